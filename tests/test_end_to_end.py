"""parse then prof on every corpus file, through the CLI, reading the corpus in place.

Files without kernels (MANIFEST ``kernel`` = 0) must be rejected by parse with exit 2 and one line; every
other file must go through ``pyprof parse`` and ``pyprof prof --csv -c all`` with exit 0 and one row per
record. On the PyTorch exports (PyProf/DLProf markers, mmagic, CS336) the table must show the op, its
params and its FLOPs/bytes wherever the markers allow: every record with an op shows it, every record
with arguments shows params, and every kernel whose op a cost model covers shows FLOPs and bytes.
"""

from __future__ import annotations

import csv
import math

import pytest

try:
    from conftest import CORPUS, corpus_files, corpus_params, read_record_file, run_main
except ImportError:  # tests/ collected as a package
    from tests.conftest import CORPUS, corpus_files, corpus_params, read_record_file, run_main

from pyprof.prof.columns import COLUMNS
from pyprof.prof.ops import OpCall, estimate

PYTORCH = ("MohanadOdema__DLProf", "josiahdavis__profiling-lm__net.sql", "yyhtbs-yye__mmagic_vsr_v2__net",
           "assignment2")
WITH_OP_MARKERS = ("MohanadOdema__DLProf", "josiahdavis__profiling-lm__net.sql", "yyhtbs-yye__mmagic_vsr_v2__net")


def manifest_kernels() -> dict[str, int]:
    path = CORPUS / "MANIFEST.tsv"
    if not path.exists():
        return {}
    rows = list(csv.DictReader(path.open(), delimiter="\t"))
    return {r["file"]: int(r["kernel"]) for r in rows}


def run(args, capsys) -> tuple[int, str]:
    code, _, err = run_main(capsys, args)
    return code, err


FILES = corpus_files()


@pytest.mark.corpus
@pytest.mark.skipif(not FILES, reason=f"corpus not found at {CORPUS}")
@pytest.mark.parametrize("path", corpus_params(FILES), ids=lambda p: p.name[:48])
def test_parse_then_prof(path, tmp_path, capsys):
    records_path = tmp_path / "net.dict"
    code, err = run(["parse", "-q", str(path), "-o", str(records_path)], capsys)
    if manifest_kernels().get(path.name, 1) == 0:
        assert code == 2, err
        assert err.startswith("pyprof: error: ") and err.count("\n") == 1
        assert not records_path.exists()
        return
    assert code == 0, err
    records = read_record_file(records_path)
    out = tmp_path / "net.csv"
    code, err = run(["prof", "--csv", "-c", "all", "-o", str(out), str(records_path)], capsys)
    assert code == 0, err
    assert "Traceback" not in err
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == len(records)
    headers = {c.name: c.header for c in COLUMNS}
    assert list(rows[0]) == [c.header for c in COLUMNS]
    for rec, row in zip(records, rows, strict=True):
        assert row[headers["kernel"]] == rec["kShortName"]
        assert float(row[headers["sil"]]) == rec["kDuration"]
        assert row[headers["tc"]] in ("0", "1", "-")
        for col in ("flops", "bytes", "ideal", "gap"):
            v = row[headers[col]]
            assert v == "n/a" or (math.isfinite(float(v)) and float(v) >= 0), (col, v)
    if any(p in path.name for p in PYTORCH):
        check_pytorch(records, rows, headers, path.name)


def check_pytorch(records, rows, h, name):
    modelled = 0
    for rec, row in zip(records, rows, strict=True):
        if rec.get("op"):
            assert row[h["op"]] == rec["op"]
        if rec.get("args") and any(a.get("type") != "NoneType" for a in rec["args"]):
            assert row[h["params"]] not in ("", "-")
        if rec.get("kind", "kernel") != "kernel" or not rec.get("op"):
            continue
        cost = estimate(OpCall(rec["op"], rec.get("args") or [], rec.get("dir") or "fprop", rec.get("cdtype"),
                               rec.get("mod")))
        if cost is not None and cost.flops is not None and cost.bytes is not None:
            modelled += 1
            assert row[h["flops"]] != "n/a" and row[h["bytes"]] != "n/a", (rec["op"], row[h["kernel"]])
    if any(p in name for p in WITH_OP_MARKERS):
        assert modelled > 0, "no kernel of a PyTorch export with op markers got FLOPs/bytes"
