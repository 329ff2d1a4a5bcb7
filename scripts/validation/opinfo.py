"""Torch's OpInfo catalogue as the test: every sample of every op through the user's path, against torch.

For each op of ``torch.testing._internal.common_methods_invocations.op_db`` (CPU; float32, and
bfloat16 where asked), :func:`run_op` runs every sample input twice through what a user runs:

* ``init``: ``pyprof.init()`` and torch.profiler (``record_shapes``): pyprof markers name the call;
* ``plain``: torch.profiler alone: the trace's aten ops and their ``Input Dims``/``Concrete Inputs``.

Each sample runs forward, then backward (where the op supports autograd and an output needs a
gradient) inside a ``record_function("layer:s<i>")`` range, so the records of each sample are those of
its layer. The trace is parsed (:class:`pyprof.parse.kineto.KinetoSource`) and priced
(:func:`pyprof.prof.build_file`) exactly as ``pyprof parse`` + ``pyprof prof`` do. The references run
the same sample without pyprof: FlopCounterMode's total forward and backward, and bytes from a
dispatch mode that sums, per aten op that does work (views and allocations do none), the bytes of
its tensor inputs and of its outputs that are not an input written in place.

Per sample: (a) parse and prof never raise, and a forward record of the sample binds to an aten
schema (:func:`pyprof.prof.ops.schema.normalize`); (b) where FlopCounterMode counts FLOPs, pyprof's
forward and backward FLOPs of the families it counts (GEMM, convolution, attention: :data:`COUNTED`)
equal them (1%), FlopCounterMode applying pyprof's documented conventions (:func:`_conventions`); (c) forward bytes equal the dispatch count (1%);
(d) whether every op record of the sample has a FLOP and a byte model. :func:`table` prints the
per-family coverage and the totals; ``python scripts/validate.py --opinfo`` runs the catalogue.
"""

from __future__ import annotations

import math
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

TOL = 0.01


@dataclass
class Sample:
    """One sample's figures: pyprof's (``py_*``; ``py_f``/``py_b`` of the :data:`COUNTED` families) and
    the references (``fc_*``: FlopCounterMode; ``ref_bytes``: the dispatch count)."""

    index: int
    fc_f: float = 0.0
    fc_b: float = 0.0
    ref_bytes: float = 0.0
    py_f: float = 0.0
    py_b: float = 0.0
    py_bytes: float = 0.0
    unpriced: set = field(default_factory=set)  # ops of the sample without a FLOP or byte figure
    bound: bool = False  # a forward record of the sample binds to an aten schema
    problem: str = ""  # why not, where it does not
    backward: bool = False

    @property
    def flops_counted(self) -> bool:
        return self.fc_f > 0 or self.fc_b > 0

    @property
    def flops_agree(self) -> bool:
        return _close(self.py_f, self.fc_f) and (not self.backward or _close(self.py_b, self.fc_b))

    @property
    def bytes_agree(self) -> bool:
        return _close(self.py_bytes, self.ref_bytes)


@dataclass
class OpResult:
    """One op, dtype and mode."""

    name: str
    dtype: str
    mode: str  # init | plain
    samples: list[Sample] = field(default_factory=list)
    error: str = ""  # pyprof raised (a failure), or why the op was not run (``skipped: ...``)
    family: str = ""  # pyprof's family of the op's records (the most common; autograd's engine records
    # do not count), or "" when none is priced

    @property
    def skipped(self) -> bool:
        return self.error.startswith("skipped")

    @property
    def has_model(self) -> bool:
        return bool(self.samples) and not any(s.unpriced for s in self.samples)

    @property
    def flops_status(self) -> str:
        counted = [s for s in self.samples if s.flops_counted]
        if not counted:
            return "n/c"
        return "agree" if all(s.flops_agree for s in counted) else "differ"

    @property
    def bytes_status(self) -> str:
        return "agree" if self.samples and all(s.bytes_agree for s in self.samples) else "differ"


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TOL, abs_tol=1e-9)


def op_db():
    """torch's OpInfo list (imported here: it takes seconds and needs ``expecttest``)."""
    from torch.testing._internal.common_methods_invocations import op_db as db

    return db


def op_id(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _resolve(op):
    """The callable a user calls, looked up when called (so ``init()``'s patches are what runs):
    ``torch.nn.functional.conv2d`` for OpInfo ``nn.functional.conv2d`` where that attribute is the
    OpInfo's own function; else the OpInfo's callable (a lambda calls torch through patched names)."""
    import torch

    owner, parts = torch, op.name.split(".")
    for p in parts[:-1]:
        owner = getattr(owner, p, None)
        if owner is None:
            return lambda *a, **k: op.op(*a, **k)
    attr = parts[-1]
    if getattr(owner, attr, None) is op.op:
        return lambda *a, **k: getattr(owner, attr)(*a, **k)
    tensor_attr = getattr(torch.Tensor, attr, None)
    if tensor_attr is not None and tensor_attr is op.op:
        return lambda *a, **k: getattr(torch.Tensor, attr)(*a, **k)
    return lambda *a, **k: op.op(*a, **k)


def _samples(op, dtype, grad: bool, limit: int | None):
    import torch

    torch.manual_seed(0)
    out = []
    for i, s in enumerate(op.sample_inputs("cpu", dtype, requires_grad=grad)):
        if limit is not None and i >= limit:
            break
        out.append(s)
    return out


def _outputs_needing_grad(out):
    import torch
    from torch.utils._pytree import tree_leaves

    return [t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad
            and (t.is_floating_point() or t.is_complex())]


_NO_WORK = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided", "resize_",
            "resize_as_", "set_",
            "detach", "lift_fresh", "alias", "_local_scalar_dense", "is_same_size", "_to_dense"}


#: The pyprof families whose FLOPs FlopCounterMode counts (its registry: mm, addmm, bmm, baddbmm,
#: convolutions, attention). A composite's other work (the softmax of an attention written out, a
#: decomposition) has FLOPs in pyprof that FlopCounterMode does not count, so only these are compared.
COUNTED = ("gemm", "conv", "attention")
#: OpInfo ops whose every sample is causal attention: the reference halves FlopCounterMode's dense
#: count (docs/prof.md, Conventions), as scripts/validation/reference.py does per op.
_CAUSAL = {"nn.functional.scaled_dot_product_attention"}


def _conventions():
    """FlopCounterMode formulas adjusted to pyprof's documented conventions (docs/prof.md): a grouped
    convolution's weight gradient is its real work (:func:`scripts.validation.reference._conv_backward`);
    ``addbmm``, which FlopCounterMode lists no formula for (it is one kernel on CPU), is the ``bmm`` of
    its batches summed into one matrix: ``bmm``'s formula; ``addmm_`` (in place, which FlopCounterMode
    lists no formula for: ``linear_cross_entropy``'s chunked backward accumulates ``dW`` with it) is
    ``addmm``'s formula; the chunked ``linear_cross_entropy`` ops, opaque to FlopCounterMode, count
    their GEMMs (:func:`chunked_ce`)."""
    import torch
    from torch.utils.flop_counter import flop_registry

    from .reference import _conv_backward

    aten = torch.ops.aten

    def conv_backward(*args, out_val=None, **kwargs):
        return _conv_backward(flop_registry[aten.convolution_backward], args, kwargs, out_val)

    def addbmm(self, batch1, batch2, *args, out_val=None, **kwargs):
        return flop_registry[aten.bmm](batch1, batch2, out_val=out_val)

    def addmm_(self, mat1, mat2, *args, out_val=None, **kwargs):
        return flop_registry[aten.addmm](self, mat1, mat2, out_val=out_val)

    def chunked_ce(input, linear_weight, *args, out_val=None, **kwargs):
        """torch's chunked ``linear_cross_entropy`` op: the logits GEMM, and one per gradient it computes
        in forward (its ``compute_input_grad``/``compute_linear_weight_grad`` arguments, where given)."""
        rows = input.shape[0] if input.dim() == 2 else 1
        macs = rows * linear_weight.shape[0] * input.shape[-1]
        flags = [a for a in args if isinstance(a, bool)][-3:-1] if len(args) > 10 else []
        return 2 * macs * (1 + sum(flags))

    mapping = {aten.convolution_backward: conv_backward, aten.addbmm: addbmm, aten.addmm_: addmm_}
    for f in (conv_backward, addbmm, addmm_, chunked_ce):
        f._get_raw = True
    try:  # registers the chunked linear_cross_entropy ops (torch 2.13 and newer), else at their first call
        import torch.nn.modules.linear_cross_entropy  # noqa: F401
    except ImportError:
        pass
    ns = getattr(torch.ops, "torch_nn", None)
    for name in ("_linear_cross_entropy_batch_chunked", "_linear_cross_entropy_batch_chunked_no_reduction"):
        op = getattr(ns, name, None) if ns is not None else None
        if op is not None:
            mapping[op] = chunked_ce
    return mapping


def _reference(fn, samples, backward: bool, causal: bool = False) -> list[tuple[float, float, float]]:
    """(FlopCounterMode forward, backward, dispatch bytes forward) per sample, or None where the
    sample raises without pyprof (it is then left out). FlopCounterMode runs with pyprof's conventions
    (:func:`_conventions`); ``causal`` halves its counts (every FLOP of the sample is attention's)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves
    from torch.utils.flop_counter import FlopCounterMode

    mapping = _conventions()
    half = 0.5 if causal else 1.0

    class Bytes(TorchDispatchMode):
        total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            name = func._schema.name.split("::")[-1]
            if func.is_view or name in _NO_WORK:
                return out
            ins = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
            n = sum(t.nbytes for t in ins)
            seen = {id(t) for t in ins}
            n += sum(t.nbytes for t in tree_leaves(out) if isinstance(t, torch.Tensor) and id(t) not in seen)
            Bytes.total += n
            return out

    res = []
    for s in samples:
        try:
            with FlopCounterMode(display=False, custom_mapping=mapping) as fc:
                out = fn(s.input, *s.args, **s.kwargs)
            f = fc.get_total_flops() * half
            b = 0.0
            if backward:
                outs = _outputs_needing_grad(out)
                if outs:
                    seeds = [torch.ones_like(t) for t in outs]
                    with FlopCounterMode(display=False, custom_mapping=mapping) as fc:
                        torch.autograd.backward(outs, seeds)
                    b = fc.get_total_flops() * half
            Bytes.total = 0
            with torch.no_grad(), Bytes():
                fn(s.input, *s.args, **s.kwargs)
            res.append((float(f), float(b), float(Bytes.total)))
        except Exception:  # noqa: BLE001 - torch itself refuses the sample: leave it out
            res.append(None)
    return res


def _profile(fn, samples, keep: list[int], backward: bool, mode: str, folder: Path):
    """Run the kept samples under torch.profiler (and ``init()`` in mode ``init``); the records."""
    import torch

    import pyprof
    from pyprof.parse.kineto import KinetoSource

    if mode == "init":
        pyprof.init()
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
            for i in list(keep):
                s = samples[i]
                try:
                    with torch.profiler.record_function(f"layer:s{i}"):
                        out = fn(s.input, *s.args, **s.kwargs)
                    if backward:
                        outs = _outputs_needing_grad(out)
                        if outs:
                            seeds = [torch.ones_like(t) for t in outs]
                            with torch.profiler.record_function(f"layer:s{i}"):
                                torch.autograd.backward(outs, seeds)
                except Exception:  # noqa: BLE001 - torch refuses this sample here (a random input): leave it out
                    keep.remove(i)
    finally:
        if mode == "init":
            pyprof.deinit()
    trace = folder / f"{mode}.json"
    prof.export_chrome_trace(str(trace))
    return list(KinetoSource(trace).records())


def _price(records, folder: Path, mode: str):
    from pyprof.prof import build_file
    from pyprof.records import write_records

    path = folder / f"{mode}.dict"
    with open(path, "wb") as fh:
        write_records(records, fh)
    return build_file(path, peak_flops=1e12, peak_bw=1e11, workers=1)


def _sample_of(layer) -> int | None:
    for x in reversed(layer or []):
        if isinstance(x, str) and x.startswith("s") and x[1:].isdigit():
            return int(x[1:])
    return None


def run_op(op, dtype: str = "float32", mode: str = "init", limit: int | None = None,
           workdir: str | Path | None = None) -> OpResult:
    """Every sample (up to ``limit``) of OpInfo ``op`` through ``mode`` (see module docstring)."""
    import torch

    from pyprof.errors import NoKernelsError
    from pyprof.prof.ops import canonical, family
    from pyprof.prof.ops.schema import normalize_cached

    result = OpResult(op_id(op), dtype, mode)
    dt = getattr(torch, dtype)
    if dt not in op.supported_dtypes("cpu"):
        result.error = f"skipped: {dtype} not supported on CPU"
        return result
    backward = bool(op.supports_autograd) and dt.is_floating_point
    fn = _resolve(op)
    try:
        samples = _samples(op, dt, backward, limit)
        ref = _reference(fn, samples, backward, causal=op_id(op) in _CAUSAL)
        samples = _samples(op, dt, backward, limit)  # fresh inputs: the reference ran backward on them
    except Exception as exc:  # noqa: BLE001 - the catalogue's own failure: not pyprof's
        result.error = f"skipped: samples raise ({type(exc).__name__})"
        return result
    keep = [i for i, r in enumerate(ref) if r is not None]
    if not keep:
        result.error = "skipped: every sample raises without pyprof"
        return result
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(workdir or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            records = _profile(fn, samples, keep, backward, mode, folder)
            df = _price(records, folder, mode) if records else None
        except NoKernelsError:
            result.error = "skipped: the samples run no aten op (nothing to profile)"
            return result
        except Exception as exc:  # noqa: BLE001 - (a): pyprof must not raise; the row says what did
            result.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:160]
            return result
    by = {i: Sample(i, *ref[i], backward=backward) for i in keep}
    for r in records:
        i = _sample_of(r.get("layer"))
        if i not in by or r.get("op") is None or r.get("dir") != "fprop" or by[i].bound:
            continue
        b = normalize_cached(canonical(r["op"], r.get("mod")), r.get("args") or [])
        by[i].bound = b.schema is not None
        by[i].problem = by[i].problem or b.problem
    fams: dict[str, int] = defaultdict(int)
    if df is not None:
        for d, opn, mod, lay, fl, nb, ran in zip(df["dir"], df["op"], df["mod"], df["layer"], df["flops"],
                                                  df["bytes"], df["priced"], strict=True):
            i = _sample_of(lay)
            if i not in by or opn is None:
                continue
            s = by[i]
            if not (fl == fl and nb == nb):  # NaN: no model for this op (or its bytes are unknown)
                s.unpriced.add(ran or opn)  # a backward priced on what ran: the aten op without a model
            if not fl == fl:  # FLOPs known with bytes unknown still count in (b)
                continue
            fam = (family(ran, "aten") if ran else family(opn, mod)) or ""  # a backward priced on what ran
            fams[fam] += 1
            counted = float(fl) if fam in COUNTED else 0.0
            if d == "fprop":
                s.py_f += counted
                s.py_bytes += float(nb) if nb == nb else 0.0
            elif d in ("bprop", "bprop2"):
                s.py_b += counted
    result.samples = [by[i] for i in keep]
    work = {k: v for k, v in fams.items() if k != "engine"}  # AccumulateGrad is bookkeeping, not the op's
    result.family = max(work, key=work.get) if work else ""
    return result


def select(names: list[str] | None = None) -> list:
    """The OpInfos named (``op`` or ``op.variant``), or all of op_db."""
    db = op_db()
    if not names:
        return list(db)
    want = set(names)
    return [o for o in db if op_id(o) in want or o.name in want]


def table(results: list[OpResult]) -> str:
    """Coverage by family and the totals: ops, samples, FLOPs agree/differ, bytes agree, no model."""
    ran = [r for r in results if not r.skipped]
    fam: dict[str, list[OpResult]] = defaultdict(list)
    for r in ran:
        fam[r.family or "(no model)"].append(r)
    head = (f"{'family':<14} {'ops':>5} {'samples':>8} {'model':>6} {'no model':>9} {'FLOPs agree':>12} "
            f"{'FLOPs differ':>13} {'bytes agree':>12} {'failed':>7}")
    lines = [head, "-" * len(head)]

    def row(label: str, rs: list[OpResult]) -> str:
        ok = [r for r in rs if not r.error]
        return (f"{label:<14} {len(rs):>5} {sum(len(r.samples) for r in rs):>8} "
                f"{sum(r.has_model for r in ok):>6} {sum(not r.has_model for r in ok):>9} "
                f"{sum(r.flops_status == 'agree' for r in ok):>12} {sum(r.flops_status == 'differ' for r in ok):>13} "
                f"{sum(r.bytes_status == 'agree' for r in ok):>12} {sum(bool(r.error) for r in rs):>7}")

    for name in sorted(fam):
        lines.append(row(name, fam[name]))
    lines.append("-" * len(head))
    lines.append(row("all", ran))
    skipped = len(results) - len(ran)
    if skipped:
        lines.append(f"({skipped} op/dtype pairs not run: unsupported dtype, or torch refuses every sample)")
    return "\n".join(lines) + "\n"


def details(results: list[OpResult]) -> str:
    """One line per op that fails, differs or lacks a model: what and the first figures that differ."""
    out = []
    for r in results:
        if r.skipped:
            continue
        tag = f"{r.name} [{r.dtype}, {r.mode}]"
        if r.error:
            out.append(f"{tag}: FAILED {r.error}")
            continue
        if not r.has_model:
            ops = sorted(set().union(*[s.unpriced for s in r.samples]))
            out.append(f"{tag}: no model for {', '.join(ops)}")
        if r.flops_status == "differ":
            s = next(s for s in r.samples if s.flops_counted and not s.flops_agree)
            out.append(f"{tag}: FLOPs sample {s.index}: fwd {s.py_f:g} vs {s.fc_f:g}, bwd {s.py_b:g} vs {s.fc_b:g}")
        unbound = [s for s in r.samples if not s.bound]
        if unbound:
            out.append(f"{tag}: {len(unbound)} samples with no forward record bound to a schema"
                       f" ({unbound[0].problem or 'no forward op record'})")
    return "\n".join(out) + ("\n" if out else "")
