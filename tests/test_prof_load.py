"""pyprof.prof.load: the line reader gives what orjson.loads gives (less ``ranges``), on real and odd lines;
fastread's columns are those of the line reader's records."""

from __future__ import annotations

import io

import orjson
import pytest

from pyprof.prof.load import iter_records, read_records

try:
    from conftest import corpus_files, corpus_params
except ImportError:  # tests/ collected as a package
    from tests.conftest import corpus_files, corpus_params


def expected(line: bytes) -> dict:
    rec = orjson.loads(line)
    rec.pop("ranges", None)
    return rec


REC = {"kind": "kernel", "kShortName": "k", "kLongName": "void k<float>(int)", "kDuration": 5, "start": 1,
       "ranges": [{"text": 'a ,"layer": b', "domain": None}], "layer": ["m"], "trace": ["t.py:1:f"],
       "mod": "torch", "op": "add", "args": [{"name": "x", "type": "tensor", "shape": [2], "dtype": "float32"}],
       "cdtype": None, "dir": "fprop"}


def test_malformed_line_is_still_an_input_error():
    from pyprof.errors import InputError

    line = orjson.dumps(REC)[:-30] + b"\n"
    with pytest.raises(InputError, match="line 1"):
        read_records(io.BytesIO(line))


FILES = [p for p in corpus_files() if any(k in p.name for k in ("josiahdavis", "yyhtbs", "MohanadOdema", "jsun-012"))]


@pytest.mark.corpus
@pytest.mark.skipif(not FILES, reason="corpus not found")
@pytest.mark.parametrize("path", corpus_params(FILES), ids=lambda p: p.name[:30])
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


def _parse_order(**over) -> dict:
    from pyprof.records import FIELD_NAMES

    base = dict(REC, source="nsys", end=9, correlationId=1, pid=2, tid=3, device=0, gpu="NVIDIA A100",
                gpuProps={"cc": "8.0", "sms": 108}, stream=7,
                grid=[1, 1, 1], block=[32, 1, 1], bytes=None, copyKind=None, apiName="cudaLaunchKernel",
                apiStart=0, apiEnd=1, aten=None, atenSizes=None, seqId=[1], altSeqId=[], bwdNode=None, opDir=None, link=None,
                opId=1, subSeqId=0)
    base.update(over)
    order = [k for k in FIELD_NAMES if k != "opId"] + ["opId"]  # parse writes opId last but one
    order.remove("subSeqId")
    return {k: base[k] for k in order + ["subSeqId"] if k in base}


def test_fast_columns_equal_the_record_reader(tmp_path):
    """fastread's columns are those of the line reader's records, whatever the lines hold."""
    import numpy as np

    from pyprof.prof.fastread import BLOCK, read_columns, record_columns
    from pyprof.prof.fields import KEYS
    from pyprof.records import FIELD_NAMES

    lines = []
    for i in range(3000):
        rec = _parse_order(opId=i, start=i * 10, kDuration=i % 7, op=["add", "mul", "linear"][i % 3],
                           seqId=[i], args=None if i % 11 == 0 else REC["args"])
        lines.append(orjson.dumps(rec))
        if i % 97 == 0:
            lines.append(orjson.dumps(dict(reversed(list(rec.items())))))  # another field order
        if i % 89 == 0:
            lines.append(orjson.dumps({k: rec[k] for k in FIELD_NAMES}))  # opId among the static fields
        if i % 101 == 0:
            lines.append(b"   ")  # a blank line
    body = b"\n".join(lines)  # the last line without a newline
    path = tmp_path / "r.dict"
    path.write_bytes(body)
    want = record_columns(iter_records(path))
    import mmap

    import pyprof.prof.fastread as fr

    def no_map(*a, **k):
        raise OSError("not mappable")

    for block, mapped in ((BLOCK, True), (4096, True), (100, True), (BLOCK, False), (4096, False)):
        fr.BLOCK, old, old_map = block, fr.BLOCK, mmap.mmap
        if not mapped:
            mmap.mmap = no_map
        try:
            got = read_columns(path).arrays()
        finally:
            fr.BLOCK, mmap.mmap = old, old_map
        for k in KEYS:
            assert got[k].tolist() == want[k].tolist(), k
        assert isinstance(got["kind"], np.ndarray)


@pytest.mark.parametrize("bad", [b'{"kind":"kernel","kShortName":"k","kDuration":1,', b"hello", b'{"kShortName":"k"}'])
def test_fast_columns_report_the_bad_line_as_the_record_reader(tmp_path, bad):
    from pyprof.errors import InputError
    from pyprof.prof.fastread import read_columns

    lines = [orjson.dumps(_parse_order(opId=i)) for i in range(50)]
    lines.insert(37, bad)
    path = tmp_path / "r.dict"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(InputError) as slow:
        read_records(path)
    with pytest.raises(InputError) as fast:
        read_columns(path)
    assert str(fast.value) == str(slow.value) and "line 38" in str(fast.value)
