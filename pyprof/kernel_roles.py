"""Which kernels of an op instance do its work: the rule that places FLOPs and bytes, and what a CPU
kernel is. Shared by ``parse`` (CPU records) and ``prof`` (the cost split); no torch import.

Every kernel row gets one of four roles:

* ``COMPUTE``: the kernel that does an op's arithmetic. On a GPU, a GEMM, convolution or attention
  kernel by its full name, short and demangled (the ``gemm_like`` and ``tensor`` patterns of
  ``pyprof/data/tensor_cores.json``, helpers excluded; prof applies them; docs/prof.md names the
  libraries). On a CPU, the aten op that computes (``aten::addmm``, ``aten::mkldnn_convolution``, the
  SDPA kernels): :func:`cpu_role`.
* ``OP_COMPUTE``: a GPU kernel of a GEMM, convolution or attention op (:func:`is_compute_op`) whose
  name says nothing (a library's ``kernel``) and that is no helper (copy, fill, elementwise, reduction,
  layout transform): it carries the op's cost where the instance has no ``COMPUTE`` kernel
  (:func:`gpu_role`).
* ``NO_WORK``: CPU ops that move no data of their own: views, allocation, metadata, dispatch wrappers
  whose work is in the op they call (``aten::t``, ``aten::empty``, ``aten::to``), autograd engine
  ranges and custom Function records. They never carry FLOPs or bytes.
* ``WORK``: everything else (elementwise kernels, copies, reductions...).

Within an op instance the cost goes to the rows of the highest role present (``prof``'s split,
``pyprof.prof.table``), so a GEMM's FLOPs land on the GEMM kernel and not on the bias
copy or a layout transform beside it. A CPU kernel is an op with work of its own: the self time of
``NO_WORK`` ops is added to the op that called them (``parse``), so a ``linear`` is one ``aten::addmm``
record (plus its bias copy), not ten dispatch and view records.
"""

from __future__ import annotations

import functools
import re

NO_WORK, WORK, OP_COMPUTE, COMPUTE = 0, 1, 2, 3

#: aten ops (CPU) that do no work of their own: views, allocation, metadata and pure dispatch.
CPU_NO_WORK = frozenset({
    # views and reshapes that are views
    "view", "view_as", "_unsafe_view", "_reshape_alias", "reshape", "as_strided", "transpose", "t", "permute",
    "expand", "expand_as", "squeeze", "unsqueeze", "unflatten", "flatten", "split", "split_with_sizes",
    "chunk", "unbind", "select", "narrow", "slice", "detach", "detach_", "alias", "movedim", "swapaxes",
    "unfold", "diagonal", "real", "imag", "view_as_real", "view_as_complex", "numpy_T", "mT", "lift_fresh",
    "_conj", "conj", "resolve_conj", "resolve_neg", "_neg_view", "_reshape_from_tensor",
    # allocation and metadata
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_", "resize_as_",
    "set_", "result_type", "size", "stride", "_has_compatible_shallow_copy_type", "is_nonzero",
    "_shape_as_tensor", "contiguous", "to", "_to_copy", "type_as", "requires_grad_", "retain_grad",
    # dispatch wrappers: the work is in the op they call
    "linear", "matmul", "conv1d", "conv2d", "conv3d", "convolution", "conv_transpose1d",
    "conv_transpose2d", "conv_transpose3d", "dropout", "feature_dropout", "cross_entropy_loss",
    "scaled_dot_product_attention", "layer_norm", "batch_norm", "_batch_norm_impl_index", "group_norm",
    "instance_norm", "einsum", "tensordot", "lstm", "gru", "rnn_tanh", "rnn_relu", "embedding_backward",
})

#: aten ops that run a matrix product themselves (not a wrapper dispatching to one)
GEMM_KERNEL_OPS = frozenset({
    "mm", "addmm", "bmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "_addmm_activation",
    "_scaled_mm", "_int_mm", "mkldnn_linear", "mkldnn_matmul",
})

#: aten ops (CPU) that compute a GEMM, convolution or attention. ``_convolution`` is one: it runs the
#: backends that are not ops of their own (oneDNN's transposed convolution, ``ConvTranspose2d``'s
#: forward) in its own time; where it calls an op that is (``mkldnn_convolution``) its own time is the
#: dispatch, and the cost is shared by time between the two at the same FLOP/s.
CPU_COMPUTE = GEMM_KERNEL_OPS | frozenset({
    "_convolution", "mkldnn_convolution", "_mkldnn_convolution", "mkldnn_convolution_backward",
    "convolution_backward", "_slow_conv2d_forward", "_slow_conv2d_backward", "slow_conv3d_forward",
    "slow_conv_dilated2d", "slow_conv_dilated3d", "slow_conv_transpose2d", "slow_conv_transpose3d",
    "_nnpack_spatial_convolution", "thnn_conv2d", "_convolution_depthwise2d", "mkldnn_rnn_layer",
    "mkldnn_rnn_layer_backward", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
})

#: the range of a C++ kernel Inductor generated, as Inductor's ``config.cpp.enable_kernel_profile``
#: names it (``graph_0_cpp_fused_relu_0``; ``graph_<N>_`` absent where the graph has no id)
INDUCTOR_CPP_KERNEL = re.compile(r"^(?:graph_\d+_)?cpp_fused_|^graph_\d+_cpp_")


@functools.lru_cache(maxsize=65536)
def cpu_role(name: str) -> int:
    """The role of a CPU op record by its name (``aten::addmm``, ``autograd::engine::...``)."""
    if "::" in name:
        ns, _, op = name.partition("::")
        if ns == "aten":
            op = op.split(".", 1)[0]
            if op in CPU_COMPUTE:
                return COMPUTE
            return NO_WORK if op in CPU_NO_WORK else WORK
        if ns in ("autograd", "torch::autograd"):
            return NO_WORK
        return WORK  # an extension's op (torchvision::nms): its own kernel
    if INDUCTOR_CPP_KERNEL.match(name):
        return WORK  # a compiled region's C++ kernel (pyprof.parse.kineto.inductor joins it to its origins)
    # autograd nodes (AddmmBackward0), custom Function records and other Python-level ranges
    return NO_WORK


#: ops (namespace and overload dropped) whose arithmetic is a GEMM, a convolution or attention: the GEMM
#: kernels, the wrappers that dispatch to them, and (:data:`_COMPUTE_OP`) every convolution and attention
COMPUTE_OPS = GEMM_KERNEL_OPS | frozenset({
    "matmul", "__matmul__", "__rmatmul__", "linear", "bilinear", "einsum", "tensordot"})
_COMPUTE_OP = re.compile(r"(?:^|_)conv(?:olution|_|\d|$)|attention")


@functools.lru_cache(maxsize=65536)
def is_compute_op(op: str | None) -> bool:
    """Whether ``op`` (``linear``, ``aten::addmm.out``, ``cudnn_convolution_backward``) is a GEMM,
    convolution or attention op."""
    if not op:
        return False
    name = str(op).rpartition("::")[2].split(".", 1)[0]
    return name in COMPUTE_OPS or bool(_COMPUTE_OP.search(name))


def gpu_role(compute_kernel: bool, helper: bool, op: str | None) -> int:
    """The role of a GPU kernel from what its full name says (``compute_kernel``: a GEMM, convolution or
    attention kernel; ``helper``: a copy, fill, elementwise, reduction or layout kernel) and its op."""
    if compute_kernel:
        return COMPUTE
    if not helper and is_compute_op(op):
        return OP_COMPUTE
    return WORK
