"""``pyprof advise`` on a script written as a user writes one (scripts/validation/gpt_user.py: a GPT
with hand-written attention, a for-loop AdamW, a 7-layer MLP beside it), profiled for real: the
ranking issue 40 saw, and the kinds that cover what it sees on the CPU (attention, bf16 where the CPU
has native bf16, compile for op-dense modules, the copies the CPU findings flag)."""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from pyprof import advise as adv
from pyprof.advise import attention, copies, dense, gemm
from pyprof.advise.common import Advice
from pyprof.cli.main import cli
from pyprof.prof.devices import Device
from pyprof.report import profile

pytestmark = pytest.mark.torch
GPT_USER = Path(__file__).parent.parent / "scripts" / "validation" / "gpt_user.py"
FP32 = 1e11


def cpu(bf16_ratio: float) -> dict:
    """A calibration whose CPU runs bf16 GEMMs at ``bf16_ratio`` times its fp32 peak."""
    flops = {"fp32": FP32, "tf32_tc": FP32, "bf16": bf16_ratio * FP32, "bf16_tc": bf16_ratio * FP32}
    return {"cpu": Device("cpu", "cpu", flops, 2e10, "test", "calibrated")}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pytest.importorskip("torch")
    from pyprof.cli.main import main

    out = tmp_path_factory.mktemp("gpt") / "out"
    try:
        main(["run", "--no-calibrate", "-o", str(out), str(GPT_USER), "--steps", "7", "--threads", "1"])
    except SystemExit as exc:
        assert exc.code in (0, None)
    return out


@pytest.fixture(scope="module")
def result(run):
    from pyprof.advise.spans import read_spans

    p = profile.load(run / "records.dict", peak_flops=None)
    p = profile.from_records(p.records, env=p.env, calibration=cpu(2.5))
    return p, adv.advise(p, read_spans(run / "trace.json"))


def test_the_top_item_is_no_sub_percent_item_and_the_ranking_holds(result):
    p, res = result
    assert res.wall and res.steps == 5 and res.items  # pyprof run profiles 5 steps (--active)
    shares = [adv.size(a) / res.step_s for a in res.items]
    assert min(shares) >= adv.MIN_SHARE
    est = [a for a in res.items if a.saved_s is not None]
    assert res.items[:len(est)] == est  # estimated first
    assert [a.saved_s for a in est] == sorted((a.saved_s for a in est), reverse=True)
    rest = res.items[len(est):]
    assert [a.now_s for a in rest] == sorted((a.now_s for a in rest), reverse=True)
    assert res.items[0].kind in ("bf16", "attention", "optim")  # what this step's time goes to


def found(p, kind: str) -> Advice:
    """The advice of ``kind`` before the 1% filter (how much of a step a kind covers depends on the load)."""
    rule = {"attention": attention.attention, "compile": dense.dense, "copies": copies.copies}[kind]
    return rule(adv.context(p))


def test_hand_written_attention_saves_what_runs_between_its_matmuls(result):
    p, res = result
    a = found(p, "attention")
    df = p.df
    attn = df["layer"].map(lambda layer: bool(layer) and layer[-1].endswith(".attn"))
    matmuls = float(df.loc[attn & (df["op"] == "__matmul__"), "sil"].sum()) / adv.context(p).per_step / 1e9
    assert a.now_s - a.saved_s == pytest.approx(matmuls, rel=1e-9)  # the matmuls keep their time
    assert 0 < a.saved_s < a.now_s
    assert sorted(e.split(" in ")[1].split(" @")[0] for e in a.evidence) == ["blocks.0.attn", "blocks.1.attn"]
    assert all("scores [8, 4, 64, 64]" in e for e in a.evidence)


def test_sdpa_and_a_lone_softmax_are_no_hand_written_attention(result):
    p, _ = result
    recs = [r for r in p.records if (r.get("layer") or [""])[-1] == "blocks.0.attn" and r.get("op") == "softmax"]
    sdpa = copy.deepcopy([r for r in p.records if r.get("op") in ("__matmul__", "softmax", "masked_fill")])
    for r in sdpa:
        if r["op"] == "softmax":
            r["args"][0]["shape"] = [8, 4, 64, 65]  # not the scores' shape: no chain
    assert recs and not [a for a in adv.advise(profile.from_records(sdpa, calibration=cpu(1))).items
                         if a.kind == "attention"]


def test_bf16_on_a_cpu_follows_the_formula_and_needs_native_bf16(result):
    p, _ = result
    rec = copy.deepcopy(next(r for r in p.records if r.get("op") == "linear" and r.get("dir") == "fprop"
                             and r.get("aten") == "aten::addmm"))
    n = 2048
    rec["args"] = [{"name": "input", "type": "tensor", "shape": [n, n], "dtype": "float32", "device": "cpu"},
                   {"name": "weight", "type": "tensor", "shape": [n, n], "dtype": "float32", "device": "cpu"},
                   {"name": "bias", "type": "tensor", "shape": [n], "dtype": "float32", "device": "cpu"}]
    rec["atenSizes"] = [[n], [n, n], [n, n], [], []]
    rec["kDuration"] = t = 400_000_000  # 0.4 s: gap 2, compute-bound
    rec["end"] = rec["start"] + t
    q = profile.from_records([rec], calibration=cpu(2.5))
    row = q.df.iloc[0]
    assert row["flops"] == pytest.approx(2 * n**3, rel=1e-3)
    now, new = row["flops"] / FP32, max(row["flops"] / (2.5 * FP32), row["bytes"] / 2 / 2e10)
    got = next(a for a in adv.advise(q).items if a.kind == "bf16")
    # on a CPU the number is withdrawn (measured: docs/advise.md), the model's figure kept beside it
    assert got.saved_s is None and got.no_estimate == gemm.CPU_WITHDRAWN
    assert got.model_s == pytest.approx((t - t * new / now) / 1e9, rel=1e-6)
    assert not [a for a in adv.advise(profile.from_records([rec], calibration=cpu(1.2))).items if a.kind == "bf16"]


def test_op_dense_modules_get_compile_advice_and_copies_match_the_findings(result):
    from pyprof.cpu_findings import reorder_finding

    p, _ = result
    comp = found(p, "compile")
    assert comp.saved_s is None and comp.no_estimate and "attn" in comp.evidence[0]
    made = found(p, "copies")
    assert made.saved_s is None
    conv = sum(r["kDuration"] for r in p.records if str(r.get("op") or "").startswith("conv"))
    assert conv == 0
    assert made.now_s == pytest.approx(reorder_finding(p.records).numbers["ns"] / adv.context(p).per_step / 1e9, rel=1e-9)


def test_the_command_ranks_and_hides_alike_in_text_and_json(run):
    text = CliRunner().invoke(cli, ["advise", "-q", str(run)]).output
    items = orjson.loads(CliRunner().invoke(cli, ["advise", "--json", "-q", str(run)]).stdout)
    kinds = [line.split("]")[0].split("[")[1] for line in text.splitlines() if line[:1].isdigit()]
    assert kinds == [a["kind"] for a in items] and kinds


def test_an_unestimated_item_is_hidden_by_the_time_it_covers():
    a = Advice("fuse", None, "c", "f", now_s=0.004, model_s=49e-6)
    assert adv.size(a) == 0.004 and adv.size(Advice("tf32", 0.001, "c", "f", now_s=0.5)) == 0.001


def test_cpu_convolutions_of_nchw_inputs_get_layout_advice_without_an_estimate(result):
    p, _ = result
    base = next(r for r in p.records if r.get("op") == "linear" and r.get("dir") == "fprop")
    recs = []
    for i, contig in enumerate((True, False)):  # NCHW, then a channels_last input (not contiguous)
        r = copy.deepcopy(base)
        r.update(op="conv2d", aten="aten::conv2d", kShortName="aten::conv2d", kDuration=1_000_000 * (i + 1),
                 args=[{"name": "input", "type": "tensor", "shape": [8, 16, 32, 32], "dtype": "float32",
                        "device": "cpu", "contig": contig}])
        r["end"] = r["start"] + r["kDuration"]
        recs.append(r)
    got = next(a for a in adv.advise(profile.from_records(recs, calibration=cpu(1))).items if a.kind == "layout")
    assert got.saved_s is None and got.no_estimate and got.kernels == 1 and got.now_s == pytest.approx(1e-3)
