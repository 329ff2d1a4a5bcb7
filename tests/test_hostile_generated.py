"""Hostile inputs of the classes of issue #45, made by seeded generators at several sizes: range patterns
(nesting, crossing, overlap) whose work and memory must stay linear, non-finite and ill-typed fields,
undecodable text, record files cut short, hard links, signals during a write.

Each input gives a result or one line, and nothing is lost without a count: the same rules as
tests/test_hostile_inputs.py (whose helpers these tests share). Work is measured by counting (the
sweep's pushes), memory by ``tracemalloc`` or an address-space limit in a child: no wall-clock
assertion. Time and peak memory of the big cases as a user meets them: ``scripts/hostile_bounds.py``.
"""

from __future__ import annotations

import json
import random
import tracemalloc

import numpy as np
import pytest

from pyprof.parse import limits
from pyprof.parse.limits import LimitError
from pyprof.parse.sweep import open_stacks
from tests.test_hostile_inputs import SEED, one_line_or_result, parse_bounded, records_ok

# -- 1. bounded work on every sweep ------------------------------------------------------------------------


def range_pattern(kind: str, n: int, rng: random.Random) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``n`` ranges of one thread as (start, end, label), in a pattern a sweep may meet:

    * ``nested``: stacks 1,000 deep, one after another (push/pop ranges);
    * ``crossing``: the same, each stack crossed by a range that opens before it and ends halfway up
      it (the issue's: nested ranges crossing a real one);
    * ``staircase``: each range ends just after the next one starts (every end crosses);
    * ``window``: ranges ``[i, i + w)`` for a seeded w of 2 to 6 (every end under w - 1 others);
    * ``wide``: the same with w 1,999 (under the depth limit, but 1,998 ranges re-stacked per end);
    * ``random``: seeded starts and lengths (overlapping every way);
    * ``deep-crossing``: one stack ``n`` deep, crossed (past the depth limit from 2,000 ranges)."""
    i = np.arange(n, dtype=np.int64)
    if kind in ("nested", "crossing"):
        d = 1000
        stack, level = i // d, i % d
        start = stack * 10 * d + 2 * level
        end = stack * 10 * d + 4 * d - 2 * level
        if kind == "crossing":
            top = i[level == 0]
            start = np.concatenate([start, start[top] - 1])
            end = np.concatenate([end, start[top] + d + 1])  # ends halfway up its stack
    elif kind == "staircase":
        start, end = 2 * i, 2 * i + 3
    elif kind in ("window", "wide"):
        w = rng.randint(2, 6) if kind == "window" else 1999
        start, end = 2 * i, 2 * i + 2 * w - 1
    elif kind == "random":
        start = np.array(sorted(rng.randrange(0, 4 * n) for _ in range(n)), dtype=np.int64)
        end = start + np.array([rng.choice((1, 2, 5, 40, 300)) for _ in range(n)], dtype=np.int64)
    elif kind == "deep-crossing":
        start, end = 2 * i, 4 * n - 2 * i
        start, end = np.append(start, -1), np.append(end, n)
    else:
        raise ValueError(kind)
    label = np.array([rng.randrange(97) for _ in range(len(start))], dtype=np.int64)
    return start, end, label


def _brute(start, end, label, times) -> list[tuple]:
    out = []
    for t in times.tolist():
        open_ = sorted((s, -e, r) for r, (s, e) in enumerate(zip(start.tolist(), end.tolist(), strict=True))
                       if s <= t < e)
        out.append(tuple(int(label[r]) for _, _, r in open_))
    return out


PATTERNS = ("nested", "crossing", "staircase", "window", "wide", "random", "deep-crossing")


@pytest.mark.parametrize("kind", PATTERNS)
def test_range_patterns_match_the_definition(kind):
    """Each pattern at 3,000 ranges (the depth limit raised for ``deep-crossing`` not to be refused):
    the stacks at 300 seeded times are the open ranges in start order, as the definition says."""
    rng = random.Random(SEED)
    start, end, label = range_pattern(kind, 3000, rng)
    times = np.array(sorted(rng.randrange(int(start.min()), int(end.max()) + 2) for _ in range(300)), dtype=np.int64)
    spec = "depth=4000,cross=2000" if kind in ("deep-crossing", "wide") else ""
    with _limits(spec):
        s = open_stacks(np.zeros(len(start), np.int64), start, end, label, np.zeros(len(times), np.int64), times)
    got = [s.stack_labels[i] if i >= 0 else () for i in s.q_sid.tolist()]
    assert got == _brute(start, end, label, times)
    # the range instance at each depth, for the op ids (q_chain), agrees with the labels
    q = np.flatnonzero(s.q_sid >= 0)[:40]
    for depth in (0, 1, 5):
        r = s.q_chain(q, np.full(len(q), depth))
        want = [got[j][depth] if depth < len(got[j]) else None for j in q.tolist()]
        assert [int(label[x]) if x >= 0 else None for x in r.tolist()] == want


class _limits:
    """``PYPROF_LIMITS`` set to ``spec`` within the block."""

    def __init__(self, spec: str):
        self.spec = spec

    def __enter__(self):
        import os

        self.old = os.environ.get(limits.ENV)
        os.environ[limits.ENV] = self.spec

    def __exit__(self, *exc):
        import os

        if self.old is None:
            os.environ.pop(limits.ENV, None)
        else:
            os.environ[limits.ENV] = self.old


def _sweep(kind: str, n: int) -> tuple[str, int, int]:
    """(outcome, work, peak bytes) of the sweep of pattern ``kind`` at ``n`` ranges and n / 10 launches:
    work is every push of a range onto a stack (the crossing sweep's, re-pushes included; the nested
    sweep's is one per range, done in numpy)."""
    rng = random.Random(SEED + n)
    start, end, label = range_pattern(kind, n, rng)
    times = np.sort(np.array([rng.randrange(int(start.min()), int(end.max()) + 1) for _ in range(n // 10)],
                             dtype=np.int64))
    tracemalloc.start()
    try:
        s = open_stacks(np.zeros(len(start), np.int64), start, end, label, np.zeros(len(times), np.int64), times)
        outcome, work = "result", len(start) + s.restacked
    except LimitError as exc:
        outcome, work = f"refused ({exc.problem.split('(')[-1].split(')')[0]})", 0
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return outcome, work, peak


@pytest.mark.parametrize("kind", PATTERNS)
def test_range_patterns_take_linear_work_and_memory(kind):
    """Each pattern at 10^3, 10^4 and 10^5 ranges: a result or a refusal naming its limit, with the
    pushes at most ``1 + cross`` per range and launch, and peak memory under 4 kB per range (numpy's
    arrays, and at most one new stack per push, each about 170 bytes: linear). ``wide`` is refused by ``cross`` and ``deep-crossing`` by
    ``depth`` from 10^4 on (before #45, the crossing sweep built a tuple of every open range per start:
    20,000 crossing ranges took 8 GB). 10^6: ``scripts/hostile_bounds.py``."""
    bound = 1 + limits.get("cross")
    for n in (1_000, 10_000, 100_000):
        outcome, work, peak = _sweep(kind, n)
        ranges = n + n // 10
        assert work <= bound * ranges, (kind, n, work)
        assert peak < 4096 * ranges + (1 << 20), (kind, n, peak)
        if kind == "wide" and n >= 10_000:
            assert outcome == "refused (cross)", outcome
        elif kind == "deep-crossing" and n >= 10_000:
            assert outcome == "refused (depth)", outcome
        elif kind not in ("wide", "deep-crossing"):
            assert outcome == "result", (kind, n, outcome)


def write_crossing(path, ranges: int, depth: int) -> None:
    """An Nsight export of ``ranges`` nested NVTX ranges in stacks ``depth`` deep (:func:`write_nested`),
    each stack crossed by one more range that opens before it and ends halfway up it (the issue's
    export: 20,000 such ranges took 8.2 GB in 120 s)."""
    import sqlite3

    from tests.nsys_synth import _TICK, NVTX_PUSH_POP, write_nested

    write_nested(path, ranges, depth)
    con = sqlite3.connect(path)
    (thread,) = con.execute("SELECT DISTINCT globalTid FROM NVTX_EVENTS").fetchone()
    span = (2 * depth + 3 + 4) * _TICK  # (write_nested's stack span, one kernel per stack)
    rows = [(1_000_000 + s * span - _TICK // 2, 1_000_000 + s * span + (depth // 2) * _TICK + _TICK // 2,
             NVTX_PUSH_POP, "cross", thread, 0) for s in range(-(-ranges // depth))]
    con.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) '
                    "VALUES (?,?,?,?,?,?)", rows)
    con.commit()
    con.close()


@pytest.mark.parametrize("ranges, depth", [(20_000, 20_000), (300_000, 300_000), (30_000, 1500)])
def test_crossing_nested_exports_are_bounded(ranges, depth, tmp_path):
    """Nested NVTX ranges crossed by a real range, in a child under a 2 GB address-space limit: one
    stack of 20,000 or 300,000 is refused naming the depth limit and the thread; stacks 1,500 deep
    (under the limit) are read, each record listing its 1,500 open ranges (the crossing one ended)."""
    from tests.conftest import read_record_file

    src, out = tmp_path / "cross.sqlite", tmp_path / "o.dict"
    write_crossing(src, ranges, depth)
    r = parse_bounded(src, out)
    assert one_line_or_result(r.returncode, r.stderr, [out]) is None, r.stderr
    if depth > limits.DEFAULTS["depth"]:
        assert r.returncode == 2 and "--limit depth=" in r.stderr and "on thread 4242 of process 4242" in r.stderr
        return
    assert r.returncode == 0 and records_ok(out) is None
    recs = read_record_file(out)
    assert len(recs) == ranges // depth and {len(rec["ranges"]) for rec in recs} == {depth}


def _annotation_stacks(n: int, depth: int) -> dict:
    """A torch.profiler trace of ``n`` user annotations in stacks ``depth`` deep, an ATen op in each
    innermost one."""
    events, t = [], 0
    for base in range(0, n, depth):
        d = min(depth, n - base)
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ann{i % 97}", "pid": 1, "tid": 1, "ts": t + i,
                    "dur": 4 * d - 2 * i} for i in range(d)]
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::mul", "pid": 1, "tid": 1, "ts": t + d + 1, "dur": 1,
                       "args": {}})
        t += 5 * d
    return {"traceEvents": events}


@pytest.mark.parametrize("depth", [20, 1999])
def test_deep_annotation_stacks_stay_linear(depth, tmp_path):
    """60,000 user annotations in stacks 20 deep (read) or 1,999 deep (under the depth limit, but each
    range keeps the tuple of those open around it: 60,000 x 1,000 ids, and 1M of them took 10 GB before
    #45): refused naming the ``chain`` limit, in a child under a 2 GB address-space limit."""
    src, out = tmp_path / "deep.json", tmp_path / "o.dict"
    src.write_text(json.dumps(_annotation_stacks(60_000, depth)))
    r = parse_bounded(src, out)
    assert one_line_or_result(r.returncode, r.stderr, [out]) is None, r.stderr
    if depth == 20:
        assert r.returncode == 0 and records_ok(out) is None
    else:
        assert r.returncode == 2 and "--limit chain=" in r.stderr and "thread 1 of process 1" in r.stderr


# -- 4. record files that know their end ---------------------------------------------------------------


def _record_files(tmp_path) -> list:
    """Record files as parse writes them, from an Nsight export (this suite's), the torch.profiler GPU
    fixture and, where the corpus is present, a real export of thousands of kernels."""
    from pyprof.parse.run import parse_file
    from tests.conftest import corpus_files
    from tests.test_hostile_inputs import KINETO_GPU, _small_export

    srcs = [tmp_path / "small.sqlite", KINETO_GPU]
    _small_export(srcs[0], 300)
    srcs += [p for p in corpus_files("nsys") if "Athrun0109" in p.name]
    outs = []
    for i, src in enumerate(srcs):
        out = tmp_path / f"r{i}.dict"
        parse_file(str(src), str(out))
        outs.append(out)
    return outs


def _cut_at(path, share: float, dst) -> int:
    """``path`` cut at the first line boundary at or after ``share`` of its bytes (before its last line
    at least) into ``dst``; the records kept."""
    data = path.read_bytes()
    last = data.rfind(b"\n", 0, len(data) - 1) + 1
    at = data.find(b"\n", int(len(data) * share))
    cut = last if at < 0 else min(at + 1, last)
    dst.write_bytes(data[:cut])
    return data[:cut].count(b"\n") - 1


def _usable(*commands: list) -> list:
    """``commands`` less ``report`` where Plotly (the ``report`` extra) is not installed: these tests are
    about the readers; the report's one line for the missing extra has its own test (test_report_cli)."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        return [c for c in commands if c[0] != "report"]
    return list(commands)


#: every reader of a record file, as ``pyprof ARGS`` with ``{}`` for the file
CUT_READERS = (["prof", "{}"], ["prof", "--summary", "op", "{}"], ["prof", "-j", "2", "--csv", "{}"],
               ["report", "{}", "-o", "{html}"], ["diff", "{}", "{}"], ["advise", "{}"])


@pytest.mark.parametrize("share", [0.0, 0.15, 0.5, 1.0])
def test_record_file_cut_at_a_line_boundary_is_refused(share, capsys, tmp_path, monkeypatch):
    """Parse outputs cut at a line boundary (0: right after the header; 15%, as a killed ``parse``
    writing to stdout left 21 MB of 141 MB; 1.0: just before the end line): every command that reads
    records, ``pyprof.load`` (both ways) and the Parquet conversion refuse each in one line saying it was
    cut short (before #45, prof read it with exit 0). prof's parallel reader (``-j 2``, every file
    counted as big) checks the whole file across its parts."""
    import pyprof
    from pyprof import process
    from pyprof.errors import InputError
    from pyprof.prof import table
    from tests.conftest import run_main

    monkeypatch.setattr(table, "PARALLEL_MIN_BYTES", 1)
    html = tmp_path / "r.html"
    problems = []
    for path in _record_files(tmp_path):
        cut = tmp_path / f"cut-{path.name}"
        kept = _cut_at(path, share, cut)
        for args in CUT_READERS:
            if args[0] == "report":
                pytest.importorskip("plotly")
            argv = [a.format(cut, html=html) for a in args]
            with process.owning():
                code, _, err = run_main(capsys, argv)
            bad = one_line_or_result(code, err, [html])
            if bad is None and (code != 2 or f"no end line after its {kept:,} records" not in err):
                bad = f"exit {code}: {err[-300:]}"
            if bad:
                problems.append(f"{cut.name}: pyprof {' '.join(args)}: {bad}")
        for kw in ({}, {"prof": True}):
            with pytest.raises(InputError, match="no end line"):
                pyprof.load(cut, **kw)
        if _has("duckdb") and _has("pyarrow"):
            from pyprof.scale.identity import identify
            from pyprof.scale.parquet import convert

            out = tmp_path / "x.parquet"
            with pytest.raises(InputError, match="no end line"):
                convert(str(cut), str(out), identify(str(cut), 0))
            assert not out.exists()
    assert not problems, "\n".join(problems)


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def test_whole_joined_old_and_edited_record_files(capsys, tmp_path):
    """A whole file reads; two whole files joined (``cat a b``) read as their records; a file of pyprof
    before the end line (its header without ``counted``, no end line) reads, unchecked, as documented;
    a record deleted by hand (the count unchanged) is refused naming both counts; an end line whose
    count is no number is one line."""
    import orjson

    from pyprof.records import END_COUNT, END_FLAG
    from tests.conftest import run_main

    path = _record_files(tmp_path)[0]
    data = path.read_bytes()
    n = data.count(b"\n") - 2
    joined = tmp_path / "joined.dict"
    joined.write_bytes(data + data)
    code, out, err = run_main(capsys, ["prof", "--csv", joined])
    assert code == 0 and len(out.splitlines()) == 2 * n + 1, err
    head, *body, _ = data.splitlines(keepends=True)
    old_head = orjson.loads(head)
    del old_head[END_FLAG]
    old = tmp_path / "old.dict"
    old.write_bytes(orjson.dumps(old_head) + b"\n" + b"".join(body[: n // 2]))
    code, out, err = run_main(capsys, ["prof", "--csv", old])
    assert code == 0 and len(out.splitlines()) == n // 2 + 1, err
    edited = tmp_path / "edited.dict"
    edited.write_bytes(data.replace(body[3], b""))
    code, _, err = run_main(capsys, ["prof", edited])
    assert code == 2 and one_line_or_result(code, err, []) is None
    assert f"holds {n - 1:,} records where its end line counts {n:,}" in err
    broken = tmp_path / "broken.dict"
    broken.write_bytes(data.replace(f'"{END_COUNT}":{n}'.encode(), f'"{END_COUNT}":"x"'.encode()))
    code, _, err = run_main(capsys, ["prof", broken])
    assert code == 2 and one_line_or_result(code, err, []) is None and "a broken end line" in err


# -- 3. every drop counted and said; 5. parse writes only what prof reads ---------------------------------

#: values no complete event can use, by field (each an event left out, counted by its field's reason)
UNUSABLE = {"ts": [float("nan"), float("inf"), float("-inf"), "123", [5], 10.0**30], "dur": [float("nan"), float("inf"), -5, "7", {}],
            "pid": [[1], 1.5, 2**70, {"a": 1}], "tid": [[1], 2.5, True], "cat": [5, ["cpu_op"]],
            "name": [7, ["x"]]}


def _trace_files() -> list:
    """torch.profiler traces to mutate: the GPU fixture, and the corpus' real traces where present."""
    from tests.conftest import CORPUS
    from tests.test_hostile_inputs import KINETO_GPU

    real = sorted((CORPUS / "kineto").glob("*.json.gz"))[:3] if (CORPUS / "kineto").is_dir() else []
    return [KINETO_GPU, *real]


def _events(path) -> dict:
    import gzip

    data = path.read_bytes()
    return json.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)


def _mutated(doc: dict, rng: random.Random, share: float) -> tuple[dict, dict, int]:
    """``doc`` with a seeded ``share`` of its complete events given an unusable value in one field
    (:data:`UNUSABLE`), and as many others a name holding a lone surrogate: (the trace, the drops
    expected by reason, the names escaped)."""
    from pyprof.parse.kineto.events import DROP_REASONS

    want: dict[str, int] = {}
    escaped = 0
    for ev in doc["traceEvents"]:
        if not isinstance(ev, dict) or ev.get("ph") != "X" or rng.random() >= share:
            continue
        if rng.random() < 0.5 and isinstance(ev.get("name"), str):
            ev["name"] += "\ud800"
            escaped += 1
            continue
        key = rng.choice(list(UNUSABLE))
        ev[key] = rng.choice(UNUSABLE[key])
        want[DROP_REASONS[key]] = want.get(DROP_REASONS[key], 0) + 1
    return doc, want, escaped


@pytest.mark.parametrize("share", [0.02, 0.3, 1.0])
def test_unusable_event_fields_are_counted_by_reason(share, capsys, tmp_path):
    """Real and fixture torch.profiler traces whose complete events hold, seeded, NaN, infinite, text,
    list, object, 2^70 and negative values in ts, dur, pid, tid, cat and name, or a lone surrogate in
    a name: parse keeps every other event, says in one warning how many it left out and why (the
    exact counts, by reason; the same in the end line's ``dropped``), keeps each surrogate name escaped
    and counted, writes records prof, report and diff accept; a trace left with nothing is one line
    naming the drops (before #45: "0 kernels" or "holds neither GPU kernels nor CPU ops", no word of
    the NaN times; ill-typed events left out without a count; names turned into '')."""
    from pyprof.parse.kineto.events import DROP_REASONS
    from pyprof.records import END_COUNT
    from tests.conftest import run_main

    rng = random.Random(SEED)
    for i, trace in enumerate(_trace_files()):
        doc, want, escaped = _mutated(_events(trace), rng, share)
        src, out = tmp_path / f"t{i}.json", tmp_path / f"t{i}.dict"
        src.write_text(json.dumps(doc))  # (NaN and Infinity as Python's json writes them)
        code, _, err = run_main(capsys, ["parse", src, "-o", out])
        assert one_line_or_result(code, err, [out]) is None, err
        if code == 2:
            assert share == 1.0 and "no kernel or CPU op is left" in err and "events left out" in err, err
            continue
        assert code == 0 and records_ok(out) is None, err
        said = [line for line in err.splitlines() if "left out (" in line]
        if want:
            assert len(said) == 1, err
            assert f"{sum(want.values()):,} events left out" in said[0]
            for reason, n in want.items():
                assert f"{reason}: {n:,}" in said[0], (reason, n, said[0])
        end = json.loads(out.read_text().splitlines()[-1])
        reasons = set(DROP_REASONS.values())
        assert END_COUNT in end and {k: v for k, v in end.get("dropped", {}).items() if k in reasons} == want
        if escaped:
            assert end["dropped"]["texts holding a lone surrogate, kept escaped"] == escaped
            assert "\\ud800" in out.read_text()
        for args in _usable(["prof", out], ["diff", out, out], ["report", out, "-o", tmp_path / "r.html"]):
            code, _, err = run_main(capsys, args)
            assert code == 0, (args, err)


def _mutate_export(path, rng: random.Random, share: float) -> dict[str, int]:
    """An Nsight export changed in place, seeded: a ``share`` of its kernels end before they start, as
    many have a grid dimension below zero, as many NVTX ranges end before they start, and a kernel name
    and an NVTX message hold bytes that are no UTF-8. Returns what the parse must count: ``kDuration``,
    ``grid`` (values nulled), ``backwards`` (ranges left out), ``escaped`` (at least)."""
    import sqlite3

    con = sqlite3.connect(path)
    kernels = [r for (r,) in con.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL")]
    ranges = [r for (r,) in con.execute('SELECT rowid FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND "end" > start')]
    k = max(1, int(len(kernels) * share))
    ends, grids = rng.sample(kernels, k), rng.sample(kernels, k)
    back = rng.sample(ranges, min(len(ranges), k))
    con.executemany('UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = start - 1 - rowid % 997 WHERE rowid = ?',
                    [(r,) for r in ends])
    con.executemany("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridY = -5 WHERE rowid = ?", [(r,) for r in grids])
    con.executemany('UPDATE NVTX_EVENTS SET "end" = start - 10 WHERE rowid = ?', [(r,) for r in back])
    name = con.execute("SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE rowid = ?", (kernels[0],)).fetchone()[0]
    con.execute("UPDATE StringIds SET value = CAST(X'6b5fff5f78' AS TEXT) WHERE id = ?", (name,))
    if con.execute("SELECT 1 FROM NVTX_EVENTS WHERE text IS NOT NULL LIMIT 1").fetchone():
        con.execute("UPDATE NVTX_EVENTS SET text = CAST(X'6c617965723aff' AS TEXT) "
                    "WHERE rowid = (SELECT min(rowid) FROM NVTX_EVENTS WHERE text IS NOT NULL)")
    con.commit()
    con.close()
    return {"kDuration": len(ends), "grid": len(grids), "backwards": len(back), "escaped": 1}


def _exports(tmp_path) -> list:
    """Nsight exports to mutate: this suite's synthetic one (pyprof markers), and real ones with NVTX
    ranges where the corpus is present (copies)."""
    import shutil

    from tests.conftest import corpus_files
    from tests.test_hostile_inputs import _export_with_markers, generated_markers

    first = tmp_path / "m.sqlite"
    _export_with_markers(first, generated_markers(200))
    out = [first]
    for p in corpus_files("nsys"):
        if any(k in p.name for k in ("yyhtbs", "zx3xyy", "NVIDIA__Fuser__report1")):
            out.append(tmp_path / p.name)
            shutil.copy(p, out[-1])
    return out


@pytest.mark.parametrize("share", [0.01, 0.2])
def test_impossible_export_values_are_nulled_and_counted(share, capsys, tmp_path):
    """Synthetic and real Nsight exports with kernels ending before they start, grids with a dimension
    below zero, NVTX ranges ending before they start and names that are no UTF-8 (seeded): parse writes
    every kernel, each impossible value as null, counted per field in one warning and in the end line
    (``nulled``), the backward ranges left out and the names kept with their bytes escaped, counted
    (``dropped``); prof, report and diff read what it wrote (before #45 they refused parse's own output:
    "kDuration is -7", "grid is [1, null, 1]")."""
    import sqlite3

    from pyprof.parse.assemble import BACKWARDS, ESCAPED
    from tests.conftest import run_main

    rng = random.Random(SEED)
    for src in _exports(tmp_path):
        want = _mutate_export(src, rng, share)
        n = sqlite3.connect(src).execute("SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
        out = src.with_suffix(".dict")
        code, _, err = run_main(capsys, ["parse", src, "-o", out])
        assert code == 0 and records_ok(out) is None, err
        lines = out.read_text().splitlines()
        end = json.loads(lines[-1])
        assert end["records"] >= n and end["nulled"] == {"kDuration": want["kDuration"], "grid": want["grid"]}, end
        assert end["dropped"].get(BACKWARDS) == want["backwards"] and end["dropped"].get(ESCAPED, 0) >= want["escaped"]
        assert r"k_\\xff_x" in out.read_text()  # (the escape, as JSON writes its backslash)
        assert f"{want['kDuration'] + want['grid']:,} impossible values written as null" in err
        for args in _usable(["prof", out], ["diff", out, out], ["report", out, "-o", tmp_path / "r.html"]):
            code, _, err = run_main(capsys, args)
            assert code == 0, (args, err)


def test_kineto_plan_entries_are_checked_before_writing():
    """The write-time check of torch.profiler records (what no trace of the corpus needs): an instance's
    decoded field and a GPU record's own field that their checks refuse are written as null, counted per
    record, the entries changed in place and the shared dicts left as they were."""
    from pyprof.parse.kineto.lines import entry_stats

    f_bad = {"op": "mm", "bwdNode": None, "layer": [1, 2], "dir": "fprop"}
    f_ok = {"op": "mm", "bwdNode": None, "layer": ["a"], "dir": "fprop"}
    bad_ctx, ok_ctx = (f_bad, 7, 1), (f_ok, 8, 2)
    pre = {"kind": "kernel", "kDuration": -3, "grid": [1, None, 1]}
    entries = [(1, bad_ctx, 0, None), (2, bad_ctx, 1, dict(pre)), (3, ok_ctx, 0, {"kind": "kernel", "kDuration": 4})]
    stats = entry_stats(entries)
    assert stats.nulled == {"layer": 2, "kDuration": 1, "grid": 1}
    assert entries[0][1][0]["layer"] is None and entries[0][1] is entries[1][1] and entries[0][1][1:] == (7, 1)
    assert entries[1][3] == {"kind": "kernel", "kDuration": None, "grid": None}
    assert entries[2][1] is ok_ctx and f_bad["layer"] == [1, 2]  # (the shared dict untouched)


# -- 4. outputs: hard links, signals during the write ---------------------------------------------------------


@pytest.mark.parametrize("command", ["parse", "prof", "report"])
def test_output_over_a_hard_link_writes_its_file(command, capsys, tmp_path):
    """``-o`` naming a file with another hard link: the file itself gets the output, so both names show
    it (before #45 the output was renamed over the name given: the link broken, the other name left
    with the old content); a file without other links is still replaced whole."""
    import os

    from tests.conftest import run_main
    from tests.test_hostile_inputs import _small_export

    if command == "report":
        pytest.importorskip("plotly")
    src, records = tmp_path / "s.sqlite", tmp_path / "r.dict"
    _small_export(src, 30)
    assert run_main(capsys, ["parse", src, "-o", records])[0] == 0
    other, named = tmp_path / "other", tmp_path / "named"
    other.write_text("old\n")
    os.link(other, named)
    argv = {"parse": ["parse", src, "-o", named], "prof": ["prof", records, "-o", named],
            "report": ["report", records, "-o", named]}[command]
    code, _, err = run_main(capsys, argv)
    assert code == 0, err
    assert os.path.samefile(other, named) and os.stat(named).st_nlink == 2
    assert other.read_bytes() == named.read_bytes() != b"old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["named", "other", "r.dict", "s.sqlite"]


#: a child that runs ``pyprof ARGS`` and, at the K-th write to its output (``end``: after the last one,
#: before the file is put in place), sends itself (or its process group) a signal: an interrupt met
#: during the final write, at a chosen moment
_SIGNALLED = """
import contextlib, os, signal, sys
from pyprof import atomic
from pyprof.parse import run
sig, k, group = getattr(signal, sys.argv[1]), sys.argv[2], sys.argv[3] == "group"
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job inherits it ignored)
real = atomic.atomic_output


def send():
    (os.killpg if group else os.kill)(0 if group else os.getpid(), sig)

class Spy:
    def __init__(self, fh):
        self.fh, self.n = fh, 0
    def write(self, data):
        self.n += 1
        if str(self.n) == k:
            send()
        return self.fh.write(data)
    def __getattr__(self, name):
        return getattr(self.fh, name)

@contextlib.contextmanager
def spied(path, mode="w"):
    with real(path, mode) as fh:
        yield Spy(fh)
        if k == "end":  # every byte written, the file not yet in place
            send()

atomic.atomic_output = run.atomic_output = spied
from pyprof.cli.main import main
main(sys.argv[4:])
"""


def _cpu_trace(path, ops: int) -> None:
    events = []
    for i in range(ops):
        events += [{"ph": "X", "cat": "cpu_op", "name": "aten::linear", "pid": 1, "tid": 1, "ts": 10 * i, "dur": 8,
                    "args": {"Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}},
                   {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": 10 * i + 1, "dur": 5,
                    "args": {"Input Dims": [[4], [4, 4], [4, 4]]}}]
    path.write_text(json.dumps({"traceEvents": events}))


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_signal_during_the_final_write_leaves_nothing(sig, tmp_path):
    """SIGINT (Ctrl-C), SIGTERM or SIGHUP, to pyprof alone or to its process group (its forked workers
    too), at the 1st, 3rd or 20th write of its output: parse of an Nsight export (a writer thread), of
    a torch.profiler CPU trace (a forked child writing the later records to a file of its own) and prof
    ``-o``: exit 128 + the signal's number, one line naming it, no output, no temporary file beside it
    or in $TMPDIR (before #45: SIGTERM left the hidden ``.pyprof-*.part``)."""
    import os
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO
    from tests.nsys_synth import write_nested

    nsys, cpu, records = tmp_path / "n.sqlite", tmp_path / "c.json", tmp_path / "r.dict"
    write_nested(str(nsys), 60_000, 2)  # 30,000 kernels: the writer thread
    _cpu_trace(cpu, 3000)
    temp = tmp_path / "temp"
    temp.mkdir()
    env = dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(temp))
    subprocess.run([sys.executable, "-m", "pyprof", "parse", "-q", str(nsys), "-o", str(records)], env=env, check=True)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    problems = []
    for name, argv in (("nsys", ["parse", nsys]), ("kineto", ["parse", cpu]), ("prof", ["prof", records])):
        for k in ("1", "2", "end"):
            for who in ("self", "group"):
                out = out_dir / f"{name}.out"
                r = subprocess.run([sys.executable, "-c", _SIGNALLED, sig, str(k), who, *map(str, argv), "-o", str(out)],
                                   capture_output=True, text=True, env=env, timeout=300, start_new_session=True)
                code = 128 + getattr(signal, sig)
                left = sorted(p.name for p in (*out_dir.iterdir(), *temp.iterdir()))
                said = f"pyprof: interrupted ({sig}); no partial output file is left\n"
                lines = r.stderr.splitlines(keepends=True)
                if r.returncode != code or lines[-1:] != [said] or r.stderr.count("interrupted") != 1 \
                        or "Traceback" in r.stderr or left:
                    problems.append(f"{name} k={k} {who}: exit {r.returncode}, left {left}, stderr {r.stderr[-300:]!r}")
                for p in (*out_dir.iterdir(), *temp.iterdir()):
                    p.unlink()
    assert not problems, "\n".join(problems)


# -- 6. no tracebacks, no raw control characters, bounded lines -------------------------------------------

#: control characters of every class: C0 (BEL, BS, CR, LF, ESC sequences), DEL, C1 (CSI)
CONTROLS = ["\x1b[2J\x1b[31m", "\x07", "\r\n", "\x08", "\x7f", "\x9b31m", "\x00"]


def _evil_names(rng: random.Random, n: int) -> list[str]:
    """Op names holding control characters (seeded) or run to 1 kB, 1 MB or 10 MB (the issue's)."""
    names = [f"op{i}{rng.choice(CONTROLS)}{rng.choice(CONTROLS)}x" for i in range(n)]
    return names + ["long" + "A" * size for size in (1 << 10, 1 << 20, 10 << 20)]


def _bad(text: str) -> list[str]:
    return [line[:80] for line in text.splitlines() if any(c < " " or "\x7f" <= c <= "\x9f" for c in line)]


def test_terminal_lines_are_escaped_and_bounded(capsys, tmp_path):
    """Ops named with escape sequences and other control characters, and ops named by 1 kB to 10 MB of
    text, none of which a FLOP model prices (so warnings name them): every line prof, prof --summary,
    report, advise and diff write to the terminal holds no control character (each escaped, ``\\x1b``)
    and none is longer than a terminal line (each name cut, saying by how much); the records keep every
    name whole (before #45 the warning lines of prof and report carried raw escapes and all 10 MB)."""
    from pyprof import terminal
    from tests.conftest import read_record_file, run_main
    from tests.test_hostile_inputs import _export_with_markers

    names = _evil_names(random.Random(SEED), 12)
    texts = [json.dumps({"pyprof": 1, "k": "op", "ns": "torch", "op": op, "args": []}) for op in names]
    src, out = tmp_path / "evil.sqlite", tmp_path / "evil.dict"
    _export_with_markers(src, texts)
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert code == 0 and not _bad(err), err[:300]
    assert sorted(r["op"] for r in read_record_file(out)) == sorted(names)
    problems = []
    for args in _usable(["prof", out], ["prof", "--summary", "op", out], ["prof", "-w", "120", out],
                        ["report", out, "-o", tmp_path / "r.html"], ["advise", out], ["diff", out, out]):
        code, stdout, err = run_main(capsys, args)
        if code not in (0, 2) or one_line_or_result(code, err, []) is not None and code == 2:
            problems.append(f"{args[0]}: exit {code}: {err[:200]!r}")
        lines = err.splitlines() + (stdout.splitlines() if "-w" in args or "--summary" in args else [])
        if _bad(err + stdout):
            problems.append(f"{' '.join(map(str, args[:-1]))}: control characters: {_bad(err + stdout)[:2]}")
        if any(len(line) > terminal.LINE_MAX + 40 for line in lines):
            problems.append(f"{' '.join(map(str, args[:-1]))}: a line of {max(map(len, lines)):,} characters")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("text, want", [
    ("plain", "plain"), ("a\x1b[31mb", "a\\x1b[31mb"), ("x\ny\r", "x\\x0ay\\x0d"), ("\x9b\x7f", "\\x9b\\x7f"),
    ("n" * 301, "n" * 300 + "...(+1 characters)"), ("a " * 3000, None)])
def test_shown_escapes_and_cuts(text, want):
    from pyprof.terminal import LINE_MAX, shown

    got = shown(text)
    if want is not None:
        assert got == want
    else:
        assert len(got) <= LINE_MAX + 40 and got.endswith(f"...(+{len(text) - LINE_MAX:,} characters)")


@pytest.mark.parametrize("literal", ["0x" + "f" * 1_000_000, "1" * 5000, "-0b" + "1" * 20_000, "[" * 150 + "]" * 150,
                                     "[" + "1," * 600_000 + "]"])
def test_marker_literals_are_bounded(literal, capsys, tmp_path):
    """PyProf dict markers holding a hex int of 10^6 digits (before #45: a ValueError traceback, the
    int-to-string digit limit), a decimal one of 5,000 digits, a binary one of 20,000, a deep nesting,
    a literal of 1.2 MB (past what pyprof reads: ``literal_eval`` takes ~500 bytes per byte): the marker
    is counted malformed in one warning, its kernel kept, and prof reads the records."""
    from tests.conftest import run_main
    from tests.test_hostile_inputs import _export_with_markers

    src, out = tmp_path / "m.sqlite", tmp_path / "m.dict"
    _export_with_markers(src, ["{'mod': 'torch', 'op': 'mul', 'args': [{'name': 'x', 'type': 'int', 'value': "
                               + literal + "}]}", "{'mod': 'torch', 'op': 'add', 'args': []}"])
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert code == 0 and records_ok(out) is None, err[-500:]
    assert "1 malformed pyprof/PyProf marker" in err or literal.startswith("[[") and "malformed" not in err
    code, _, err = run_main(capsys, ["prof", out])
    assert code == 0, err[-300:]


#: ill-typed values of env.json's fields (``pyprof run`` writes counts, flags, texts, an object of texts)
ENV_BAD = {"intra_op_threads": ["8", -1, 2.5, [4]], "processes": ["x", {}], "physical_cores": [[4], True],
           "mkldnn": ["yes", 1], "torch": [2], "vars": [5, {"OMP_NUM_THREADS": 4}, ["a"]]}


@pytest.mark.parametrize("key", list(ENV_BAD))
def test_ill_typed_env_file_is_one_line(key, records_ok_file, capsys, tmp_path):
    """An env.json whose field holds a value of another type, given to ``report --env`` or found beside
    the records (report, advise): one line naming the file and the field (before #45: a TypeError or
    ValueError traceback in the thread finding)."""
    pytest.importorskip("plotly")
    from tests.conftest import run_main

    records = records_ok_file
    html = tmp_path / "r.html"
    for value in ENV_BAD[key]:
        env = {"intra_op_threads": 4, "physical_cores": 2, "processes": 1, key: value}
        beside = records.with_name("env.json")
        beside.write_text(json.dumps(env))
        other = tmp_path / "other.json"
        other.write_text(json.dumps(env))
        for args in (["report", records, "--env", other, "-o", html], ["report", records, "-o", html],
                     ["advise", records]):
            code, _, err = run_main(capsys, args)
            assert code == 2 and one_line_or_result(code, err, [html]) is None, (args, err)
            assert f'"{key}" is ' in err and "env.json" in err or "other.json" in err, err
        beside.unlink()


@pytest.fixture
def records_ok_file(tmp_path, capsys):
    from tests.conftest import run_main
    from tests.test_hostile_inputs import _small_export

    src, out = tmp_path / "run" / "s.sqlite", tmp_path / "run" / "records.dict"
    src.parent.mkdir()
    _small_export(src, 10)
    assert run_main(capsys, ["parse", src, "-o", out])[0] == 0
    return out


@pytest.mark.parametrize("name", ["zx3xyy", "NVIDIA__Fuser__report1", "yyhtbs"])
def test_real_exports_crossed_by_start_end_ranges(name, capsys, tmp_path):
    """A real export (corpus) given 40 seeded NVTX start/end ranges on its busiest thread, each from a
    random kernel launch to a later one (crossing its push/pop ranges every way): its threads go to the
    crossing sweep, and every record lists exactly the ranges open on its thread at its launch, in start
    order (a reference computed here from the table), the crossing ones among them."""
    import shutil
    import sqlite3

    from tests.conftest import corpus_file, read_record_file, run_main

    src = tmp_path / "x.sqlite"
    shutil.copy(corpus_file(name), src)
    rng = random.Random(SEED)
    con = sqlite3.connect(src)
    (thread,) = con.execute("SELECT globalTid FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY globalTid "
                            "ORDER BY count(*) DESC LIMIT 1").fetchone()
    launches = sorted(t for (t,) in con.execute("SELECT start FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE globalTid = ?",
                                                (thread,)))
    rows = []
    for i in range(40):
        a, b = sorted(rng.sample(launches, 2))
        rows.append((a - rng.randrange(1, 50), b + rng.randrange(0, 2), 60, f"cross{i}", thread, 0))
    con.executemany('INSERT INTO NVTX_EVENTS (start, "end", eventType, text, globalTid, domainId) VALUES (?,?,?,?,?,?)',
                    rows)
    con.commit()
    nvtx = [(s, e, t or "", g) for s, e, t, g in con.execute(
        'SELECT start, "end", text, globalTid FROM NVTX_EVENTS WHERE eventType IN (59, 60) AND "end" > start '
        "AND text IS NOT NULL")]
    con.close()
    out = tmp_path / "x.dict"
    code, _, err = run_main(capsys, ["parse", src, "-o", out])
    assert code == 0 and records_ok(out) is None, err
    if "never popped" in err:
        pytest.skip("the export holds never-popped ranges: the reference here does not model them")
    by_thread: dict = {}
    for s, e, t, g in nvtx:
        by_thread.setdefault(g & 0xFFFFFF, []).append((s, -e, t))
    for rs in by_thread.values():
        rs.sort()
    crossed = 0
    for rec in read_record_file(out):
        t0 = rec.get("apiStart")
        if t0 is None or rec.get("tid") is None:
            continue
        want = [t for s, ne, t in by_thread.get(rec["tid"], ()) if s <= t0 < -ne]
        assert [r["text"] or "" for r in rec["ranges"]] == want, rec["kShortName"]
        crossed += any(t.startswith("cross") for t in want)
    assert crossed > 0


def test_ill_typed_calibration_file_is_one_line(capsys, tmp_path, monkeypatch):
    """A calibration file (``$PYPROF_CALIBRATION``) whose CPU entry holds a text, a list, a negative or an
    object where a peak belongs: prof of CPU records says so in one line (before #45: a ValueError or
    AttributeError traceback), as does prof of what parse wrote meanwhile; a good one is read."""
    import orjson

    from tests.conftest import REPO, run_main

    out = tmp_path / "cpu.dict"
    trace = REPO / "tests" / "fixtures" / "kineto" / "cpu_compiled_mlp.trace.json.gz"
    cal = tmp_path / "cal.json"
    monkeypatch.setenv("PYPROF_CALIBRATION", str(cal))
    assert run_main(capsys, ["parse", trace, "-o", out])[0] == 0
    for entry in ({"flops": {"float32": "x"}, "bw": 1e10}, {"flops": [1]}, 5, {"flops": {"float32": 1e12}, "bw": "fast"},
                  {"flops": {"float32": -1.0}, "bw": 1e10}):
        cal.write_text(json.dumps({"version": 1, "devices": {"cpu": entry}}))
        code, _, err = run_main(capsys, ["prof", "--reprice", out])  # today's calibration, not the pinned one
        assert code == 2 and one_line_or_result(code, err, []) is None and "calibration file" in err, err
        # parse leaves an unreadable calibration unpinned, so that prof of its output says what is wrong
        again = tmp_path / "again.dict"
        assert run_main(capsys, ["parse", trace, "-o", again])[0] == 0
        assert "peaks" not in orjson.loads(again.read_bytes().partition(b"\n")[0])
        code, _, err = run_main(capsys, ["prof", again])
        assert code == 2 and one_line_or_result(code, err, []) is None and "calibration file" in err, err
    cal.write_text(json.dumps({"version": 1, "devices": {"cpu": {"flops": {"float32": 1e12}, "bw": 1e10}}}))
    code, _, err = run_main(capsys, ["prof", "--reprice", out])
    assert code == 0 and "no peak FLOP/s" not in err, err


def test_record_files_with_deep_ranges_take_linear_work(tmp_path):
    """Record files whose every record lists 10^4 or 10^5 open ranges (a hand-made file: parse refuses
    such depths), read by prof, report, diff and advise in a child under a 2 GB address-space limit: each
    a result (their work is linear in the file; none walks the ranges more than once)."""
    import os
    import subprocess
    import sys

    import orjson

    from tests.conftest import REPO
    from tests.test_hostile_inputs import MEMORY_LIMIT, _small_export

    src, base = tmp_path / "s.sqlite", tmp_path / "s.dict"
    _small_export(src, 8)
    subprocess.run([sys.executable, "-m", "pyprof", "parse", "-q", str(src), "-o", str(base)], check=True,
                   env=dict(os.environ, PYTHONPATH=str(REPO)))
    head, *body, end = base.read_bytes().splitlines()
    code = (f"import resource, sys; resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_LIMIT}, {MEMORY_LIMIT})); "
            "from pyprof.cli.main import main; main(sys.argv[1:])")
    for n in (10_000, 100_000):
        ranges = [{"text": f"ProfilerStep#{i}" if i % 1000 == 0 else f"r{i}", "domain": None} for i in range(n)]
        path = tmp_path / f"deep{n}.dict"
        path.write_bytes(b"\n".join([head, *(orjson.dumps({**orjson.loads(r), "ranges": ranges}) for r in body), end])
                         + b"\n")
        for args in _usable(["prof", path], ["report", path, "-o", tmp_path / "r.html"], ["diff", path, path],
                            ["advise", path]):
            r = subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                               env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300)
            assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr[-500:])
