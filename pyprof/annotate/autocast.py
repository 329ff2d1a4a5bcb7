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


def _legacy_readers(device_type: str):
    """``(is_enabled(), get_dtype())`` for ``device_type`` through the API of torch < 2.4, which has no
    ``torch.get_autocast_dtype(device_type)`` and whose ``torch.is_autocast_enabled()`` takes no
    argument and answers for CUDA: ``torch.get_autocast_gpu_dtype()`` for CUDA, else
    ``torch.is_autocast_<type>_enabled()`` / ``torch.get_autocast_<type>_dtype()`` (cpu, ipu, xla);
    None for a device type that API has no functions for."""
    if device_type == "cuda":
        return torch.is_autocast_enabled, torch.get_autocast_gpu_dtype
    is_enabled = getattr(torch, f"is_autocast_{device_type}_enabled", None)
    get_dtype = getattr(torch, f"get_autocast_{device_type}_dtype", None)
    if is_enabled is None or get_dtype is None:
        return None
    return is_enabled, get_dtype


def _legacy_is_enabled(device_type: str) -> bool:
    readers = _legacy_readers(device_type)
    if readers is None:
        raise RuntimeError(f"no autocast functions for device type {device_type!r} in this torch")
    return readers[0]()


def _legacy_get_dtype(device_type: str) -> torch.dtype:
    readers = _legacy_readers(device_type)
    if readers is None:
        raise RuntimeError(f"no autocast functions for device type {device_type!r} in this torch")
    return readers[1]()


def readers():
    """``(is_enabled(device_type), get_dtype(device_type))``: torch's own where it has
    ``torch.get_autocast_dtype`` (torch >= 2.4, with the device-type form of ``is_autocast_enabled``,
    added together), else the same questions asked of the older per-device API (torch 2.1 to 2.3,
    which the README promises). Looked up when this module is imported."""
    if getattr(torch, "get_autocast_dtype", None) is not None:
        return torch.is_autocast_enabled, torch.get_autocast_dtype
    return _legacy_is_enabled, _legacy_get_dtype


_is_enabled, _get_dtype = readers()


def compute_dtype(op: str, device_type: str) -> torch.dtype | None:
    """The autocast dtype ``op`` computes in on ``device_type`` now, or None when not autocasting it."""
    if op in LOWER_PRECISION_OPS:
        try:
            if _is_enabled(device_type):
                return _get_dtype(device_type)
        except RuntimeError:  # a device type autocast does not know
            return None
    return None
