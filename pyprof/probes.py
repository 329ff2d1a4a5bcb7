"""The private torch (and nvtx) interfaces ``pyprof.init()`` relies on, each checked before it is used.

torch gives no public way to read, on every op and at the cost of an attribute read, whether a
profiler is recording, nor the autograd sequence number an op is about to take. The instrumentation
therefore reads a few private names. A rename in a new torch must not silently disable the markers or
mislink backward kernels: :func:`require` checks every name in :data:`PROBES` before
:mod:`pyprof.annotate` is imported, and one failing probe makes ``init()`` raise one line that names the
interface, what pyprof needs it for and the torch version, with nothing patched.

Each probe is cheap (attribute lookups and a type check, no profiler started). The C accelerator reads
``torch.autograd.profiler._is_profiler_enabled`` from that module's ``__dict__``, which a probe checks
too. The nvtx package's internals matter only when an NVTX tool (Nsight Systems) is attached: without
them the markers would not reach it, so their probe fails only then.
"""

from __future__ import annotations

import os
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
    import importlib

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


def _present(path: str) -> Callable[[], str]:
    def check() -> str:
        try:
            _attr(path)
        except (AttributeError, RuntimeError):
            return "is missing"
        return ""
    return check


def _callable(path: str) -> Callable[[], str]:
    def check() -> str:
        try:
            obj = _attr(path)
        except (AttributeError, RuntimeError):
            return "is missing"
        return "" if callable(obj) else f"is a {type(obj).__name__}, not callable"
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
    return f"lacks {', '.join(missing)}" if missing else ""


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
    Probe("torch._C._functorch", "the batch sizes of ops under torch.func.vmap", lambda: "" if all(
        callable(_attr("torch._C." + n)) for n in ("_are_functorch_transforms_active", "_functorch.get_unwrapped",
                                                   "_functorch.is_batchedtensor", "_functorch.maybe_get_bdim",
                                                   "_functorch.is_functorch_wrapped_tensor",
                                                   "_functorch.maybe_get_level")) else "is missing"),
    Probe("nvtx._lib.lib", "handing markers to Nsight Systems", _nvtx_internals),
)


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


#: The oldest torch release ``init()`` supports (CI runs the torch tests on it and on the newest).
TORCH_FLOOR = (2, 4)


def check_torch(version: str | None = None) -> None:
    """Raise :class:`~pyprof.errors.UsageError` where torch (``version``: ``torch.__version__``) is
    older than :data:`TORCH_FLOOR`."""
    import re

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
