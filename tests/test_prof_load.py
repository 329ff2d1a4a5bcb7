"""pyprof.prof.load: the record decoder gives exactly what orjson.loads gives, on real and odd lines."""

from __future__ import annotations

import io

import orjson
import pytest

from pyprof.prof.load import _Decoder, iter_records, read_records

try:
    from conftest import corpus_files
except ImportError:  # tests/ collected as a package
    from tests.conftest import corpus_files


def expected(line: bytes) -> dict:
    rec = orjson.loads(line)
    rec.pop("ranges", None)
    return rec


def plain(line: bytes) -> dict:
    rec = _Decoder()(line)
    rec.pop("ranges", None)
    return rec


REC = {"kind": "kernel", "kShortName": "k", "kLongName": "void k<float>(int)", "kDuration": 5, "start": 1,
       "ranges": [{"text": 'a ,"layer": b', "domain": None}], "layer": ["m"], "trace": ["t.py:1:f"],
       "mod": "torch", "op": "add", "args": [{"name": "x", "type": "tensor", "shape": [2], "dtype": "float32"}],
       "cdtype": None, "dir": "fprop"}


@pytest.mark.parametrize("variant", [
    REC,
    {k: v for k, v in REC.items() if k != "ranges"},  # no ranges: decoded whole
    dict(REC, args=None, trace=[], layer=[]),
    dict(reversed(list(REC.items()))),  # another field order: decoded whole
    {"kShortName": "k", "kLongName": "x", "extra": 1, "kDuration": 3},  # a field between: decoded whole
    dict(REC, kLongName='quote " and ,"kDuration": inside'),
])
def test_decoder_matches_orjson(variant):
    line = orjson.dumps(variant)
    assert plain(line) == expected(line)


def test_repeated_values_are_shared():
    d = _Decoder()
    a, b = d(orjson.dumps(REC)), d(orjson.dumps(dict(REC, start=2)))
    assert a["args"] is b["args"] and a["trace"] is b["trace"] and a["start"] != b["start"]


def test_malformed_line_is_still_an_input_error():
    from pyprof.errors import InputError

    line = orjson.dumps(REC)[:-30] + b"\n"
    with pytest.raises(InputError, match="line 1"):
        read_records(io.BytesIO(line))


FILES = [p for p in corpus_files() if any(k in p.name for k in ("josiahdavis", "yyhtbs", "MohanadOdema", "jsun-012"))]


@pytest.mark.corpus
@pytest.mark.skipif(not FILES, reason="corpus not found")
@pytest.mark.parametrize("path", FILES, ids=[p.name[:30] for p in FILES])
def test_decoder_on_parsed_corpus(path, tmp_path):
    from pyprof.parse import open_source

    out = tmp_path / "r.dict"
    with out.open("wb") as fh:
        for rec in open_source(str(path)).records():
            fh.write(orjson.dumps(rec) + b"\n")
    lines = out.read_bytes().splitlines()
    got = list(iter_records(out))
    assert len(got) == len(lines)
    for line, rec in zip(lines, got, strict=True):
        assert rec == expected(line)
    d = _Decoder()
    for line in lines:
        d(line)
    assert d.cache  # parse's field order was recognised: the heavy fields went through the cache
