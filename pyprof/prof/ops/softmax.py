"""Softmax family: softmax, log_softmax, softmin and their aten forms (``_softmax``, ``_log_softmax``).

Per element, forward: max, subtract, exp, sum, then divide (softmax) or, for log_softmax, subtract the
row's log-sum (the one log per row is negligible): 5 FLOPs. Backward: softmax ``dX = Y·(dY − Σ dY·Y)``
is multiply, sum, subtract, multiply = 4 per element; log_softmax ``dX = dY − exp(Y)·Σ dY`` is sum,
exp, multiply, subtract = 4. Bytes: forward reads X, writes Y; backward reads Y and dY, writes dX.
The output dtype is the ``dtype`` argument when given (``softmax(x, dim, dtype=torch.float32)``).
``_softmax_backward_data(dY, Y, dim, input_dtype)``, called as an op, is that backward (4 per element,
dY and Y read, dX written in ``input_dtype``); its own backward (double backward) costs the same again.
"""

from __future__ import annotations

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register

FWD, BWD = 5, 4


@register("softmax", "log_softmax", "softmin", "_softmax", "_log_softmax", "special_softmax",
          "special_log_softmax", "_safe_softmax")
def _softmax(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("input", "dim"))
    x = b.get("input") or b.get("self")
    n = A.numel(A.shape(x))
    if n is None:
        return None
    dt = A.compute_dtype(call.cdtype, x)
    odt = A.out_dtype(b, dt)
    if call.op.startswith("_") and A.value(b.get("*0")) is True:  # _softmax(x, dim, half_to_float=True)
        odt = "float32"
    if call.direction == "bprop":
        if not A.requires_grad(x):
            return Cost(0.0, 0, dt)
        return Cost(float(BWD * n), A.total(A.sized(2 * n, odt), A.sized(n, A.dtype(x))), odt)
    return Cost(float(FWD * n), A.total(A.nbytes(x), A.sized(n, odt)), dt)


_DTYPE_CODE = {5: "float16", 6: "float32", 7: "float64", 15: "bfloat16"}  # c10::ScalarType


@register("_softmax_backward_data", "_log_softmax_backward_data")
def _softmax_backward(call: OpCall) -> Cost | None:
    b = A.bind(call.args, ("grad_output", "output", "dim", "input_dtype"))
    dy, y = b.get("grad_output"), b.get("output")
    n = A.numel(A.shape(dy))
    if n is None or not A.is_tensor(y):
        return None
    want = A.value(b.get("input_dtype"))
    odt = _DTYPE_CODE.get(want) if isinstance(want, int) else A.norm_dtype(want) if isinstance(want, str) else None
    odt = odt or A.dtype(dy)
    dt = A.compute_dtype(call.cdtype, dy)
    return Cost(float(BWD * n), A.total(A.nbytes(dy), A.nbytes(y), A.sized(n, odt)), dt)
