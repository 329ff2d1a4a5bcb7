"""No import circles between pyprof's modules.

The graph is built from the source with :mod:`ast`, not by importing: every ``import`` and ``from ...
import`` statement of every module under ``pyprof/``, at module level or inside a function (a lazy
import that closes a circle is still a circle), except those under ``if TYPE_CHECKING:``. ``from
pyprof.x import y`` is an edge to ``pyprof.x.y`` when ``y`` is a submodule, else to ``pyprof.x``; a
package's ``__init__`` importing its own submodules counts. Importing ``pyprof.a.b`` also runs
``pyprof/a/__init__.py``, but that implicit edge is not counted: it would make every package a circle
with its children. (Not seen: ``importlib.import_module`` of a computed name, and imports a C extension
makes.) Any circle fails the test.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "pyprof"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).parts)
    parts[-1] = parts[-1].split(".", 1)[0]  # (an extension's file: _fastpayload.cpython-311-x86_64-linux-gnu.so)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules(root: Path) -> dict[str, Path]:
    """Every module of package ``root``: its ``.py`` files, and its C extensions (from their source,
    ``X.c``, whether built or not; they import no module here), so ``from pkg import _ext`` names the
    extension, not ``pkg``."""
    found = {_module_name(p, root): p for pattern in ("*.c", "*.so", "*.pyd") for p in root.rglob(pattern)}
    found.update((_module_name(p, root), p) for p in root.rglob("*.py"))
    return dict(sorted(found.items()))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, type_checking: bool = False) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree`` outside ``if TYPE_CHECKING:`` bodies (their ``else`` counts);
    with ``type_checking``, those inside too (the graph a type checker follows)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
            return
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """``name`` if it is one of ``modules``, else its longest prefix that is one (None: not ours)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _targets(node: ast.Import | ast.ImportFrom, importer: str, is_package: bool,
             modules: dict[str, Path]) -> set[str]:
    """The modules (of ``modules``) an import statement in module ``importer`` names."""
    if isinstance(node, ast.Import):
        return {t for alias in node.names if (t := _known(alias.name, modules))}
    out: set[str] = set()
    if node.level:
        package = importer if is_package else importer.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{node.module}" if node.module else package
    else:
        base = node.module or ""
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        target = sub if sub in modules else _known(base, modules)
        if target:
            out.add(target)
    return out


def import_graph(root: Path = ROOT, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of the same package (``root``) its import statements name (self-imports
    left out; ``type_checking``: those under ``if TYPE_CHECKING:`` too)."""
    modules = _modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if path.suffix != ".py":
            graph[name] = set()
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_package = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _imports(tree, type_checking):
            edges |= _targets(node, name, is_package, modules)
        edges.discard(name)
        graph[name] = edges
    return graph


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _cycle(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One circle through the first module of a component: the shortest way back to it (BFS)."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    queue = [start]
    for node in queue:
        for child in sorted(graph[node] & members):
            if child == start:
                path = [node]
                while path[-1] != start:
                    path.append(prev[path[-1]])
                return [*reversed(path), start]
            if child not in prev:
                prev[child] = node
                queue.append(child)
    raise AssertionError(f"not a component: {comp}")  # pragma: no cover


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One circle per strongly connected component of the graph."""
    return [_cycle(graph, comp) for comp in _components(graph)]


def _report(found: list[list[str]]) -> str:
    return "import circles:\n" + "\n".join("  " + " -> ".join(c) for c in found)


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_graph_sees_imports_of_every_kind(tmp_path):
    root = tmp_path / "pkg"
    _write(root, {
        "__init__.py": "from pkg.sub import thing\n",  # a package importing its own submodule
        "sub/__init__.py": "from . import leaf\nthing = 1\n",  # relative, a submodule
        "sub/leaf.py": "import os\nimport pkg.b as b\nfrom ..c import z\n",  # not ours; ``as``; ``..``
        "sub/_ext.c": "",  # a C extension's source
        "a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import b\nelse:\n"
                "    from pkg.sub import _ext\n\ndef f():\n    from . import c\n",
        "b.py": "from pkg.sub import thing, leaf\nfrom .sub.leaf import x\nfrom pkg import missing\n",
        "c.py": "import typing\nif typing.TYPE_CHECKING:\n    import pkg.a\n",
    })
    graph = import_graph(root)
    assert graph == {
        "pkg": {"pkg.sub"},
        "pkg.sub": {"pkg.sub.leaf"},
        "pkg.sub.leaf": {"pkg.b", "pkg.c"},
        "pkg.sub._ext": set(),
        "pkg.a": {"pkg.sub._ext", "pkg.c"},  # TYPE_CHECKING's else counts; an import in a function too
        "pkg.b": {"pkg.sub", "pkg.sub.leaf", "pkg"},  # (``x`` is leaf's name: the edge is to leaf)
        "pkg.c": set(),
    }
    # the package's __init__ imports sub, whose leaf imports b, which imports the package back
    assert cycles(graph) == [["pkg", "pkg.sub", "pkg.sub.leaf", "pkg.b", "pkg"]]
    real = import_graph()
    assert "pyprof.parse.kineto.source" in real["pyprof.parse.kineto"]
    assert len(real) > 50


def test_cycle_finder_reports_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    graph["d"] = {"c"}
    assert cycles(graph) == [["a", "b", "c", "a"]]  # one circle per component: the shortest from its first


def test_no_import_circles():
    found = cycles(import_graph())
    assert not found, _report(found)


def test_no_import_circles_even_for_the_type_checker():
    """Imports under ``if TYPE_CHECKING:`` counted too: no circle either. parse/kineto's record writer
    (lines) is imported by the source that uses it and knows it only through its own public interface
    (``lines.PlanSource``), not by importing it for its annotations."""
    graph = import_graph(type_checking=True)
    assert "pyprof.parse.kineto.lines" in graph["pyprof.parse.kineto.source"]
    found = cycles(graph)
    assert not found, _report(found)


def test_the_kineto_writers_read_no_private_name_of_the_source():
    """lines reaches the source only through ``PlanSource``'s public names: no ``src._x``,
    ``self.src._x`` or ``self._src._x``."""
    found = []
    for name in ("lines.py",):
        tree = ast.parse((ROOT / "parse" / "kineto" / name).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            base = node.value
            if (isinstance(base, ast.Name) and base.id == "src") or (
                    isinstance(base, ast.Attribute) and base.attr in ("src", "_src")):
                found.append(f"{name}:{node.lineno}: .{node.attr}")
    assert not found, found
