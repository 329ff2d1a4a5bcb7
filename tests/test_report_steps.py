"""Steps survive every path: a record file read back by ``pyprof report``/``diff`` keeps the records'
``ranges`` (the ``ProfilerStep#N`` steps), so a standalone report is the one ``pyprof run --report``
makes of the same records, and ``diff`` compares runs of different step counts per step.

Real data: torch.profiler traces of the corpus (skipped where it is absent)."""

from __future__ import annotations

import re
import statistics

import orjson
import pytest

try:
    from conftest import CORPUS, run_main
except ImportError:  # tests/ collected as a package
    from tests.conftest import CORPUS, run_main

from pyprof.parse.kineto import KinetoSource
from pyprof.prof.units import duration
from pyprof.records import write_records
from pyprof.report import profile, timeline

STEP = re.compile(rb'"text":"(ProfilerStep#\d+)"')


def _trace(name: str):
    path = CORPUS / "kineto" / name
    if not path.is_file():
        pytest.skip(f"corpus trace {name} not found under {CORPUS}")
    return path


def _step_of_line(line: bytes) -> bytes | None:
    m = STEP.search(line)
    return m.group(1) if m else None


@pytest.fixture(scope="module")
def five_steps(tmp_path_factory):
    """A real trace of 5 steps parsed as ``pyprof run`` parses its trace: (records in memory, their file)."""
    recs = list(KinetoSource(_trace(
        "facebookresearch__HolisticTraceAnalysis__negative_queue_length_values_check__rank0.json.gz")).records())
    path = tmp_path_factory.mktemp("steps") / "records.dict"
    with open(path, "wb") as fh:
        write_records(recs, fh)
    return recs, path


def test_a_record_file_read_back_keeps_the_steps_pyprof_run_report_saw(five_steps):
    recs, path = five_steps
    standalone = profile.load(path, peak_flops=1e12, peak_bw=1e11)  # `pyprof report records.dict`
    in_run = profile.from_records(recs, name=str(path), peak_flops=1e12, peak_bw=1e11)  # `run --report`
    assert standalone.records == in_run.records
    assert len(standalone.df.attrs["steps"]) == 5 and standalone.df.attrs["steps"] == in_run.df.attrs["steps"]
    a, b = timeline.one_step(standalone), timeline.one_step(in_run)
    assert (a.step, a.steps, a.lanes, a.left_out) == (b.step, b.steps, b.lanes, b.left_out)
    assert a.step is not None and a.bars.equals(b.bars)


def test_diff_of_3_and_5_steps_compares_per_step(tmp_path, capsys):
    """A: 3 steps of a real run, B: 5 steps of the same run (its records in ProfilerStep ranges). As totals
    B "regressed" by two thirds, which the gate judged when the steps were lost; per step it is the same
    run, and ``diff --fail-above 10`` passes, naming each side's step count."""
    recs = list(KinetoSource(_trace("pytorch__kineto__resnet50_num_workers_0.pt.trace.json.gz")).records())
    full = tmp_path / "full.dict"
    with open(full, "wb") as fh:
        write_records(recs, fh)
    lines = full.read_bytes().splitlines()
    steps = sorted({s for s in map(_step_of_line, lines) if s}, key=lambda s: int(s.split(b"#")[1]))
    assert len(steps) >= 5

    def keep(n: int, name: str):
        chosen = set(steps[:n])
        kept = [ln for ln in lines if _step_of_line(ln) in chosen]
        (tmp_path / name).write_bytes(b"\n".join(kept) + b"\n")
        per = {}
        for ln in kept:
            per[_step_of_line(ln)] = per.get(_step_of_line(ln), 0) + orjson.loads(ln)["kDuration"]
        keep.median = statistics.median(per.values())
        return tmp_path / name, sum(per.values())

    (a, sum_a), med_a = keep(3, "a.dict"), keep.median
    (b, sum_b), med_b = keep(5, "b.dict"), keep.median
    assert sum_b / sum_a > 1.5  # as totals, B "regressed" by far more than 10%
    per_step_pct = (sum_b / 5 - sum_a / 3) / (sum_a / 3) * 100
    assert abs(per_step_pct) < 10  # the data: per step the same run
    code, out, err = run_main(capsys, ["diff", a, b, "--fail-above", "10"])
    assert code == 0, err
    head = out.splitlines()
    assert head[0].endswith("(3 steps)") and head[1].endswith("(5 steps)")
    assert head[2].startswith(f"total time per step: {duration(med_a)} -> {duration(med_b)} ")  # medians


def test_diff_prints_flop_rates_in_flop_per_second(five_steps, capsys):
    """The human table of ``pyprof diff`` shows each op's achieved rate as the summary computes it (TFLOP/s in
    the raw columns, written in FLOP/s units): the GEMM of a real trace reads TFLOP/s or GFLOP/s, not 10^-12 of
    it, and the cell equals the one ``units`` writes for the JSON figure times 10^12."""
    from pyprof.prof import units

    _, path = five_steps
    code, raw, err = run_main(capsys, ["diff", path, path, "--by", "op", "--json"])
    assert code == 0, err
    rows = [orjson.loads(line) for line in raw.splitlines()]
    ops = [r for r in rows if r["by"] == "op" and r["tflops_a"]]
    assert ops
    code, out, err = run_main(capsys, ["diff", path, path, "--by", "op", "-w", "300", "--top", str(len(rows))])
    assert code == 0, err
    for r in ops:
        want = units.column([r["tflops_a"] * 1e12], "flops")[0]
        line = next(line for line in out.splitlines() if line.split(" ")[0] == r["key"])
        assert f" {want} " in f" {line} ", (r["key"], want, line)
    assert any(units.column([r["tflops_a"] * 1e12], "flops")[0].endswith(("GFLOP/s", "TFLOP/s")) for r in ops)
