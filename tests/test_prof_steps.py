"""The step as the unit: each record placed in the profiled step open at its launch (the header's
``ProfilerStep#N`` ranges), per-step summaries, ``--summary step``, and the noise line.

The reference for the real traces is worked out here from the trace JSON by hand: each GPU activity's
launch (its runtime event, by correlation id; its own start where the launch is not in the trace), the
``ProfilerStep#N`` range holding it (the last one begun before it), and the sum of durations per step.
"""

from __future__ import annotations

import gzip
import json

import numpy as np
import orjson
import pytest

from pyprof.prof import noise, steps
from pyprof.prof.table import build_file
from tests.conftest import CORPUS, REPO, run_main

TRACES = sorted(p.name for p in (CORPUS / "kineto").glob("*.json*")) if (CORPUS / "kineto").is_dir() else []
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}


def _hand_steps(trace) -> dict[int, int]:
    """ns of GPU activity per step, from the trace JSON alone (see the module docstring)."""
    opener = gzip.open if str(trace).endswith(".gz") else open
    with opener(trace, "rb") as fh:
        events = json.load(fh)["traceEvents"]
    ns = lambda us: round(us * 1000)  # noqa: E731 (torch.profiler writes microseconds)
    step_ranges = sorted((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), int(e["name"].split("#")[1]))
                         for e in events if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X")
    launch = {e["args"]["correlation"]: ns(e["ts"]) for e in events
              if str(e.get("cat", "")).lower() in ("cuda_runtime", "runtime", "cuda_driver")
              and "correlation" in e.get("args", {})}
    per: dict[int, int] = {n: 0 for _, _, n in step_ranges}
    for e in events:
        if str(e.get("cat", "")).lower() not in GPU_CATS | {"memcpy", "memset"} or e.get("ph") != "X":
            continue
        t = launch.get((e.get("args") or {}).get("correlation"), ns(e["ts"]))
        begun = [r for r in step_ranges if r[0] <= t]
        if not begun or (begun[-1] is step_ranges[-1] and t > begun[-1][1]):
            continue  # before the first step, or after the last one ended
        per[begun[-1][2]] += ns(e["dur"])
    return per


@pytest.mark.corpus
@pytest.mark.parametrize("name", TRACES)
def test_step_times_of_real_traces_equal_the_hand_count(tmp_path, capsys, name):
    trace = CORPUS / "kineto" / name
    if not trace.is_file():
        pytest.skip(f"corpus trace {name} not found")
    out = tmp_path / "r.dict"
    assert run_main(capsys, ["parse", "-q", trace, "-o", out])[0] == 0
    head = orjson.loads(out.read_bytes().split(b"\n", 1)[0])
    want = _hand_steps(trace)
    if not want:
        assert "steps" not in head  # a trace without ProfilerStep ranges is one step
        return
    assert [s[0] for s in head["steps"]] == sorted(want)
    df = build_file(str(out), workers=1)
    table = steps.summary(df)
    rows = table[table["step"] != "median"]
    got = dict(zip(rows["step"].astype(int), rows["sil"].astype(int), strict=True))
    assert got == want and sum(want.values()) > 0
    code, text, _ = run_main(capsys, ["prof", "--summary", "step", "-w", "120", out])
    assert code == 0 and f"Steps: {len(want)} profiled step" in text and ("median" in text or len(want) == 1)


def test_a_launch_between_steps_takes_the_last_step_begun():
    st = steps.table({"steps": [[3, 100, 200], [4, 210, 300], [2, 0, 50]]})
    assert st[:, 0].tolist() == [2, 3, 4]  # in start order
    launch, known = steps.launches(np.array([None, 150, None, 205, 400, None], dtype=object),
                                   np.array([60, 1, 250, 1, 1, None], dtype=object))
    assert steps.assign(launch, known, st).tolist() == [2, 3, 4, 3, steps.OUTSIDE, steps.OUTSIDE]
    assert steps.assign(launch, known, steps.table({})).tolist() == [steps.WHOLE] * 6  # no steps: one


def test_spread_is_the_interquartile_range_over_the_median():
    assert float(steps.spread(np.array([10.0, 10.0, 70.0]))) == pytest.approx(3.0)
    assert np.isnan(steps.spread(np.array([5.0])))  # one step: unknown, not 0


def _stepped_file(tmp_path, conditions=None, times=(1000, 1000, 1000)):
    """A record file of three steps, one kernel each, with ``conditions`` in its header."""
    facts = {"steps": [[i, i * 10_000, i * 10_000 + 5000] for i in range(3)]}
    if conditions is not None:
        facts["conditions"] = conditions
    from pyprof.records import end_line, header_line

    recs = [{"kind": "kernel", "kShortName": "k", "kLongName": "k", "kDuration": t, "start": i * 10_000 + 10,
             "end": i * 10_000 + 10 + t, "apiStart": i * 10_000 + 5, "device": 0, "gpu": "NVIDIA A100-SXM4-40GB",
             "op": "relu", "mod": "torch", "opId": i, "dir": "fprop", "seqId": [], "altSeqId": [], "layer": []}
            for i, t in enumerate(times)]
    path = tmp_path / "s.dict"
    path.write_bytes(header_line("kineto", facts) + b"".join(orjson.dumps(r) + b"\n" for r in recs)
                     + end_line(len(recs)))
    return path


def test_a_run_under_load_says_so_with_its_figure(tmp_path, capsys):
    path = _stepped_file(tmp_path, {"busy_others": 0.63, "cpus": 2})
    code, _, err = run_main(capsys, ["prof", "--summary", "op", path])
    assert code == 0
    lines = [line for line in err.splitlines() if "timings may not hold" in line]
    assert len(lines) == 1 and "other processes used 63% of the 2 CPUs" in lines[0]
    code, _, err = run_main(capsys, ["prof", "--summary", "op", _stepped_file(tmp_path, {"busy_others": 0.05})])
    assert "timings may not hold" not in err  # a quiet run says nothing


def test_steps_that_vary_say_so(tmp_path, capsys):
    path = _stepped_file(tmp_path, times=(1000, 1000, 3000))
    code, _, err = run_main(capsys, ["prof", "--summary", "step", path])
    assert code == 0 and "the step time varied 100% between steps" in err
    df = build_file(str(path), workers=1)
    assert noise.problems(df) and noise.under_load(df) is None


@pytest.mark.torch
def test_lenet_under_pyprof_run_counts_calls_not_kernels(tmp_path, capsys, monkeypatch):
    """The user's path: LeNet's conv2d is 2 layers x 3 profiled steps = 6 calls (as torch's own table
    counts them), over many more kernels (CPU ops), and every step is listed."""
    pytest.importorskip("torch")
    monkeypatch.setenv("PYPROF_CALIBRATION", str(tmp_path / "cal.json"))
    out = tmp_path / "out"
    code, text, err = run_main(capsys, ["run", "-o", out, "--no-calibrate", "--active", "3", "-w", "160",
                                        REPO / "examples" / "lenet.py"])
    assert code == 0, err
    code, csv_text, _ = run_main(capsys, ["prof", "--summary", "op", "--csv", out])
    rows = {r.split(",")[0]: r.split(",") for r in csv_text.splitlines()}
    head = rows["Op"]
    assert rows["conv2d"][head.index("Calls")] == "6" and int(rows["conv2d"][head.index("Kernels")]) > 6
    code, step_text, _ = run_main(capsys, ["prof", "--summary", "step", "--csv", out])
    assert [r.split(",")[0] for r in step_text.splitlines()[1:]] == ["2", "3", "4", "median"]
    assert "Steps: 3 profiled steps" in text  # pyprof run lists them too
