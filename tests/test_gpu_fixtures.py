"""pyprof on traces an NVIDIA H200 recorded under ``pyprof run`` (tests/fixtures/gpu/README.md): the CUDA
path of parse and prof, checked without a GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from pyprof.parse.kineto import KinetoSource
from pyprof.prof import build_file
from pyprof.records import write_records

GPU = Path(__file__).parent / "fixtures" / "gpu"


def priced(name: str, tmp_path: Path):
    """The prof table of fixture ``name``, parsed and priced as ``pyprof parse`` then ``pyprof prof``."""
    records = tmp_path / f"{name}.dict"
    with open(records, "wb") as fh:
        write_records(KinetoSource(GPU / f"{name}.trace.json.gz").records(), fh)
    return build_file(records, workers=1)


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    return priced("h200_lenet", tmp_path_factory.mktemp("lenet"))


def test_every_lenet_kernel_has_an_op_a_direction_and_its_launch(lenet):
    kern = lenet[(lenet["kind"] == "kernel") & lenet["device"].notna()]
    assert len(kern) > 100
    assert kern["op"].notna().all() and kern["dir"].isin(["fprop", "bprop", "optim"]).all()
    assert kern["grid"].notna().all() and kern["block"].notna().all() and kern["stream"].notna().all()
    assert set(kern["dir"]) == {"fprop", "bprop", "optim"}


def test_lenet_backward_kernels_carry_their_forward_layer(lenet):
    kern = lenet[(lenet["kind"] == "kernel") & lenet["device"].notna()]
    for op in ("conv2d", "linear"):
        fwd = {tuple(x) for x in kern.loc[(kern["op"] == op) & (kern["dir"] == "fprop"), "layer"]}
        bwd = {tuple(x) for x in kern.loc[(kern["op"] == op) & (kern["dir"] == "bprop"), "layer"]}
        assert bwd and bwd == fwd  # conv1, conv2 / fc1, fc2, fc3, each under LeNet


def test_lenet_fp32_gemms_without_tf32_say_so(lenet):
    kern = lenet[(lenet["kind"] == "kernel") & lenet["device"].notna()]
    ffma = kern[kern["longkernel"].str.contains("_ffma_")]
    assert len(ffma) and (ffma["tc"] == "0").all()
    assert ffma["note"].str.startswith("fp32 without TF32").all()
    # cuDNN's TF32 (its default) weight-gradient kernels do use tensor cores
    tf32 = kern[kern["longkernel"].str.contains("tf32")]
    assert (tf32["tc"] == "1").all()


def test_recomputed_ops_on_the_autograd_thread_do_not_steal_backward_links(tmp_path):
    # A checkpointed block re-runs its forward on the CUDA autograd thread, whose sequence numbers
    # start again: the recomputed `transpose` of layers.0 has the number of layers.0's original
    # attention. Each attention backward kernel must still find the attention, on the main thread.
    df = priced("h200_ckpt_llama_fp32", tmp_path)
    kern = df[(df["kind"] == "kernel") & df["device"].notna()]
    bwd = kern[kern["longkernel"].str.startswith("fmha_cutlassB") & (kern["dir"] == "bprop")]
    assert len(bwd) == 4  # 2 layers x 2 steps
    assert (bwd["op"] == "scaled_dot_product_attention").all()
    assert sorted(tuple(x)[1] for x in bwd["layer"]) == ["layers.0", "layers.0", "layers.1", "layers.1"]
    # and the attention's backward FLOPs are FlopCounterMode's: 5 GEMMs of the recorded shapes
    # (2.5x the forward's 2 GEMMs), causal so halved; q, k, v are (2, 4, 32, 16)
    b, h, s, d = 2, 4, 32, 16
    per_call = 5 * 2 * b * h * s * s * d / 2
    sdpa = kern[(kern["op"] == "scaled_dot_product_attention") & (kern["dir"] == "bprop")]
    assert sdpa["flops"].sum() == pytest.approx(4 * per_call, rel=1e-9)


@pytest.mark.torch
def test_ckpt_llama_on_the_h200_matches_flopcountermode_per_direction_and_module(tmp_path):
    # the same model and seed on the CPU: FlopCounterMode's count depends only on the shapes
    pytest.importorskip("torch")
    from scripts.validation import harness, reference, zoo

    mine = harness.pyprof_flops(priced("h200_ckpt_llama_fp32", tmp_path), "CheckpointedLlama")
    model, x = zoo.build("checkpoint_llama")
    ref = {k: v * 2 for k, v in reference.count_step(zoo.CASES["checkpoint_llama"], model, x).items()}  # 2 steps
    assert len(ref) > 50 and {d for d, _, _ in ref} == {"fprop", "bprop", "recomp"}
    assert set(mine) == set(ref)
    assert {k: mine[k] for k in ref} == pytest.approx(ref, rel=0.01)
