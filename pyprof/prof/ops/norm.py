"""Normalization family: layer_norm, group_norm, batch_norm, instance_norm, rms_norm and their aten forms
(``native_layer_norm``, ``native_batch_norm``, ``_native_batch_norm_legit``, ``cudnn_batch_norm``,
``native_group_norm``, ``_fused_rms_norm``).

FLOPs per input element, forward:

* statistics computed from the input (layer/group/instance norm, batch norm in training): mean (1 add),
  centre (1 sub), square (1), variance (1 add), normalise (1 mul by the reciprocal std) = 5;
* batch norm in eval uses the running statistics: centre and normalise = 2;
* rms_norm: square, sum, normalise = 3;
* an affine ``weight`` adds 1 and a ``bias`` 1.

Backward per element: the input gradient ``dX = rstd·(g − mean(g) − x̂·mean(g·x̂))`` with ``g = dY·w``
is 8 FLOPs (x̂ recomputed, two row sums, the combination); rms_norm's is 6; eval batch norm's is 2
(``dY·w·rstd``); ``dw = Σ dY·x̂`` adds 2 and ``db = Σ dY`` 1.
Bytes: forward reads X (and w, b, running stats), writes Y; backward reads dY and X (and w), writes dX
(and dw, db). The per-row statistics (mean/rstd) are small and not counted.

Positional orders differ: ``F.batch_norm(input, running_mean, running_var, weight, bias, training, ...)``
but ``torch.batch_norm(input, weight, bias, running_mean, running_var, training, ...)``.
``_batch_norm_with_update`` is batch norm in training (batch statistics, running ones updated).

``local_response_norm(x[N, C, ...], size)``: each element divided by ``(k + α·avg(x²))^β`` over a window
of ``size`` channels: square, the window's ``size`` adds, scale and shift, power, divide: ``5 + size``
per element; backward ``6 + size`` per element (dX through the power and the window); x read, y written.
"""

from __future__ import annotations

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, one_input, register
from pyprof.prof.ops.schema import param_names

# name: the statistics it normalises with ("batch": the batch's in training, the running ones in eval)
KINDS = {"layer_norm": "stats", "native_layer_norm": "stats", "group_norm": "stats", "native_group_norm": "stats",
         "batch_norm": "batch", "native_batch_norm": "batch", "_native_batch_norm_legit": "batch",
         "_batch_norm_with_update": "stats", "cudnn_batch_norm": "batch", "miopen_batch_norm": "batch",
         "_native_batch_norm_legit_no_training": "eval", "instance_norm": "stats", "rms_norm": "rms",
         "_fused_rms_norm": "rms"}
# The functionals whose order is not aten's (torch.batch_norm's): the others are read by the schema's names.
_FUNCTIONAL = {
    "batch_norm": ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"),
    "instance_norm": ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum", "eps"),
}


def _batch_kind(b: dict) -> str | None:
    """batch_norm's: "stats" in training (the batch's statistics), else "eval"; None when not known."""
    tr = b.get("training")
    rm = b.get("running_mean")
    if rm is not None and rm.get("type") == "bool":  # (input, weight, bias, training, ...) overload
        tr = rm
    return ("stats" if A.value(tr, False) else "eval") if A.known(tr) else None


def _norm_backward(kind: str, x, w, bias, n: int, dt: str | None) -> Cost:
    """dY, X and w read, dX and the parameters' gradients written."""
    flops = ({"stats": 8, "rms": 6, "eval": 2}[kind] if A.requires_grad(x) else 0) * n
    byts = A.total(A.sized(2 * n, dt), A.nbytes(w) if w is not None else 0, A.nbytes(x) if A.requires_grad(x) else 0)
    for t, extra in ((w, 2), (bias, 1)):
        if t is not None and A.requires_grad(t):
            flops += extra * n
            byts = A.total(byts, A.nbytes(t))
    return Cost(float(flops), byts, dt)


@register(*KINDS)
def _norm(call: OpCall) -> Cost | None:
    functional = call.mod == "torch.nn.functional" and call.op in _FUNCTIONAL
    b = A.bind(call.args, _FUNCTIONAL[call.op] if functional else param_names(call.op))
    x = b.get("input") or b.get("self")
    n = A.numel(A.shape(x))
    kind = _batch_kind(b) if KINDS[call.op] == "batch" else KINDS[call.op]
    if n is None or kind is None:
        return None
    w = b.get("weight") if A.is_tensor(b.get("weight")) else None
    bias = b.get("bias") if A.is_tensor(b.get("bias")) else None
    dt = A.compute_dtype(call.cdtype, x)
    stats = (b.get("running_mean"), b.get("running_var")) if kind != "rms" else ()
    params = [t for t in (w, bias, *stats) if A.is_tensor(t)]
    param_bytes = A.total(*[A.nbytes(t) for t in params])
    if call.direction == "bprop":
        return _norm_backward(kind, x, w, bias, n, dt)
    per = {"stats": 5, "rms": 3, "eval": 2}[kind] + (w is not None) + (bias is not None)
    return Cost(float(per * n), A.total(A.nbytes(x), param_bytes, A.sized(n, dt)), dt)


@register("local_response_norm")
def _lrn(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "size", "alpha", "beta", "k"))
    x, size = b.get("input") or b.get("self"), A.value(b.get("size"))
    sx = A.shape(x)
    if sx is None or len(sx) < 3 or not isinstance(size, int) or size < 1:
        return None
    n, dt = A.numel(sx), A.compute_dtype(call.cdtype, x)
    return one_input(call, x, dt, (float((5 + size) * n), A.sized(2 * n, dt)),
                     (float((6 + size) * n), A.sized(3 * n, dt)))
