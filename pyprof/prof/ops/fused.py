"""The cost of a kernel Inductor generated (``torch.compile``), from what it was compiled from.

Such a kernel's record (``mod`` ``inductor``, ``op`` ``fused:OPS``) carries in ``args`` what
:mod:`pyprof.annotate.inductor` recorded as the kernel was generated: ``buffers``, one ``op`` argument per
origin node, or ``inputs`` (docs/records.md, ``args``). How that is priced is docs/prof.md's (Conventions):
**bytes** the buffers, each once (``rw`` twice: read, then written), unknown without ``buffers``;
**FLOPs** the sum of the origin nodes', each priced by the model its op gets as an eager call
(:func:`pyprof.prof.ops.registry.estimate`), ``1/share`` of it in each kernel sharing the node, 0 for a
node priced at an extern call; a node without a model, with unknown sizes or missing makes the
kernel's FLOPs unknown, never the part that could be priced; ``inputs`` only: a copy, 0 FLOPs.

No torch here: the arguments are the record's.
"""

from __future__ import annotations

from typing import Any

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, canonical, estimate

FUSED_MOD = "inductor"  # the record's ``mod`` of a kernel Inductor generated (docs/records.md)
FUSED_PREFIX = "fused:"
BUFFERS = "buffers"
INPUTS = "inputs"  # a kernel whose origin nodes are graph inputs only: a copy (a layout change)
ACCESS = ("r", "w", "rw", "?")


def is_fused(op: Any, mod: Any) -> bool:
    """Whether a record's (op, mod) is a kernel Inductor generated."""
    return mod == FUSED_MOD and isinstance(op, str) and op.startswith(FUSED_PREFIX)


def buffer_bytes(args: list | None) -> float | None:
    """The bytes of the ``buffers`` argument (see the module docstring); None where it is absent or a
    size or dtype is unknown."""
    arg = next((a for a in args or () if isinstance(a, dict) and a.get("name") == BUFFERS
                and a.get("type") == "tensorlist"), None)
    if arg is None or not isinstance(arg.get("items"), list):
        return None
    total = 0.0
    for t in arg["items"]:
        n = A.nbytes(t) if isinstance(t, dict) else None
        if n is None or t.get("name") not in ACCESS:
            return None
        total += 2 * n if t["name"] == "rw" else n
    return total


def origin_flops(args: list | None) -> tuple[float | None, str]:
    """(the FLOPs of the ``op`` arguments, summed; the first op that could not be priced, or ``""``).
    None where there is no ``op`` argument or one cannot be priced."""
    calls = [a for a in args or () if isinstance(a, dict) and a.get("type") == "op"]
    if not calls:
        copies = any(isinstance(a, dict) and a.get("name") == INPUTS and a.get("type") == "int"
                     and isinstance(a.get("value"), int) and a["value"] > 0 for a in args or ())
        return (0.0, "") if copies else (None, "no origin ops recorded")
    total = 0.0
    for c in calls:
        flops, why = _call_flops(c)
        if flops is None:
            return None, why
        total += flops
    return total, ""


def _call_flops(c: dict) -> tuple[float | None, str]:
    """One origin op's FLOPs over its ``share`` (0 for an extern one: priced at its call), or None and why."""
    name = c.get("name")
    if not isinstance(name, str) or not name:
        return None, "an origin node not recorded"
    if c.get("extern") is True:
        return 0.0, ""
    items = c.get("items")
    if not isinstance(items, list):
        return None, f"{canonical(name)}: sizes unknown"
    cost = estimate(OpCall(name, items, "fprop", None, "aten"))
    if cost is None or cost.flops is None:
        return None, canonical(name)
    share = c.get("share", 1)
    if type(share) is not int or share < 1:
        return None, f"{canonical(name)}: share {share!r}"
    return cost.flops / share, ""


def fused_cost(args: list | None) -> Cost:
    """A generated kernel's :class:`Cost`: FLOPs of its origin ops, bytes of its buffers (each None where
    unknown, independently), the dtype its buffers promote to; ``note`` names what left FLOPs unknown."""
    flops, missing = origin_flops(args)
    buf = next((a for a in args or () if isinstance(a, dict) and a.get("name") == BUFFERS), None)
    items = buf.get("items") if isinstance(buf, dict) else None
    dtype = A.promote(t.get("dtype") for t in items if isinstance(t, dict)) if isinstance(items, list) else None
    return Cost(flops, buffer_bytes(args), dtype, note=f"fused: flops n/a ({missing})" if missing else "")
