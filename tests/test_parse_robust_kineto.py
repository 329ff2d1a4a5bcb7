"""torch.profiler traces the chunked loader cannot cut are still read: list-valued keys after
``traceEvents``, and any failure of the fast path falls back to the whole-document parse."""

from __future__ import annotations

import gzip
import json

import orjson
import pytest

from pyprof.errors import InputError
from pyprof.parse.kineto import KinetoSource
from pyprof.parse.kineto import load as kineto_load
from tests.conftest import REPO, run_main

GPU = REPO / "tests" / "fixtures" / "kineto" / "gpu_synthetic.json"
CPU = REPO / "tests" / "fixtures" / "kineto" / "cpu_unescaped_markers.json.gz"


def _records(path) -> list:
    return list(KinetoSource(path).records())


def _with_trailer(tmp_path, monkeypatch, name: str, **after) -> tuple:
    """The GPU fixture rewritten with ``after``'s keys following ``traceEvents`` (Kineto's indented
    layout); (path, its records as the whole-document parse reads them)."""
    doc = orjson.loads(GPU.read_bytes())
    for key in after:
        doc.pop(key, None)
    doc.update(after)
    assert list(doc)[-len(after):] == list(after)
    p = tmp_path / name
    p.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    assert json.loads(p.read_bytes())["traceEvents"]  # what Python's json reads
    with monkeypatch.context() as m:
        m.setattr(kineto_load, "_layout", lambda data: None)  # the reference path only
        want = _records(p)
    assert [r["kShortName"] for r in want] == [r["kShortName"] for r in _records(GPU)]
    return p, want


def _meta(src: KinetoSource) -> dict:
    return {k: v for k, v in src.meta.items() if k != "traceEvents"}


def _no_reference(monkeypatch) -> None:
    """Make the whole-document (reference) parse fail, so a test sees the chunked loader alone."""
    def refuse(path, data):
        raise AssertionError("the reference path was taken")

    monkeypatch.setattr(kineto_load, "_parse_whole", refuse)


@pytest.mark.parametrize("chunk", [kineto_load.CHUNK_BYTES, 64])
@pytest.mark.parametrize("after", [
    {"ERROR": ["x"]},
    {"deviceProperties": [{"id": 0, "name": "A", "cc": [8, 0]}, {"id": 1, "name": "B", "cc": [9, 0]}]},
    {"ERROR": ["x"], "traceName": "t", "extra": [[1, 2], {"a": [3]}]},
], ids=["error-list", "device-list", "nested-lists"])
def test_list_valued_key_after_the_events(tmp_path, monkeypatch, after, chunk):
    p, want = _with_trailer(tmp_path, monkeypatch, "t.json", **after)
    monkeypatch.setattr(kineto_load, "CHUNK_BYTES", chunk)
    _no_reference(monkeypatch)  # the chunked loader itself finds the end of the events
    src = KinetoSource(p)
    assert list(src.records()) == want
    for key, value in after.items():
        assert src.meta[key] == value


def _failing_after_one_chunk(original):
    """A ``_chunks`` that gives its first chunk and then fails (a fast-path bug, whatever it is)."""
    def chunks(path, data, start, end, trace):
        it = original(path, data, start, end, trace)
        yield next(it)
        raise RuntimeError("fast path broke")

    return chunks


@pytest.mark.parametrize("path", [GPU, CPU], ids=["json", "json.gz"])
def test_a_failing_chunk_falls_back_to_the_whole_document(path, monkeypatch):
    want, want_meta = _records(path), _meta(KinetoSource(path))
    taken = []
    reference = kineto_load._parse_whole
    monkeypatch.setattr(kineto_load, "_parse_whole", lambda p, d: taken.append(p) or reference(p, d))
    monkeypatch.setattr(kineto_load, "CHUNK_BYTES", 512)  # several chunks: one is given before the failure
    monkeypatch.setattr(kineto_load, "_chunks", _failing_after_one_chunk(kineto_load._chunks))
    src = KinetoSource(path)
    assert list(src.records()) == want
    assert taken == [str(path)]  # the fallback was taken, once
    assert _meta(src) == want_meta


@pytest.mark.parametrize("path", [GPU, CPU], ids=["json", "json.gz"])
def test_a_failing_layout_search_falls_back_to_the_whole_document(path, monkeypatch):
    want = _records(path)

    def broken(data):
        raise ValueError("layout search broke")

    monkeypatch.setattr(kineto_load, "_layout", broken)
    assert _records(path) == want


def test_what_only_pythons_json_reads(tmp_path):
    """NaN is not JSON (orjson refuses it) but Python's json, and torch.profiler's own readers, take it."""
    doc = orjson.loads(GPU.read_bytes())
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "kernel":
            ev.setdefault("args", {})["occupancy"] = "NAN_HERE"
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).replace(b'"NAN_HERE"', b"NaN")
    p = tmp_path / "nan.json.gz"
    p.write_bytes(gzip.compress(text))
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(text)
    assert [r["kShortName"] for r in _records(p)] == [r["kShortName"] for r in _records(GPU)]


def test_both_paths_failing_is_one_line(tmp_path, capsys, monkeypatch):
    data = GPU.read_bytes()
    p = tmp_path / "cut.json"
    p.write_bytes(data[: len(data) * 2 // 3])
    out = tmp_path / "out.dict"
    code, _, err = run_main(capsys, ["parse", p, "-o", out])
    assert code == 2 and not out.exists()
    assert err.count("\n") == 1 and err.startswith("pyprof: error: ") and "not JSON" in err
    assert "Traceback" not in err
    with pytest.raises(InputError, match="not JSON"):
        kineto_load.load_trace(p)


@pytest.mark.parametrize("mapped", [False, True])
@pytest.mark.parametrize("gz", [False, True])
def test_a_byte_order_mark_is_dropped(tmp_path, monkeypatch, mapped, gz):
    """A trace saved with a UTF-8 byte order mark (some Windows tools write one; Python's ``utf-8-sig``
    reads it) gives the same records as without, plain, gzipped, and memory-mapped when big."""
    data = b"\xef\xbb\xbf" + GPU.read_bytes()
    p = tmp_path / ("bom.json.gz" if gz else "bom.json")
    p.write_bytes(gzip.compress(data) if gz else data)
    if mapped:
        monkeypatch.setattr(kineto_load, "MMAP_BYTES", 1)
    assert _records(p) == _records(GPU)


@pytest.mark.parametrize("pid", ["²", "١٢", "-"])
def test_a_pid_written_as_other_digits_is_read_not_a_crash(tmp_path, pid):
    """A pid text of Unicode digits that are not decimal (``"²"``: ``str.isdigit`` says yes, ``int`` says no) or
    of another script's decimals: parse reads the trace, each record as it reads the rest, and does not stop
    with a ValueError."""
    doc = orjson.loads(GPU.read_bytes())
    for ev in doc["traceEvents"]:
        if ev.get("cat") == "cpu_op":
            ev["pid"] = pid
    p = tmp_path / "pid.json"
    p.write_bytes(orjson.dumps(doc))
    assert [r["kShortName"] for r in _records(p)] == [r["kShortName"] for r in _records(GPU)]
