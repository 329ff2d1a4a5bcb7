"""The private torch (and nvtx) interfaces ``pyprof.init()`` relies on, each checked before it is used.

:mod:`pyprof.torch_private` binds them; no other module of pyprof names one (``tests/test_probes.py``).

torch gives no public way to read, on every op and at the cost of an attribute read, whether a
profiler is recording, nor the autograd sequence number an op is about to take. The instrumentation
therefore reads a few private names. A rename in a new torch must not silently disable the markers or
mislink backward kernels: :func:`require` checks every name in :data:`PROBES` before
:mod:`pyprof.annotate` is imported, and one failing probe makes ``init()`` raise one line that names the
interface, what pyprof needs it for and the torch version, with nothing patched.

Each probe is cheap (attribute lookups and a type check, no profiler started). The C accelerator is
handed the profiler flag's namespace and name at ``configure()`` and names nothing of torch itself.
The names read with a fallback (:data:`OPTIONAL`) need no probe: the tests check they exist. The nvtx
package's internals matter only when an NVTX tool (Nsight Systems) is attached: without them the
markers would not reach it, so their probe fails only then.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass

from pyprof.errors import UsageError


@dataclass(frozen=True)
class Probe:
    """One private interface: its dotted name, what pyprof uses it for, and the check (``""``: present
    and usable; else what is wrong)."""

    name: str
    used_for: str
    check: Callable[[], str]


def _attr(path: str):
    """The object at dotted ``path`` (imported module, then attributes), or raise AttributeError."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise AttributeError(path)


def attr_or_none(path: str):
    """The object at dotted ``path``, or None where it is missing."""
    try:
        return _attr(path)
    except (AttributeError, RuntimeError):
        return None


def _present(*paths: str) -> Callable[[], str]:
    return lambda: "" if all(attr_or_none(p) is not None for p in paths) else "is missing"


def _callable(*paths: str) -> Callable[[], str]:
    """All of ``paths`` callable (one: "is missing", or what it is instead; several: which are not)."""
    def check() -> str:
        bad = [p for p in paths if not callable(attr_or_none(p))]
        if len(paths) > 1:
            return f"lacks {', '.join(bad)}" if bad else ""
        obj = attr_or_none(paths[0])
        return "is missing" if obj is None else "" if not bad else f"is a {type(obj).__name__}, not callable"
    return check


def _profiler_flag() -> str:
    import torch.autograd.profiler as ap

    flag = vars(ap).get("_is_profiler_enabled", None)
    if flag is None:
        return "is missing from torch.autograd.profiler's namespace"
    return "" if isinstance(flag, bool) else f"is a {type(flag).__name__}, not a bool"


def _sequence_nr() -> str:
    import torch

    get = getattr(getattr(torch._C, "_autograd", None), "_get_sequence_nr", None)
    if get is None:
        return "is missing"
    value = get()
    return "" if isinstance(value, int) and value >= 0 else f"returned {value!r}, not a count"


def _kineto_type() -> str:
    import torch

    kinds = getattr(getattr(torch._C, "_profiler", None), "ActiveProfilerType", None)
    return "" if kinds is not None and hasattr(kinds, "KINETO") else "is missing (or has no KINETO)"


def _record_function_ops() -> str:
    import torch

    ns = torch.ops.profiler
    missing = [n for n in ("_record_function_enter_new", "_record_function_exit") if not hasattr(ns, n)]
    if not missing and not hasattr(ns._record_function_exit, "_RecordFunction"):
        missing = ["_record_function_exit._RecordFunction"]
    return f"lacks {', '.join(missing)}" if missing else ""


def _node_sequence_nr() -> str:
    import torch

    with torch.inference_mode(False), torch.enable_grad():
        node = torch.ones(1, requires_grad=True).mul(2).grad_fn
    return "" if isinstance(getattr(node, "_sequence_nr", lambda: None)(), int) else "is missing"


def _tracing_state() -> str:
    import torch

    ok = callable(getattr(torch._C, "_is_tracing", None)) or callable(getattr(torch._C, "_get_tracing_state", None))
    return "" if ok else "is missing (and torch._C._get_tracing_state too)"


def _nvtx_internals() -> str:
    if not os.environ.get("NVTX_INJECTION64_PATH"):
        return ""  # no NVTX tool attached: the nvtx package is not used
    try:
        from nvtx._lib.lib import DummyDomain, EventAttributes, RegisteredString  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure means the markers cannot reach the tool
        return "is missing DummyDomain, EventAttributes or RegisteredString, and an NVTX tool is attached"
    return ""


#: Every private interface init() uses (the modules that use them say so where they do).
PROBES: tuple[Probe, ...] = (
    Probe("torch.autograd.profiler._is_profiler_enabled", "knowing on every op whether torch.profiler records",
          _profiler_flag),
    Probe("torch._C._autograd._profiler_enabled", "knowing whether the active profiler is torch.profiler's",
          _callable("torch._C._autograd._profiler_enabled")),
    Probe("torch._C._autograd._profiler_type", "knowing whether the active profiler is torch.profiler's",
          _callable("torch._C._autograd._profiler_type")),
    Probe("torch._C._profiler.ActiveProfilerType", "knowing whether the active profiler is torch.profiler's",
          _kineto_type),
    Probe("torch.ops.profiler._record_function_enter_new", "writing markers into torch.profiler traces",
          _record_function_ops),
    Probe("torch._C._autograd._get_sequence_nr", "tying backward kernels to their forward op", _sequence_nr),
    Probe("torch._C._VariableFunctions", "finding the torch functions to instrument",
          _present("torch._C._VariableFunctions")),
    Probe("torch._C._jit_get_schemas_for_operator", "naming the arguments of native functions",
          _callable("torch._C._jit_get_schemas_for_operator")),
    Probe("torch._C._is_tracing", "leaving torch.jit.trace recordings unmarked", _tracing_state),
    Probe("torch._C._functorch", "the batch sizes of ops under torch.func.vmap", lambda: _callable(*(
        "torch._C." + n for n in ("_are_functorch_transforms_active", "_functorch.get_unwrapped",
                                  "_functorch.is_batchedtensor", "_functorch.maybe_get_bdim",
                                  "_functorch.is_functorch_wrapped_tensor", "_functorch.maybe_get_level",
                                  "_functorch.get_interpreter_stack")))() or _present(
        "torch._C._functorch.TransformType.Grad")()),
    Probe("torch._guards.CompileContext", "knowing whether torch.compile runs on this thread",
          _callable("torch._guards.CompileContext.try_get", "torch._guards.TracingContext.try_get",
                    "torch._guards.CompileContext.current_compile_id")),
    Probe("torch.autograd.graph.Node._sequence_nr", "tying backward kernels to their forward op",
          _node_sequence_nr),
    Probe("torch.nn.modules.module._global_forward_pre_hooks", "noticing other tools' global module hooks",
          _present("torch.nn.modules.module._global_forward_pre_hooks",
                   "torch.nn.modules.module._global_forward_hooks")),
    Probe("nvtx._lib.lib", "handing markers to Nsight Systems", _nvtx_internals),
)

#: The private names :mod:`pyprof.torch_private` reads with a fallback where a torch lacks them (so no
#: probe stops ``init()``), each with the first torch release that has it (the tests check them).
OPTIONAL = {n: (2, 4) for n in (
    "torch._C._current_autograd_node", "torch._C._is_any_autocast_enabled", "torch.autograd._engine_run_backward",
    "torch.utils._device._device_constructors", "torch.autograd.profiler._run_on_profiler_start",
    "torch.autograd.profiler._run_on_profiler_stop", "torch._dynamo.trace_rules.get_torch_obj_rule_map",
    "torch._dynamo.trace_rules.get_tensor_method", "torch._inductor.virtualized.V",
    "torch._inductor.scheduler.Scheduler.codegen_extern_call", "torch._inductor.graph.GraphLowering.codegen",
    "torch.jit._builtins._find_builtin", "torch.jit._builtins._register_builtin",
    "torch.jit._builtins._get_builtin_table", "torch._jit_internal.boolean_dispatched")} | {
    "torch._inductor.debug._inductor_triton_kernel_to_post_grad_node_info": (2, 8),
    "torch._inductor.debug._inductor_kernel_stack_trace": (2, 8)}


def failures() -> list[tuple[Probe, str]]:
    """(probe, problem) for every probe that fails here."""
    out = []
    for p in PROBES:
        try:
            problem = p.check()
        except Exception as exc:  # noqa: BLE001 - a probe that raises has found a changed interface
            problem = f"raised {type(exc).__name__}: {exc}"
        if problem:
            out.append((p, problem))
    return out


DYNAMO = "torch._dynamo"


def dynamo_imported() -> bool:
    """Whether TorchDynamo has been imported (importing it costs seconds: pyprof never does)."""
    return DYNAMO in sys.modules


#: The oldest torch release ``init()`` supports (CI runs the torch tests on it and on the newest).
TORCH_FLOOR = (2, 4)


def check_torch(version: str | None = None) -> None:
    """Raise :class:`~pyprof.errors.UsageError` where torch (``version``: ``torch.__version__``) is
    older than :data:`TORCH_FLOOR`."""
    if version is None:
        import torch

        version = str(torch.__version__)
    m = re.match(r"(\d+)\.(\d+)", version)
    if m is None or (int(m.group(1)), int(m.group(2))) < TORCH_FLOOR:
        floor = ".".join(map(str, TORCH_FLOOR))
        raise UsageError(f"pyprof.init() needs torch {floor} or newer, and this is torch {version}",
                         f"upgrade it (pip install 'torch>={floor}'); pyprof parse and prof need no torch")


def require() -> None:
    """Raise :class:`~pyprof.errors.UsageError` where torch is older than :data:`TORCH_FLOOR`, or naming
    the first private interface that is not as pyprof needs it (all failing ones are counted), with
    the torch version."""
    check_torch()
    bad = failures()
    if not bad:
        return
    import torch

    probe, problem = bad[0]
    more = f" (and {len(bad) - 1} more: {', '.join(p.name for p, _ in bad[1:])})" if len(bad) > 1 else ""
    raise UsageError(f"pyprof.init() cannot instrument torch {torch.__version__}: {probe.name} {problem}; "
                     f"pyprof needs it for {probe.used_for}{more}",
                     "use a torch release pyprof supports (README: Compatibility) or report this torch version; "
                     "pyprof parse and prof work without init()")
