"""``python -m pyprof.prof.ops``: the covered ops, by family, as a Markdown table (for the docs)."""

from __future__ import annotations

import sys
from collections import defaultdict

from pyprof.prof.ops import covered_ops, family


def markdown() -> str:
    by_family: dict[str, list[str]] = defaultdict(list)
    for op in sorted(covered_ops()):
        by_family[family(op) or "?"].append(op)
    lines = ["| family | ops |", "|---|---|"]
    lines += [f"| `{fam}` | {', '.join(f'`{o}`' for o in ops)} |" for fam, ops in sorted(by_family.items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.stdout.write(markdown())
