"""Dropout family: dropout, native_dropout, feature/alpha dropout, dropout1d/2d/3d, ``_fused_dropout``.

Training forward, per element: draw, compare with ``p`` (1) and scale the kept value (1) = 2 FLOPs
(random-number generation is not counted as FLOPs); bytes: X read, Y written, a one-byte mask written.
Backward: ``dX = dY·mask·scale`` = 2 FLOPs per element; bytes: dY and the mask read, dX written.
Not training, or ``p == 0``: dropout returns its input and launches nothing: FLOPs 0 and bytes 0 (known
zeros, not unknowns). Feature (channel) dropout draws one mask value per channel; its mask bytes are
priced per element anyway (an upper bound).
"""

from __future__ import annotations

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register

_SIG = ("input", "p", "training", "inplace")


@register("dropout", "native_dropout", "feature_dropout", "alpha_dropout", "feature_alpha_dropout",
          "dropout1d", "dropout2d", "dropout3d", "_fused_dropout")
def _dropout(call: OpCall) -> Cost | None:
    b = A.bind(call.args, _SIG)
    x = b.get("input") or b.get("self")
    n = A.numel(A.shape(x))
    if n is None:
        return None
    dt = A.compute_dtype(call.cdtype, x)
    train_arg = b.get("training") or b.get("train")
    if not A.known(train_arg) or not A.known(b.get("p")):
        return None
    # F.dropout defaults to training=True; torch.dropout/native_dropout pass it explicitly.
    training = A.value(train_arg, True)
    p = A.value(b.get("p"), 0.5)
    if not isinstance(p, (int, float)) or not 0 <= p <= 1:
        return None
    if call.op == "_fused_dropout":  # _fused_dropout(input, p) where p is the *keep* probability
        training, p = True, 1.0 - p
    if not training or p == 0 or (call.direction == "bprop" and not A.requires_grad(x)):
        return Cost(0.0, 0, dt)
    elem = A.itemsize(dt)  # forward and backward alike: x (or dY) and the mask read, the result written
    return Cost(2.0 * n, None if elem is None else n * (2 * elem + 1), dt)
