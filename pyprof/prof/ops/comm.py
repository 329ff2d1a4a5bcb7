"""Collective family: the c10d collectives torch.distributed records (``record_param_comms``'s
``Collective name``), priced per rank from their message sizes.

* Bytes: the input message read and the output message written, each once, at the collective's element
  size: the memory traffic of the rank's buffers. The bytes on the wire depend on the algorithm (a ring
  all-reduce sends about twice the message) and are not modelled.
* FLOPs: a reducing collective (all-reduce, reduce-scatter, reduce) adds ``(g - 1) / g`` of its input
  elements on each rank of a group of ``g`` (the reduce-scatter phase of a ring); the others only move
  data (a known zero). Unknown group size: n/a.

The roofline of a collective compares these bytes with memory bandwidth, which the network, not memory,
bounds: read its gap as how far the collective is from a memory copy of its buffers.
"""

from __future__ import annotations

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register

REDUCING = frozenset({"allreduce", "all_reduce", "allreduce_coalesced", "reduce_scatter", "_reduce_scatter_base",
                      "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced", "reduce_scatter_base", "reduce"})
MOVING = frozenset({"allgather", "all_gather", "_allgather_base", "allgather_base", "_all_gather_base", "all_gather_into_tensor",
                    "allgather_into_tensor_coalesced", "allgather_coalesced", "broadcast", "send", "recv",
                    "alltoall", "alltoall_base", "all_to_all", "all_to_all_single"})


@register(*sorted(REDUCING | MOVING))
def _collective(call: OpCall) -> Cost | None:
    b = {a.get("name"): a for a in call.args if isinstance(a, dict)}
    x, y = b.get("input"), b.get("output")
    sx, sy = A.shape(x), A.shape(y)
    if sx is None or sy is None:
        return None
    dt = A.dtype(x)
    n_in, n_out = A.numel(sx), A.numel(sy)
    byts = A.sized(n_in + n_out, dt)
    if call.op in MOVING:
        return Cost(0.0, byts, dt)
    group = A.value(b.get("group_size"), None)
    flops = float(n_in) * (group - 1) / group if isinstance(group, int) and group > 0 else None
    return Cost(flops, byts, dt)
