"""pyprof's FLOPs, computed from the markers the models emit, agree with torch's FlopCounterMode.

For ResNet-50, ViT-B/16 and a 6-layer GPT-style decoder (tests/zoo.py), forward and backward, the
FLOPs per module (inclusive of submodules, like FlopCounterMode's table) agree *exactly* for every op
family FlopCounterMode counts: GEMM (mm/addmm/bmm/baddbmm), convolution and attention.

pyprof's side: run the model under ``pyprof.init()`` with a :class:`Recorder`; price every innermost op
marker (an op marker with op markers nested inside, such as ``multi_head_attention_forward``, is a
container and not priced, so attention under MHA counts once) with ``estimate(direction="fprop")``,
and with ``direction="bprop"`` when a backward node of that op (same ``seq``) ran; attribute it to the
innermost module path of the marker's enclosing ``mod`` ranges.

torch's side, forward: FlopCounterMode's per-module table of a forward pass. Backward: FlopCounterMode's
totals per family over forward+backward minus forward, compared at the root; per module, its
ModuleTracker is not usable for backward: it keeps a module's backward "open" until its input's
gradient is complete, so with parallel branches (ResNet's ``downsample`` shares the block input) or
pass-through modules (ViT's ``Dropout(p=0)``) it credits other modules' backward to them (observed:
all of ``layer1.0``'s backward under ``layer1.0.downsample``). So per module, backward FLOPs are counted
with FlopCounterMode's own formulas (``flop_registry``) by a dispatch mode that charges each backward
aten op to the module that created the autograd node running it (``torch._C._current_autograd_node()``;
nodes are assigned to the innermost module by walking the autograd graph from each module's outputs to
its inputs in forward hooks): torch-side attribution, independent of pyprof's markers.

On CPU, SDPA dispatches to ``_scaled_dot_product_flash_attention_for_cpu``, which FlopCounterMode does
not list (it would count 0); it is mapped to FlopCounterMode's *own* flash attention formulas through
``custom_mapping``, so the reference stays torch's.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode, flop_registry  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import zoo  # noqa: E402

from pyprof.prof.ops import OpCall, estimate, family  # noqa: E402

aten = torch.ops.aten
FAMILIES = ("gemm", "conv", "attention")
# FlopCounterMode's counted aten ops -> pyprof family
FC_FAMILY = {
    aten.mm: "gemm", aten.addmm: "gemm", aten.bmm: "gemm", aten.baddbmm: "gemm",
    aten.convolution: "conv", aten._convolution: "conv", aten.convolution_backward: "conv",
    aten._scaled_dot_product_flash_attention_for_cpu: "attention",
    aten._scaled_dot_product_flash_attention_for_cpu_backward: "attention",
    aten._scaled_dot_product_flash_attention: "attention",
    aten._scaled_dot_product_flash_attention_backward: "attention",
    aten._scaled_dot_product_efficient_attention: "attention",
    aten._scaled_dot_product_efficient_attention_backward: "attention",
}


def _raw(formula):
    def f(*args, **kwargs):
        return formula(*args, **kwargs)

    f._get_raw = True  # the registry entry already converts tensors to shapes
    return f


CPU_SDPA = {
    aten._scaled_dot_product_flash_attention_for_cpu: _raw(flop_registry[aten._scaled_dot_product_flash_attention]),
    aten._scaled_dot_product_flash_attention_for_cpu_backward:
        _raw(flop_registry[aten._scaled_dot_product_flash_attention_backward]),
}


def _fc_table(counts: dict, root: str) -> dict[tuple[str, str], int]:
    """FlopCounterMode's {"ResNet.layer1.0": {aten.mm: n}} -> {("layer1.0", "gemm"): n}."""
    out: dict[tuple[str, str], int] = defaultdict(int)
    for mod, ops in counts.items():
        if mod == "Global":
            continue
        assert mod == root or mod.startswith(root + "."), mod
        path = mod[len(root) + 1:] if mod != root else ""
        for op, n in ops.items():
            assert op in FC_FAMILY, f"FlopCounterMode counted {op}, which this test does not map to a family"
            out[path, FC_FAMILY[op]] += n
    return out


def _prefixes(path: str, called: set[str]) -> list[str]:
    """The module itself and its ancestors that ran a forward (a ModuleList is not called)."""
    parts = path.split(".") if path else []
    return [p for p in [""] + [".".join(parts[: i + 1]) for i in range(len(parts))] if p in called]


def _pyprof_tables(payloads: list[dict], bwd_seqs: set[int], called: set[str]):
    """Price innermost op markers per (module path, family), inclusive of submodules."""
    containers = {p.get("id") for op in payloads for p in op["_parents"] if p.get("k") == "op"}
    fwd: dict[tuple[str, str], float] = defaultdict(float)
    bwd: dict[tuple[str, str], float] = defaultdict(float)
    priced = 0
    for op in payloads:
        if op.get("id") in containers:
            continue
        fam = family(op["op"], op.get("ns"))
        if fam not in FAMILIES:
            continue
        mods = [p for p in op["_parents"] if p.get("k") == "mod"]
        path = mods[-1]["path"] if mods else ""
        call = dict(op=op["op"], args=op["args"], cdtype=op.get("cdtype"), mod=op.get("ns"))
        f = estimate(OpCall(direction="fprop", **call))
        assert f is not None and f.flops is not None, f"no forward FLOPs for {op['ns']}.{op['op']} {op['args']}"
        ran_backward = bool(set(op.get("seq") or []) & bwd_seqs)
        b = estimate(OpCall(direction="bprop", **call)) if ran_backward else None
        assert not ran_backward or (b is not None and b.flops is not None), op
        priced += 1
        for pre in _prefixes(path, called):
            fwd[pre, fam] += f.flops
            if b is not None:
                bwd[pre, fam] += b.flops
    return fwd, bwd, priced


class _NodeOwners:
    """Autograd node -> innermost module that created it, from forward hooks walking the autograd graph
    from the module's outputs back to its inputs (children's hooks run first, so the innermost wins)."""

    def __init__(self, model):
        self.names = {m: n for n, m in model.named_modules()}
        self.owner: dict[int, str] = {}
        self.called: set[str] = set()
        self.handle = torch.nn.modules.module.register_module_forward_hook(self._post, with_kwargs=True)

    def _post(self, mod, args, kwargs, out):
        path = self.names.get(mod)
        if path is None:
            return
        self.called.add(path)
        stop = {t.grad_fn for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        stack = [t.grad_fn for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        seen = set()
        while stack:
            node = stack.pop()
            if node is None or node in seen or node in stop:
                continue
            seen.add(node)
            self.owner.setdefault(node._sequence_nr(), path)
            stack.extend(f for f, _ in node.next_functions)

    def close(self):
        self.handle.remove()


class _BackwardFlops(TorchDispatchMode):
    """FlopCounterMode's formulas, charged to the module owning the autograd node being run."""

    def __init__(self, owners: _NodeOwners):
        super().__init__()
        self.owners = owners
        self.registry = {**flop_registry, **CPU_SDPA}
        self.counts: dict[tuple[str, str], int] = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        formula = self.registry.get(func._overloadpacket)
        if formula is not None:
            node = torch._C._current_autograd_node()
            path = self.owners.owner.get(node._sequence_nr()) if node is not None else None
            assert path is not None, f"backward {func} outside any module"
            n = formula(*args, **kwargs, out_val=out)
            for pre in _prefixes(path, self.owners.called):
                self.counts[pre, FC_FAMILY[func._overloadpacket]] += n
        return out


def _run(model, x):
    import pyprof
    from pyprof.annotate.recorder import Recorder

    root = type(model).__name__
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as fc_fwd:
        model(x)
    owners = _NodeOwners(model)
    pyprof.init()
    try:
        with Recorder() as rec, FlopCounterMode(display=False, custom_mapping=CPU_SDPA) as fc_all:
            y = model(x).sum()
            with _BackwardFlops(owners) as ref_bwd:
                y.backward()
    finally:
        pyprof.deinit()
        owners.close()
    fc_f = _fc_table(fc_fwd.get_flop_counts(), root)
    fc_t = _fc_table(fc_all.get_flop_counts(), root)
    fc_b_root = {fam: fc_t.get(("", fam), 0) - fc_f.get(("", fam), 0) for fam in FAMILIES}
    bwd_seqs = {p["seq"] for p in rec.payloads(kind="bwd")}
    called = {p["path"] for p in rec.payloads(kind="mod")}
    assert called == owners.called, "pyprof's module paths differ from the modules torch ran"
    pp_f, pp_b, priced = _pyprof_tables(rec.payloads(kind="op"), bwd_seqs, called)
    return fc_f, fc_b_root, dict(ref_bwd.counts), pp_f, pp_b, priced


def _compare(fc: dict, pp: dict, what: str) -> None:
    keys = {k for k, v in fc.items() if v} | {k for k, v in pp.items() if v}
    bad = sorted((k, fc.get(k, 0), pp.get(k, 0)) for k in keys if fc.get(k, 0) != pp.get(k, 0))
    assert not bad, f"{what}: {len(bad)} (module, family) totals differ, first: {bad[:5]}"


MODELS = {
    "resnet50": (zoo.resnet50, lambda: torch.randn(1, 3, 224, 224), {"conv", "gemm"}),
    "vit_b_16": (zoo.vit_b_16, lambda: torch.randn(1, 3, 224, 224), {"conv", "gemm", "attention"}),
    "gpt": (zoo.gpt, lambda: torch.randint(0, 1024, (2, 128)), {"gemm", "attention"}),
}


@pytest.mark.torch
@pytest.mark.parametrize("name", list(MODELS))
def test_flops_agree_with_flopcountermode(name):
    make, inp, families = MODELS[name]
    torch.manual_seed(0)
    model = make()
    fc_f, fc_b_root, ref_b, pp_f, pp_b, priced = _run(model, inp())
    assert priced > 0
    # the comparison is not vacuous: every expected family is counted, forward and backward, at the root
    for fam in families:
        assert fc_f.get(("", fam), 0) > 0 and fc_b_root[fam] > 0, (fam, fc_f, fc_b_root)
    _compare(fc_f, pp_f, f"{name} forward, per module (FlopCounterMode)")
    _compare({("", f): n for f, n in fc_b_root.items()}, {k: v for k, v in pp_b.items() if k[0] == ""},
             f"{name} backward, whole model (FlopCounterMode)")
    _compare(ref_b, pp_b, f"{name} backward, per module (FlopCounterMode formulas, autograd-node owners)")
    # per-module detail is really compared (not only the root)
    assert len({k for k in fc_f if k[0]}) > 5 and len({k for k in ref_b if k[0]}) > 5
