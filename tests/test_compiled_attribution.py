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
from scripts.validation import harness  # noqa: E402

pytestmark = pytest.mark.torch



def _compile_and_run(seed: int = 0):
    """(Dynamo's counters, the outputs and gradients) of a small model compiled with Inductor: two
    convolutions (Inductor copies their inputs to channels-last in a kernel of its own) and a linear layer."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.Conv2d(4, 4, 3),
                                torch.nn.Flatten(), torch.nn.Linear(64, 4))
    x = torch.randn(2, 3, 8, 8)
    out = torch.compile(model)(x)
    out.sum().backward()
    got = {k: dict(v) for k, v in counters.items() if k in ("stats", "graph_break", "recompiles") and v}
    return got, [out.detach(), *(p.grad for p in model.parameters())]


def _patched():
    """Every Inductor method pyprof may wrap, as it is now (torch 2.4-2.7 lack some: None)."""
    import importlib

    from torch._inductor.codegen import wrapper as wrapper_module
    from torch._inductor.graph import GraphLowering
    from torch._inductor.scheduler import Scheduler

    wrapper = getattr(wrapper_module, "PythonWrapperCodegen", None) or wrapper_module.WrapperCodeGen
    definers = []
    for module, cls, _attr in inductor._DEFINERS.values():
        try:
            definers.append(vars(getattr(importlib.import_module(module), cls)).get("define_kernel"))
        except ImportError:
            definers.append(None)
    return [GraphLowering.codegen, wrapper.generate_kernel_call, Scheduler.codegen_extern_call, *definers]


def test_inductor_compiles_the_same_graphs_and_results_under_init_and_deinit_restores():
    from torch._inductor import config

    def settings():  # (torch 2.4-2.7 has no provenance tracking level)
        return (getattr(config.trace, "provenance_tracking_level", None), getattr(config, "force_disable_caches", None),
                config.cpp.enable_kernel_profile, *_patched())

    before = settings()
    plain_counts, plain = _compile_and_run()
    pyprof.init()
    try:
        assert config.cpp.enable_kernel_profile is True  # (each C++ kernel a profiler range of its own)
        counts, outs = _compile_and_run()
        graphs = list(inductor.GRAPHS)
        status = inductor.STATE["status"]
    finally:
        pyprof.deinit()
    assert counts == plain_counts and counts["stats"].get("unique_graphs") == 1
    assert all(torch.equal(a, b) for a, b in zip(outs, plain, strict=True))
    assert settings() == before
    assert status.startswith("on"), status
    # a forward and a backward graph (every torch: provenance tracking, or the scheduler's kernels)
    assert [g["backward"] for g in graphs] == [False, True]
    layers = {tuple(k["layer"]) for g in graphs for k in g["kernels"] if k["ops"] in (["addmm"], ["mm"])}
    assert layers == {("4",)}
    conv = {tuple(k["layer"]) for g in graphs for k in g["kernels"] if k["ops"][:1] == ["convolution"]}
    assert conv == {("0",), ("2",)}
    # the kernel copying the convolutions' inputs to channels-last: a copy for both convolutions
    copies = [k for k in graphs[0]["kernels"] if k["ops"] == ["copy"]]
    assert copies and {"0", "2"} <= set(copies[0]["modules"])
    assert [n["name"] for n in copies[0]["nodes"]] == ["inputs"]  # (what prof prices as no FLOPs, not n/a)
    assert all(k["ops"] for g in graphs for k in g["kernels"]), graphs
    # each generated kernel's tensors, as compiled: the forward's ReLU writes the [2, 4, 6, 6] activation
    fused = [k for g in graphs for k in g["kernels"] if k["name"].startswith("cpp_")]
    # (a buffer updated in place, ``rw``, is read and written: its bytes count twice)
    assert fused and all(k["bytes"] == sum(4 * math.prod(sh) * len(acc) for sh, dt, acc in k["tensors"])
                         for k in fused)
    assert all(dt == "float32" and acc in ("r", "w", "rw") for k in fused for _, dt, acc in k["tensors"])
    relu = [k for k in graphs[0]["kernels"] if "relu" in k["ops"]]
    assert len(relu) == 1 and [[2, 4, 6, 6], "float32"] in [t[:2] for t in relu[0]["tensors"]]
    # and its origin node as the call prof prices (pyprof.prof.ops.fused): relu of the convolution's output
    assert {"name": "aten::relu.default", "type": "op",
            "items": [{"type": "tensor", "shape": [2, 4, 6, 6], "dtype": "float32"}]} in relu[0]["nodes"]


def test_without_provenance_tracking_the_schedulers_kernels_are_read():
    """A torch whose Inductor has no provenance tracking (2.4-2.7) but can bypass its caches: install()
    wraps code generation and says that kernel origins come from the scheduler; one that cannot bypass
    the caches (a graph loaded from them generates no code to read) changes nothing and says why."""
    inductor.uninstall()
    for cfg, wrapped in ((types.SimpleNamespace(trace=types.SimpleNamespace(enabled=False), force_disable_caches=False),
                          True),
                         (types.SimpleNamespace(trace=types.SimpleNamespace(enabled=False)), False)):
        graph_module = types.SimpleNamespace(GraphLowering=type("GraphLowering", (), {"codegen": lambda self: 1}))
        codegen = graph_module.GraphLowering.codegen
        inductor._installed[0] = True
        try:
            inductor._configure(cfg)
            inductor._wrap(graph_module)
            status = inductor.STATE["status"]
            assert "level" not in inductor._saved
            assert (graph_module.GraphLowering.codegen is not codegen) is wrapped
            assert getattr(cfg, "force_disable_caches", True) is True
            assert status.startswith("on: kernel origins from Inductor's scheduler") if wrapped \
                else status.startswith("unavailable"), status
        finally:
            if wrapped:
                inductor._saved.pop("codegen")
                graph_module.GraphLowering.codegen = codegen
            inductor._saved.pop("caches", None)
            inductor.uninstall()


@pytest.mark.parametrize("name", ["attn_compiled"])  # (scripts/validate.py also runs mlp_ and cnn_compiled)
def test_compiled_models_flops_per_direction_and_module_equal_torchs(name, tmp_path):
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
    extern = work[(work["mod"] != "inductor") & ~work["op"].isin(["addmm", "mm"])]
    assert {tuple(lay) for lay in extern["layer"]} == {("OptimizedModule",)}
    # the C++ kernels are records of their own, named by their origin ops, in the modules they came from,
    # each priced from its origin ops and buffers (tests/test_compiled_fused_cost.py)
    fused = df[compiled & (df["mod"] == "inductor")]
    assert fused["flops"].notna().all() and fused["bytes"].notna().all() and (fused["bytes"] > 0).all()
    assert len(fused) and all(k.startswith("graph_") and "_cpp_fused_" in k for k in fused["kernel"])
    assert {"ln", "fc"} <= {lay[-1] for lay in fused["layer"]} and set(fused["dir"]) == {"fprop", "bprop"}
    assert all(op.startswith("fused:") and op != "fused:" + inductor_parse.kernel_name(k)
               for op, k in zip(fused["op"], fused["kernel"], strict=True))
    joined, named, _own = o.attributed  # (kernel time joined to Inductor's record, with a module and an op)
    assert named >= 0.95 and joined <= named


@pytest.mark.parametrize("source,path", [
    ("L['self'].fc1", "fc1"),
    ("L['self'].layers[0].attn", "layers.0.attn"),
    ("L['self']._modules['net']._modules['0']", "net.0"),
    ("L['self'].blocks['enc'].mlp", "blocks.enc.mlp"),
    ("L['self']", ""),
    ("L['model'].fc", "fc"),  # a compiled function's module argument: the path below it
    ("getattr(L['fn'], '0')", "0"),  # torch 2.4's source of a Sequential's child
    ("getattr(getattr(L['self'], 'layers'), '0')", "layers.0"),
    ("getattr(L['self'].layers, '1').fc", "layers.1.fc"),
])
def test_dynamo_module_sources_become_module_paths(source, path):
    assert inductor.normalize_path(source) == path
