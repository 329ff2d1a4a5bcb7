"""pyprof.prof.table.build: op instances, the split rule, n/a for unknown, roofline, PyProf lines."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

from pyprof import process
from pyprof.prof import devices, table
from pyprof.prof.devices import Device, match_gpu
from pyprof.prof.fastread import record_columns
from pyprof.prof.load import read_records
from pyprof.prof.ops import registry
from pyprof.prof.ops.registry import Cost

A100 = "NVIDIA A100-SXM4-40GB"


def rec(i, op="ptestgemm", dur=1000, opid=1, d="fprop", kernel="ampere_sgemm_128x64_tn", gpu=A100, **kw):
    r = {"kind": "kernel", "kShortName": kernel, "kLongName": kernel, "kDuration": dur, "start": i * 10_000,
         "tid": 1, "device": 0, "gpu": gpu, "stream": 7, "grid": [1, 1, 1], "block": [128, 1, 1],
         "layer": ["net", "net.fc"], "trace": ["train.py:3:forward"], "mod": "torch.nn.functional", "op": op,
         "args": [{"name": "input", "type": "tensor", "shape": [64, 512], "dtype": "float32"},
                  {"name": "weight", "type": "tensor", "shape": [256, 512], "dtype": "float32"}],
         "cdtype": None, "opId": opid, "seqId": [5], "altSeqId": [], "dir": d, "subSeqId": 0}
    r.update(kw)
    return r


@pytest.fixture
def model(monkeypatch):
    """A test cost model for op ``ptestgemm`` that counts its calls. Its kernels' roofline times are
    under a microsecond, so the latency floor is set to 1 ns here: the floor has tests of its own."""
    calls = []
    monkeypatch.setattr(devices, "DEFAULT_FLOOR_NS", 1.0)

    def fn(call):
        calls.append(call)
        x, w = call.args[0]["shape"], call.args[1]["shape"]
        m, k, n = x[0], x[1], w[0]
        return Cost(2.0 * m * n * k, 4.0 * (m * k + n * k + m * n), call.cdtype or "float32", tensor_op=True)

    monkeypatch.setitem(registry._MODELS, "ptestgemm", fn)
    return calls


FLOPS = 2.0 * 64 * 256 * 512
BYTES = 4.0 * (64 * 512 + 256 * 512 + 64 * 256)


def test_split_in_proportion_to_duration_and_exact_totals(model):
    recs = [rec(0, dur=1000, subSeqId=0), rec(1, dur=3000, kernel="ampere_sgemm_64x64_nn", subSeqId=1)]
    df = table.build(recs)
    assert df["flops"].tolist() == pytest.approx([FLOPS / 4, FLOPS * 3 / 4])
    assert df["bytes"].tolist() == pytest.approx([BYTES / 4, BYTES * 3 / 4])
    assert df["flops"].sum() == pytest.approx(FLOPS)
    assert len(model) == 1  # cost computed once per instance


def test_cost_goes_to_the_kernels_that_do_the_work(model):
    """A GEMM's FLOPs and bytes land on its GEMM kernel, not on the split-K reduction or the copy beside
    it, however long those run; the instance's total is unchanged."""
    recs = [rec(0, dur=1000, subSeqId=0), rec(1, dur=3000, kernel="splitKreduce_kernel", subSeqId=1),
            rec(2, dur=500, kernel="elementwise_kernel", subSeqId=2)]
    df = table.build(recs)
    assert df["flops"].tolist() == pytest.approx([FLOPS, 0, 0])
    assert df["bytes"].tolist() == pytest.approx([BYTES, 0, 0])


def test_cpu_records_cost_goes_to_the_computing_aten_op(model):
    """On a CPU trace an instance's rows are aten ops: the GEMM gets the cost, the dispatch wrapper, the
    views and the allocation get none; an op without a computing row splits over its working rows."""
    cpu = dict(device=None, gpu=None)
    recs = [rec(0, kernel="aten::linear", **cpu), rec(1, kernel="aten::t", **cpu),
            rec(2, kernel="aten::addmm", dur=50, **cpu), rec(3, kernel="aten::empty", **cpu),
            rec(4, kernel="aten::copy_", **cpu),
            rec(5, kernel="aten::relu", opid=2, dur=100, **cpu), rec(6, kernel="aten::clamp_min", opid=2, dur=300, **cpu),
            rec(7, kernel="aten::as_strided", opid=2, **cpu)]
    df = table.build(recs)
    assert df["flops"].tolist() == pytest.approx([0, 0, FLOPS, 0, 0, FLOPS / 4, FLOPS * 3 / 4, 0])


def test_split_equally_when_durations_are_zero(model):
    df = table.build([rec(0, dur=0), rec(1, dur=0), rec(2, dur=0)])
    assert df["flops"].tolist() == pytest.approx([FLOPS / 3] * 3)


def test_instances_are_keyed_by_opid_and_dir(model):
    recs = [rec(0, opid=1), rec(1, opid=1, d="bprop"), rec(2, opid=2)]
    df = table.build(recs)
    # three instances, each carrying the whole cost (bprop is another instance of the same opId)
    assert df["flops"].tolist() == pytest.approx([FLOPS, FLOPS, FLOPS])
    assert [c.direction for c in model] == ["fprop", "bprop"]  # opId 2 reuses the fprop cost


def test_cost_computed_once_per_distinct_call(model):
    recs = [rec(i, opid=i) for i in range(500)]
    df = table.build(recs)
    assert len(model) == 1
    assert df.attrs["n_costed"] == 1
    assert (df["flops"] == FLOPS).all()


def test_no_model_is_nan_with_one_warning_listing_share():
    recs = [rec(0, op="ptestunknownop", dur=3000, opid=1), rec(1, op="ptestunknownop", dur=1000, opid=2),
            rec(2, op=None, dur=4000, opid=None)]
    df = table.build(recs)
    assert df["flops"].isna().all() and df["bytes"].isna().all()
    assert df["gap"].isna().all()
    warns = df.attrs["warnings"]
    model_lines = [w for w in warns if "no FLOP/byte model" in w]
    assert len(model_lines) == 1
    assert "ptestunknownop 50.0%" in model_lines[0]
    assert any("carry no op" in w and "50.0%" in w for w in warns)


def test_roofline_ideal_gap_and_bound(model):
    df = table.build([rec(0, dur=10_000)])
    dev = match_gpu(A100)
    # TC=0 (ampere_sgemm is a CUDA-core GEMM): fp32 peak, not TF32
    assert df["tc"][0] == "0"
    ideal = max(FLOPS / dev.flops["fp32"], BYTES / dev.bw) * 1e9
    assert df["ideal"][0] == pytest.approx(ideal)
    assert df["gap"][0] == pytest.approx(10_000 / ideal)
    assert df["bound"][0] == ("compute" if FLOPS / dev.flops["fp32"] > BYTES / dev.bw else "memory")
    assert df["ai"][0] == pytest.approx(FLOPS / BYTES)
    assert df["tflops"][0] == pytest.approx(FLOPS / 10_000 / 1e3)
    assert df["gbps"][0] == pytest.approx(BYTES / 10_000)
    assert "TF32" in df["note"][0]


def test_tensor_core_kernel_uses_tensor_peak(model):
    k = "sm80_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel"
    df = table.build([rec(0, dur=10_000, kernel=k, cdtype="float16")])
    dev = match_gpu(A100)
    assert df["tc"][0] == "1"
    assert df["dtype"][0] == "float16"
    expect = max(FLOPS / dev.flops["fp16_tc"], BYTES / dev.bw) * 1e9
    assert df["ideal"][0] == pytest.approx(expect)


def test_unknown_gpu_gives_na_and_warning(model):
    df = table.build([rec(0, gpu="NVIDIA GeForce RTX 3070 Ti"), rec(1, gpu="NVIDIA GeForce RTX 3070 Ti", opid=2)],
                     calibration={})
    assert not math.isnan(df["flops"][0])
    assert df["ideal"].isna().all() and df["gap"].isna().all()
    lines = [w for w in df.attrs["warnings"] if "no peak" in w]
    assert len(lines) == 1 and "RTX 3070 Ti (2 kernels)" in lines[0]


def test_overrides_and_calibration(model):
    df = table.build([rec(0, dur=10_000, gpu="mystery gpu")], peak_flops=1e12, peak_bw=1e11, calibration={})
    assert df["ideal"][0] == pytest.approx(max(FLOPS / 1e12, BYTES / 1e11) * 1e9)
    cal = {"cpu": Device("cpu", "cpu", {"fp32": 1e11, "tf32_tc": 1e11}, 2e10)}
    df = table.build([rec(0, dur=10_000, gpu=None, device=None)], calibration=cal)
    assert df["ideal"][0] == pytest.approx(max(FLOPS / 1e11, BYTES / 2e10) * 1e9)
    assert df["tc"][0] == "-"  # CPU: no tensor cores


def test_gpu_option_overrides_record_gpu(model):
    df = table.build([rec(0, dur=10_000, gpu="unknown thing")], gpu="H100 SXM", calibration={})
    dev = match_gpu("NVIDIA H100 80GB HBM3")
    assert df["ideal"][0] == pytest.approx(max(FLOPS / dev.flops["fp32"], BYTES / dev.bw) * 1e9)


def test_memcpy_keeps_own_bytes_and_takes_no_share(model):
    recs = [rec(0, dur=1000), dict(rec(1, dur=9000), kind="memcpy", kShortName="memcpy DtoD", bytes=4096),
            dict(rec(2, dur=500), kind="memcpy", kShortName="memcpy HtoD", bytes=100)]
    df = table.build(recs)
    assert df["flops"].tolist()[0] == pytest.approx(FLOPS)  # the kernel keeps the whole op cost
    assert df["bytes"].tolist()[1:] == [2 * 4096, 100]  # DtoD: read and written
    assert all(math.isnan(f) for f in df["flops"].tolist()[1:])  # a copy does no op's arithmetic: n/a
    assert math.isnan(df["ideal"][1]) and math.isnan(df["gap"][1])  # no roofline for copies
    assert math.isnan(df["ideal"][2])  # host copy: bounded by the link, no ideal


def test_params_and_columns(model):
    df = table.build([rec(0)])
    assert df["params"][0] == "input=(64,512),float32;weight=(256,512),float32"
    assert df["module"][0] == "net.fc"
    assert df["idx"][0] == 1
    from pyprof.prof.columns import COLUMNS

    missing = [c.name for c in COLUMNS if c.name not in df.columns]
    assert missing == []


def test_build_accepts_empty_and_generators(model):
    assert len(table.build([])) == 0
    df = table.build(r for r in [rec(0), rec(1, opid=2)])
    assert len(df) == 2


PYPROF_LINES = [
    {"kShortName": "volta_sgemm_128x64_tn", "kDuration": 2000, "layer": [], "trace": ["lm.py:10"], "seqId": [7],
     "altSeqId": [], "subSeqId": 0, "dir": "fprop", "mod": ["torch.nn.functional"], "op": ["ptestgemm"], "tid": 9,
     "device": 0, "stream": 7, "grid": (1, 1, 1), "block": (128, 1, 1), "kLongName": "volta_sgemm_128x64_tn",
     "marker": ["{'mod': 'torch.nn.functional', 'op': 'ptestgemm', 'args': [{'name': '', 'type': 'tensor', "
                "'shape': (64, 512), 'dtype': 'float32'}, {'name': '', 'type': 'tensor', 'shape': (256, 512), "
                "'dtype': 'float32'}]}"], "reprMarkers": [], "seqMarker": []},
    {"kShortName": "reduce_kernel", "kDuration": 2000, "layer": [], "trace": ["lm.py:10"], "seqId": [7],
     "altSeqId": [], "subSeqId": 1, "dir": "fprop", "mod": ["torch.nn.functional"], "op": ["ptestgemm"], "tid": 9,
     "device": 0, "stream": 7, "grid": (1, 1, 1), "block": (128, 1, 1), "kLongName": "reduce_kernel",
     "marker": [], "reprMarkers": [], "seqMarker": []},
    {"kShortName": "volta_sgemm_128x64_nn", "kDuration": 4000, "layer": [], "trace": [], "seqId": [7],
     "altSeqId": [], "subSeqId": 0, "dir": "bprop", "mod": [], "op": [], "tid": 10, "device": 0, "stream": 7,
     "grid": (1, 1, 1), "block": (128, 1, 1), "kLongName": "volta_sgemm_128x64_nn", "marker": [],
     "reprMarkers": [], "seqMarker": ["ptestgemm, seq = 7"]},
]


def test_pyprof_dict_lines(model):
    text = "\n".join(str(r) for r in PYPROF_LINES) + "\n"
    recs = read_records(io.BytesIO(text.encode()))
    df = table.build(recs)
    assert df["op"].tolist() == ["ptestgemm"] * 3  # bprop took the fprop op through seqId 7
    assert df["mod"][0] == "torch.nn.functional"
    assert df["params"][0] == "T=(64,512),float32;T=(256,512),float32"
    # no opId: kernels 1-2 (sub 0, 1) are one instance, whose cost goes to its GEMM kernel and not to
    # its reduction; the bprop kernel is another instance
    assert df["flops"].tolist() == pytest.approx([FLOPS, 0, FLOPS])
    assert df["grid"][0] == [1, 1, 1]
    assert np.isnan(df["start"][0]) if isinstance(df["start"][0], float) else df["start"][0] is None


def test_odd_list_fields_do_not_break_sharing(model):
    # lists that are not lists of scalars (not what parse writes) keep their own identity
    df = table.build([rec(0, trace=[["a", 1]], grid=[1, 1, 1]), rec(1, opid=2, trace=[["a", 1]])])
    assert df["trace"].tolist() == [[["a", 1]], [["a", 1]]]
    assert df["grid"][0] == [1, 1, 1]


def test_non_numeric_duration_is_an_input_error(model):
    from pyprof.errors import InputError

    with pytest.raises(InputError, match="kDuration"):
        table.build([rec(0, dur="12 ns")])


def test_large_opids_are_kept_apart(model):
    big = 2**60
    df = table.build([rec(0, opid=big), rec(1, opid=big + 1)])
    assert df["flops"].tolist() == pytest.approx([FLOPS, FLOPS])  # two instances, not one split in two


def test_build_file_in_parallel_equals_sequential(model, tmp_path, monkeypatch):
    import orjson

    path = tmp_path / "net.dict"
    recs = [rec(i, opid=i // 3, dur=100 + i, subSeqId=i % 3, kernel=f"k{i % 7}") for i in range(3000)]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    monkeypatch.setattr(table, "PARALLEL_MIN_BYTES", 0)
    used = []
    parallel = table._parallel_columns
    monkeypatch.setattr(table, "_parallel_columns", lambda *a: used.append(parallel(*a)) or used[-1])
    with process.owning():  # forks only where pyprof owns the process (as `pyprof prof` does)
        par = table.build_file(path, workers=2)
    assert used and used[0] is not None  # the file was decoded by the worker processes
    seq = table.build(recs)
    assert par.equals(seq)
    assert par["flops"].sum() == pytest.approx(FLOPS * 1000)


def test_build_file_bad_line_reports_its_number(model, tmp_path, monkeypatch):
    import orjson

    from pyprof.errors import InputError

    lines = [orjson.dumps(rec(i, opid=i)) for i in range(2000)]
    lines[1500] = b'{"kShortName": "k", "kDuration": 1'
    path = tmp_path / "bad.dict"
    path.write_bytes(b"\n".join(lines) + b"\n")
    monkeypatch.setattr(table, "PARALLEL_MIN_BYTES", 0)
    with process.owning(), pytest.raises(InputError, match="line 1501"):
        table.build_file(path, workers=2)


def test_argless_ops_are_costed_once(monkeypatch):
    calls = []
    monkeypatch.setitem(registry._MODELS, "ptestnoargs", lambda c: calls.append(c) or Cost(1.0, 8.0, "float32"))
    df = table.build([rec(i, op="ptestnoargs", opid=i, args=[]) for i in range(50)])
    assert len(calls) == 1 and (df["flops"] == 1.0).all()


def test_modelled_op_with_unpriceable_args_is_told_apart_from_no_model():
    # contiguous has a model, but without the "contig" flag (legacy PyProf args) it cannot tell whether the
    # op copied: n/a, and a warning of its own that does not claim the model is missing.
    legacy = [{"name": "", "type": "tensor", "shape": [35, 20, 200], "dtype": "float32"}]
    recs = [rec(0, op="contiguous", mod="Tensor", args=legacy, dur=1000, opid=1),
            rec(1, op="ptestunknownop", dur=3000, opid=2)]
    df = table.build(recs)
    assert df["flops"].isna().all()
    warns = df.attrs["warnings"]
    assert any("no FLOP/byte model for 1 op(s)" in w and "ptestunknownop 75.0%" in w for w in warns)
    priced = [w for w in warns if "have a FLOP/byte model but arguments it cannot price" in w]
    assert len(priced) == 1 and "contiguous 25.0%" in priced[0]
    assert not any("no FLOP/byte model" in w and "contiguous" in w for w in warns)


def _reference_instances(raw, n, is_kernel):
    """The per-instance loop that _instances replaced: params, dtype and cost per instance."""
    from pyprof.prof.params import first_dtype, render

    inst = table._instances(raw, n, is_kernel)  # instance ids are not what is checked here
    first = inst["first"].tolist()
    cache, renders, out = {}, {}, []
    for i in first:
        o, args, cd, mod, d = raw["op"][i], raw["args"][i], raw["cdtype"][i], raw["mod"][i], raw["dir"][i]
        if o is None or not is_kernel[i]:
            info = (None, "", None)
            if args:
                if id(args) not in renders:
                    renders[id(args)] = (None, render(args), cd or first_dtype(args))
                info = renders[id(args)]
        else:
            key = (o, mod, d, cd, id(args))
            if key not in cache:
                cost = table._estimate(o, mod, d, cd, args)[0]
                cache[key] = (cost, render(args), (cost.dtype if cost and cost.dtype else None) or cd
                              or first_dtype(args))
            info = cache[key]
        out.append(info)
    return inst, out, len(cache)


def test_instances_match_a_loop_over_instances(model):
    import random

    rng = random.Random(7)
    shapes = [[64, 512], [32, 512], [64, 256]]
    recs = []
    for i in range(400):
        args = [{"name": "input", "type": "tensor", "shape": rng.choice(shapes), "dtype": rng.choice(["float32",
                                                                                                   "float16"])},
                {"name": "weight", "type": "tensor", "shape": [256, 512], "dtype": "float32"}]
        recs.append(rec(i, op=rng.choice(["ptestgemm", "relu", None, "ptestunknownop"]), opid=rng.choice([None, i // 3]),
                        d=rng.choice(["fprop", "bprop"]), cdtype=rng.choice([None, "bfloat16"]), args=args,
                        kind=rng.choice(["kernel", "kernel", "memcpy"]), subSeqId=rng.choice([0, 1])))
    raw = record_columns(recs)
    raw["dir"] = table._obj(["" if v is None else v for v in raw["dir"].tolist()])
    is_kernel = np.array([k in (None, "kernel") for k in raw["kind"].tolist()])
    inst, expected, n_costed = _reference_instances(raw, len(recs), is_kernel)
    key = inst["key"]
    assert inst["n_costed"] == n_costed
    assert inst["params"][key].tolist() == [e[1] for e in expected]
    assert inst["dtype"][key].tolist() == [e[2] for e in expected]
    flops = [e[0].flops if e[0] is not None and e[0].flops is not None else math.nan for e in expected]
    assert np.array_equal(inst["flops"][key], np.array(flops, dtype=float), equal_nan=True)


def test_a_kernel_faster_than_the_roofline_is_flagged(model):
    """Achieved FLOP/s above the peak is impossible: the kernel gets a note and the build one warning."""
    df = table.build([rec(0, dur=1000), rec(1, opid=2, dur=10**9)], peak_flops=1e9, peak_bw=1e15)
    assert df["gap"][0] < 1 and table.BEYOND_NOTE in df["note"][0] and bool(df["beyond"][0])
    assert df["gap"][1] > 1 and table.BEYOND_NOTE not in (df["note"][1] or "")
    assert sum("faster than the roofline" in w for w in df.attrs["warnings"]) == 1


def test_latency_floor_prices_tiny_kernels_at_the_floor(model, monkeypatch):
    """A kernel whose roofline time is below the device's floor (launch, dispatch) is latency-bound: its
    ideal is the floor, or its own time where it took less, so no tiny op shows a gap of 10^4; it is not
    'faster than the roofline'."""
    monkeypatch.setattr(devices, "DEFAULT_FLOOR_NS", 2000.0)
    df = table.build([rec(0, dur=6000), rec(1, dur=1500, opid=2)])
    assert df["bound"].tolist() == ["latency", "latency"]  # roof 860 ns < 2 us
    assert df["ideal"].tolist() == [2000.0, 1500.0]
    assert df["gap"].tolist() == [3.0, 1.0]
    assert not any("faster than the roofline" in w for w in df.attrs["warnings"])


def test_a_kernel_of_no_work_is_latency_bound_without_a_gap(model, monkeypatch):
    """A kernel whose op does no work (0 FLOPs, 0 bytes: a compiled region's or a wrapper's own time) is
    all overhead: latency-bound, with no ideal, excess or gap (it has no roofline to be a multiple of;
    before, a wrapper's milliseconds over a 1 us floor read as a gap of 2,000); the latency line counts it."""
    from pyprof.prof import summary as summary_mod

    monkeypatch.setattr(devices, "DEFAULT_FLOOR_NS", 1000.0)
    monkeypatch.setitem(registry._MODELS, "ptestnothing", lambda call: Cost(0.0, 0.0, "float32"))
    df = table.build([rec(0, op="ptestnothing", dur=2_000_000), rec(1, dur=1500, opid=2)])
    assert df["bound"].tolist() == ["latency", "latency"] and df["flops"][0] == 0 and df["bytes"][0] == 0
    assert math.isnan(df["ideal"][0]) and math.isnan(df["gap"][0]) and df["gap"][1] == 1.5
    s = summary_mod.summarize(df, "op").set_index("key")
    assert math.isnan(s.loc["ptestnothing", "gap"]) and s.loc["ptestnothing", "bound"] == "latency"
    assert s.loc["ptestnothing", "latency"] == 2_000_000  # in the latency line's time


def test_calibrated_cache_levels_raise_the_bandwidth_roof_of_small_working_sets(model):
    """A CPU op whose bytes fit a calibrated cache level is priced against that level's bandwidth, the
    largest calibrated size no larger than its working set (DRAM's for larger ones)."""
    cal = {"cpu": Device("cpu", "cpu", {"fp32": 1e15}, 1e10, floor=1.0, bw_levels=((1e4, 1e11), (1e9, 5e10)))}
    df = table.build([rec(0, dur=10**7, gpu=None, device=None)], calibration=cal)
    assert df["ideal"][0] == pytest.approx(BYTES / 1e11 * 1e9)  # BYTES (about 0.7 MB) is over 1e4, under 1e9
    assert df["bound"][0] == "memory"
