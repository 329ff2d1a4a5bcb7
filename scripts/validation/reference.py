"""torch's own FLOP count of one training step, per direction, module and op family: the reference the
harness compares pyprof's figures with.

The formulas are FlopCounterMode's (``torch.utils.flop_counter.flop_registry``), applied by a dispatch
mode that sees every aten op the step runs, so pyprof's markers play no part in the reference:

* **forward** ops are charged to the innermost module whose forward is running (global forward hooks);
* **recompute** (``recomp``): forward ops that run while an autograd node is running and a module's
  forward is open (``torch.utils.checkpoint`` re-running a block to rebuild what it did not save) are
  charged to that module, the innermost open one; an op at which checkpoint's early stop raises never
  reaches the dispatch mode (it stops while saving its inputs), so it counts nothing;
* **backward** ops to the module that created the autograd node running them
  (``torch._C._current_autograd_node()``; nodes are assigned to the innermost module by walking the
  autograd graph from each module's outputs back to its inputs, children first). FlopCounterMode's own
  module tracker is not used for backward: it keeps a module's backward open until its input gradient
  is complete, so with parallel branches (ResNet's ``downsample``) it credits one module's backward to
  another.

Conventions shared with pyprof (docs/prof.md): a grouped convolution's weight gradient is its real work
(FlopCounterMode counts it ``groups`` times over, :func:`_conv_backward` divides); causal attention counts the causal half (FlopCounterMode
counts it dense, so its attention formulas are halved for ``is_causal`` calls); on CPU, SDPA runs
``_scaled_dot_product_flash_attention_for_cpu``, which FlopCounterMode does not list, so its flash
formulas are applied to it. Totals are inclusive: a module's figure includes its submodules', and
the root's (path ``""``) is the whole step's.

Bytes are checked by hand for the layers whose forward is one op (``nn.Linear``, ``nn.Conv*``):
:func:`hand_bytes` counts each input, parameter and output tensor once, at the element size the
kernel reads (the autocast dtype under autocast), from the shapes a forward hook sees (under
``torch.func.vmap``, the batched tensors its wrappers hold).
"""

from __future__ import annotations

import bisect
import inspect
import threading
from collections import defaultdict

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

aten = torch.ops.aten
_sequence_counter = torch._C._autograd._get_sequence_nr  # the calling thread's next autograd node number
FAMILIES = ("gemm", "conv", "attention")

#: The aten ops FlopCounterMode counts, by pyprof family.
FAMILY_OF = {
    aten.mm: "gemm", aten.addmm: "gemm", aten.bmm: "gemm", aten.baddbmm: "gemm",
    aten.convolution: "conv", aten._convolution: "conv", aten.convolution_backward: "conv",
    aten._scaled_dot_product_flash_attention: "attention",
    aten._scaled_dot_product_flash_attention_backward: "attention",
    aten._scaled_dot_product_efficient_attention: "attention",
    aten._scaled_dot_product_efficient_attention_backward: "attention",
    aten._scaled_dot_product_cudnn_attention: "attention",
    aten._scaled_dot_product_cudnn_attention_backward: "attention",
    aten._scaled_dot_product_flash_attention_for_cpu: "attention",
    aten._scaled_dot_product_flash_attention_for_cpu_backward: "attention",
}
_CPU_SDPA = {
    aten._scaled_dot_product_flash_attention_for_cpu: aten._scaled_dot_product_flash_attention,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: aten._scaled_dot_product_flash_attention_backward,
}


def _formula(packet):
    return flop_registry.get(_CPU_SDPA.get(packet, packet))


def _is_causal(func, args, kwargs) -> bool:
    """The call's ``is_causal`` argument, by name from the op's schema."""
    for i, a in enumerate(func._schema.arguments):
        if a.name == "is_causal":
            value = kwargs.get("is_causal", args[i] if i < len(args) else a.default_value)
            return bool(value)
    return False


def _conv_backward(formula, args, kwargs, out) -> float:
    """FlopCounterMode's convolution backward with the weight gradient of a grouped convolution divided
    by ``groups``: its formula prices that gradient as a dense ``C_out x C_in`` convolution, ``groups``
    times the work done (a convention pyprof does not share: see pyprof/prof/ops/conv.py)."""
    groups, mask = args[9], list(args[10])
    if groups == 1 or not mask[1]:
        return float(formula(*args, **kwargs, out_val=out))
    data = float(formula(*args[:10], [mask[0], False, False], **kwargs, out_val=out)) if mask[0] else 0.0
    weight = float(formula(*args[:10], [False, True, False], **kwargs, out_val=out))
    return data + weight / groups


def prefixes(path: str) -> list[str]:
    """A module path and its ancestors, root (``""``) first: where an inclusive total is added."""
    parts = path.split(".") if path else []
    return [""] + [".".join(parts[: i + 1]) for i in range(len(parts))]


class _Owners:
    """Forward: the stack of running modules. Backward: autograd node -> innermost module that made it."""

    def __init__(self, model: torch.nn.Module):
        self.names = {m: n for n, m in model.named_modules()}
        self.stack: list[str] = []
        self.owner: dict[int, str] = {}
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        # the post hook sees kwargs, and runs when a forward raises too (checkpoint's early stop), where
        # torch has it: the global hook takes with_kwargs from 2.5 on; before, each module's hook does
        params = inspect.signature(register_module_forward_hook).parameters
        if "with_kwargs" in params:
            kw = {"always_call": True} if "always_call" in params else {}
            posts = [register_module_forward_hook(self._post, with_kwargs=True, **kw)]
        else:
            kw = {"always_call": True} if "always_call" in inspect.signature(
                torch.nn.Module.register_forward_hook).parameters else {}
            posts = [m.register_forward_hook(self._post, with_kwargs=True, **kw) for m in self.names]
        self.handles = [register_module_forward_pre_hook(self._pre), *posts]

    def _pre(self, mod, args):
        path = self.names.get(mod)
        if path is not None:
            self.stack.append(path)

    def _post(self, mod, args, *rest):
        # (mod, args, kwargs, out); where a forward raised, torch calls always_call hooks as (mod, args, None)
        kwargs, out = (rest[0], rest[1]) if len(rest) == 2 else ({}, rest[0])
        path = self.names.get(mod)
        if path is None:
            return
        if self.stack and self.stack[-1] == path:
            self.stack.pop()
        stop = {t.grad_fn for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        todo = [t.grad_fn for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        seen = set()
        while todo:
            node = todo.pop()
            if node is None or node in seen or node in stop:
                continue
            seen.add(node)
            self.owner.setdefault(node._sequence_nr(), path)
            todo.extend(f for f, _ in node.next_functions)

    def close(self) -> None:
        for h in self.handles:
            h.remove()


class _Counter(TorchDispatchMode):
    def __init__(self, owners: _Owners):
        super().__init__()
        self.owners = owners
        self.counts: dict[tuple[str, str, str], float] = defaultdict(float)
        self.made: dict[int, tuple[list, list]] = {}  # thread -> (autograd counters, modules): see _owner

    def _owner(self, node) -> str:
        """The module owning autograd ``node``. A node made while a backward node ran (a backward taken with
        ``create_graph``) is owned by that node's module, so that the backward of a backward (double
        backward) is charged to the module whose backward it differentiates: each op run by a node notes
        the thread's autograd counter, which its own nodes, made before the op reaches a dispatch mode,
        are already below, and an unowned node takes the module of the first op noted above its number on
        its thread (the op that made it)."""
        seq = node._sequence_nr()
        path = self.owners.owner.get(seq)
        if path is None:
            made = self.made.get(threading.get_ident(), ([], []))
            i = bisect.bisect_right(made[0], seq)
            path = self.owners.owner[seq] = made[1][i] if i < len(made[1]) else ""
        return path

    def _note(self, node) -> None:
        counters, paths = self.made.setdefault(threading.get_ident(), ([], []))
        counters.append(_sequence_counter())
        paths.append(self._owner(node))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        formula = _formula(packet)
        node = torch._C._current_autograd_node()
        if node is not None and not self.owners.stack:
            self._note(node)
        if formula is None or packet not in FAMILY_OF:
            return out
        if node is not None and self.owners.stack:  # a module's forward run by a backward node: recompute
            direction, path = "recomp", self.owners.stack[-1]
        elif node is not None:
            direction, path = "bprop", self._owner(node)
        else:
            direction, path = "fprop", self.owners.stack[-1] if self.owners.stack else ""
        flops = _conv_backward(formula, args, kwargs, out) if packet is aten.convolution_backward else \
            float(formula(*args, **kwargs, out_val=out))
        if FAMILY_OF[packet] == "attention" and _is_causal(func, args, kwargs):
            flops /= 2
        for pre in prefixes(path):
            self.counts[direction, pre, FAMILY_OF[packet]] += flops
        return out


def count_step(case, model, x) -> dict[tuple[str, str, str], float]:
    """torch's FLOPs of one training step (forward and backward) of ``model`` on ``x``:
    ``{(direction, module path, family): flops}``, inclusive of submodules."""
    from .zoo import step

    owners = _Owners(model)
    # torch runs RNNs as one oneDNN (CPU) or cuDNN (CUDA) kernel that FlopCounterMode does not count;
    # without those libraries they run as their GEMMs (same FLOPs), which it does
    rnn = any(isinstance(m, torch.nn.RNNBase) for m in model.modules())
    try:
        with torch.backends.mkldnn.flags(enabled=not rnn), torch.backends.cudnn.flags(enabled=not rnn), \
                _Counter(owners) as counter:
            step(case, model, x)
    finally:
        owners.close()
    return dict(counter.counts)


HAND_LAYERS = (torch.nn.Linear, torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


def _physical(t: torch.Tensor) -> torch.Tensor:
    """The tensor a ``torch.func`` transform's wrappers hold (vmap: the batched one the kernel reads)."""
    while torch._C._functorch.is_functorch_wrapped_tensor(t):
        t = torch._C._functorch.get_unwrapped(t)
    return t


def hand_bytes(case, model, x) -> dict[str, float]:
    """``{module path: bytes}`` of one forward of every ``nn.Linear``/``nn.Conv*`` layer of ``model`` on
    ``x``: input, weight, bias and output, each read or written once, at the compute element size."""
    from .zoo import step

    names = {m: n for n, m in model.named_modules()}
    out: dict[str, float] = {}

    def hook(mod, args, result):
        if not isinstance(mod, HAND_LAYERS) or mod not in names or torch._C._current_autograd_node() is not None:
            return  # (a forward re-run by backward, checkpoint's recompute, is not a forward)
        size = (torch.finfo(case.autocast).bits // 8) if case.autocast is not None else None
        tensors = [args[0], mod.weight, *([mod.bias] if mod.bias is not None else []), result]
        total = sum(_physical(t).numel() * (size or t.element_size()) for t in tensors)
        out[names[mod]] = out.get(names[mod], 0.0) + float(total)

    from torch.nn.modules.module import register_module_forward_hook

    handle = register_module_forward_hook(hook)
    try:
        step(case, model, x)
    finally:
        handle.remove()
    return out
