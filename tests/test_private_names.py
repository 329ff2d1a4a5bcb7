"""Private torch names live in pyprof/torch_private.py and pyprof/probes.py alone (no other module of
pyprof, nor the C extension, names one), so a torch release that renames one is met in one place."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "pyprof"
ALLOWED = {"torch_private.py", "probes.py"}
PRIVATE_PATH = re.compile(r"\btorch(?:\.\w+)*\._[A-Za-z]\w*")  # torch._C..., torch.utils._device...


def _private_leaves() -> set[str]:
    """The private names the two allowed files use: each ``_name`` of a ``torch.…`` path they spell, and
    each ``_name`` torch_private.py reads as an attribute or names in a string."""
    out: set[str] = set()
    for name in ALLOWED:
        tree = ast.parse((PKG / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for path in PRIVATE_PATH.findall(node.value):
                    out.update(p for p in path.split(".") if p.startswith("_"))
                if name == "torch_private.py" and re.fullmatch(r"_[A-Za-z]\w*", node.value):
                    out.add(node.value)
            elif name == "torch_private.py" and isinstance(node, ast.Attribute) and re.fullmatch(r"_[A-Za-z]\w*",
                                                                                                  node.attr):
                out.add(node.attr)
    return out


def _python_hits(path: Path, leaves: set[str]) -> list[str]:
    text = path.read_text()
    hits = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute) and node.attr in leaves:
            hits.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in leaves or PRIVATE_PATH.search(node.value):
                hits.append(f"{node.lineno}: {node.value[:60]!r}")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            if "._" in node.module or any(a.name.startswith("_") for a in node.names):
                hits.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Import):
            hits += [f"{node.lineno}: import {a.name}" for a in node.names if PRIVATE_PATH.match(a.name)]
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT and PRIVATE_PATH.search(tok.string):
            hits.append(f"{tok.start[0]}: {tok.string[:60]}")
    return hits


def test_the_leaves_are_found():
    leaves = _private_leaves()
    assert {"_is_profiler_enabled", "_sequence_nr", "_VariableFunctions", "_inductor", "_dynamo"} <= leaves


def test_no_other_python_file_names_a_private_torch_name():
    leaves = _private_leaves()
    found = {str(p.relative_to(PKG)): h for p in sorted(PKG.rglob("*.py"))
             if p.name not in ALLOWED or p.parent != PKG for h in [_python_hits(p, leaves)] if h}
    assert found == {}


def test_the_c_extension_names_no_private_torch_name():
    leaves = _private_leaves()
    for src in PKG.rglob("*.c"):
        text = src.read_text()
        assert not PRIVATE_PATH.search(text), src
        assert not [w for w in leaves if f'"{w}"' in text], src
