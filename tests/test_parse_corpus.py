"""Every corpus export: record counts from hand SQL, and each record's ``ranges`` against a naive
reference (one SQL query per kernel for the NVTX ranges open on the launching thread at the API call's
start) -- independent of the vectorised sweep the parser uses.

The rule (nsys-schema.md §2/§4): kernel -> API row with the same correlationId and pid (runtime or
driver, eventClass 0/1, first row) -> every NVTX range (eventType 59/60; nvprof: MARKER start/end rows
paired by id) on that thread with start <= apiStart < end, outermost first (start ascending, end
descending). Push ranges the program never popped are not open ranges: nsys ends them at the capture's
end (ANALYSIS_DETAILS.duration), or, where their thread ended first, several at once at the thread's last
range end: a push range ending at the capture's end, or sharing its (thread, end) with another range where
that end is the thread's last, was never popped.
"""

from __future__ import annotations

import sqlite3

import pytest

from pyprof.errors import NoKernelsError
from pyprof.parse.source import open_source
from tests.conftest import corpus_files, corpus_params

MAX_CHECKED = 400  # activities checked against the per-kernel reference, per file (evenly spaced)


def _connect(path):
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    c.text_factory = lambda b: b.decode("utf-8", "replace")
    return c


def _tables(c):
    return {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _cols(c, t):
    return [r[1] for r in c.execute(f'PRAGMA table_info("{t}")')]


def _sample(items):
    if len(items) <= MAX_CHECKED:
        return items
    step = len(items) / MAX_CHECKED
    return [items[int(i * step)] for i in range(MAX_CHECKED)]


# -- nsys reference ------------------------------------------------------------------------------------
def _nsys_reference(c):
    tables = _tables(c)
    acts = []
    for t, kind in (("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"), ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
                    ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        if t in tables:
            for corr, gpid, start, end in c.execute(f'SELECT correlationId, globalPid, start, "end" FROM {t}'):
                acts.append((kind, corr, (gpid >> 24) & 0xFFFFFF, start, end))
    api = {}
    if "CUPTI_ACTIVITY_KIND_RUNTIME" in tables:
        cls = "eventClass" in _cols(c, "CUPTI_ACTIVITY_KIND_RUNTIME")
        q = ("SELECT correlationId, globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME "
             + ("WHERE eventClass IN (0, 1) " if cls else "") + "ORDER BY rowid")
        for corr, gt, start in c.execute(q):
            api.setdefault((corr, (gt >> 24) & 0xFFFFFF), (gt, start))
    nvtx = "NVTX_EVENTS" in tables
    domains = {}
    shared, capture_end = set(), None
    if nvtx:
        shared = set(c.execute(NSYS_SHARED_ENDS))
        if "ANALYSIS_DETAILS" in tables:
            capture_end = c.execute("SELECT MAX(duration) FROM ANALYSIS_DETAILS").fetchone()[0]
        for did, text, tid in c.execute("SELECT domainId, text, textId FROM NVTX_EVENTS WHERE eventType = 75"):
            name = text if text is not None else c.execute("SELECT value FROM StringIds WHERE id = ?", (tid,)).fetchone()[0]
            domains.setdefault(did, name)
    return acts, api, nvtx, domains, shared, capture_end


NSYS_OPEN = """
SELECT COALESCE(n.text, s.value), n.domainId, n.eventType, n."end" FROM NVTX_EVENTS n
LEFT JOIN StringIds s ON s.id = n.textId
WHERE n.globalTid = ? AND n.eventType IN (59, 60) AND n.start <= ? AND n."end" > ?
ORDER BY n.start, n."end" DESC, n.rowid
"""
NSYS_SHARED_ENDS = """
SELECT globalTid, "end" FROM NVTX_EVENTS n WHERE eventType IN (59, 60) GROUP BY globalTid, "end"
HAVING COUNT(*) >= 2 AND "end" = (SELECT MAX(m."end") FROM NVTX_EVENTS m
                                  WHERE m.globalTid = n.globalTid AND m.eventType IN (59, 60))
"""


# -- nvprof reference ----------------------------------------------------------------------------------
def _nvprof_reference(c):
    tables = _tables(c)
    acts, seen = [], set()
    for t in ("CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL", "CUPTI_ACTIVITY_KIND_KERNEL"):
        if t in tables:
            for corr, start, end in c.execute(f'SELECT correlationId, start, "end" FROM {t}'):
                if (corr, start, end) not in seen:
                    seen.add((corr, start, end))
                    acts.append(("kernel", corr, None, start, end))
    for t, kind in (("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "memset")):
        if t in tables:
            for corr, start, end in c.execute(f'SELECT correlationId, start, "end" FROM {t}'):
                acts.append((kind, corr, None, start, end))
    api = {}
    for t in ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"):
        if t in tables:
            for corr, pid, tid, start in c.execute(f"SELECT correlationId, processId, threadId, start FROM {t} ORDER BY rowid"):
                if corr:
                    api.setdefault(corr, (pid, tid, start))
    return acts, api


NVPROF_OPEN = """
SELECT (SELECT value FROM StringTable WHERE _id_ = s.name), s.domain FROM CUPTI_ACTIVITY_KIND_MARKER s
JOIN CUPTI_ACTIVITY_KIND_MARKER e ON e.id = s.id AND (e.flags & 4)
WHERE (s.flags & 2) AND substr(s.objectId, 1, 8) = ? AND s.timestamp <= ? AND e.timestamp > ?
ORDER BY s.timestamp, e.timestamp DESC, s.rowid
"""


def _records(path):
    src = open_source(path)
    return src, list(src.records())


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params(corpus_files("nsys")), ids=lambda p: p.name[:60])
def test_nsys_file_matches_reference(path):
    c = _connect(path)
    acts, api, nvtx, domains, shared, capture_end = _nsys_reference(c)
    n_kernels = sum(1 for a in acts if a[0] == "kernel")
    if n_kernels == 0:
        with pytest.raises(NoKernelsError):
            _records(path)
        return
    src, recs = _records(path)
    assert src.kind == "nsys"
    kinds = [r["kind"] for r in recs]
    assert kinds.count("kernel") == n_kernels
    assert kinds.count("memcpy") == sum(1 for a in acts if a[0] == "memcpy")
    assert kinds.count("memset") == sum(1 for a in acts if a[0] == "memset")
    by_key = {(r["kind"], r["correlationId"], r["pid"], r["start"]): r for r in recs}
    assert len(by_key) == len(recs)
    for kind, corr, pid, start, end in _sample(acts):
        rec = by_key[(kind, corr, pid, start)]
        assert rec["kDuration"] == end - start
        call = api.get((corr, pid))
        if call is None:
            assert rec["apiStart"] is None and rec["ranges"] == []
            continue
        gt, t = call
        assert rec["apiStart"] == t
        assert rec["tid"] == gt & 0xFFFFFF
        want = []
        if nvtx:
            want = [{"text": text, "domain": domains.get(d, f"domain {d}") if d else None}
                    for text, d, etype, e in c.execute(NSYS_OPEN, (gt, t, t))
                    if not (etype == 59 and ((gt, e) in shared or e == capture_end))]
        assert rec["ranges"] == want, (kind, corr)


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params(corpus_files("nvprof")), ids=lambda p: p.name[:60])
def test_nvprof_file_matches_reference(path):
    c = _connect(path)
    acts, api = _nvprof_reference(c)
    src, recs = _records(path)
    assert src.kind == "nvprof"
    assert src.version == f"v{c.execute('SELECT * FROM Version').fetchone()[0]}"
    kinds = [r["kind"] for r in recs]
    assert kinds.count("kernel") == sum(1 for a in acts if a[0] == "kernel")
    assert kinds.count("memcpy") + kinds.count("memset") == sum(1 for a in acts if a[0] != "kernel")
    by_key = {(r["kind"], r["correlationId"], r["start"]): r for r in recs}
    has_marker = "CUPTI_ACTIVITY_KIND_MARKER" in _tables(c)
    strings = dict(c.execute("SELECT _id_, value FROM StringTable"))
    for kind, corr, _, start, end in _sample(acts):
        rec = by_key[(kind, corr, start)]
        assert rec["kDuration"] == end - start
        call = api.get(corr)
        if call is None:
            assert rec["ranges"] == [] and rec["apiStart"] is None
            continue
        pid, tid, t = call
        assert (rec["pid"], rec["tid"], rec["apiStart"]) == (pid, tid & 0xFFFFFFFF, t)
        want = []
        if has_marker:
            key = pid.to_bytes(4, "little") + tid.to_bytes(4, "little", signed=True)
            want = [{"text": text, "domain": strings.get(d) if d else None}
                    for text, d in c.execute(NVPROF_OPEN, (key, t, t))]
        assert rec["ranges"] == want, (kind, corr)
