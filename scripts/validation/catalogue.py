"""Cases nobody here wrote: higher-order gradients and torch.func transforms of the ops and modules torch's
own test suite lists, through the user's path (``init()`` + torch.profiler, parse, prof), against
FlopCounterMode per direction.

From ``torch.testing._internal`` (CPU, float32):

* ``gradgrad``: every sample of every ``op_db`` op that supports double backward
  (``OpInfo.supports_gradgrad``, what torch's ``test_fn_gradgrad`` checks): the output, the gradient of
  its inputs with ``create_graph``, and a backward through that gradient;
* ``vmap``: every sample's op ``vmap``'d over a batch of 3 copies of its first input (functorch's
  ``test_vmap_exhaustive``);
* ``per_sample_grad``: every ``module_db`` module with parameters, per-sample gradients of its outputs'
  sum, ``vmap(grad(functional_call(...)))`` over its input's batch (functorch's per-sample-grad samples,
  torch's ``test_expanded_weights``); ``module_gradgrad``: its input's gradient with ``create_graph``,
  then a backward through that gradient's square (a gradient penalty).

For each case, pyprof's GEMM, convolution and attention FLOPs (the families FlopCounterMode counts) per
direction (``fprop``; ``bprop``: everything run by an autograd node, a backward's backward included)
are compared with FlopCounterMode's formulas under pyprof's documented conventions
(:func:`scripts.validation.opinfo._conventions`) applied by a dispatch mode that charges an op run by
an autograd node to bprop. :func:`run` gives one :class:`Case` per sample; :func:`table` the coverage
(``python scripts/validate.py --catalogue``).
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

KINDS = ("gradgrad", "vmap", "per_sample_grad", "module_gradgrad")
#: Where pyprof's count differs from FlopCounterMode's by a convention of docs/prof.md (Conventions).
CONVENTIONS = {
    "einsum": "a product that sums no letter is elementwise: pyprof counts its multiplies, FlopCounterMode none",
    "nn.functional.scaled_dot_product_attention": "causal attention counts its causal half; where torch runs "
                                                  "the math fallback (double backward) the dense scores ran",
    "nn.functional.linear_cross_entropy.chunked_none": "its backward runs aten::dot (2 FLOPs per pair), a GEMM "
                                                       "to pyprof, which FlopCounterMode does not count",
}


@dataclass
class Case:
    kind: str
    name: str
    index: int
    torch: dict = field(default_factory=dict)  # direction -> FLOPs (FlopCounterMode)
    pyprof: dict = field(default_factory=dict)
    status: str = ""  # agree | differ | convention: why | n/c (torch counts none) | skipped: why | error: what

    def judge(self) -> None:
        if not any(self.torch.values()):  # (FlopCounterMode counts no op it ran: mv, dot, a fused RNN)
            self.status = "n/c"
            return
        same = all(math.isclose(self.pyprof.get(d, 0.0), self.torch.get(d, 0.0), rel_tol=0.01, abs_tol=1e-9)
                   for d in ("fprop", "bprop"))
        self.status = "agree" if same else f"convention: {CONVENTIONS[self.name]}" if self.name in CONVENTIONS \
            else "differ"


def _counter():
    """A dispatch mode counting FlopCounterMode's formulas (pyprof's conventions) per direction."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    from .opinfo import _conventions
    from .reference import _CPU_SDPA

    formulas = {**flop_registry, **{k: flop_registry[v] for k, v in _CPU_SDPA.items()}, **_conventions()}

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.flops = {"fprop": 0.0, "bprop": 0.0}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            f = formulas.get(func._overloadpacket) or formulas.get(func)
            if f is not None:
                d = "bprop" if torch._C._current_autograd_node() is not None else "fprop"
                self.flops[d] += float(f(*args, **kwargs, out_val=out))
            return out

    return Count()


def _grads(outs, ins, create: bool):
    import torch

    outs = [o for o in outs if o.requires_grad]
    ins = [t for t in ins if t.requires_grad]
    if not outs or not ins:
        return []
    gs = torch.autograd.grad(outs, ins, [torch.ones_like(o) for o in outs], create_graph=create, allow_unused=True)
    return [g for g in gs if g is not None]


def _tensors(tree):
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(tree) if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())]


def op_steps(op, kind: str, limit: int | None):
    """(index, step) per sample of OpInfo ``op``: ``step()`` runs the case once."""
    import torch

    from .opinfo import _resolve, _samples

    fn = _resolve(op)
    for i, s in enumerate(_samples(op, torch.float32, True, limit)):
        if kind == "gradgrad":
            def step(s=s):
                gs = _grads(_tensors(fn(s.input, *s.args, **s.kwargs)), _tensors((s.input, s.args, s.kwargs)), True)
                gs = [g for g in gs if g.requires_grad]
                if gs:
                    torch.autograd.backward(gs, [torch.ones_like(g) for g in gs])
        else:
            def step(s=s):
                x = s.input.detach() if isinstance(s.input, torch.Tensor) else s.input
                torch.func.vmap(lambda x: fn(x, *s.args, **s.kwargs), randomness="same")(torch.stack([x] * 3))
        yield i, step


def module_steps(info, kind: str, limit: int | None):
    """(index, step) per sample input of ModuleInfo ``info``."""
    import torch
    from torch.func import functional_call, grad, vmap

    inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True, training=True)
    for i, mi in enumerate(inputs[:limit]):
        if mi.forward_input is None:
            continue
        torch.manual_seed(0)
        m = info.module_cls(*mi.constructor_input.args, **mi.constructor_input.kwargs)
        a, kw = mi.forward_input.args, mi.forward_input.kwargs
        if not a or not isinstance(a[0], torch.Tensor) or a[0].dim() < 2:
            continue
        if kind == "per_sample_grad":
            params = {k: v.detach() for k, v in m.named_parameters()}
            if not params:
                continue

            def loss(p, xb, m=m, a=a, kw=kw):
                return sum(t.sum() for t in _tensors(functional_call(m, p, (xb.unsqueeze(0), *a[1:]), kw)))

            def step(params=params, loss=loss, x=a[0].detach()):
                vmap(grad(loss), in_dims=(None, 0), randomness="same")(params, x)
        else:
            def step(m=m, a=a, kw=kw):
                gs = [g for g in _grads(_tensors(m(*a, **kw)), [a[0]], True) if g.requires_grad]
                if gs:
                    sum(g.square().sum() for g in gs).backward()
        yield i, step


def profiled_table(step, folder: Path):
    """prof's table of one run of ``step`` under ``init()`` + torch.profiler (CPU, shapes), its trace
    written to ``folder``; roofline peaks fixed, so that no calibration runs."""
    import torch

    import pyprof
    from pyprof.parse.kineto import KinetoSource
    from pyprof.prof import build

    pyprof.init()
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            step()
    finally:
        pyprof.deinit()
    prof.export_chrome_trace(str(folder / "trace.json"))
    return build(KinetoSource(folder / "trace.json").records(), peak_flops=1e12, peak_bw=1e11)


def _pyprof(step, folder: Path) -> dict:
    """pyprof's counted FLOPs per direction of one run of ``step`` under ``init()`` + torch.profiler."""
    from pyprof.prof.ops import family

    df = profiled_table(step, folder)
    out = {"fprop": 0.0, "bprop": 0.0}
    for d, op, mod, ran, fl in zip(df["dir"], df["op"], df["mod"], df["priced"], df["flops"], strict=True):
        fam = family(ran or op, "aten" if ran else mod) if op and fl == fl else None
        if fam in ("gemm", "conv", "attention") or (fam == "rnn" and d in out):
            key = "bprop" if d in ("bprop", "bprop2") else "fprop" if d in ("fprop", "recomp") else None
            if key:
                out[key] += float(fl)
    return out


def run(kind: str, names: list[str] | None = None, limit: int | None = 2) -> list[Case]:
    """The cases of ``kind`` (of :data:`KINDS`) for the ops/modules ``names`` (None: all), ``limit``
    samples each."""
    import torch

    if kind in ("gradgrad", "vmap"):
        from .opinfo import op_db, op_id

        items = [(op_id(o), o, op_steps) for o in op_db()
                 if (names is None or op_id(o) in names) and (kind != "gradgrad" or o.supports_gradgrad)]
    else:
        from torch.testing._internal.common_modules import module_db

        items = [(m.name, m, module_steps) for m in module_db if names is None or m.name in names]
    cases = []
    for name, item, steps in items:
        try:  # (a fresh copy of every sample for pyprof's run: a run can leave its inputs changed)
            todo, fresh = list(steps(item, kind, limit)), dict(steps(item, kind, limit))
        except Exception as exc:  # noqa: BLE001 - torch's own samples cannot be made here
            cases.append(Case(kind, name, -1, status=f"skipped: {type(exc).__name__}"))
            continue
        # FlopCounterMode counts an RNN's GEMMs only where oneDNN does not fuse them (as reference.py); pyprof's
        # run takes the same flags: under create_graph the fused op's backward runs another program (its
        # differentiable form recomputes the forward's gates), so both counts must be of one program
        onednn = not any(k in name for k in ("RNN", "LSTM", "GRU"))
        for i, step in todo:
            c = Case(kind, name, i)
            counter = _counter()
            try:
                with torch.backends.mkldnn.flags(enabled=onednn), counter:
                    step()
            except Exception as exc:  # noqa: BLE001 - torch refuses this case (no batching rule, ...)
                c.status = f"skipped: {type(exc).__name__}"
                cases.append(c)
                continue
            c.torch = counter.flops
            try:
                with tempfile.TemporaryDirectory() as tmp, torch.backends.mkldnn.flags(enabled=onednn):
                    c.pyprof = _pyprof(fresh[i], Path(tmp))
                c.judge()
            except Exception as exc:  # noqa: BLE001 - pyprof failed on it: a failure to report
                c.status = f"error: {type(exc).__name__}: {exc}"[:120]
            cases.append(c)
    return cases


def table(cases: list[Case]) -> str:
    """Coverage per kind: cases run, agree, differ, n/c (no counted FLOPs), skipped, errors; then each
    case that differs or failed."""
    heads = ("agree", "convention", "differ", "n/c", "skipped", "error")
    lines = [f"{'kind':<16} {'cases':>6} " + " ".join(f"{h:>10}" for h in heads)]
    for kind in KINDS:
        cs = [c for c in cases if c.kind == kind]
        if cs:
            lines.append(f"{kind:<16} {len(cs):>6} " + " ".join(
                f"{sum(c.status.split(':')[0] == h for c in cs):>10}" for h in heads))
    for c in cases:
        if c.status == "differ" or c.status.startswith("error"):
            detail = "; ".join(f"{d} {c.pyprof.get(d, 0):.4g} vs {c.torch.get(d, 0):.4g}" for d in ("fprop", "bprop"))
            lines.append(f"  {c.kind} {c.name}[{c.index}]: {c.status} {detail if c.status == 'differ' else ''}")
    return "\n".join(lines) + "\n"
