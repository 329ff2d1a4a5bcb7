"""``pyprof advise``'s kinds beyond the GEMM and fusion ones: optimizer loops, DataLoader waits, thread
oversubscription, launch-bound GPU idle and exposed collectives. Each estimate against its formula
worked by hand: on a real CPU run of a small training loop recorded here, on the corpus traces (the
resnet50 DataLoader pair, the HTA NCCL trace) and on timelines whose gaps are set by hand."""

from __future__ import annotations

import copy
import gzip
import json
import textwrap
from pathlib import Path

import pytest

from pyprof import advise as adv
from pyprof.advise import dataloader, launch, optim, threads
from pyprof.advise.common import Context
from pyprof.advise.spans import read_spans, trace_beside
from pyprof.parse.kineto import KinetoSource
from pyprof.report import profile
from tests.conftest import CORPUS

GPU = Path(__file__).parent / "fixtures" / "gpu"

LOOP = textwrap.dedent("""
    import time, torch
    from torch import nn

    class Slow(torch.utils.data.Dataset):
        def __len__(self):
            return 1000
        def __getitem__(self, i):
            time.sleep(0.002)
            return torch.ones(32)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32))
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    for i, x in enumerate(torch.utils.data.DataLoader(Slow(), batch_size=4)):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if i == 5:
            break
""")


def kineto(name: str) -> Path:
    found = sorted((CORPUS / "kineto").glob(f"*{name}*")) if (CORPUS / "kineto").is_dir() else []
    if not found:
        pytest.skip(f"corpus trace {name!r} not found under {CORPUS}/kineto")
    return found[0]


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """A real ``pyprof run`` of a for-loop AdamW fed by a DataLoader that sleeps 2 ms per sample."""
    pytest.importorskip("torch")
    from pyprof.cli.main import main

    d = tmp_path_factory.mktemp("loop")
    (d / "loop.py").write_text(LOOP)
    try:
        main(["run", "--no-calibrate", "--active", "3", "-o", str(d / "out"), str(d / "loop.py")])
    except SystemExit as exc:
        assert exc.code in (0, None)
    return d / "out"


_CACHE: dict = {}


def corpus_records(name: str):
    """(trace path, records) of a corpus trace, parsed once per test module."""
    if name not in _CACHE:
        path = kineto(name)
        _CACHE[name] = (path, list(KinetoSource(path).records()))
    return _CACHE[name]


def bare(records, per_step: float, spans=None, env=None) -> Context:
    """A context for the kinds that read no prof table (dataloader, launch, threads)."""
    return Context(None, records, per_step, spans=spans, env=env)


def _advice(p, spans=None) -> dict:
    return {a.kind: a for a in adv.advise(p, spans).items}


def test_a_for_loop_adamw_model_is_its_op_time_less_the_fused_pass(cpu_run):
    p = profile.load(cpu_run / "records.dict")
    ctx = adv.context(p)
    got = optim.optim(ctx)  # (not through advise(): a loaded machine may push it under MIN_SHARE)
    df = p.df
    steps = ctx.steps
    assert steps == 3
    # by hand: the parameters are 32x32, 32, 32x32, 32 float32; a fused AdamW reads p, g, m, v and writes p,
    # m, v: 7 tensors x 4 bytes per element
    b_fused = 7 * 4 * (32 * 32 + 32 + 32 * 32 + 32) * steps
    opt = [(r, t, b) for r, t, b, d in zip(p.records, df["sil"], df["bytes"], df["dir"], strict=True)
           if d == "optim" and not any("zero_grad" in x["text"] for x in r["ranges"])]
    b_loop = sum(b for _, _, b in opt if b == b)
    per_step: dict = {}
    for r, t, _ in opt:
        step = next(x["text"] for x in r["ranges"] if x["text"].startswith("ProfilerStep#"))
        per_step[step] = per_step.get(step, 0) + t
    assert len(per_step) == steps
    now = sorted(per_step.values())[1] * steps  # the median of 3 steps, times 3
    assert got.model_s == pytest.approx((now - b_fused * now / b_loop) / steps / 1e9, rel=1e-9)
    assert got.now_s == pytest.approx(now / steps / 1e9, rel=1e-9)
    # on the CPU the estimate is withdrawn (measured: docs/advise.md): shown with its reason, no number
    assert got.saved_s is None and got.no_estimate == optim.CPU_WITHDRAWN
    assert got.evidence[0].startswith("the model's estimate, withdrawn: ")
    got = got.evidence[1:]
    assert got[0].startswith("AdamW step: 40 ops per step, 4 parameter runs of 8+ ops")


def test_foreach_and_fused_optimizers_get_no_optimizer_advice():
    for name in ("h200_lenet", "h200_compiled_lm"):  # _foreach_ ops
        p = profile.from_records(list(KinetoSource(GPU / f"{name}.trace.json.gz").records()))
        assert "optim" not in _advice(p)


def test_an_sgd_loop_without_shapes_shows_with_no_estimate():
    _, recs = corpus_records("resnet50_num_workers_0")
    steps = {x["text"] for r in recs for x in r.get("ranges") or () if x["text"].startswith("ProfilerStep#")}
    # the optimizer's records and the forward convolutions: a profile in seconds
    some = [r for r in recs if r.get("dir") == "optim" or (r.get("op") == "conv2d" and r.get("dir") == "fprop")]
    got = adv.advise(profile.from_records(some))
    assert got.steps == len(steps) == 6
    sgd = next(a for a in got.items if a.kind == "optim")
    assert sgd.saved_s is None and "no byte counts" in sgd.no_estimate
    assert sgd.evidence[0].startswith("SGD step: 483 ops per step")  # 161 parameters x 3 ops
    assert got.items[-1].saved_s is None  # unestimated advice comes last
    assert "saving not estimated" in adv.format_text(got)
    assert adv.as_json(got)[-1]["no_estimate"] == sgd.no_estimate


def _hand_dataloader_wait(path: Path) -> tuple[float, int]:
    """The median over ProfilerSteps of the ns inside DataLoader.__next__, with the json module."""
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    steps = [e for e in events if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")]
    loads = [e for e in events if e.get("ph") == "X" and e["name"].startswith("enumerate(DataLoader)#")]
    waits = sorted(sum(ld["dur"] for ld in loads if ld["tid"] == s["tid"] and s["ts"] <= ld["ts"] < s["ts"] + s["dur"])
                   for s in steps)
    assert len(waits) % 2 == 0
    return (waits[len(waits) // 2 - 1] + waits[len(waits) // 2]) / 2 * 1000, len(steps)


@pytest.mark.parametrize("workers, iterator", [(0, "_SingleProcessDataLoaderIter"),
                                                (4, "_MultiProcessingDataLoaderIter")])
def test_dataloader_wait_on_the_corpus_resnet50_pair(workers, iterator):
    path = kineto(f"resnet50_num_workers_{workers}")
    assert trace_beside(path) == str(path)
    wait, n = _hand_dataloader_wait(path)
    assert n == 6
    got = dataloader.dataloader(bare([], 6.0, read_spans(path)))
    assert got.saved_s == pytest.approx(wait / 1e9, rel=1e-9)
    assert iterator in got.evidence[1]
    assert dataloader.dataloader(bare([], 6.0)) is None  # no trace: no DataLoader spans, no advice


def test_dataloader_wait_counts_out_of_the_launch_advice():
    # the num_workers=0 run's GPU waits on the host mostly while the batch loads: that idle is the
    # dataloader's, not launch overhead
    path, recs = corpus_records("resnet50_num_workers_0")
    host = launch.launch(bare(recs, 6.0)).saved_s
    ctx = bare(recs, 6.0, read_spans(path))
    wait = dataloader.dataloader(ctx).saved_s
    assert 0 < wait and ctx.claimed["dataloader"] == wait
    after = launch.launch(ctx)
    assert after is None if host <= wait else after.saved_s == pytest.approx(host - wait)


def test_the_command_reads_the_trace_beside_a_run_and_its_env(cpu_run, capsys):
    from tests.conftest import run_main

    env = json.loads((cpu_run / "env.json").read_text())
    code, out, _ = run_main(capsys, ["advise", "--json", "-q", cpu_run])
    assert code == 0
    kinds = {a["kind"]: a for a in json.loads(out)}
    assert "dataloader" in kinds and kinds["dataloader"]["saved_s"] > 0.008 * 0.9  # 4 samples x 2 ms slept
    if env["intra_op_threads"] > env["physical_cores"]:
        assert kinds["threads"]["saved_s"] is None


def test_threads_advice_needs_more_threads_than_cores():
    recs = [{"pid": 1, "kind": "kernel"}]
    for n, cores, procs, shown in [(8, 2, 1, True), (2, 2, 1, False), (1, 2, 4, True)]:
        env = {"intra_op_threads": n, "physical_cores": cores, "processes": procs}
        got = threads.threads(bare(recs, 1.0, env=env))
        assert (got is not None) == shown
        if shown:
            assert got.saved_s is None and got.no_estimate
            assert f"{n} intra-op threads x {procs} process(es) = {n * procs} threads on {cores}" in got.evidence[0]
    # processes counted from the records too
    two = [{"pid": 1, "kind": "kernel"}, {"pid": 2, "kind": "kernel"}]
    assert threads.threads(bare(two, 1.0, env={"intra_op_threads": 2, "physical_cores": 2})) is not None
    assert threads.threads(bare(recs, 1.0)) is None  # no env.json: the records cannot show it


def _gpu_kernel(base: dict, start: int, end: int, api: int, stream: int = 7, opid: int = 1) -> dict:
    rec = copy.deepcopy(base)
    rec.update(start=start, end=end, kDuration=end - start, apiStart=api, apiEnd=api + 1_000, stream=stream,
               opId=opid, ranges=[{"text": "ProfilerStep#1", "domain": None}])
    return rec


def test_host_bound_idle_by_hand_is_the_launch_saving():
    base = next(r for r in KinetoSource(GPU / "h200_lenet.trace.json.gz").records()
                if r.get("op") == "relu" and r.get("device") is not None)
    us = 1_000
    recs = [_gpu_kernel(base, 0, 10 * us, -5 * us, opid=1),
            _gpu_kernel(base, 20 * us, 30 * us, 15 * us, opid=2),   # launched 5 us into the gap: host-bound 10 us
            _gpu_kernel(base, 40 * us, 50 * us, 5 * us, opid=3),    # queued before its gap: a wait, not host
            _gpu_kernel(base, 62 * us, 70 * us, 61 * us, opid=4)]   # launched 11 us into its gap: host 12 us
    got = launch.launch(bare(recs, 1.0))
    assert got.saved_s == pytest.approx(22e-6)
    assert "host-bound idle per step" in got.evidence[0]


def test_exposed_collective_by_hand_is_bounded_by_the_compute_left():
    _, recs = corpus_records("HolisticTraceAnalysis__negative_queue")
    nccl = next(r for r in recs if r.get("link") == "collective" and "nccl" in str(r.get("kShortName")).lower())
    compute = next(r for r in recs if r.get("device") == nccl["device"] and r.get("link") != "collective"
                   and "nccl" not in str(r.get("kShortName")).lower() and r.get("kind") == "kernel")
    us = 1_000
    coll = dict(copy.deepcopy(nccl), start=0, end=100 * us, kDuration=100 * us, stream=7, opId=1)
    hid = dict(copy.deepcopy(compute), start=20 * us, end=50 * us, kDuration=30 * us, stream=13, opId=2)
    alone = dict(copy.deepcopy(compute), start=200 * us, end=240 * us, kDuration=40 * us, stream=13, opId=3)
    for r in (coll, hid, alone):
        r["ranges"] = [{"text": "ProfilerStep#1", "domain": None}]
    got = _advice(profile.from_records([coll, hid, alone]))["comm"]
    # exposed 100 - 30 = 70 us; compute 30 + 40 = 70 us, 30 of it already hiding the collective: 40 us left
    assert got.saved_s == pytest.approx(40e-6)
    alone["end"] = alone["start"] + 90 * us
    alone["kDuration"] = 90 * us  # compute 120 us, 90 left: the whole exposed 70 us
    assert _advice(profile.from_records([coll, hid, alone]))["comm"].saved_s == pytest.approx(70e-6)


def test_the_corpus_nccl_trace_gets_comm_advice_below_its_exposed_time():
    from pyprof.prof.comm import collectives

    _, recs = corpus_records("HolisticTraceAnalysis__negative_queue")
    result = adv.advise(profile.from_records(recs))
    got = next(a for a in result.items if a.kind == "comm")
    exposed = float(collectives(recs)["exposed"].sum()) / result.steps / 1e9
    assert 0 < got.saved_s <= exposed + 1e-12
    assert any("all_reduce" in e for e in got.evidence)


def test_the_validation_table_has_a_row_per_advice_and_flags_changed_results():
    from scripts.validation.advice import HEADER, table

    tried = {"kind": "optim", "saved_s": None, "model_s": 0.012, "change": "optim", "params": {},
             "measured_s": 0.0048, "measured_ci": [0.0035, 0.0089], "ci_level": 0.984, "trials": 7,
             "step_s": [0.0398, 0.0337], "results_equal": True, "max_abs_diff": 3e-05, "busy_others": 0.8,
             "measured_note": "unreliable: other processes used 80% of the CPUs during the trials"}
    bf16 = {**tried, "kind": "bf16", "change": "bf16", "saved_s": 0.002, "measured_s": 0.001,
            "results_equal": False, "max_abs_diff": 0.5, "measured_note": None}
    text = table({"a": [tried, bf16, {"kind": "attention", "saved_s": 0.001, "measured_s": None,
                                      "not_tried": "needs an edit of the script"}], "b": "boom", "c": []})
    lines = text.splitlines()
    assert lines[0] == HEADER and len(lines) == 2 + 5 and all(line.count("|") == 10 for line in lines)
    assert ("| a | `optim` | optim | not estimated (withdrawn model: 12.00 ms) | 4.80 ms (3.50 ms .. 8.90 ms, 98%, 7); "
            "unreliable: other processes used 80% of the CPUs during the trials | 39.80 ms -> 33.70 ms | n/a | kept "
            "(max diff 3e-05) | 80% |") in lines
    assert "| 0.50 | **CHANGED** (max diff 0.5) |" in lines[3]
    assert lines[4].startswith("| a | `attention` | not tried: needs an edit of the script | 1.00 ms |")
    assert lines[5:] == ["| b | | error: boom | | | | | | |", "| c | | no advice | | | | | | |"]
