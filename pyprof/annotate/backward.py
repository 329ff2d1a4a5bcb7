"""Backward attribution: ranges around the autograd nodes a forward op created.

Mechanism. A kernel launched in the backward pass runs on the autograd engine's thread, where the
forward markers are not open. To tie it to its forward op (and so to the op's arguments and module
path), the op wrapper:

1. peeks the calling thread's autograd sequence counter before the call
   (:func:`pyprof.torch_private.get_sequence_nr`, a plain read; ``s0``) and writes ``"seq": [s0]`` into
   the op payload when grad mode is on and a tensor argument requires grad (the first sequence number
   the op may give a node: the range text is fixed before the op runs);
2. after the call, reads the counter again (``s1``). Nodes numbered ``s0 <= n < s1`` were created by
   this op (the counter is per thread). They are found from the outputs' ``grad_fn`` (and, only when
   some are missing, by walking ``next_functions`` inside that interval);
3. registers on each such node a prehook / hook pair (``Node.register_prehook`` /
   ``Node.register_hook``) that pushes a ``bwd`` range (:mod:`pyprof.markers`: the op's ``seq`` and
   ``id``, the node's own ``nseq``) on the thread that runs the node, and pops it after. ``id`` is the
   exact join key: several ops can share an ``s0`` when one did not create a node it could have, or
   when ops nest.

Cost. The two registrations are PyTorch's (a Python ``_register_hook`` and a ``RemovableHandle``
each, about 3 us per node together) and dominate; pyprof adds one closure per node (the pre-hook,
whose text is built only if the node runs; the post-hook is one shared function), and finds the
nodes without a graph walk in the common case of one node, the output's ``grad_fn``.

Limits. Only nodes created while payloads are built get hooks (no hooks outside a profile). A node is
hooked once, by the innermost instrumented op that created it (a per-thread high-water mark). Nodes
created by un-instrumented code get no range (kernels there are attributed to the enclosing node's
range, or none). If a node raises, its post-hook does not run; the patched function every backward
pass runs through (``torch_private.ENGINE_RUN_BACKWARD``) then closes the ranges left open on the
calling thread, and other threads close theirs at their next node (a generation counter) — balanced
as far as the NVTX per-thread stack allows.
"""

from __future__ import annotations

import functools
import threading

import torch

from pyprof import markers
from pyprof import torch_private as tp
from pyprof.annotate import describe, emit

get_seq = tp.get_sequence_nr
_functorch_active = tp.functorch_active
_seq_nr = tp.node_sequence_nr
_ENGINE = tp.ENGINE_RUN_BACKWARD
_Tensor = torch.Tensor
_tls = threading.local()
_generation = [0]
_MAX_WALK = 256
#: Nodes whose backward is a pure view (launches no kernel): not hooked when internal to an op
#: (e.g. the weight transpose inside F.linear), to save two hook registrations per op.
VIEW_NODES = frozenset({"TBackward0", "TransposeBackward0", "PermuteBackward0", "UnsqueezeBackward0",
                        "SqueezeBackward0", "SqueezeBackward1", "AliasBackward0"})


def _stack() -> list:
    st = getattr(_tls, "bwd", None)
    if st is None:
        st = _tls.bwd = []
    return st


def _close_stale() -> None:
    st = _stack()
    gen = _generation[0]
    while st and st[-1][0] != gen:
        emit.pop(st.pop()[1])


_BWD = '{"pyprof":%d,"k":"bwd","node":"%s","seq":%d,"id":%d,"nseq":%d}'


def _make_pre(node_name: str, s0: int, op_id: int, n: int):
    def pre(grad_outputs):
        st = _stack()
        if st and st[-1][0] != _generation[0]:
            _close_stale()
        tok = emit.NOTHING
        if emit.consumer_active():  # the text is built only when the node actually runs
            text = _BWD % (markers.VERSION, node_name, s0, op_id, n)
            if _functorch_active():  # (run under torch.func.vmap: jacrev's backward, batched)
                vm = next((d["vmap"] for t in grad_outputs if isinstance(t, _Tensor)
                           for d in [describe.vmapped({}, t)] if "vmap" in d), None)
                text = text[:-1] + f',"vmap":{vm}}}'.replace(" ", "") if vm else text
            tok = emit.push(text)
        st.append((_generation[0], tok))

    return pre


def _post(grad_inputs, grad_outputs):
    """The post-hook of every hooked node (one function: it only closes this thread's last range)."""
    st = _stack()
    if st:
        emit.pop(st.pop()[1])


def _out_nodes(out, s0: int, s1: int, found: dict) -> None:
    if isinstance(out, _Tensor):
        fn = out.grad_fn
        if fn is not None:
            n = _seq_nr(fn)
            if s0 <= n < s1 and n not in found:
                found[n] = fn
    elif isinstance(out, (tuple, list)):
        for o in out:
            if isinstance(o, _Tensor):
                _out_nodes(o, s0, s1, found)


def _hook(node, s0: int, op_id: int, n: int) -> None:
    node.register_prehook(_make_pre(type(node).__name__, s0, op_id, n))
    node.register_hook(_post)


def hook_op(out, s0: int, s1: int, op_id: int) -> None:
    """Register bwd ranges on the nodes numbered [s0, s1) reachable from ``out`` (see module doc)."""
    tls = _tls
    try:
        low = tls.hooked
    except AttributeError:
        low = -1
    s0_eff = low + 1 if low >= s0 else s0  # nodes already hooked by an inner op: start above them
    if s0_eff >= s1:
        return
    if s1 - s0_eff == 1 and isinstance(out, _Tensor):  # the common case: one node, the output's
        fn = out.grad_fn
        if fn is not None and _seq_nr(fn) == s0_eff:
            _hook(fn, s0, op_id, s0_eff)
            tls.hooked = s0_eff
            return
    found: dict = {}
    _out_nodes(out, s0_eff, s1, found)
    outs = set(found)
    if len(found) < s1 - s0_eff and found:
        todo = list(found.values())
        seen = 0
        while todo and seen < _MAX_WALK and len(found) < s1 - s0_eff:
            node = todo.pop()
            seen += 1
            for nxt, _ in node.next_functions:
                if nxt is None:
                    continue
                n = _seq_nr(nxt)
                if s0_eff <= n < s1 and n not in found:
                    found[n] = nxt
                    todo.append(nxt)
    for n, node in found.items():
        if n not in outs and type(node).__name__ in VIEW_NODES:
            continue
        _hook(node, s0, op_id, n)
    tls.hooked = s1 - 1


# -- closing ranges left open when backward raises ------------------------------------------------
_patched: list = []


def _wrap_engine(orig):
    @functools.wraps(orig)
    def engine_run_backward(*args, **kwargs):
        try:
            return orig(*args, **kwargs)
        except BaseException:
            _generation[0] += 1
            _close_stale()
            raise

    return engine_run_backward


def install() -> None:
    import torch.autograd
    import torch.autograd.graph

    for mod in (torch.autograd, torch.autograd.graph):
        orig = getattr(mod, _ENGINE, None)
        if orig is not None and not hasattr(orig, "__wrapped__"):
            setattr(mod, _ENGINE, _wrap_engine(orig))
            _patched.append((mod, orig))


def uninstall() -> None:
    while _patched:
        mod, orig = _patched.pop()
        setattr(mod, _ENGINE, orig)
