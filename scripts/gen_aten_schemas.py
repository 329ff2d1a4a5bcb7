"""Write pyprof/data/aten_schemas.txt: the aten operator schemas prof normalises op arguments to.

    python scripts/gen_aten_schemas.py > pyprof/data/aten_schemas.txt

prof and parse must run without torch, so the schemas they need are data: one line per aten overload,
as torch prints it (``aten::addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar
alpha=1) -> Tensor``), from ``torch._C._jit_get_all_schemas()`` of the installed torch. Left out: other
namespaces, ``out=`` overloads (a keyword-only argument torch writes into; profilers record the
functional overload too) and TorchScript overloads without a tensor (``aten::add.int``). The first
line names the torch version, the second the ops torch tags ``pointwise`` (all their overloads); rerun after a torch upgrade (``tests/test_ops_schema.py`` checks the
file parses). Read by :mod:`pyprof.prof.ops.schema`.
"""

import sys

import torch


def _is_out(s) -> bool:
    return any(a.kwarg_only and a.alias_info is not None and a.alias_info.is_write for a in s.arguments)


def keep(s) -> bool:
    if not s.name.startswith("aten::"):
        return False
    if _is_out(s):
        return False  # an out= overload
    types = [str(a.type) for a in s.arguments] + [str(r.type) for r in s.returns]
    return any("Tensor" in t for t in types)


def text() -> str:
    """The data file's text for the installed torch."""
    # ops sorted by name; an op's overloads in torch's registry order, the order its own overload
    # resolution tries them in (torch.add(x, 2) runs add.Tensor, listed before add.Scalar)
    lines = list(dict.fromkeys(str(s) for s in torch._C._jit_get_all_schemas() if keep(s)))
    order = {t: i for i, t in enumerate(lines)}
    lines.sort(key=lambda t: (t.split("(", 1)[0].split(".", 1)[0], order[t]))
    names = sorted({t.split("(", 1)[0].split(".", 1)[0][len("aten::"):] for t in lines})
    return (f"# aten schemas of torch {torch.__version__} (scripts/gen_aten_schemas.py)\n"
            f"# pointwise: {' '.join(pointwise(names))}\n" + "\n".join(lines) + "\n")


def pointwise(names: list[str]) -> list[str]:
    """The ops every overload of which torch tags ``pointwise`` (``max`` is not: ``max.dim`` reduces)."""
    out = []
    for n in names:
        packet = getattr(torch.ops.aten, n, None)
        try:
            tags = [getattr(packet, o).tags for o in packet.overloads() if keep(getattr(packet, o)._schema)]
        except (AttributeError, RuntimeError):
            continue
        if tags and all(torch.Tag.pointwise in t for t in tags):
            out.append(n)
    return out


def main() -> int:
    sys.stdout.write(text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
