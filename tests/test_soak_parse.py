"""Many parses in one process leave nothing behind.

:data:`PASSES` passes over the same inputs through the Python API (``open_source(path).records()``,
read to the end): the corpus's smallest SQLite exports and torch.profiler traces (or, without the
corpus, the committed traces and synthetic Nsight exports), and a few damaged copies whose errors are
caught. After the last pass, against the first:

* Python memory (``tracemalloc``) has not grown by more than :data:`GROWTH_LIMIT` (the first pass
  fills the caches that are meant to stay);
* the same file descriptors are open as before the first pass (a database, trace file or memory map
  left open holds one), no input is still memory-mapped, no temporary file is left and no forked
  child is alive;
* every pass gave the same records for every file (nothing of one parse leaks into the next).

The passes run as in a process pyprof owns (:func:`pyprof.process.owning`).
"""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import tempfile
import threading
import tracemalloc
from pathlib import Path

import orjson
import pytest

from pyprof import process
from pyprof.errors import PyprofError
from pyprof.parse.source import open_source
from tests.conftest import CORPUS, REPO

pytestmark = pytest.mark.slow

PASSES = 5
#: inputs per pass (corpus present), of which up to KINETO torch.profiler traces
FILES = 20
KINETO = 2
#: traced memory after the last pass may exceed that after the first by this much
GROWTH_LIMIT = 2 << 20
FIXTURES = REPO / "tests" / "fixtures" / "kineto"


def _corpus_inputs() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    size = os.path.getsize
    kineto = sorted((CORPUS / "kineto").glob("*.json*"), key=size)[:KINETO]
    sqlite = sorted([*(CORPUS / "nsys").glob("*.sqlite"), *(CORPUS / "nvprof").glob("*.sqlite")], key=size)
    return kineto + sqlite[:FILES - len(kineto)]


def _synthetic_exports(folder: Path) -> list[Path]:
    """Small Nsight Systems exports (tests/nsys_synth.py): markers, plain ranges, two threads."""
    from tests.nsys_synth import Export

    out = []
    for n in (1, 3, 8):
        ex = Export()
        main, worker = ex.track(name="python"), ex.track(name="worker")
        for i in range(n):
            with main.range(f'{{"pyprof":1,"k":"mod","path":"fc{i}","cls":"Linear"}}', domain="pyprof"):
                main.launch("ampere_sgemm_32x128_tn")
            with worker.range(f"step {i}"):
                worker.launch("vectorized_elementwise_kernel")
        path = folder / f"synthetic{n}.sqlite"
        ex.write(path)
        out.append(path)
    return out


def _damaged(folder: Path, good: list[Path]) -> list[Path]:
    """Inputs that fail: a truncated SQLite export, a truncated trace, an empty file."""
    out = []
    sqlite = next(p for p in good if p.suffix == ".sqlite")
    data = sqlite.read_bytes()
    (folder / "cut.sqlite").write_bytes(data[: len(data) // 3])
    trace = FIXTURES / "gpu_synthetic.json"
    data = trace.read_bytes()
    (folder / "cut.json").write_bytes(data[: len(data) // 2])
    (folder / "empty.json").write_bytes(b"")
    out += [folder / "cut.sqlite", folder / "cut.json", folder / "empty.json"]
    return out


def _inputs(folder: Path) -> list[Path]:
    good = _corpus_inputs() or [FIXTURES / "gpu_synthetic.json", FIXTURES / "cpu_unescaped_markers.json.gz",
                                *_synthetic_exports(folder)]
    return good + _damaged(folder, good)


def _parse(path: Path) -> str:
    """A digest of the records of ``path`` (read to the end), or the error's type."""
    try:
        digest = hashlib.blake2b()
        for rec in open_source(path).records():
            digest.update(orjson.dumps(rec, option=orjson.OPT_SORT_KEYS))
        return digest.hexdigest()
    except PyprofError as exc:
        return type(exc).__name__


def _fds() -> set[str]:
    return {f"{fd} -> {_target(fd)}" for fd in os.listdir("/proc/self/fd")}


def _target(fd: str) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # (the listing's own descriptor, closed since)
        return "?"


def _children() -> list[str]:
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            found += Path(f"/proc/self/task/{task}/children").read_text().split()
        except OSError:
            pass
    return found


def _mapped(paths: list[Path]) -> list[str]:
    names = {str(p) for p in paths}
    maps = Path("/proc/self/maps").read_text().splitlines()
    return [line for line in maps if line.rsplit(None, 1)[-1] in names]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_many_parses_leave_nothing_behind(tmp_path, monkeypatch):
    work, temp = tmp_path / "inputs", tmp_path / "temp"
    work.mkdir()
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # forked children's temporary files
    inputs = _inputs(work)
    gc.collect()
    fds, children, threads = _fds(), _children(), threading.active_count()
    was_tracing = tracemalloc.is_tracing()
    tracemalloc.start()
    try:
        passes, memory = [], []
        with process.owning():  # as pyprof parse: the two-process paths are taken
            for _ in range(PASSES):
                passes.append([_parse(p) for p in inputs])
                gc.collect()
                memory.append(tracemalloc.get_traced_memory()[0])
    finally:
        if not was_tracing:
            tracemalloc.stop()
    outcomes = dict(zip(map(str, inputs), passes[0], strict=True))
    assert sum(len(o) > 32 for o in outcomes.values()) >= len(inputs) // 2, outcomes  # most have records
    assert {o for o in outcomes.values() if len(o) < 32} >= {"InputError"}, outcomes  # the damaged ones fail
    assert all(p == passes[0] for p in passes), "a later pass gave other records"
    growth = memory[-1] - memory[0]
    assert growth <= GROWTH_LIMIT, f"traced memory grew {growth / 2**20:.1f} MiB over {PASSES - 1} passes: {memory}"
    gc.collect()
    assert _fds() == fds, f"descriptors left open: {sorted(_fds() - fds)}"
    assert not _mapped(inputs), _mapped(inputs)
    assert not list(temp.iterdir()), sorted(p.name for p in temp.iterdir())
    assert _children() == children, "a forked child is still alive"
    assert threading.active_count() == threads
    shutil.rmtree(work)
