"""Recurrent family: ``lstm``, ``gru``, ``rnn_tanh``, ``rnn_relu`` (the aten ops behind ``nn.LSTM``,
``nn.GRU`` and ``nn.RNN``, padded or packed input).

Every 2-D weight of the op's parameter list (input-hidden, hidden-hidden and, for an LSTM with
``proj_size``, the projection; per layer and direction) multiplies one vector per time step and batch
row: ``2·N·rows·cols`` FLOPs each, with ``N = prod(input.shape[:-1])`` (time steps times batch, or the
packed sequence's total length). Biases and the gate nonlinearities are O(N·hidden) and left out of
FLOPs, as the GEMM family leaves out epilogues. Backward, the GEMMs autograd runs: every weight's
gradient (``2·N·rows·cols`` each); the gradient through each input-hidden weight (and projection) at
every step, except the first layer's when its input needs none; and through each hidden-hidden weight
at every step but the first, whose gradient would go to the initial state (that one too when the
initial state is marked as requiring grad). The weights of each layer and direction come in aten's order
(``w_ih, w_hh[, w_hr]``, biases apart).

Bytes are the ideal traffic: input, parameters and initial states read once, the output written once,
at the input's element size (gate activations stay in the fused kernels' registers). Without the
parameter list (a trace that did not record it) the op has no model.
"""

from __future__ import annotations

from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register


def _params(args: list) -> tuple[int, list[list[int]]] | None:
    """(position, shapes) of the parameter list: the tensor list whose items are all 1-D or 2-D, with a
    2-D one."""
    for i, a in enumerate(args):
        items = A.tensorlist(a)
        if not items:
            continue
        shapes = [A.shape(t) for t in items]
        if all(s is not None and len(s) in (1, 2) for s in shapes) and any(len(s) == 2 for s in shapes):
            return i, shapes
    return None


def _states(args: list, before: int) -> list[list[int]] | None:
    """Shapes of the initial hidden (and cell) states ``[layers·directions, batch, features]``: the tensor
    list (or tensor) of 3-D items before the parameter list."""
    for a in args[1:before]:
        items = A.tensorlist(a)
        cand = [A.shape(t) for t in items] if items else ([A.shape(a)] if A.is_tensor(a) else [])
        if cand and all(s is not None and len(s) == 3 for s in cand):
            return cand
    return None


@register("lstm", "gru", "rnn_tanh", "rnn_relu")
def _rnn(call: OpCall) -> Cost | None:
    args = call.args
    x = args[0] if args else None
    sx, found = A.shape(x), _params(args)
    if not sx or found is None or not A.is_tensor(x):
        return None
    at, params = found
    n = prod(sx[:-1])
    two_d = [r * c for r, c in (s for s in params if len(s) == 2)]
    flops = 2.0 * n * sum(two_d)
    states = _states(args, at)
    if call.direction == "bprop":
        flops = _backward_flops(args, at, two_d, n, states, x)
        if flops is None:
            return None
    dt = A.compute_dtype(call.cdtype, x)
    # the output: one vector per step of the states' feature size (the projection's, where there is one),
    # per direction (the bidirectional flag: 5 places after the parameter list)
    bidir = A.value(args[at + 5], None) if len(args) > at + 5 else None
    out = n * states[0][2] * (2 if bidir else 1) if states and isinstance(bidir, bool) else None
    nx, nparams = prod(sx), sum(prod(s) for s in params)
    nstates = sum(prod(s) for s in states) if states else 0
    if call.direction == "bprop":  # dY, x and the parameters read; dX and the parameter gradients written
        byts = A.total(A.sized(out, dt), A.sized(2 * nx, dt), A.sized(2 * nparams, dt)) if out else None
    else:
        byts = A.total(A.sized(nx + nparams + nstates, dt), A.sized(out, dt)) if out else None
    return Cost(flops, byts, dt, tensor_op=True)


def _backward_flops(args: list, at: int, two_d: list[int], n: int, states, x) -> float | None:
    """The backward GEMMs' FLOPs (see the module docstring), or None when the layout is not known."""
    layers = A.value(args[at + 2], None) if len(args) > at + 2 else None
    bidir = A.value(args[at + 5], None) if len(args) > at + 5 else None
    if not isinstance(layers, int) or not isinstance(bidir, bool) or not states or layers < 1:
        return None
    groups = layers * (2 if bidir else 1)  # one (w_ih, w_hh[, w_hr]) group per layer and direction
    if len(two_d) % groups or len(two_d) // groups not in (2, 3):
        return None
    g = len(two_d) // groups
    batch = states[0][1]
    # the initial state needs a gradient only when it says so (nn.LSTM's default state is zeros without)
    hx = [a for a in args[1:at] if A.is_tensor(a)] + [t for a in args[1:at] for t in (A.tensorlist(a) or [])]
    h0_grad = any(t.get("grad") is True for t in hx)
    flops = 2.0 * n * sum(two_d)  # weight gradients
    for k in range(groups):
        w_ih, w_hh, *proj = two_d[k * g:(k + 1) * g]
        first_layer = k < (2 if bidir else 1)
        if not first_layer or A.requires_grad(x):
            flops += 2.0 * n * w_ih
        flops += 2.0 * n * sum(proj)
        flops += 2.0 * (n if h0_grad else n - batch) * w_hh
    return flops
