"""The Nsight reader never drops ranges silently (pyprof/parse/nsys.py, ``_Nvtx._dropped`` and
``NsysSource._join_without_pid``), on exports built with tests/nsys_synth.py in the layouts real captures
have, each read every way the reader can read it (window and slice sizes, Arrow or sqlite3, forked):

* nested ranges popped in the same tick (a coarse clock) are kept around the kernels inside them;
* a range never popped, alone, ends at the capture's end (``ANALYSIS_DETAILS.duration``): it is left
  out, with a warning, instead of staying open around every later kernel;
* several ranges ending together at their thread's last end (a thread that exited with them open) are
  left out, with a warning that counts them;
* kernels whose ``globalPid`` is NULL join their launch by correlation id, and say so.
"""

from __future__ import annotations

import orjson

from pyprof.markers import encode, make
from pyprof.records import FORMAT_VERSION, HEADER_KEY
from tests.nsys_synth import Export
from tests.test_parse_speed_windows import _same_every_way


def _records(out: bytes) -> tuple[dict[str, list[str]], list[str]]:
    """Kernel name -> the texts of its ranges, and the warnings (the lines after the records; the
    record file's header line is checked to come first, its end line to count the records)."""
    recs, warnings = {}, []
    for i, line in enumerate(out.split(b"\n")):
        if line.startswith(b"{"):
            r = orjson.loads(line)
            if HEADER_KEY in r:  # the header line first; the end line (its count) last
                assert i == 0 or r["records"] == len(recs), (i, r)
                assert r[HEADER_KEY] == FORMAT_VERSION, (i, r)
                continue
            recs[r["kShortName"]] = [x["text"] for x in r["ranges"]]
        elif line:
            warnings.append(line.decode())
    return recs, warnings


def _read(ex: Export, tmp_path, monkeypatch):
    return _records(_same_every_way(ex.write(tmp_path / "x.sqlite"), tmp_path, monkeypatch))


def test_nested_ranges_popped_in_the_same_tick_are_kept(tmp_path, monkeypatch):
    ex = Export()
    t = ex.thread()
    op = encode(make("op", op="linear", id=1, seq=[1]))
    ex.range(t, "step", 1_000, 9_000)
    ex.range(t, "layer:fc", 2_000, 5_000)
    ex.range(t, op, 3_000, 5_000, domain="pyprof")  # popped in the tick its parent is
    ex.kernel(t, "sgemm", 3_100, 3_200, 3_500, 4_000)
    ex.kernel(t, "after", 6_000, 6_100, 6_500, 7_000)
    recs, warnings = _read(ex, tmp_path, monkeypatch)
    assert recs["sgemm"] == ["step", "layer:fc", op]
    assert recs["after"] == ["step"]
    assert not any("never popped" in w or "no NVTX ranges" in w for w in warnings)


def test_a_single_range_never_popped_is_left_out_and_counted(tmp_path, monkeypatch):
    ex = Export()
    t = ex.thread()
    ex.range(t, "step 0", 1_000, 4_000)
    ex.kernel(t, "before", 1_100, 1_200, 1_500, 2_000)
    ex.never_popped(t, "leaked", 5_000)
    ex.range(t, "step 1", 6_000, 9_000)
    ex.kernel(t, "later", 6_100, 6_200, 6_500, 7_000)
    recs, warnings = _read(ex, tmp_path, monkeypatch)
    assert recs == {"before": ["step 0"], "later": ["step 1"]}
    assert any(w.startswith("1 NVTX push range(s) were never popped") for w in warnings), warnings


def test_ranges_left_open_when_their_thread_ended_are_left_out(tmp_path, monkeypatch):
    """Two ranges ending in one tick, their thread's last: a thread that exited with both open (the
    capture went on: they do not end at its end). Two nested ones popped together earlier are kept."""
    ex = Export(capture_end=50_000)
    t = ex.thread()
    w = ex.thread(tid=ex.pid + 3, name="worker")
    ex.range(w, "outer", 1_000, 4_000)
    ex.range(w, "inner", 2_000, 4_000)
    ex.kernel(w, "kept", 2_100, 2_200, 2_500, 3_000)
    ex.range(w, "open a", 5_000, 20_000)
    ex.range(w, "open b", 6_000, 20_000)
    ex.kernel(w, "dropped", 6_100, 6_200, 6_500, 7_000)
    ex.range(t, "main", 1_000, 30_000)
    ex.kernel(t, "main", 1_100, 1_200, 1_500, 1_700)
    recs, warnings = _read(ex, tmp_path, monkeypatch)
    assert recs == {"kept": ["outer", "inner"], "dropped": [], "main": ["main"]}
    assert any(w.startswith("2 NVTX push range(s) were never popped") for w in warnings), warnings


def test_kernels_with_a_null_process_join_their_launch(tmp_path, monkeypatch):
    ex = Export(null_pid=True)
    main = ex.track()
    with main.range("layer:fc"):
        main.launch("sgemm")
    main.launch("outside")
    recs, warnings = _read(ex, tmp_path, monkeypatch)
    assert recs == {"sgemm": ["layer:fc"], "outside": []}
    assert any("2 kernel/copy row(s) have no process id" in w and "2 were joined" in w for w in warnings), warnings
    assert not any("no NVTX ranges" in w for w in warnings)
