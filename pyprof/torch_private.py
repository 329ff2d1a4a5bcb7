"""Every private torch name pyprof uses, bound here and nowhere else (besides :mod:`pyprof.probes`).

Each name either has a probe in :data:`pyprof.probes.PROBES`, which ``init()`` runs before this
module is imported (a missing one stops ``init()`` with one line, nothing patched), or is read here
with its fallback for a torch that lacks it (``getattr`` with a default, a ``None`` module).
``tests/test_private_names.py`` checks that no other file of pyprof names one, ``tests/test_probes.py``
that each exists on the torch under test. Import only after ``probes.require()`` passed
(``pyprof.annotate`` does).
"""

from __future__ import annotations

import importlib
import operator
import sys
import types
from typing import Any

import torch
import torch._guards
import torch.autograd.profiler

from pyprof.probes import DYNAMO, attr_or_none, dynamo_imported  # noqa: F401  (re-exported)

_C: Any = torch._C

# -- the profiler (emit, ops, modules; the C accelerator gets FLAGS and RECORDING from ops) --------
#: ``FLAGS[RECORDING]``: the plain bool torch.profiler sets while it records, read on every op (a dict
#: lookup costs what an attribute read does, and TorchDynamo never reaches it: see ops.make_wrapper)
FLAGS: dict[str, Any] = vars(torch.autograd.profiler)
RECORDING = "_is_profiler_enabled"
#: the functions of torch.autograd.profiler that torch.profiler calls as it starts and stops
PROFILER_HOOKS = ("_run_on_profiler_start", "_run_on_profiler_stop")
profiler_enabled = _C._autograd._profiler_enabled
profiler_type = _C._autograd._profiler_type
KINETO = _C._profiler.ActiveProfilerType.KINETO
record_function_enter = torch.ops.profiler._record_function_enter_new
record_function_exit = torch.ops.profiler._record_function_exit._RecordFunction

# -- autograd and torch.func (backward, describe, ops) ---------------------------------------------
get_sequence_nr = _C._autograd._get_sequence_nr
node_sequence_nr = operator.methodcaller("_sequence_nr")  # an autograd node's own sequence number
current_autograd_node = getattr(_C, "_current_autograd_node", lambda: None)
#: the function of torch.autograd (and torch.autograd.graph) every backward pass runs through
ENGINE_RUN_BACKWARD = "_engine_run_backward"
functorch_active = _C._are_functorch_transforms_active
functorch = _C._functorch

# -- tracing, compiling and dispatch (ops, modules, patch, torchtables) -------------------------------
# torch.jit.trace recording? (what torch.jit.is_tracing() asks, at half the cost of the older torch's test)
is_tracing = getattr(_C, "_is_tracing", None) or (lambda: _C._get_tracing_state() is not None)
any_autocast = getattr(_C, "_is_any_autocast_enabled", lambda: True)
compile_context = torch._guards.CompileContext.try_get
tracing_context = torch._guards.TracingContext.try_get
current_compile_id = torch._guards.CompileContext.current_compile_id
#: the attribute TorchDynamo unwraps, tracing what it holds in place of the function that has it
DYNAMO_INLINE = "_torchdynamo_inline"
variable_functions = _C._VariableFunctions
jit_schemas = _C._jit_get_schemas_for_operator


def build_dynamo_tables() -> None:
    """Build TorchDynamo's cached maps of torch callables (where it is imported)."""
    tr = sys.modules.get(DYNAMO + ".trace_rules")
    for name in ("get_torch_obj_rule_map", "get_tensor_method"):
        fn = getattr(tr, name, None)
        if fn is not None:
            fn()


def build_device_tables() -> None:
    """Build the cached set of factory functions ``with torch.device(...)`` redirects."""
    fn = attr_or_none("torch.utils._device._device_constructors")
    if fn is not None:
        fn()


def compiled_original(module: Any) -> Any:
    """The user's module inside ``module`` where ``module`` is torch.compile's OptimizedModule, else None."""
    return module._modules.get("_orig_mod")


def global_module_hooks() -> list:
    """Every global module forward (pre-)hook registered now."""
    from torch.nn.modules import module as mm

    return [*mm._global_forward_pre_hooks.values(), *mm._global_forward_hooks.values()]


def jit_tables() -> tuple[Any, Any] | None:
    """(torch's boolean-dispatch table, TorchScript's builtins module), or None where absent."""
    try:
        from torch import _jit_internal
        from torch.jit import _builtins
    except ImportError:
        return None
    return _jit_internal.boolean_dispatched, _builtins


def jit_register(orig: Any, wrapper: Any) -> list[tuple[str, Any]]:
    """Make TorchScript treat ``wrapper`` as ``orig`` (a builtin op's wrapper is registered under its
    aten name, a Python function's carries ``__original_fn`` for ``torch.jit.script`` to compile, and
    boolean-dispatch entries are mirrored); returns what :func:`jit_unregister` takes back."""
    tables = jit_tables()
    if tables is None:
        return []
    dispatched, builtins = tables
    regs = []
    if isinstance(orig, types.FunctionType):
        # torch.jit.script compiles ``__original_fn`` of such wrappers instead of the wrapper
        setattr(wrapper, "__script_if_tracing_wrapper", True)
        setattr(wrapper, "__original_fn", orig)
        disp = dispatched.get(orig)
        if disp is not None:
            dispatched[wrapper] = disp
            regs.append(("disp", wrapper))
    op = builtins._find_builtin(orig)
    if op is not None:
        builtins._register_builtin(wrapper, op)
        regs.append(("builtin", wrapper))
    return regs


def jit_unregister(regs: list[tuple[str, Any]]) -> None:
    """Undo :func:`jit_register` for ``regs`` (emptied)."""
    tables = jit_tables()
    if tables is None:
        regs.clear()
        return
    dispatched, builtins = tables
    table = builtins._get_builtin_table()
    while regs:
        kind, w = regs.pop()
        if kind == "disp":
            dispatched.pop(w, None)
        else:
            table.pop(id(w), None)


def jit_builtin_table() -> None:
    """Build TorchScript's table of builtins (from the functions in place now)."""
    tables = jit_tables()
    if tables is not None:
        tables[1]._get_builtin_table()


# -- Inductor (pyprof.annotate.inductor) -----------------------------------------------------------
INDUCTOR_CONFIG = "torch._inductor.config"
INDUCTOR_GRAPH = "torch._inductor.graph"
INDUCTOR_WRAPPER = "torch._inductor.codegen.wrapper"
INDUCTOR_SCHEDULER = "torch._inductor.scheduler"
#: (key, module, class, method): where a torch without provenance tracking names a generated kernel
INDUCTOR_DEFINERS = {"define_cpp": ("torch._inductor.codegen.cpp", "CppScheduling", "define_kernel"),
                     "define_triton": ("torch._inductor.codegen.triton", "TritonScheduling", "define_kernel")}


def inductor_graph() -> Any:
    """The ``GraphLowering`` Inductor is generating code for now."""
    return importlib.import_module("torch._inductor.virtualized").V.graph


def inductor_kernel_nodes() -> dict:
    """Inductor's provenance tracker: kernel -> its origin post-grad nodes' names ({} where absent)."""
    return getattr(importlib.import_module("torch._inductor.debug"),
                   "_inductor_triton_kernel_to_post_grad_node_info", None) or {}


def inductor_kernel_stacks() -> dict:
    """Inductor's provenance tracker: kernel -> the stack traces of its nodes ({} where absent)."""
    return getattr(importlib.import_module("torch._inductor.debug"), "_inductor_kernel_stack_trace", None) or {}
