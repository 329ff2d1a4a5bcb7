"""The record file format and the all-or-nothing output writer."""

from __future__ import annotations

import io

import pytest

from pyprof import records
from pyprof.atomic import atomic_output


def test_write_then_read_round_trip(tmp_path):
    recs = [{"kShortName": "k1", "kDuration": 10, "ranges": [{"text": "a", "domain": None}]},
            {"kShortName": "k2", "kDuration": 20, "args": None}]
    path = tmp_path / "r.dict"
    with open(path, "wb") as fh:
        assert records.write_records(recs, fh) == 2
    with open(path, "rb") as fh:
        assert list(records.iter_records(fh)) == recs


def test_text_stream_and_legacy_lines():
    buf = io.StringIO()
    records.write_records([{"a": 1}], buf)
    legacy = "{'kShortName': 'volta_sgemm_128x64_nn', 'kDuration': 1234, 'grid': (1, 2, 3)}\n"
    got = list(records.iter_records(io.StringIO(buf.getvalue() + "\n" + legacy)))
    assert got[0] == {"a": 1}
    assert got[1]["grid"] == [1, 2, 3] and got[1]["kDuration"] == 1234


def test_bad_line_names_its_number():
    with pytest.raises(ValueError, match="line 2"):
        list(records.iter_records(io.StringIO('{"a": 1}\n{"a": \n')))


def test_every_field_is_documented_once():
    names = [f.name for f in records.FIELDS]
    assert len(names) == len(set(names))
    assert all(f.meaning and f.type for f in records.FIELDS)
    md = records.markdown()
    assert all(f"`{n}`" in md for n in names)


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "out.dict"
    with pytest.raises(RuntimeError):
        with atomic_output(out) as fh:
            fh.write("partial")
            raise RuntimeError("boom")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
    with atomic_output(out) as fh:
        fh.write("whole")
    assert out.read_text() == "whole"
