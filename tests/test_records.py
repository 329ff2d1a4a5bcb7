"""The record file format and the all-or-nothing output writer."""

from __future__ import annotations

import io
import os
import stat

import pytest

from pyprof import records
from pyprof.atomic import atomic_output
from pyprof.errors import InputError
from pyprof.prof.load import iter_records
from scripts.gen_docs import records_md


def test_write_then_read_round_trip(tmp_path):
    recs = [{"kShortName": "k1", "kDuration": 10, "ranges": [{"text": "a", "domain": None}]},
            {"kShortName": "k2", "kDuration": 20, "args": None}]
    path = tmp_path / "r.dict"
    with open(path, "wb") as fh:
        assert records.write_records(recs, fh) == 2
    with open(path, "rb") as fh:
        assert list(iter_records(fh, keep_ranges=True)) == recs


def test_text_stream_and_legacy_lines():
    buf = io.StringIO()
    records.write_records([{"kShortName": "k", "kDuration": 1}], buf)
    legacy = "{'kShortName': 'volta_sgemm_128x64_nn', 'kDuration': 1234, 'grid': (1, 2, 3)}\n"
    got = list(iter_records(io.StringIO(buf.getvalue() + "\n" + legacy)))
    assert got[0] == {"kShortName": "k", "kDuration": 1}
    assert got[1]["grid"] == [1, 2, 3] and got[1]["kDuration"] == 1234


def test_bad_line_names_its_number():
    with pytest.raises(InputError, match="line 2"):
        list(iter_records(io.StringIO('{"kShortName": "k", "kDuration": 1}\n{"a": \n')))


def test_every_field_is_documented_once():
    names = [f.name for f in records.FIELDS]
    assert len(names) == len(set(names))
    assert all(f.meaning and f.type for f in records.FIELDS)
    md = records_md()
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


@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="no POSIX permissions here")
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_atomic_output_gets_the_permissions_open_would_give(tmp_path, umask):
    """The temporary file is private (0o600); the finished output must not be: it gets what a plain
    ``open()`` gives under the umask, as any other tool's output would."""
    old = os.umask(umask)
    try:
        with atomic_output(tmp_path / "out.dict") as fh:
            fh.write("x")
        with open(tmp_path / "plain", "w") as fh:
            fh.write("x")
    finally:
        os.umask(old)
    mode = stat.S_IMODE(os.stat(tmp_path / "out.dict").st_mode)
    assert mode == stat.S_IMODE(os.stat(tmp_path / "plain").st_mode) == 0o666 & ~umask
