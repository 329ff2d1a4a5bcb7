"""Time by layer: the module tree of the records, split into forward, backward and optimizer, as the
nodes of an icicle chart.

A record's layers (``layer``: module paths and ``layer:NAME`` ranges, outermost first) are its path in
the tree, under a root per direction; a node's time is that of every record at or below it (its own
records' and its children's), in whole ns, so a parent is never smaller than its children. Records
without a layer sit under ``(no layer)`` of their direction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

DIRECTION_NAMES = {"fprop": "forward", "bprop": "backward", "bprop2": "double backward", "optim": "optimizer"}
#: the directions' roots in the order they are drawn
ORDER = {name: i for i, name in enumerate([*DIRECTION_NAMES.values(), "other"])}
ROOT = "all"
NO_LAYER = "(no layer)"


@dataclass
class Tree:
    """Icicle nodes, parents before children: ``ids`` (unique paths), ``labels``, ``parents`` ('' for
    the root), ``values`` (ns, totals), ``own`` (ns of the node's own records)."""

    ids: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    parents: list[str] = field(default_factory=list)
    values: list[int] = field(default_factory=list)
    own: list[int] = field(default_factory=list)

    def value(self, node_id: str) -> int:
        return self.values[self.ids.index(node_id)]


def tree(df: pd.DataFrame) -> Tree:
    """The tree of ``df`` (prof's per-kernel table: ``dir``, ``layer``, ``sil``)."""
    totals: dict[tuple, int] = {}
    own: dict[tuple, int] = {}
    for d, layer, sil in zip(df["dir"].tolist(), df["layer"].tolist(), df["sil"].fillna(0).tolist(), strict=True):
        t = int(round(sil))
        chain = tuple(str(x) for x in layer) if isinstance(layer, (list, tuple)) and layer else (NO_LAYER,)
        path = (DIRECTION_NAMES.get(d, "other"),) + chain
        for k in range(len(path) + 1):
            totals[path[:k]] = totals.get(path[:k], 0) + t
        own[path] = own.get(path, 0) + t
    out = Tree()
    order = sorted(totals, key=lambda p: (len(p), ORDER[p[0]] if p else -1, -totals[p]))
    for p in order:
        out.ids.append("/".join((ROOT,) + p))
        out.labels.append(p[-1] if p else ROOT)
        out.parents.append("/".join((ROOT,) + p[:-1]) if p else "")
        out.values.append(totals[p])
        out.own.append(own.get(p, 0))
    return out
