"""``torch.compile`` (Inductor) under ``pyprof.init()`` and ``pyprof run``: what each generated kernel came
from is recorded as it is compiled (pyprof.annotate.inductor) without changing what is compiled or
computed, and joined at parse, so compiled models' FLOPs per direction and per module equal torch's.
"""

from __future__ import annotations

import math
import types

import pytest

torch = pytest.importorskip("torch")

import pyprof  # noqa: E402
from pyprof.annotate import inductor  # noqa: E402
from pyprof.parse.kineto import inductor as inductor_parse  # noqa: E402
from pyprof.validate import harness  # noqa: E402

pytestmark = pytest.mark.torch
from torch._inductor import config as _inductor_config  # noqa: E402

HAS_PROVENANCE = hasattr(getattr(_inductor_config, "trace", None), "provenance_tracking_level")


def _compile_and_run(seed: int = 0):
    """(Dynamo's counters, the outputs and gradients) of a small model compiled with Inductor."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    out = torch.compile(model)(x)
    out.sum().backward()
    got = {k: dict(v) for k, v in counters.items() if k in ("stats", "graph_break", "recompiles") and v}
    return got, [out.detach(), *(p.grad for p in model.parameters())]


def test_inductor_compiles_the_same_graphs_and_results_under_init_and_deinit_restores():
    from torch._inductor import config
    from torch._inductor.codegen import wrapper as wrapper_module
    from torch._inductor.graph import GraphLowering

    wrapper = getattr(wrapper_module, "PythonWrapperCodegen", None) or wrapper_module.WrapperCodeGen

    def settings():  # (torch 2.4-2.7 has no provenance tracking level)
        return (getattr(config.trace, "provenance_tracking_level", None), getattr(config, "force_disable_caches", None),
                GraphLowering.codegen, config.cpp.enable_kernel_profile, wrapper.generate_kernel_call)

    before = settings()
    plain_counts, plain = _compile_and_run()
    pyprof.init()
    try:
        assert config.cpp.enable_kernel_profile is True  # (each C++ kernel a profiler range of its own)
        counts, outs = _compile_and_run()
        graphs = list(inductor.GRAPHS)
    finally:
        pyprof.deinit()
    assert counts == plain_counts and counts["stats"].get("unique_graphs") == 1
    assert all(torch.equal(a, b) for a, b in zip(outs, plain, strict=True))
    assert settings() == before
    if HAS_PROVENANCE:  # a forward and a backward graph, the GEMMs as extern calls of their modules
        assert [g["backward"] for g in graphs] == [False, True]
        layers = {tuple(k["layer"]) for g in graphs for k in g["kernels"] if k["ops"] in (["addmm"], ["mm"])}
        assert layers == {("0",), ("2",)}
        # each generated kernel's tensors, as compiled: the forward's ReLU writes the [5, 16] activation
        fused = [k for g in graphs for k in g["kernels"] if k["name"].startswith("cpp_")]
        assert fused and all(k["bytes"] == sum(4 * math.prod(sh) for sh, dt, _ in k["tensors"]) for k in fused)
        assert all(dt == "float32" and acc in ("r", "w") for k in fused for _, dt, acc in k["tensors"])
        relu = [k for k in graphs[0]["kernels"] if "relu" in k["ops"]]
        assert len(relu) == 1 and [[5, 16], "float32", "w"] in relu[0]["tensors"]


def test_without_provenance_tracking_nothing_is_patched():
    """A torch whose Inductor has no provenance tracking (2.4-2.7): install() changes nothing and says why;
    parse then names fused kernels from their names (tests/test_compiled_kernels.py)."""
    inductor.uninstall()
    old = types.SimpleNamespace(trace=types.SimpleNamespace(enabled=False), force_disable_caches=False)
    graph_module = types.SimpleNamespace(GraphLowering=type("GraphLowering", (), {"codegen": lambda self: 1}))
    codegen = graph_module.GraphLowering.codegen
    inductor._installed[0] = True
    try:
        inductor._configure(old)
        inductor._wrap(graph_module)
        assert inductor.STATE["status"].startswith("unavailable")
        assert graph_module.GraphLowering.codegen is codegen and old.force_disable_caches is False
        assert "level" not in inductor._saved and "codegen" not in inductor._saved
    finally:
        inductor.uninstall()


@pytest.mark.parametrize("name", ["attn_compiled"])  # (scripts/validate.py also runs mlp_ and cnn_compiled)
def test_compiled_models_flops_per_direction_and_module_equal_torchs(name, tmp_path):
    if not HAS_PROVENANCE:
        pytest.skip("this torch's Inductor has no provenance tracking: modules of compiled kernels unknown")
    o = harness.validate(name, steps=1, workdir=tmp_path)
    assert not o.error, o.error
    assert not o.mismatches(), harness.table([o])
    modules = {m for (_, m, _) in o.torch}
    assert len(modules) > 2 and modules == {m for (_, m, _) in o.pyprof}
    df = o.frame
    compiled = df["layer"].map(lambda lay: bool(lay) and lay[0] == "OptimizedModule").astype(bool)
    work = df[compiled & (df["kind"] == "kernel") & df["flops"].notna() & (df["flops"] > 0)]
    assert set(work["op"]) >= {"addmm", "mm"} and set(work["dir"]) == {"fprop", "bprop"}
    # the linear layers' GEMMs sit in their modules (qkv, proj, fc); attention in the block's own code
    gemm = work[work["op"].isin(["addmm", "mm"])]
    assert {lay[-1] for lay in gemm["layer"]} == {"qkv", "proj", "fc"}
    assert {tuple(lay) for lay in work[~work["op"].isin(["addmm", "mm"])]["layer"]} == {("OptimizedModule",)}
    # the C++ kernels are records of their own, named by their origin ops, in the modules they came from
    fused = df[compiled & (df["mod"] == "inductor")]
    assert len(fused) and all(k.startswith("graph_") and "_cpp_fused_" in k for k in fused["kernel"])
    assert {"ln", "fc"} <= {lay[-1] for lay in fused["layer"]} and set(fused["dir"]) == {"fprop", "bprop"}
    assert all(op.startswith("fused:") and op != "fused:" + inductor_parse.kernel_name(k)
               for op, k in zip(fused["op"], fused["kernel"], strict=True))
    assert o.attributed is not None


@pytest.mark.parametrize("source,path", [
    ("L['self'].fc1", "fc1"),
    ("L['self'].layers[0].attn", "layers.0.attn"),
    ("L['self']._modules['net']._modules['0']", "net.0"),
    ("L['self'].blocks['enc'].mlp", "blocks.enc.mlp"),
    ("L['self']", ""),
    ("L['model'].fc", "fc"),  # a compiled function's module argument: the path below it
])
def test_dynamo_module_sources_become_module_paths(source, path):
    assert inductor.normalize_path(source) == path
