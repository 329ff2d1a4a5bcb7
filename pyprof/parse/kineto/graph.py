"""What a Kineto trace shows of the autograd graph beyond one forward and one backward per op: each run of
a node's backward (``create_graph``, ``retain_graph``), a convolution backward's ``output_mask``, a forward
re-run by a node (a checkpoint's), the op that made a double backward's node, a node run under ``vmap``."""

from __future__ import annotations

import bisect
from typing import Any

import orjson

from pyprof.parse.kineto import schema as ks
from pyprof.parse.kineto.args import kineto_args
from pyprof.parse.kineto.index import ROLE_OP, Index

RUN_STRIDE = 1 << 40  # (Kineto's External ids stay far below it)
#: PyTorch 1.8-1.10 ran a convolution's gradients as child ops of its backward op (no ``output_mask`` in
#: the trace): which ran says which gradients it computed ([input, weight, bias] index)
OLD_CONV = {"aten::cudnn_convolution_backward", "aten::miopen_convolution_backward"}
_OLD_GRADS = {f"aten::{b}_convolution_backward_{g}": i for b in ("cudnn", "miopen") for i, g in enumerate(("input", "weight"))}


def run_id(op_id: int, run: int) -> int:
    """The instance id of run ``run`` (0: the first) of the backward of the forward op ``op_id``: its id
    plus ``run · RUN_STRIDE``."""
    return op_id if run <= 0 else op_id + run * RUN_STRIDE if op_id >= 0 else op_id - run * RUN_STRIDE


class Graph:
    """Lookups over an :class:`~pyprof.parse.kineto.index.Index`, each built in one pass on first use."""

    def __init__(self, ix: Index):
        self.ix = ix
        self._runs: dict[int, int] | None = None
        self._masks: dict[int, list] | None = None
        self._makers: dict[tuple, tuple[list, list]] | None = None
        self._batched: dict[int, list] | None = None
        self._roots: dict[str, tuple] | None = None

    def node(self, r: int) -> int:
        """The innermost backward node's ``evaluate_function`` range open at range ``r`` (-1: none)."""
        ix = self.ix
        return next((a for a in reversed(ix.chain[r]) if ix.bwd[a] and ix.name[a].startswith(ks.BACKWARD_PREFIX)),
                    -1) if r >= 0 else -1

    def first_op(self, kept: tuple) -> int:
        """The outermost plain op range inside the innermost backward node of chain ``kept`` (-1: none)."""
        ix = self.ix
        i = next((i for i in range(len(kept) - 1, -1, -1) if ix.bwd[kept[i]]), -1)
        return next((r for r in kept[i + 1:] if ix.role[r] == ROLE_OP and not ix.bwd[r]), -1) if i >= 0 else -1

    def recomputed(self, kept: tuple) -> bool:
        """Whether the op a backward node runs (chain ``kept``) is a forward re-run by it (a checkpoint's
        recompute): an ``nn.Module`` forward (a ``with_stack``/``with_modules`` Python range) opened inside
        the node, as :func:`pyprof.parse.decode._recomputes` asks of pyprof's module ranges."""
        op = self.first_op(kept)
        node = self.node(op)
        return node >= 0 and len(self.ix.modules[op]) > len(self.ix.modules[node])

    def rooted(self, mods: tuple) -> tuple:
        """A recompute's module ranges (opened inside a node: the re-run block's) under the modules that
        held that block in the forward (its first forward run), so it keeps its forward path."""
        if self._roots is None:
            ix = self.ix
            self._roots = {}
            for i, ms in enumerate(ix.modules):
                if ms and not any(ix.bwd[a] for a in ix.chain[i]):
                    for j, m in enumerate(ms):
                        self._roots.setdefault(m, ms[:j])
        return self._roots.get(mods[0], ()) + mods if mods else mods

    def run(self, r: int) -> int:
        """Which evaluation of its node (0: the first, per process, thread, number and name) range ``r`` is."""
        if self._runs is None:
            ix = self.ix
            groups: dict[tuple, list] = {}
            for i, nm in enumerate(ix.name):
                if ix.bwd[i] and ix.seq[i] is not None and nm.startswith(ks.BACKWARD_PREFIX):
                    groups.setdefault((ix.pid[i], ix.tid[i], ix.seq[i], nm), []).append(i)
            self._runs = {i: k for rs in groups.values() if len(rs) > 1
                          for k, i in enumerate(sorted(rs, key=ix.start.__getitem__))}
        return self._runs.get(r, 0)

    def conv_masks(self) -> dict[int, list]:
        """Node range -> the ``output_mask`` ([input, weight, bias]) of the ``convolution_backward`` run inside it
        (old backward op range -> the gradients whose child ops ran)."""
        if self._masks is None:
            ix = self.ix
            self._masks = {}
            for i, nm in enumerate(ix.name):
                if nm == "aten::convolution_backward" and ix.args[i]:
                    got = kineto_args(*map(ix.value, ix.args[i][1:]))
                    mask, key, p = got[-1].get("value") if got else None, self.node(i), -1
                elif nm in _OLD_GRADS:
                    mask, key, p = [j == _OLD_GRADS[nm] for j in range(3)], -1, ix.parent[i]
                else:
                    continue
                while p >= 0 and ix.name[p] in OLD_CONV:  # (1.8 nests the old op in a twin of itself)
                    key, p = p, ix.parent[p]
                if isinstance(mask, list) and len(mask) == 3 and all(isinstance(v, bool) for v in mask) and key >= 0:
                    had = self._masks.get(key, [False] * 3)  # (vmap runs a call per gradient)
                    self._masks[key] = [a or b for a, b in zip(had, mask, strict=True)]
        return self._masks

    def batched(self, r: int) -> list | None:
        """The ``vmap`` levels of the pyprof ``bwd`` marker inside node range ``r`` (a node run under
        ``torch.func.vmap``: ``jacrev``'s backward), as :func:`pyprof.parse.decode.link` takes them."""
        if self._batched is None:
            self._batched = {self.node(i): [{"name": "", "type": "tensor", "shape": None, "vmap": orjson.loads(
                nm).get("vmap")}] for i, nm in enumerate(self.ix.name)
                if nm.startswith('{"pyprof":') and '"vmap":' in nm and '"k":"bwd"' in nm}
        return self._batched.get(r)

    def maker(self, pid: Any, tid: Any, seq: int | None, before: int) -> int | None:
        """The op range numbered ``seq`` run inside a backward node on (``pid``, ``tid``), latest to start
        before ``before``: the op that made node ``seq`` in a backward taken with ``create_graph``."""
        if self._makers is None:
            ix = self.ix
            found: dict[tuple, list] = {}
            for i, s in enumerate(ix.seq):
                p = ix.parent[i]
                if s is not None and ix.role[i] == ROLE_OP and not ix.bwd[i] and (p < 0 or ix.seq[p] != s) and \
                        any(ix.bwd[a] for a in ix.chain[i]):  # (the outermost op of equal numbers)
                    found.setdefault((ix.pid[i], ix.tid[i], s), []).append((ix.start[i], i))
            self._makers = {k: ([t for t, _ in sorted(v)], [i for _, i in sorted(v)]) for k, v in found.items()}
        got = self._makers.get((pid, tid, seq))
        j = bisect.bisect_right(got[0], before) - 1 if got else -1
        return got[1][j] if got and j >= 0 else None


def with_grads(args: list | None, mask: list) -> list | None:
    """A convolution's arguments with ``grad`` false on its input, weight and bias (positions 0-2 in every
    spelling) where ``mask`` says that gradient was not computed."""
    return [{**a, "grad": False} if i < 3 and not mask[i] and isinstance(a, dict) and a.get("type") == "tensor"
            else a for i, a in enumerate(args)] if args else args
