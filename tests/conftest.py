"""Shared test fixtures: where the real corpus lies, and skipping cleanly where it is absent."""

from __future__ import annotations

import ast
import atexit
import functools
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# The validation harness (scripts/validation: model zoo, FLOP references) is imported from the checkout
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))
CORPUS = Path(os.environ.get("PYPROF_CORPUS", REPO.parent / "shared" / "corpus"))

# Tests never read or write the user's saved peaks (~/.cache/pyprof/calibration.json): each test process
# gets its own empty calibration path (a test that wants one sets PYPROF_CALIBRATION itself), in a
# temporary folder removed when the process exits.
_CALIBRATION_DIR = tempfile.mkdtemp(prefix="pyprof-test-")
atexit.register(shutil.rmtree, _CALIBRATION_DIR, True)
os.environ["PYPROF_CALIBRATION"] = os.path.join(_CALIBRATION_DIR, "calibration.json")


# Python code run first in a child interpreter to prove a path imports no torch (import of torch fails there).
BLOCK_TORCH = (
    "import sys, importlib.abc\n"
    "class Block(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'torch' or name.startswith('torch.'):\n"
    "            raise ImportError('torch is blocked in this test')\n"
    "sys.meta_path.insert(0, Block())\n"
)


def hand_union(events, keep) -> tuple[int, int]:
    """(busy ns, span ns) of the chrome-trace events ``keep`` accepts, worked out by hand from their
    ``ts``/``dur``: the reference the idle and overlap figures are checked against."""
    iv = sorted((round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in events if keep(e))
    busy, cur = 0, list(iv[0])
    for s, e in iv[1:]:
        if s > cur[1]:
            busy, cur = busy + cur[1] - cur[0], [s, e]
        else:
            cur[1] = max(cur[1], e)
    return busy + cur[1] - cur[0], max(e for _, e in iv) - iv[0][0]


def run_main(capsys, argv) -> tuple[int, str, str]:
    """``pyprof ARGV`` run in-process: (exit code, stdout, stderr)."""
    from pyprof.cli.main import main

    try:
        main([str(a) for a in argv])
        code = 0
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def corpus_files(kind: str | None = None) -> list[Path]:
    """All corpus SQLite files (``kind`` = "nsys" or "nvprof"), or [] where the corpus is absent."""
    if not CORPUS.is_dir():
        return []
    kinds = [kind] if kind else ["nsys", "nvprof"]
    return sorted(p for k in kinds for p in (CORPUS / k).glob("*.sqlite"))


def corpus_params(paths: list) -> list:
    """``paths`` to parametrize a test with, or where the corpus gave none, one skipped case that says so
    (an empty parameter set would skip without naming the corpus, and uncounted by the suite's line)."""
    return list(paths) or [pytest.param(None, marks=pytest.mark.skip(reason=f"corpus not found at {CORPUS}"),
                                        id="no-corpus")]


def corpus_file(name: str) -> Path:
    """One corpus file by (a unique part of) its name; skips the test where the corpus is absent."""
    matches = [p for p in corpus_files() if name in p.name]
    if not matches:
        pytest.skip(f"corpus file {name!r} not found under {CORPUS}")
    assert len(matches) == 1, f"{name!r} matches several corpus files: {matches}"
    return matches[0]


def corpus_copy(tmp_path: Path, name: str) -> Path:
    """A writable copy in ``tmp_path`` of the corpus file ``name`` (the corpus is read-only), for tests
    that damage or rebuild it; skips where the corpus is absent."""
    src = corpus_file(name)
    dst = tmp_path / src.name
    shutil.copyfile(src, dst)
    dst.chmod(0o644)
    return dst


def _corpus_skip(report) -> bool:
    """A skip for want of the real-data corpus (every such skip's reason names the corpus or its folder)."""
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    return report.skipped and ("corpus" in reason.lower() or str(CORPUS) in reason)


def pytest_terminal_summary(terminalreporter):
    """One line before pytest's last: how many tests skipped because the real-data corpus is absent
    (CONTRIBUTING.md, "The real-data corpus", says where it lives and how to get it)."""
    n = sum(1 for r in terminalreporter.stats.get("skipped", []) if _corpus_skip(r))
    where = f"the real-data corpus is not at {CORPUS}" if not CORPUS.is_dir() else f"files missing from {CORPUS}"
    terminalreporter.write_line(f"pyprof: {n} test(s) skipped for want of corpus data ({where}; CONTRIBUTING.md: The "
                                "real-data corpus)" if n else f"pyprof: no test skipped for want of corpus data ({CORPUS})")


# -- CI legs select by marker (.ci/run): a test needs torch by what it imports -----------------------
def _torch_in(node: ast.AST) -> bool:
    """Whether ``node`` imports torch (directly, through a module of this repository that does at its
    top level, or by ``pytest.importorskip("torch")``) or is marked ``torch``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Import) and any(a.name.split(".")[0] == "torch" or _imports_torch(a.name)
                                             for a in n.names):
            return True
        if isinstance(n, ast.ImportFrom) and n.module and (n.module.split(".")[0] == "torch" or any(
                _imports_torch(f"{n.module}.{a.name}") for a in n.names) or _imports_torch(n.module)):
            return True
        if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", "")) == "importorskip" \
                and n.args and str(getattr(n.args[0], "value", "")).split(".")[0] == "torch":
            return True
        if isinstance(n, ast.Attribute) and n.attr == "torch" and getattr(n.value, "attr", "") == "mark":
            return True
    return False


_SEEN: set[str] = set()


@functools.cache
def _imports_torch(module: str) -> bool:
    """Whether the module ``module`` of this repository imports torch when it is imported."""
    path = REPO.joinpath(*module.split("."))
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if module in _SEEN or not path.is_file():  # (an import cycle, or not this repository's)
        return False
    _SEEN.add(module)
    return _torch_units(path)[0]


@functools.cache
def _torch_units(path: Path) -> tuple[bool, frozenset[str]]:
    """(whether the module at ``path`` needs torch at its top level, the names of its top-level
    functions and classes that need torch: their own imports, or a function, class or fixture of the
    module that they name and that needs it)."""
    body = ast.parse(path.read_text()).body
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    units = {s.name: s for s in body if isinstance(s, defs)}
    top = any(_torch_in(s) for s in body if not isinstance(s, defs))
    names = {k: {n.id if isinstance(n, ast.Name) else n.arg for n in ast.walk(u) if isinstance(n, (ast.Name, ast.arg))}
             for k, u in units.items()}
    need = {k for k, u in units.items() if _torch_in(u)}
    while grown := {k for k in units if k not in need and names[k] & need}:
        need |= grown
    return top, frozenset(need)


def pytest_collection_modifyitems(items) -> None:
    """Mark ``torch`` every test that needs torch (:func:`_torch_units`), the set the torch legs and
    the pure-Python leg of .ci/run select with ``-m torch``."""
    for item in items:
        top, need = _torch_units(Path(item.fspath))
        unit = item.cls.__name__ if getattr(item, "cls", None) else getattr(item, "originalname", item.name)
        if top or unit in need:
            item.add_marker(pytest.mark.torch)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Where torch is absent, a test that skips for want of it but is not marked ``torch`` fails: the
    torch legs, which select by the marker, would never run it."""
    report = (yield).get_result()
    if report.skipped and re.search(r"could not import 'torch['.]", str(report.longrepr)) \
            and not item.get_closest_marker("torch"):
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} skips without torch but is not marked torch: mark it (pytest.mark.torch)"


@pytest.fixture
def initialized():
    """pyprof.init() for the test, deinit() after (imports torch only for the tests that use it)."""
    import pyprof

    pyprof.init()
    yield
    pyprof.deinit()


@pytest.fixture
def corpus():
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not found at {CORPUS}")
    return CORPUS


# -- pyprof.annotate: nothing may stay patched or hooked after a test --------------------------------
def _pyprof_leftovers() -> list[str]:
    """Attributes of torch namespaces that are pyprof wrappers, and pyprof callables left in torch's
    global hook dicts. Looks only at modules already imported (never imports torch itself)."""
    import sys
    import types

    if "torch" not in sys.modules:
        return []
    found = []
    names = ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special")
    owners = [sys.modules[n] for n in names if n in sys.modules]
    torch = sys.modules["torch"]
    owners.append(torch.Tensor)
    graphs = sys.modules.get("torch.cuda.graphs")
    if graphs is not None and isinstance(getattr(graphs, "CUDAGraph", None), type):
        owners.append(graphs.CUDAGraph)
    for owner in owners:
        for name, value in list(vars(owner).items()):
            fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            if isinstance(fn, types.FunctionType) and getattr(fn, "__pyprof_meta__", None) is not None:
                found.append(f"{getattr(owner, '__name__', owner)}.{name} is still a pyprof wrapper")
    hook_dicts = []
    mm = sys.modules.get("torch.nn.modules.module")
    if mm is not None:
        hook_dicts += [("module forward pre", mm._global_forward_pre_hooks),
                       ("module forward", mm._global_forward_hooks)]
    opt = sys.modules.get("torch.optim.optimizer")
    if opt is not None:
        hook_dicts += [("optimizer pre", opt._global_optimizer_pre_hooks),
                       ("optimizer post", opt._global_optimizer_post_hooks)]
    for what, hooks in hook_dicts:
        for h in hooks.values():
            if getattr(h, "__module__", "").startswith("pyprof"):
                found.append(f"{what} hook {h.__qualname__} still registered")
    autograd = sys.modules.get("torch.autograd")
    if autograd is not None and getattr(getattr(autograd, "_engine_run_backward", None), "__module__", "").startswith("pyprof"):
        found.append("torch.autograd._engine_run_backward is still patched")
    return found


_PRISTINE: dict = {}


def _owners_now() -> dict:
    import sys

    names = ("torch", "torch.nn.functional", "torch.linalg", "torch.fft", "torch.special")
    owners = {n: sys.modules[n] for n in names if n in sys.modules}
    owners["torch.Tensor"] = sys.modules["torch"].Tensor
    return owners


def _take_pristine() -> None:
    """Snapshot the torch namespaces the first time a test starts with torch imported and pyprof
    not initialised (never importing torch here)."""
    import sys

    if _PRISTINE or "torch" not in sys.modules:
        return
    ann = sys.modules.get("pyprof.annotate")
    if ann is not None and ann.is_initialized():
        return
    for name, owner in _owners_now().items():
        _PRISTINE[name] = dict(vars(owner))


def _diff_from_pristine() -> list[str]:
    """Attributes deinit lost, or put back as an own attribute where the original was inherited."""
    found = []
    owners = _owners_now()
    for name, before in _PRISTINE.items():
        owner = owners.get(name)
        if owner is None:
            continue
        now = vars(owner)
        missing = [k for k in before if k not in now]
        found += [f"{name}.{k} is gone" for k in missing]
        if name == "torch.Tensor":
            base = owner.__mro__[1]
            found += [f"torch.Tensor.{k} became an own attribute" for k in now
                      if k not in before and k in vars(base) and now[k] is vars(base)[k]]
    return found


@pytest.fixture(autouse=True)
def _no_terminal_width(monkeypatch):
    """Every test starts without ``$COLUMNS``, as a piped run has it: a summary's width would otherwise
    come from the shell that started pytest, and a test pass on one machine and fail on another."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(autouse=True)
def _no_pyprof_leftovers():
    """After every test: if the test left pyprof initialised, deinit it and fail the test; then
    fail if any pyprof wrapper or hook is left, or a torch attribute differs from the pristine
    snapshot in a way only a bad restore can cause."""
    _take_pristine()
    yield
    import sys

    ann = sys.modules.get("pyprof.annotate")
    was_on = bool(ann and ann.is_initialized())
    if was_on:
        ann.deinit()
    left = _pyprof_leftovers()
    if "torch" in sys.modules:
        left += _diff_from_pristine()
    assert not was_on, "test left pyprof initialised (call pyprof.deinit())"
    assert not left, "pyprof left torch patched after deinit(): " + "; ".join(left[:5])


def record_body(data: bytes | str) -> bytes | str:
    """A record file's text (or bytes) less its header line, checked to be the current format's
    (``pyprof.records.header_line``), and its end line: the record lines themselves, as tests compare them."""
    import orjson

    from pyprof.records import FORMAT_VERSION, HEADER_KEY

    raw = data.encode() if isinstance(data, str) else data
    head, sep, body = raw.partition(b"\n")
    assert orjson.loads(head)[HEADER_KEY] == FORMAT_VERSION, f"no record file header: {head[:80]!r}"
    body = body if sep else b""
    cut = body.rfind(b"\n", 0, len(body) - 1) + 1  # the end line (pyprof.records.end_line), if any
    if body[cut:].startswith(b'{"' + HEADER_KEY.encode() + b'":'):
        body = body[:cut]
    return body.decode() if isinstance(data, str) else body


def record_lines(data: bytes | str) -> list[dict]:
    """The records of a record file's text (or bytes), its header line checked and skipped."""
    import orjson

    return [orjson.loads(line) for line in record_body(data).splitlines() if line.strip()]


def read_record_file(path) -> list[dict]:
    """The records of the record file ``path`` (see :func:`record_lines`)."""
    return record_lines(Path(path).read_bytes())
