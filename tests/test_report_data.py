"""pyprof.report: the data behind each chart and table of the HTML page, checked in pure Python (no
browser), on a hand-built GPU profile whose every number is known, and on a real CPU trace."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import orjson
import pytest

from pyprof.prof.devices import match_gpu
from pyprof.prof.summary import summarize
from pyprof.report import breakdown, diff, instances, layers, profile, roofline, shapes, tables, timeline

H100 = "NVIDIA H100 80GB HBM3"
STEP = 1_000_000  # ns between step starts
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "kineto"


def _rec(kernel, start, dur, *, op=None, opid=None, d="fprop", layer=(), stream=7, kind="kernel", args=None,
         step=1, sub=0, nbytes=None, copy=None, mod="torch.nn.functional"):
    return {"kind": kind, "source": "kineto", "kShortName": kernel, "kLongName": kernel, "kDuration": dur,
            "start": start, "end": start + dur, "correlationId": None, "pid": 1, "tid": 11, "device": 0, "gpu": H100,
            "stream": stream, "grid": [1, 1, 1], "block": [128, 1, 1], "bytes": nbytes, "copyKind": copy,
            "layer": list(layer), "trace": ["train.py:7:forward"] if op else [], "mod": mod if op else None, "op": op,
            "args": args, "cdtype": None, "opId": opid, "seqId": [], "altSeqId": [], "dir": d, "subSeqId": sub,
            "ranges": [{"text": f"ProfilerStep#{step}", "domain": None}]}


def tensor(shape, dtype="bfloat16", grad=True, name=""):
    return {"name": name, "type": "tensor", "shape": list(shape), "dtype": dtype, "grad": grad}


LINEAR_ARGS = [tensor([64, 512], grad=False, name="input"), tensor([256, 512], name="weight")]
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def gpu_records(steps=2, slow=1.0, extra_op=False) -> list[dict]:
    """Per step (at ``step * STEP``): a bf16 linear forward (100 us) and backward (two GEMMs of 80 us at
    200 and 290 us), a relu (10 us), an all-reduce on stream 20 from 250 to 400 us (hidden under the
    backward GEMMs but for 10 + 30 us), a 20 us memcpy at 400 us (exposed), an optimizer kernel at 430 us
    (30 us). ``slow`` multiplies the linear forward's time (a regression for ``pyprof diff``)."""
    out = []
    for s in range(steps):
        t0 = s * STEP
        step = s + 1
        base = 10 * s
        fwd = int(100_000 * slow)
        out += [
            _rec(GEMM, t0, fwd, op="linear", opid=base + 1, layer=["net", "net.fc1"], args=LINEAR_ARGS, step=step),
            _rec("vectorized_elementwise_kernel", t0 + 110_000, 10_000, op="relu", opid=base + 2,
                 layer=["net", "net.act"], args=[tensor([64, 256], grad=False, name="input")], step=step),
            _rec(GEMM, t0 + 200_000, 80_000, op="linear", opid=base + 1, d="bprop", layer=["net", "net.fc1"],
                 args=LINEAR_ARGS, step=step),
            _rec(GEMM, t0 + 290_000, 80_000, op="linear", opid=base + 1, d="bprop", layer=["net", "net.fc1"],
                 args=LINEAR_ARGS, step=step, sub=1),
            _rec("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", t0 + 250_000, 150_000, stream=20, step=step, d="bprop"),
            _rec("memcpy HtoD", t0 + 400_000, 20_000, kind="memcpy", nbytes=1 << 20, copy="HtoD", step=step, d=""),
            _rec("multi_tensor_apply_kernel", t0 + 430_000, 30_000, op="add_", opid=base + 3, d="optim",
                 mod="torch.Tensor", args=[tensor([256, 512], grad=False), tensor([256, 512], grad=False)],
                 step=step),
        ]
        if extra_op:
            out.append(_rec("softmax_warp_forward", t0 + 120_000, 50_000, op="softmax", opid=base + 4,
                            layer=["net", "net.head"], args=[tensor([64, 256], grad=False, name="input")],
                            step=step))
    return out


@pytest.fixture
def gpu():
    return profile.from_records(gpu_records(), name="gpu.dict", calibration={})


def test_profile_devices_and_peaks(gpu):
    assert len(gpu.df) == len(gpu.records) == 14
    (dev,) = gpu.devices
    assert dev.label == H100 and not dev.is_cpu and dev.kernels == 14
    assert dev.device == match_gpu(H100) and dev.source == f"datasheet: {dev.device.source}"  # where they came from
    assert gpu.total_ns == 2 * (100_000 + 10_000 + 160_000 + 150_000 + 20_000 + 30_000)


def test_instances_join_a_backward_of_two_kernels(gpu):
    inst = instances.instances(gpu.df)
    bwd = inst[(inst["op"] == "linear") & (inst["dir"] == "bprop")]
    assert len(bwd) == 2 and set(bwd["n_kernels"]) == {2} and set(bwd["time"]) == {160_000}
    assert bwd.iloc[0]["kernels"] == (GEMM,) and bwd.iloc[0]["module"] == "net.fc1"
    fwd = inst[(inst["op"] == "linear") & (inst["dir"] == "fprop")].iloc[0]
    assert fwd["flops"] == 2 * 64 * 256 * 512  # prof's GEMM model, not a figure of the report's own
    assert fwd["tc"] and fwd["site"] == "train.py:7:forward" and fwd["device"] == H100


def test_roofline_points_are_instances_with_prof_figures(gpu):
    pts = roofline.points(gpu)
    inst = instances.instances(gpu.df)
    drawn = inst[(inst["flops"] > 0) & (inst["bytes"] > 0) & (inst["time"] > 0)]
    assert len(pts) == len(drawn) and (pts["count"] == 1).all()
    row = pts[(pts["op"] == "linear") & (pts["dir"] == "fprop")].iloc[0]
    assert row["rate"] == pytest.approx(row["flops"] / 100e-6)
    assert row["ai"] == pytest.approx(row["flops"] / row["bytes"])
    assert list(pts["time"]) == sorted(pts["time"], reverse=True)  # largest first: drawn under the small
    assert set(pts["dir"]) <= set(roofline.DIRECTIONS) and "GEMM" not in row["kernels"] and GEMM in row["kernels"]


def test_roofline_merges_equal_calls_past_the_cap(gpu):
    pts = roofline.points(gpu, max_points=1)
    fwd = pts[(pts["op"] == "linear") & (pts["dir"] == "fprop")]
    assert len(fwd) == 1 and fwd.iloc[0]["count"] == 2 and fwd.iloc[0]["time"] == 200_000


def test_roofs_of_the_device(gpu):
    rfs = roofline.roofs(gpu)
    dev = match_gpu(H100)
    tensor = [r for r in rfs if r.tensor]
    assert {r.peak for r in tensor} == {dev.peak("bfloat16", True)} and tensor[0].label == "bf16 tensor cores"
    assert any(not r.tensor and r.peak == dev.peak("bfloat16", False) for r in rfs)
    assert all(r.bw == dev.bw for r in rfs)
    roof = tensor[0]
    xs, ys = roofline.roof_line(roof, 0.1, 10_000)
    assert xs == [0.1, roof.ridge, 10_000] and ys[0] == pytest.approx(dev.bw * 0.1) and ys[-1] == roof.peak
    lo, hi = roofline.x_range(roofline.points(gpu), rfs)
    assert lo < min(roofline.points(gpu)["ai"]) and hi > roof.ridge


def test_no_peaks_no_roofs():
    recs = gpu_records()
    for r in recs:
        r["gpu"] = "Mystery Accelerator 9000"  # in no peak table, no calibration
    p = profile.from_records(recs, calibration={})
    assert p.devices[0].device is None and "no peaks known" in p.devices[0].source
    assert roofline.roofs(p) == [] and len(roofline.points(p)) > 0


def test_layer_tree_splits_directions_and_adds_up(gpu):
    t = layers.tree(gpu.df)
    assert t.ids[0] == "all" and t.values[0] == gpu.total_ns
    assert t.value("all/forward/net/net.fc1") == 200_000
    assert t.value("all/backward/net/net.fc1") == 320_000
    assert t.value("all/optimizer") == 60_000
    assert t.value("all/backward/(no layer)") == 300_000  # the all-reduce
    assert len(set(t.ids)) == len(t.ids)
    for i, parent in enumerate(t.parents):  # parents first, never smaller than their children together
        if parent:
            assert t.ids.index(parent) < i
    for node in t.ids:
        kids = [v for v, p in zip(t.values, t.parents, strict=True) if p == node]
        assert sum(kids) <= t.value(node)


def test_timeline_draws_one_step_by_stream(gpu):
    tl = timeline.one_step(gpu)
    assert tl.step == "ProfilerStep#1" and tl.steps == 2  # the median of two: the earlier
    assert tl.lanes == ["GPU 0 stream 7", "GPU 0 stream 20"]
    assert len(tl.bars) == 7 and tl.bars["start"].min() == 0 and tl.span_ns == 460_000
    nccl = tl.bars[tl.bars["kernel"].str.startswith("nccl")].iloc[0]
    assert nccl["lane"] == "GPU 0 stream 20" and nccl["start"] == 250_000 and nccl["dur"] == 150_000
    assert set(tl.bars["layer"]) == {"net.fc1", "net.act", timeline.NO_LAYER}
    capped = timeline.one_step(gpu, max_bars=3)
    assert len(capped.bars) == 3 and capped.left_out == 4 and set(capped.bars["dur"]) <= {150_000, 100_000, 80_000}


def test_timeline_picks_the_median_step():
    recs = gpu_records(steps=3)
    for r in recs:  # step 1 slow, step 3 fast: the median is step 2
        if r["ranges"][0]["text"] == "ProfilerStep#1":
            r["kDuration"] *= 3
        if r["ranges"][0]["text"] == "ProfilerStep#3":
            r["kDuration"] //= 2
    p = profile.from_records(recs, calibration={})
    assert timeline.one_step(p).step == "ProfilerStep#2"


def test_breakdown_exposed_communication_and_memcpy(gpu):
    (b,) = breakdown.breakdown(gpu.records)
    assert b.device == f"GPU 0: {H100}"
    assert b.window == STEP + 460_000
    assert b.busy == 2 * 300_000
    assert b.comm_exposed == 2 * 40_000  # 250-400 us under GEMMs at 200-280 and 290-370 us
    assert b.memcpy_exposed == 2 * 20_000
    assert b.idle == b.window - 2 * 360_000
    assert b.busy + b.comm_exposed + b.memcpy_exposed + b.idle == b.window
    assert b.comm == 2 * 150_000 and b.memcpy == 2 * 20_000
    assert b.share("busy") == pytest.approx(600_000 / 1_460_000 * 100)


def test_union_length():
    import numpy as np

    assert breakdown.union_length(np.array([0.0, 1, 5, 5.5]), np.array([2.0, 3, 6, 5.7])) == 4.0
    assert breakdown.union_length(np.array([]), np.array([])) == 0.0


def test_per_shape_table_with_gemm_dims(gpu):
    sh = shapes.by_shape(gpu)
    lin = sh[(sh["op"] == "linear") & (sh["dir"] == "fprop")].iloc[0]
    assert lin["gemm"] == "M=64 N=256 K=512 bfloat16"
    assert lin["count"] == 2 and lin["mean"] == lin["median"] == 100_000 and lin["std"] == 0
    assert lin["rate_mean"] == pytest.approx(2 * 64 * 256 * 512 / 100e-6)
    assert sh[sh["op"] == "relu"].iloc[0]["gemm"] == "-"
    assert list(sh["total"]) == sorted(sh["total"], reverse=True)


@pytest.mark.parametrize("op,args,dims", [
    ("linear", [tensor([8, 16, 32]), tensor([64, 32])], (1, 128, 64, 32)),
    ("bmm", [tensor([4, 8, 16]), tensor([4, 16, 2])], (4, 8, 2, 16)),
    ("addmm", [tensor([5]), tensor([3, 7]), tensor([7, 5])], (1, 3, 5, 7)),
    ("__matmul__", [tensor([3, 7]), tensor([7, 5])], (1, 3, 5, 7)),
    ("relu", [tensor([3, 7])], None),
    ("linear", [tensor([3, 7])], None),
])
def test_gemm_dims(op, args, dims):
    assert shapes.gemm_dims(op, "torch", args) == dims


def test_fix_this_first_orders_by_time_above_the_roofline(gpu):
    first = tables.fix_this_first(gpu.df)
    assert list(first["excess"]) == sorted(first["excess"], reverse=True) and len(first) <= tables.FIX_FIRST_ROWS
    assert set(summarize(gpu.df, "kernel")["key"]) >= {GEMM, "memcpy HtoD"}


def test_diff_names_the_op_that_changed():
    a = profile.from_records(gpu_records(steps=6), calibration={})
    b = profile.from_records(gpu_records(steps=6, slow=2.0, extra_op=True), calibration={})
    sa, sb = diff.side(a.df, "op"), diff.side(b.df, "op")
    assert sa.steps == sb.steps == 6  # the steps of the records' ProfilerStep ranges
    table = diff.compare(sa, sb)
    assert list(table["key"][:2]) == ["linear", "softmax"]  # +100 us per step, then +50 us (new): by |delta|
    new = table.iloc[1]
    assert new["verdict"] == "new" and math.isnan(new["time_a"]) and new["time_b"] == 50_000
    lin = table[table["key"] == "linear"].iloc[0]
    assert lin["delta"] == 100_000 and lin["delta_pct"] == pytest.approx(100_000 / 260_000 * 100)
    assert lin["verdict"] == "slower" and lin["p"] < diff.ALPHA
    assert lin["tflops_b"] < lin["tflops_a"] and lin["shapes"] == ""  # the same FLOPs in more time
    same = table[table["key"] == "relu"].iloc[0]
    assert same["delta"] == 0 and same["verdict"] == "same"
    tot = diff.total(sa, sb)
    assert (tot.time_a, tot.time_b) == (470_000, 620_000) and tot.p < diff.ALPHA
    outcome = diff.judge({"op": table}, tot, 5.0)
    assert outcome.kind == "regression" and outcome.exit_code == 1
    assert outcome.regressions[0].startswith("total time per step +31.9%")
    assert any(x.startswith("op linear: time per step +38.5%") for x in outcome.regressions)
    assert any(x.startswith("op softmax: new") for x in outcome.regressions)
    faster = diff.judge({"op": diff.compare(sb, sa)}, diff.total(sb, sa), 0.0)
    assert faster.kind == "no regression" and faster.regressions == []


def test_diff_of_too_few_steps_is_inconclusive_not_a_regression():
    """Two steps a side cannot show a change (the best one-sided p is 1/6): inconclusive, exit 3."""
    a = profile.from_records(gpu_records(steps=2), calibration={})
    b = profile.from_records(gpu_records(steps=2, slow=2.0), calibration={})
    sa, sb = diff.side(a.df, "op"), diff.side(b.df, "op")
    outcome = diff.judge({"op": diff.compare(sa, sb)}, diff.total(sa, sb), 10.0)
    assert outcome.kind == "inconclusive" and outcome.exit_code == 3 and "2 and 2 steps" in outcome.why[0]


def test_diff_compares_per_step_when_step_counts_differ():
    a = profile.from_records(gpu_records(steps=2), calibration={})
    b = profile.from_records(gpu_records(steps=4), calibration={})
    sa, sb = diff.side(a.df, "op"), diff.side(b.df, "op")
    assert (sa.steps, sb.steps) == (2, 4)
    assert (diff.compare(sa, sb)["delta"] == 0).all()
    assert diff.total(sa, sb).delta_pct == 0


def test_mann_whitney_is_the_textbook_test():
    """Exact p of complete separation is 1 / C(n+m, n); with ties, the normal approximation with the tie
    correction; and, where scipy is at hand, the same as its test in both directions."""
    a, b = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    assert diff.mann_whitney(a, b, greater=True) == pytest.approx(1 / 20)
    assert diff.mann_whitney(a, b, greater=False) == pytest.approx(1.0)
    assert diff.best_p(5, 5) == pytest.approx(1 / 252)
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(7)
    for n, m in ((3, 4), (5, 5), (8, 11), (20, 20)):
        x, y = rng.normal(10, 1, n), rng.normal(10.7, 1, m)
        for greater in (True, False):
            want = scipy_stats.mannwhitneyu(y, x, alternative="greater" if greater else "less", method="exact").pvalue
            assert diff.mann_whitney(x, y, greater) == pytest.approx(want)
    x, y = np.array([1.0, 2, 2, 3]), np.array([2.0, 3, 3, 4, 0])  # ties
    want = scipy_stats.mannwhitneyu(y, x, alternative="greater", method="asymptotic").pvalue
    assert diff.mann_whitney(x, y, True) == pytest.approx(want)


def _cpu_records():
    from pyprof.parse.kineto import KinetoSource

    path = FIXTURES / "cpu_unescaped_markers.json.gz"
    return list(KinetoSource(path).records())


def test_cpu_trace_charts():
    """A real torch.profiler CPU trace (tests/fixtures/kineto): every chart has data."""
    recs = _cpu_records()
    p = profile.from_records(recs, calibration={"cpu": match_gpu(H100)})  # any peaks will do
    assert p.is_cpu and p.devices[0].label == "CPU"
    assert len(roofline.points(p)) > 0 and roofline.roofs(p)
    tl = timeline.one_step(p)
    assert tl.lanes and all(lane.startswith("CPU thread ") for lane in tl.lanes)
    (b,) = breakdown.breakdown(p.records)
    assert b.device == "CPU" and b.busy > 0 and b.comm_exposed == 0
    assert layers.tree(p.df).values[0] == pytest.approx(p.total_ns, abs=len(p.df))
    assert len(shapes.by_shape(p)) > 0


def test_page_is_one_self_contained_file(tmp_path, gpu):
    pytest.importorskip("plotly")
    from pyprof.report import page

    base = profile.from_records(gpu_records(slow=0.5), name="base.dict", calibration={})
    out = tmp_path / "r.html"
    size = page.write(gpu, out, baseline=base)
    text = out.read_text()
    assert size == len(text.encode()) and size <= page.MAX_BYTES
    for sid in ("overview", "fix-first", "roofline", "layers", "timeline", "tables", "shapes", "baseline",
                "findings"):
        assert f'<section id="{sid}">' in text
    for fid in ("fig-roofline", "fig-layers", "fig-timeline", "fig-breakdown", "fig-delta-op"):
        assert f'id="{fid}"' in text
    assert "<script src" not in text and "<link" not in text  # nothing fetched
    assert "plotly.js v" in text and "H100" in text and "pyprof 0." in text
    figs_json = text.split('id="pyprof-figures">', 1)[1].split("</script>", 1)[0]
    figs = orjson.loads(figs_json.replace("<\\/", "</"))
    assert set(figs) == {"fig-roofline", "fig-layers", "fig-timeline", "fig-breakdown", "fig-delta-op"}
    assert figs["fig-roofline"]["layout"]["xaxis"]["type"] == "log"
    assert figs["fig-layers"]["data"][0]["type"] == "icicle"


def test_page_of_a_long_trace_stays_under_the_cap(tmp_path):
    """Many steps of many distinct calls: points, bars and rows are capped; the page stays small."""
    pytest.importorskip("plotly")
    from pyprof.report import page

    recs = []
    for s in range(40):
        for i in range(150):
            args = [tensor([64 + i, 512], grad=False, name="input"), tensor([256, 512], name="weight")]
            recs.append(_rec(GEMM, s * STEP + i * 5_000, 4_000 + i, op="linear", opid=s * 1000 + i,
                             layer=["net", f"net.l{i}"], args=args, step=s + 1))
    p = profile.from_records(recs, calibration={})
    assert len(roofline.points(p)) == 150  # 6000 instances merged into their 150 calls
    size = page.write(p, tmp_path / "big.html")
    assert size <= page.MAX_BYTES


def test_records_file_and_env_json_beside_it(tmp_path):
    path = tmp_path / "records.dict"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in gpu_records()))
    (tmp_path / "env.json").write_bytes(orjson.dumps({"intra_op_threads": 2}))
    p = profile.load(path)
    assert p.env == {"intra_op_threads": 2} and len(p.records) == 14 and p.name == str(path)
    assert profile.read_env(tmp_path / "missing.json") is None



def test_page_without_a_placeable_instance_says_why(tmp_path):
    """A trace without argument shapes: no FLOPs or bytes, so no roofline point; the page says why."""
    pytest.importorskip("plotly")
    from pyprof.report import page

    recs = gpu_records()
    for r in recs:
        r["args"] = None
    p = profile.from_records(recs, calibration={})
    assert len(roofline.points(p)) == 0
    page.write(p, tmp_path / "r.html")
    text = (tmp_path / "r.html").read_text()
    assert 'id="fig-roofline"' not in text and "No op instance has both FLOPs and bytes known" in text
    assert 'id="fig-layers"' in text and 'id="fig-timeline"' in text
