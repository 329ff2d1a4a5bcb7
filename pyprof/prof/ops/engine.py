"""Autograd engine family: nodes that do no arithmetic of their own.

A trace can name an autograd node as the op of a record when no aten op ran inside it and no forward op
is known (``mod`` ``autograd``; see docs/records.md, "How a kernel finds its op"). ``AccumulateGrad``
and ``GraphRoot`` are the engine's bookkeeping: storing a leaf's first gradient is a reference, and
any arithmetic (adding to an existing ``.grad``, a copy) runs as an aten op inside the node, which then
names the work. So a record of such a node alone did none: 0 FLOPs, 0 bytes, a known zero. Other nodes
(``XBackward0``, ``CppNode<...>``) compute their gradient themselves and stay without a model (n/a).
"""

from __future__ import annotations

from pyprof.prof.ops.registry import Cost, OpCall, register


@register("accumulategrad", "graphroot")
def _bookkeeping(call: OpCall) -> Cost:
    return Cost(0.0, 0, None, note="autograd bookkeeping: no arithmetic of its own")
