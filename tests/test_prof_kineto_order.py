"""prof reads torch.profiler records on its fast paths: their ``ranges`` come after ``opDir`` (just before
``opId``), not after ``apiEnd`` as in Nsight records, and the block reader (:mod:`pyprof.prof.fastread`)
cuts that order too, with the same columns as decoding every line whole."""

from __future__ import annotations

import orjson
import pytest

import pyprof.prof.load as load
from pyprof.prof.fastread import read_columns, record_columns
from pyprof.prof.fields import KEYS
from pyprof.prof.load import iter_records

try:
    from conftest import REPO
except ImportError:  # tests/ collected as a package
    from tests.conftest import REPO

CPU = REPO / "tests" / "fixtures" / "kineto" / "cpu_unescaped_markers.json.gz"


@pytest.fixture(scope="module")
def kineto_lines() -> list[bytes]:
    """The records ``pyprof parse`` writes for a real CPU trace with pyprof markers (torch.profiler order)."""
    from pyprof.parse.kineto import KinetoSource

    lines = b"".join(KinetoSource(CPU).prepared().lines()).splitlines()
    first = orjson.loads(lines[0])
    keys = list(first)
    assert keys.index("ranges") == keys.index("opId") - 1 > keys.index("opDir")  # the order under test
    return lines


def _whole(line: bytes) -> dict:
    rec = orjson.loads(line)
    rec.pop("ranges", None)
    return rec


def _fast_and_slow(path, monkeypatch) -> tuple[dict, dict, int]:
    """(fastread's arrays, the line reader's columns, lines fastread left to the line reader)."""
    slow = 0
    real = load._LineReader.record

    def counting(self, *a, **k):
        nonlocal slow
        slow += 1
        return real(self, *a, **k)

    monkeypatch.setattr(load._LineReader, "record", counting)
    got = read_columns(path).arrays()
    n_slow = slow
    monkeypatch.setattr(load._LineReader, "record", real)
    return got, record_columns(iter_records(path)), n_slow


def test_fast_columns_of_torch_profiler_records(kineto_lines, tmp_path, monkeypatch):
    path = tmp_path / "r.dict"
    path.write_bytes(b"\n".join(kineto_lines * 3) + b"\n")
    got, want, slow = _fast_and_slow(path, monkeypatch)
    for k in KEYS:
        assert got[k].tolist() == want[k].tolist(), k
    assert slow == 0  # every line took the fast path


def test_a_field_between_ranges_and_op_id_is_not_lost(kineto_lines, tmp_path, monkeypatch):
    """A line with another field where the torch.profiler cut skips (between ranges and opId) is read
    again line by line: its value is kept, not read as missing."""
    lines = list(kineto_lines[:50])
    rec = orjson.loads(lines[10])
    moved = {k: v for k, v in rec.items() if k not in ("dir", "opId", "subSeqId")}
    moved.update(dir=rec["dir"], opId=rec["opId"], subSeqId=rec["subSeqId"])  # dir after ranges
    lines[10] = orjson.dumps(moved)
    path = tmp_path / "r.dict"
    path.write_bytes(b"\n".join(lines) + b"\n")
    got, want, slow = _fast_and_slow(path, monkeypatch)
    for k in KEYS:
        assert got[k].tolist() == want[k].tolist(), k
    assert got["dir"][10] == rec["dir"] and slow > 0
