"""The advised changes ``pyprof advise --try`` applies to a script without editing it: each a patch of
torch that :func:`apply` installs and whose undo it returns (trials run in fresh processes, and the undo
still restores everything, so that a change never outlives its trial).

A change is made at the points a script cannot avoid: an optimizer's or DataLoader's constructor, the
call of a *root* module (one with parameters that no module called before contains: the model, not
its layers), ``Tensor.backward`` and torch's thread and TF32 settings. :data:`CHANGES` names each with
the advice kinds it tries, what it does, and the relative tolerance its results are held to (bf16
rounds to 8 bits of mantissa; every other change keeps float32 and reorders sums at most).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Undo = Callable[[], object]


@dataclass(frozen=True)
class Change:
    kinds: tuple[str, ...]
    what: str
    rtol: float
    patch: Callable[[dict], Undo]


def _wrap_init(cls: type, edit: Callable[[dict], None] | dict) -> Undo:
    """``cls.__init__`` with its keyword arguments edited first (by ``edit``, or updated with it); the undo."""
    orig = cls.__dict__["__init__"]

    @functools.wraps(orig)
    def init(self, *args, **kwargs):
        if callable(edit):
            edit(kwargs)
        else:
            kwargs.update(edit)
        orig(self, *args, **kwargs)

    setattr(cls, "__init__", init)  # noqa: B010 - (mypy refuses an assignment to __init__)
    return lambda: setattr(cls, "__init__", orig)


def _optim(params: dict) -> Undo:
    """Every torch.optim class made ``fused=True`` where it has a fused implementation, else
    ``foreach=True`` (whatever the script asked for)."""
    import torch

    undo = []
    for cls in vars(torch.optim).values():
        if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer) and "__init__" in cls.__dict__):
            continue
        names = inspect.signature(cls.__init__).parameters
        key = "fused" if "fused" in names else "foreach" if "foreach" in names else None
        if key:
            undo.append(_wrap_init(cls, {"foreach": None, "fused": True} if key == "fused" else {"foreach": True}))
    return lambda: [u() for u in undo]


def _loader(params: dict) -> Undo:
    """DataLoaders made with ``params["workers"]`` workers or more, kept between epochs, and pinned
    memory where CUDA runs."""
    import torch

    def edit(kw):
        kw["num_workers"] = max(kw.get("num_workers") or 0, int(params.get("workers") or 2))
        kw.setdefault("persistent_workers", True)
        kw.setdefault("pin_memory", torch.cuda.is_available())

    return _wrap_init(torch.utils.data.DataLoader, edit)


def on_roots(fn: Callable[[Any, tuple], Any]) -> Undo:
    """``fn(module, args)`` at every call of a root module (see the module docstring), as a global
    forward pre-hook (what it returns replaces the arguments); the undo."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    from pyprof.annotate.modules import unseen_by_dynamo

    inner: set[int] = set()

    def hook(module, args):
        if id(module) in inner or not any(True for _ in module.parameters()):
            return None
        inner.update(id(m) for m in module.modules() if m is not module)
        return fn(module, args)

    return register_module_forward_pre_hook(unseen_by_dynamo(hook)).remove


def _channels_last(params: dict) -> Undo:
    """Root modules with convolutions and their 4-D inputs in ``torch.channels_last``."""
    import torch

    done: set[int] = set()

    def to_cl(module, args):
        if id(module) not in done:
            done.add(id(module))
            if any(isinstance(m, torch.nn.Conv2d) for m in module.modules()):
                module.to(memory_format=torch.channels_last)
        return tuple(a.contiguous(memory_format=torch.channels_last) if isinstance(a, torch.Tensor) and a.dim() == 4
                     else a for a in args)

    return on_roots(to_cl)


def _compile(params: dict) -> Undo:
    """Root modules' ``forward`` compiled (``torch.compile(module.forward, mode=...)``) from their second
    call on; the undo gives them back the class's ``forward``."""
    import torch

    done: list = []

    def compile_(module, args):
        if not any(m is module for m in done):
            done.append(module)
            module.forward = torch.compile(module.forward, **({"mode": params["mode"]} if params.get("mode") else {}))

    off = on_roots(compile_)

    def undo():
        off()
        for m in done:
            m.__dict__.pop("forward", None)

    return undo


def _autocast(params: dict) -> Undo:
    """bf16 autocast from a root module's call to the next ``backward`` (the forward and the loss) or
    optimizer step."""
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    active: list = []

    def enter(module, args):
        if not active:
            p = next(module.parameters())
            active.append(torch.autocast(p.device.type, dtype=torch.bfloat16))
            active[0].__enter__()

    def leave(*_):
        if active:
            active.pop().__exit__(None, None, None)

    orig = torch.Tensor.backward

    @functools.wraps(orig)
    def backward(self, *args, **kwargs):
        leave()
        return orig(self, *args, **kwargs)

    torch.Tensor.backward = backward
    hooks = [on_roots(enter), register_optimizer_step_post_hook(leave).remove]

    def undo():
        leave()
        torch.Tensor.backward = orig
        for h in hooks:
            h()

    return undo


def _threads(params: dict) -> Undo:
    """``torch.set_num_threads(params["threads"])``, and the script's own calls held to it."""
    import torch

    orig, before = torch.set_num_threads, torch.get_num_threads()
    n = int(params["threads"])
    orig(n)
    torch.set_num_threads = lambda nthreads: orig(min(int(nthreads), n))

    def undo() -> None:
        torch.set_num_threads = orig
        orig(before)

    return undo


def _tf32(params: dict) -> Undo:
    """float32 matmuls and cuDNN convolutions allowed to run as TF32."""
    import torch

    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True

    def undo():
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before

    return undo


F32 = 1e-4  # losses after a few steps of a change that reorders float32 sums
CHANGES: dict[str, Change] = {
    "optim": Change(("optim",), "optimizers made fused=True (foreach=True where there is no fused one)", F32, _optim),
    "dataloader": Change(("dataloader",), "DataLoader(num_workers=W, persistent_workers=True, pin_memory on CUDA)",
                         F32, _loader),
    "channels_last": Change(("layout",), "model and 4-D inputs in torch.channels_last", F32, _channels_last),
    "compile": Change(("compile", "fuse", "launch"), "torch.compile on the root module(s) (launch: "
                      "mode='reduce-overhead')", 1e-3, _compile),
    "threads": Change(("threads",), "torch.set_num_threads(physical cores / processes)", F32, _threads),
    "bf16": Change(("bf16",), "torch.autocast(dtype=torch.bfloat16) around the forward and the loss", 2e-2, _autocast),
    "tf32": Change(("tf32",), "torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True",
                   2e-3, _tf32),
}


def for_kind(kind: str) -> str | None:
    """The change that tries advice of ``kind`` (None: it needs an edit of the script)."""
    return next((name for name, c in CHANGES.items() if kind in c.kinds), None)


def apply(name: str, params: dict | None = None) -> Undo:
    """Install change ``name`` of :data:`CHANGES`; returns its undo."""
    return CHANGES[name].patch(params or {})
