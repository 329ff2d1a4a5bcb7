"""Which callables ``init()`` replaces, and putting them back.

Namespaces (each a category of ``init``):

* ``functions``: public ``torch.*`` ops (the native functions exported by torch,
  plus the Python ops of ``torch.functional`` such as ``einsum``/``split``);
* ``methods``: ``torch.Tensor`` methods, operator dunders (``__add__``, ``__matmul__``, ``__getitem__``,
  ``__iadd__``...) included; metadata reads (``size``, ``dim``, ``is_*``...) and Python protocol
  hooks (``__repr__``, ``__len__``, ``__iter__``...) are left alone (:data:`TENSOR_SKIP`);
* ``functional``: ``torch.nn.functional``;
* ``extra``: ``torch.linalg``, ``torch.fft``, ``torch.special``.

With ``functions``, ``torch.cuda.CUDAGraph.replay`` too (:func:`graph_replay`): a replayed graph's kernels
run under one ``cudaGraphLaunch`` that no op encloses, so its op range (ns ``torch.cuda.CUDAGraph``, op
``replay``, with the caller's module path and call site) is what gives them an op.

Every replacement is recorded as (owner, name, original, was-in-owner's-dict) so :func:`unpatch_all`
restores exactly (deleting the attribute again when the original was inherited). TorchScript keeps
working: :func:`pyprof.torch_private.jit_register` registers each wrapper as what it wraps.
"""

from __future__ import annotations

import contextlib
import inspect
import types

import torch

from pyprof import torch_private as tp
from pyprof.annotate.ops import OpMeta, make_wrapper

TORCH_SKIP = frozenset({
    "result_type", "can_cast", "promote_types", "numel", "get_default_dtype", "typename",
    "broadcast_shapes", "unravel_index", "sym_int", "sym_float", "sym_max", "sym_min", "sym_not",
    "sym_ite", "sym_sum", "sym_fresh_size", "manual_seed", "seed", "initial_seed",
    "autocast_decrement_nesting", "autocast_increment_nesting",
})
TENSOR_SKIP = frozenset({
    # metadata reads and bookkeeping (no kernels; called all over torch's own Python code)
    "size", "dim", "stride", "numel", "nelement", "ndimension", "element_size", "data_ptr",
    "storage_offset", "get_device", "untyped_storage", "storage", "storage_type", "type", "tolist",
    "item", "dim_order", "has_names", "refine_names", "rename", "rename_", "align_to", "names",
    "register_hook", "register_post_accumulate_grad_hook", "retain_grad", "backward",
    "requires_grad_", "as_subclass", "module_load", "nbytes", "itemsize", "__torch_function__",
    "__torch_dispatch__",
    # torch recognises it by identity with ``TensorBase.clone`` where a torch-function mode
    # sees it: TorchDynamo's copy of a module onto fake tensors (FakeCopyMode, which torch 2.4
    # uses for every module it calls) would otherwise clone the real parameters. ``torch.clone`` stays.
    "clone",
    # Python protocol hooks
    "__repr__", "__str__", "__format__", "__hash__", "__bool__", "__int__", "__float__",
    "__complex__", "__index__", "__len__", "__iter__", "__contains__", "__dir__", "__sizeof__",
    "__reduce__", "__reduce_ex__", "__deepcopy__", "__copy__", "__setstate__", "__getstate__",
    "__array__", "__array_wrap__", "__array_priority__", "__dlpack__", "__dlpack_device__",
    "__init__", "__new__", "__del__", "__getattribute__", "__getattr__", "__setattr__",
    "__delattr__", "__init_subclass__", "__subclasshook__", "__class__", "__instancecheck__",
    "__cuda_array_interface__", "__weakref__", "__nonzero__",
})
FUNCTIONAL_SKIP = frozenset({
    "handle_torch_function", "has_torch_function", "has_torch_function_unary",
    "has_torch_function_variadic", "boolean_dispatch", "assert_int_or_pair",
})

_patched: list = []  # (owner, name, original attribute, had_own, wrapper)
_jit_regs: list = []  # wrapper functions registered with TorchScript (tp.jit_register)


def torch_functions():
    import torch.functional as tfun

    vf = tp.variable_functions
    for name in sorted(dir(vf)):
        if name.startswith(("_", "is_", "get_", "set_")) or name in TORCH_SKIP:
            continue
        v = getattr(torch, name, None)
        if v is not None and v is getattr(vf, name, None):
            yield torch, name, v
    for name in getattr(tfun, "__all__", ()):
        v = getattr(torch, name, None)
        if isinstance(v, types.FunctionType) and name not in TORCH_SKIP:
            yield torch, name, v


def tensor_methods():
    T = torch.Tensor
    for name in sorted(dir(T)):
        if name in TENSOR_SKIP or name.startswith("is_") or (
                name.startswith("_") and not (name.startswith("__") and name.endswith("__"))):
            continue
        v = inspect.getattr_static(T, name, None)
        if isinstance(v, (types.BuiltinFunctionType, types.FunctionType, types.MethodDescriptorType,
                          types.WrapperDescriptorType)):
            yield T, name, v


def functional_functions():
    import torch.nn.functional as F

    for name in sorted(dir(F)):
        if name.startswith("_") or name in FUNCTIONAL_SKIP:
            continue
        v = getattr(F, name)
        if isinstance(v, types.BuiltinFunctionType) or (
                isinstance(v, types.FunctionType) and getattr(v, "__module__", "") == "torch.nn.functional"):
            yield F, name, v


def extra_functions():
    import importlib

    for modname in ("torch.linalg", "torch.fft", "torch.special"):
        mod = importlib.import_module(modname)
        for name in sorted(getattr(mod, "__all__", None) or dir(mod)):
            if name.startswith("_"):
                continue
            v = getattr(mod, name, None)
            if isinstance(v, (types.BuiltinFunctionType, types.FunctionType)):
                yield mod, name, v


def graph_replay():
    """``torch.cuda.CUDAGraph.replay``, where this torch defines it in Python (it does on CPU builds too)."""
    v = vars(torch.cuda.CUDAGraph).get("replay")
    if isinstance(v, types.FunctionType):
        yield torch.cuda.CUDAGraph, "replay", v


def _ns_of(owner) -> str:
    if owner is torch.Tensor:
        return "torch.Tensor"
    if owner is torch.cuda.CUDAGraph:
        return "torch.cuda.CUDAGraph"
    return owner.__name__


def patch(owner, name: str, orig, ns: str | None = None, composite: bool | None = None) -> None:
    """Replace ``owner.name`` (currently ``orig``, as found statically) by an op wrapper."""
    ns = ns or _ns_of(owner)
    had_own = name in vars(owner)
    call = getattr(owner, name) if isinstance(orig, (staticmethod, classmethod)) else orig
    wrapper = make_wrapper(call, OpMeta(ns, name, call, composite))
    new = staticmethod(wrapper) if isinstance(orig, staticmethod) else wrapper
    _jit_regs.extend(tp.jit_register(call, wrapper))
    setattr(owner, name, new)
    _patched.append((owner, name, orig, had_own, new))


def restore(owner, name: str, orig, had_own: bool) -> None:
    """Put ``owner.name`` back as it was: the original if ``owner`` defined it itself, else nothing
    (the attribute was inherited, so the wrapper set on ``owner`` is deleted and lookup falls through)."""
    if had_own:
        setattr(owner, name, orig)
        return
    with contextlib.suppress(AttributeError):
        delattr(owner, name)


def unpatch_all() -> None:
    """Put every original back, newest first; undo the TorchScript registrations."""
    while _patched:
        owner, name, orig, had_own, _new = _patched.pop()
        restore(owner, name, orig, had_own)
    tp.jit_unregister(_jit_regs)


def patch_namespaces(functions=True, methods=True, functional=True, extra=True) -> int:
    """Install wrappers for the chosen categories; returns how many callables were wrapped."""
    tp.jit_builtin_table()  # built from the originals, before anything is replaced
    seen: set = set()
    # functional first: F.conv2d is torch.conv2d; name it as the user called it where possible
    for chosen, group in ((functional, functional_functions), (functions, torch_functions),
                          (functions, graph_replay), (methods, tensor_methods), (extra, extra_functions)):
        for owner, name, v in list(group()) if chosen else ():
            if (id(owner), name) not in seen:
                seen.add((id(owner), name))
                patch(owner, name, v)
    return len(seen)


def swap(installed: bool) -> None:
    """Put the originals back in place (``installed=False``) or the wrappers again (``True``), keeping
    the record of the patch: for :mod:`pyprof.annotate.torchtables`, which imports TorchDynamo with
    the originals in place."""
    for owner, name, orig, had_own, new in _patched:
        if installed:
            setattr(owner, name, new)
        else:
            restore(owner, name, orig, had_own)
