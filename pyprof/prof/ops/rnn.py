"""Recurrent family: ``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu`` (the aten ops behind ``nn.LSTM``,
``nn.GRU`` and ``nn.RNN``), in both aten overloads: ``.input`` (a padded ``[T, B, F]`` or ``[B, T, F]``
input) and ``.data`` (a PackedSequence: ``data`` ``[N, F]``, ``N = sum(batch_sizes)``). The overload is
told by the arguments' names where they have them, else by the second argument: a 1-D tensor is
``batch_sizes``.

Every 2-D weight of the op's parameter list (input-hidden, hidden-hidden and, for an LSTM with
``proj_size``, the projection; per layer and direction) multiplies one vector per time step and batch
row: ``2·N·rows·cols`` FLOPs each, with ``N`` the rows the op steps through (time steps times batch, or
the packed data's rows). Biases and the gate nonlinearities are O(N·hidden) and left out of FLOPs, as
the GEMM family leaves out epilogues. Backward, the GEMMs autograd runs: every weight's gradient
(``2·N·rows·cols`` each); the gradient through each input-hidden weight (and projection) at every
step, except the first layer's when its input needs none; and through each hidden-hidden weight at
every step but each direction's first, whose gradient would go to the initial state (that one too
when the initial state is marked as requiring grad). A forward direction's first step has ``batch``
rows (``batch_sizes[0]``); a reverse direction starts at the last step, which has ``batch`` rows when
the input is padded and ``batch_sizes[-1]`` when it is packed. A trace records ``batch_sizes``' shape,
not its values: where they are not known, the last step's rows are the fewest the shapes allow,
``max(1, N - (T-1)·batch)`` (exact when all sequences have one length, and where the longest sequence
is alone, the common case; the note says so). The weights of each layer and direction come in aten's
order (``w_ih, w_hh[, w_hr]``, biases apart).

Bytes are the ideal traffic: input, parameters and initial states read once, the output written once,
at the input's element size (gate activations stay in the fused kernels' registers). Without the
parameter list (a trace that did not record it) the op has no model.
"""

from __future__ import annotations

from math import prod
from typing import cast

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register
from pyprof.prof.ops.schema import param_names


def _bound(call: OpCall) -> tuple[dict, bool]:
    """(arguments bound to the overload's schema, packed?)."""
    names = {a.get("name") for a in call.args if a}
    second = call.args[1] if len(call.args) > 1 else None
    packed = bool({"data", "batch_sizes"} & names) or (
        not (names - {None, ""}) and A.is_tensor(second) and len(A.shape(second) or ()) == 1)
    return A.bind(call.args, param_names(call.op, "data" if packed else "input")), packed


def _states(hx) -> list[list[int]] | None:
    """Shapes of the initial hidden (and cell) states ``[layers·directions, batch, features]``."""
    cand = [A.shape(t) for t in A.tensorlist(hx) or []]
    return cast("list[list[int]]", cand) if cand and all(s is not None and len(s) == 3 for s in cand) else None


def _shapes(x, b: dict, packed: bool) -> tuple[list[int], list[list[int]]] | None:
    """The input's shape and the parameters' (1-D biases, 2-D weights: at least one), or None."""
    items = A.tensorlist(b.get("params")) if A.known(b.get("params")) else None
    sx = A.shape(x)
    if not sx or not A.is_tensor(x) or not items or (packed and len(sx) != 2):
        return None
    params = cast("list[list[int]]", [A.shape(t) for t in items])  # a None among them is refused next
    if any(s is None or len(s) not in (1, 2) for s in params) or not any(len(s) == 2 for s in params):
        return None
    return sx, params


@register("lstm", "gru", "rnn_tanh", "rnn_relu")
def _rnn(call: OpCall) -> Cost | None:
    b, packed = _bound(call)
    x = b.get("data") if packed else b.get("input")
    shapes = _shapes(x, b, packed)
    if shapes is None:
        return None
    sx, params = shapes
    n = prod(sx[:-1])
    two_d = [r * c for r, c in (s for s in params if len(s) == 2)]
    flops = 2.0 * n * sum(two_d)
    states = _states(b.get("hx"))
    bidir = A.value(b.get("bidirectional"), None)
    note = ""
    if call.direction == "bprop":
        got = _backward_flops(b, packed, two_d, n, states, x, bidir)
        if got is None:
            return None
        flops, note = got
    dt = A.compute_dtype(call.cdtype, x)
    # the output: one vector per step of the states' feature size (the projection's, where there is one),
    # per direction
    out = n * states[0][2] * (2 if bidir else 1) if states and isinstance(bidir, bool) else None
    nx, nparams = prod(sx), sum(prod(s) for s in params)
    nstates = sum(prod(s) for s in states) if states else 0
    # backward: dY, x and the parameters read; dX and the parameter gradients written
    moved = [out, 2 * nx, 2 * nparams] if call.direction == "bprop" else [nx + nparams + nstates, out]
    byts = A.total(*[A.sized(v, dt) for v in moved]) if out else None
    return Cost(flops, byts, dt, tensor_op=True, note=note)


def _last_rows(b: dict, n: int, batch: int) -> tuple[int, str] | None:
    """Rows of a packed sequence's last step (``batch_sizes[-1]``) and a note when they are inferred."""
    sizes = A.value(b.get("batch_sizes"), None)
    if isinstance(sizes, list) and sizes and all(isinstance(v, int) for v in sizes):
        return sizes[-1], ""
    steps = A.shape(b.get("batch_sizes"))
    if not steps or len(steps) != 1 or steps[0] < 1:
        return None
    t = steps[0]
    if n == t * batch:
        return batch, ""
    return max(1, n - (t - 1) * batch), "packed: the reverse first step's rows inferred from shapes"


def _backward_flops(b: dict, packed: bool, two_d: list[int], n: int, states, x, bidir) -> tuple[float, str] | None:
    """The backward GEMMs' FLOPs (see the module docstring) and a note, or None when the layout is
    not known."""
    layers = A.value(b.get("num_layers"), None)
    if not isinstance(layers, int) or not isinstance(bidir, bool) or not states or layers < 1:
        return None
    groups = layers * (2 if bidir else 1)  # one (w_ih, w_hh[, w_hr]) group per layer and direction
    if len(two_d) % groups or len(two_d) // groups not in (2, 3):
        return None
    g = len(two_d) // groups
    batch = states[0][1]
    first_rows = [batch, batch]  # the rows of each direction's first step: forward, reverse
    note = ""
    if packed and bidir:
        last = _last_rows(b, n, batch)
        if last is None:
            return None
        first_rows[1], note = last
    # the initial state needs a gradient only when it says so (nn.LSTM's default state is zeros without)
    h0_grad = any(t.get("grad") is True for t in (A.tensorlist(b.get("hx")) or []))
    flops = 2.0 * n * sum(two_d)  # weight gradients
    for k in range(groups):
        w_ih, w_hh, *proj = two_d[k * g:(k + 1) * g]
        first_layer = k < (2 if bidir else 1)
        if not first_layer or A.requires_grad(x):
            flops += 2.0 * n * w_ih
        flops += 2.0 * n * sum(proj)
        rows = first_rows[k % 2] if bidir else batch
        flops += 2.0 * (n if h0_grad else n - rows) * w_hh
    return flops, note
