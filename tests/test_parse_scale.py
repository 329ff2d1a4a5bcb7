"""scripts/scale_export.py: a tiled export is a valid, bigger export whose tiles parse like the original."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyprof.parse.source import open_source
from tests.conftest import REPO, corpus_file

pytestmark = pytest.mark.corpus


@pytest.mark.parametrize("name", ["MohanadOdema__DLProf", "josiahdavis__profiling-lm"])
def test_tiles_parse_like_the_original(tmp_path, name):
    src = corpus_file(name)
    out = tmp_path / "tiled.sqlite"
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "scale_export.py"), str(src), str(out), "--factor", "3"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    one = list(open_source(src).records())
    three = list(open_source(out).records())
    assert len(three) == 3 * len(one)
    n = len(one)
    keys = ("kind", "kShortName", "kDuration", "ranges", "op", "mod", "args", "layer", "dir", "seqId", "altSeqId",
            "subSeqId", "apiName")
    for k in range(3):
        tile = three[k * n:(k + 1) * n]
        assert [{x: r[x] for x in keys} for r in tile] == [{x: r[x] for x in keys} for r in one]
    assert len({r["correlationId"] for r in three}) == len({r["correlationId"] for r in one}) * 3


def test_every_table_keeps_each_tables_ratio(tmp_path):
    """--every-table: every event table of the export (sync, CUDA events, OS runtime calls and their call
    chains, ...) holds 3x its rows, the tables that describe the capture hold theirs once, each tile's OS
    runtime calls point at call chains of their own, and the records are still the original's, three times."""
    import sqlite3

    src = corpus_file("yyhtbs-yye__mmagic")
    out = tmp_path / "every.sqlite"
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "scale_export.py"), str(src), str(out), "--factor", "3",
                        "--every-table"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr

    def counts(path):
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            return {t: con.execute(f'SELECT COUNT(*) FROM "{t}"').fetchone()[0] for t in names}
        finally:
            con.close()

    before, after = counts(src), counts(out)
    tripled = {t for t in before if after[t] == 3 * before[t] and before[t]}
    assert {"CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
            "NVTX_EVENTS", "OSRT_API", "OSRT_CALLCHAINS", "PROFILER_OVERHEAD"} <= tripled
    for t in ("StringIds", "ThreadNames", "PROCESSES", "TARGET_INFO_GPU", "META_DATA_CAPTURE"):
        assert after[t] == before[t], t
    con = sqlite3.connect(f"file:{out}?mode=ro", uri=True)
    try:
        orphans = con.execute("SELECT COUNT(*) FROM OSRT_API a WHERE a.callchainId > 0 AND NOT EXISTS "
                              "(SELECT 1 FROM OSRT_CALLCHAINS c WHERE c.id = a.callchainId)").fetchone()[0]
        chains = con.execute("SELECT COUNT(DISTINCT callchainId) FROM OSRT_API WHERE callchainId > 0").fetchone()[0]
    finally:
        con.close()
    assert orphans == 0
    con = sqlite3.connect(f"file:{src}?mode=ro", uri=True)
    try:
        assert chains == 3 * con.execute("SELECT COUNT(DISTINCT callchainId) FROM OSRT_API "
                                         "WHERE callchainId > 0").fetchone()[0]
    finally:
        con.close()
    one = list(open_source(src).records())
    three = list(open_source(out).records())
    assert len(three) == 3 * len(one)
    n = len(one)
    keys = ("kind", "kShortName", "kDuration", "ranges", "op", "args", "layer", "apiName")
    for k in range(3):
        assert [{x: r.get(x) for x in keys} for r in three[k * n:(k + 1) * n]] == \
            [{x: r.get(x) for x in keys} for r in one]
