"""Which ops ``torch.autocast`` runs in lower precision, and the compute dtype to record for them.

Under autocast the Python-level arguments keep the dtype the user passed, but a GEMM or convolution
computes in the autocast dtype: that is the dtype the kernel ran in, recorded as ``"cdtype"``. The
set below is the union of PyTorch's CUDA and CPU "lower precision" autocast lists (the ops autocast
casts down), by the names users call them under (torch, Tensor methods, torch.nn.functional).
"""

from __future__ import annotations

import torch

LOWER_PRECISION_OPS = frozenset({
    # GEMM family
    "linear", "matmul", "__matmul__", "__rmatmul__", "__imatmul__", "mm", "bmm", "baddbmm", "addbmm",
    "addmm", "addmv", "addr", "mv", "einsum", "chain_matmul", "multi_dot", "linalg_multi_dot",
    "linalg_vecdot", "vecdot", "bilinear",
    # convolutions
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "_convolution", "conv_tbc", "prelu",
    # attention and RNN cells
    "scaled_dot_product_attention", "_native_multi_head_attention",
    "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
})


def compute_dtype(op: str, device_type: str) -> torch.dtype | None:
    """The autocast dtype ``op`` computes in on ``device_type`` now, or None when not autocasting it
    (the device-type forms of torch's autocast queries: torch >= 2.4, pyprof's floor)."""
    if op in LOWER_PRECISION_OPS:
        try:
            if torch.is_autocast_enabled(device_type):
                return torch.get_autocast_dtype(device_type)
        except RuntimeError:  # a device type autocast does not know
            return None
    return None
