"""pyprof's ranges as a real NVTX tool receives them.

tests/nvtx_tool/record_ranges.c is a minimal NVTX tool (an NVTX v3 injection library, loaded from
``NVTX_INJECTION64_PATH`` as Nsight Systems' is) that logs every push and pop with its thread and
domain. A child process runs a small ResNet (forward + backward, a forward that raises inside a
block, and a forward inside a Recorder) under it, once with the C extension (which pushes the
ranges itself) and once with ``PYPROF_PURE_PYTHON=1`` (through the ``nvtx`` package). Both logs
must hold the same ranges, balanced on every thread, each a pyprof marker; inside the Recorder, the
tool must receive exactly the texts the Recorder holds.
"""

from __future__ import annotations

import collections
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("nvtx")

from pyprof import markers  # noqa: E402
from pyprof.annotate import fastpath  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TOOL_SRC = ROOT / "tests" / "nvtx_tool" / "record_ranges.c"

CHILD = r"""
import sys
import torch
import pyprof
from pyprof.annotate.recorder import Recorder
from pyprof.annotate.state import S
from tests.small_models import MODELS

pyprof.init()
assert S.nvtx, "pyprof did not see the NVTX tool"
torch.manual_seed(0)
model, x = MODELS["resnet"]()
model(x).sum().backward()


def été(t):  # a call site that is not ASCII: its payload reaches the tool as UTF-8
    return torch.relu(t)


été(x)
handle = model.layer1[0].register_forward_hook(lambda *a: 1 / 0)
try:
    model(x)
except ZeroDivisionError:
    pass
handle.remove()
with Recorder() as rec:
    model(x)
with open(sys.argv[1], "w") as f:
    f.write("\n".join(rec.texts()))
pyprof.deinit()
"""


@pytest.fixture(scope="module")
def tool(tmp_path_factory) -> Path:
    if not sys.platform.startswith("linux"):
        pytest.skip("the test NVTX tool is written for Linux (gettid, ELF shared library)")
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the test NVTX tool")
    lib = tmp_path_factory.mktemp("nvtx_tool") / "librecord_ranges.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-I{ROOT / 'csrc'}", str(TOOL_SRC), "-o", str(lib)],
                   check=True, capture_output=True)
    return lib


def _run(tool: Path, tmp_path: Path, pure: bool) -> tuple[list, list]:
    """(log lines as tuples, the Recorder's texts) of the child under the tool."""
    tag = "py" if pure else "c"
    log, rec = tmp_path / f"nvtx_{tag}.log", tmp_path / f"rec_{tag}.txt"
    env = {**os.environ, "NVTX_INJECTION64_PATH": str(tool), "PYPROF_TEST_NVTX_LOG": str(log),
           "PYPROF_PURE_PYTHON": "1" if pure else "0", "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", CHILD, str(rec)], env=env, cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [tuple(line.split("\t")) for line in log.read_text().splitlines()]
    return lines, rec.read_text().splitlines()


def _check_balanced(lines: list) -> list:
    """Every line is pyprof's, stacks balance per thread; returns the pushed texts in order."""
    stacks: dict = collections.defaultdict(int)
    texts = []
    for line in lines:
        assert line[2] == markers.DOMAIN, line[:3]
        if line[0] == "push":
            stacks[line[1]] += 1
            assert markers.is_pyprof(line[3])
            markers.decode(line[3])
            texts.append(line[3])
        else:
            assert line[0] == "pop" and len(line) == 3
            stacks[line[1]] -= 1
            assert stacks[line[1]] >= 0, "a pop without its push"
    assert not any(stacks.values()), "ranges left open"
    return texts


def _no_ids(text: str) -> str:
    return re.sub(r'"(id|seq|nseq)":\[?\d+\]?', "", text)


def test_an_nvtx_tool_receives_every_range_once_balanced_and_the_same_on_both_paths(tool, tmp_path):
    if fastpath.extension() is None:
        pytest.skip("the C extension is not built here (or PYPROF_PURE_PYTHON=1)")
    c_lines, c_rec = _run(tool, tmp_path, pure=False)
    py_lines, py_rec = _run(tool, tmp_path, pure=True)
    c_texts, py_texts = _check_balanced(c_lines), _check_balanced(py_lines)
    kinds = collections.Counter(markers.decode(t)["k"] for t in c_texts)
    assert kinds["op"] > 50 and kinds["mod"] > 20 and kinds["bwd"] > 20, kinds
    assert any(":\u00e9t\u00e9" in t for t in c_texts)
    assert [(x[0], x[2]) for x in c_lines] == [(x[0], x[2]) for x in py_lines]
    assert [_no_ids(t) for t in c_texts] == [_no_ids(t) for t in py_texts]
    # inside the Recorder: the tool got exactly what the Recorder holds, as the last pushes
    for texts, rec in ((c_texts, c_rec), (py_texts, py_rec)):
        assert len(rec) > 20 and texts[-len(rec):] == rec


def test_the_pure_python_path_alone_under_the_tool(tool, tmp_path):
    """Where the extension is not built the nvtx package pushes; this runs that path everywhere."""
    lines, rec = _run(tool, tmp_path, pure=True)
    texts = _check_balanced(lines)
    assert len(rec) > 20 and texts[-len(rec):] == rec
