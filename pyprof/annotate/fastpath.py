"""Load the optional C accelerator of the op payload (:mod:`pyprof.annotate._fastpayload`).

The extension builds the same text as :func:`pyprof.annotate.ops.build_payload`, byte for byte,
reading the caches that the Python code fills and calling the Python code itself for everything
it does not handle (see the comment at the top of ``_fastpayload.c``). It is compiled at install
time where a C compiler is present; where it is not (or with ``PYPROF_PURE_PYTHON=1`` in the
environment), :func:`load` returns None and the op wrapper runs the pure-Python path.

Three entry points: ``build(meta, args, kwargs, op_id, s0)`` is :func:`~pyprof.annotate.ops.build_payload`;
``call(meta, fn, args, kwargs)`` is :func:`~pyprof.annotate.ops.call_marked` (nesting flag,
tracing check, op id, autograd ``seq``, payload, push, the call, pop, backward hooks), calling the
same Python ``push``/``pop``/``hook_op`` where a torch.profiler session or a Recorder listens (an
NVTX tool alone is served in C, through the extension's own copy of NVTX v3, and a range nobody
listens to costs no Python call); ``module_call(module, orig_call, args, kwargs)`` is the range of :func:`pyprof.annotate.modules._call` (configured by that module with
``configure_modules``). The wrappers themselves stay Python functions, and ask
``torch.compiler.is_dynamo_compiling()`` before calling into C (TorchDynamo folds it to True, so it
still traces straight through them to the original op); the C code checks the compile-session flag
``torch.compiler._is_compiling_flag`` itself, where Dynamo cannot guard on it (``compiler=``; None on
a torch without that flag, where the wrappers ask ``is_compiling()`` instead).
"""

from __future__ import annotations

import functools
import os
import warnings

import torch

from pyprof.annotate import callsite, describe


def extension():
    """The extension module as imported (not configured), or None where it was not built or
    ``PYPROF_PURE_PYTHON=1``."""
    if os.environ.get("PYPROF_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        from pyprof.annotate import _fastpayload
    except ImportError:
        return None
    return _fastpayload


def _device_samples() -> list:
    """Devices of several types and indices, equal pairs included: the C code keys its device texts
    by the bytes of the device value only where they tell these apart exactly as ``==`` does."""
    out = []
    for spec in ("cpu", "cpu", "cuda", "cuda:0", "cuda:0", "cuda:1", "cuda:7", "meta", "mps", "xpu:2",
                 "privateuseone:0"):
        try:
            out.append(torch.device(spec))
        except (RuntimeError, ValueError):
            pass
    return out


def _tensor_reads_off() -> bool:
    """``PYPROF_NO_TENSOR_READS=1``: the C code keeps to torch's getters (no samples handed over)."""
    return os.environ.get("PYPROF_NO_TENSOR_READS", "") not in ("", "0")


def _layout_samples() -> tuple[list, list]:
    """Sample tensors and what torch says of them, for the C code's search of the TensorImpl fields
    (see ``tensor_key_read`` in ``_fastpayload.c``): ``(tensor, shape, dtype, device, is_contiguous,
    dispatch keys, impl handle)`` for every dtype torch can make, on cpu and meta, one to five dims,
    contiguous and not (transposed, sliced, expanded, channels-last, narrowed), as leaves needing
    grad, as Parameters and from inference mode; and the plain dense dispatch-key sets: those the
    samples had, and the same on CUDA (the CPU backend bit swapped for CUDA's, as torch composes
    them; no CUDA device needed). Empty lists where this torch lacks what is needed, or with
    ``PYPROF_NO_TENSOR_READS=1`` in the environment (the C code then keeps to torch's getters)."""
    if _tensor_reads_off():
        return [], []
    C = torch._C
    if not all(hasattr(C, n) for n in ("_dispatch_keys", "_tensor_impl_raw_handle", "DispatchKeySet", "DispatchKey")):
        return [], []
    if not hasattr(C.DispatchKeySet, "raw_repr"):  # torch 2.4: the key sets' bits cannot be read
        return [], []
    dtypes = [getattr(torch, n) for n in (
        "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
        "complex64", "complex128", "uint16", "uint32", "uint64", "float8_e4m3fn", "float8_e5m2",
        "float8_e4m3fnuz", "float8_e5m2fnuz") if isinstance(getattr(torch, n, None), torch.dtype)]
    tensors = []
    try:
        for i, dt in enumerate(dtypes):
            for dev in ("cpu", "meta"):
                shape = [(3, 5, 7), (11,), (2, 13), (3, 1, 4, 9), (2, 3, 1, 5, 6)][i % 5]
                t = torch.empty(shape, dtype=dt, device=dev)
                tensors += [t, t.t() if t.dim() == 2 else t.transpose(0, -1), t[..., ::2]]
        base = torch.empty(2, 3, 4, 5)
        tensors += [base.contiguous(memory_format=torch.channels_last), base[:, 1:], base[:1].expand(4, 3, 4, 5),
                    torch.empty(1, 5).t(), torch.empty(5, requires_grad=True),
                    torch.nn.Parameter(torch.empty(4, 6)), torch.nn.Parameter(torch.empty(6, 4)).t().detach()]
        with torch.inference_mode():
            tensors += [torch.empty(3, 4), torch.empty(4, 3).t(), torch.empty(2, 2, dtype=torch.int64)]
        samples, keys = [], set()
        for t in tensors:
            ks = C._dispatch_keys(t).raw_repr()
            samples.append((t, tuple(t.shape), t.dtype, t.device, t.is_contiguous(), ks, C._tensor_impl_raw_handle(t)))
            keys.add(ks)
        cpu, cuda = (C.DispatchKeySet(k).raw_repr() for k in (C.DispatchKey.CPU, C.DispatchKey.CUDA))
        keys |= {k ^ cpu ^ cuda for k in keys if k & cpu == cpu}  # the CUDA twins (same functionality bits)
    except (AttributeError, RuntimeError, TypeError, ValueError):
        return [], []
    return samples, sorted(keys)


def _grad_samples() -> list:
    """``(tensor, has autograd metadata)`` pairs on which the C code checks its direct call of
    ``c10::TensorImpl::requires_grad()`` against torch's getter (see "answers read from libtorch" in
    ``_fastpayload.c``): fresh tensors made outside autograd and inference tensors (no metadata);
    leaves and results that require grad, a Parameter, and a tensor whose requires_grad was set and
    then cleared (metadata kept, requires_grad False). Empty where this torch cannot make them, or
    with ``PYPROF_NO_TENSOR_READS=1``."""
    if _tensor_reads_off():
        return []
    try:
        with torch.enable_grad():
            leaf = torch.empty(3, requires_grad=True)
            out = [(torch.empty(3), False), (torch.empty(2, 2, dtype=torch.int64), False),
                   (leaf, True), (leaf * 2, True), (torch.nn.Parameter(torch.empty(2, 2)), True),
                   (torch.empty(3).requires_grad_().requires_grad_(False), True)]
        with torch.inference_mode():
            out.append((torch.empty(3), False))
    except (AttributeError, RuntimeError, TypeError):
        return []
    return out


def _tracing_read_agrees(ext, is_tracing) -> bool:
    """Does the extension's direct read of torch.jit's tracing state (``probe("tracing")``) say what
    ``torch._C._is_tracing()`` says, outside a trace and inside one (``torch.jit.trace`` of a probe)?"""
    if ext.probe("tracing") is not False or is_tracing():
        return False
    seen = []

    def traced(x):
        seen.append((ext.probe("tracing"), bool(is_tracing())))
        return x + 1

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch.jit.trace is deprecated; its warning is not the user's
            torch.jit.trace(traced, torch.zeros(1), check_trace=False)
    except Exception:  # noqa: BLE001 - no tracer here: keep torch's own call
        return False
    return seen == [(True, True)] and ext.probe("tracing") is False


def _grad_mode_read_agrees(ext, grad_enabled) -> bool:
    """Does the extension's direct read of the grad mode (``probe("grad_mode")``) say what
    ``torch.is_grad_enabled()`` says under enable_grad, no_grad, inference_mode and set_grad_enabled?"""
    seen = []
    try:  # each context made only when entered: set_grad_enabled switches the mode when it is made
        for make in (torch.enable_grad, torch.no_grad, torch.inference_mode, lambda: torch.set_grad_enabled(True),
                     lambda: torch.set_grad_enabled(False)):
            with make():
                seen.append((ext.probe("grad_mode"), bool(grad_enabled())))
    except (AttributeError, RuntimeError, TypeError):
        return False
    return all(a is b for a, b in seen) and {b for _, b in seen} == {True, False}


def load(**call_side):
    """The configured extension module (``build``, ``call``, ``module_call``), or None (see module docstring).

    Tensors of other kinds than plain strided ones (another layout than ``strided``, a dtype of
    ``describe.QUANTIZED_DTYPES``, a nested tensor) are handed to ``describe._tensor_json``, which writes
    their ``"kind"`` (see :func:`pyprof.annotate.describe.tensor_kind`).

    ``call_side``: what :mod:`pyprof.annotate.ops` hands over for ``call`` (``state``, ``ids``, ``compiler``,
    ``tracing``, ``grad_enabled``, ``get_seq``, ``push``, ``pop``, ``nothing`` and ``nvtx_only``
    (emit's tokens), ``profiler`` (torch.autograd.profiler), ``hook_op``,
    ``build_payload``, ``meta_type``: :class:`~pyprof.annotate.ops.OpMeta`, whose ``packed`` slot is then
    read in place) and for the autocast part of ``build`` (``cdtype_json``, ``any_autocast``);
    ``layout_samples``/``layout_keys`` replace :func:`_layout_samples`', ``grad_samples``
    :func:`_grad_samples`' (for the tests). Then the extension asks libtorch directly for the tracing
    state and the grad mode where :func:`_tracing_read_agrees` and :func:`_grad_mode_read_agrees`,
    and the state object gets a ``route_sink`` through
    which every ``S.refresh()`` hands the extension its new route bits (so a range reads a C int,
    not ``S.route``).
    """
    _fastpayload = extension()
    if _fastpayload is None:
        return None
    try:
        return _configure(_fastpayload, call_side)
    except Exception as exc:  # the accelerator is optional: any failure to set it up takes the Python path
        global LOAD_ERROR
        LOAD_ERROR = f"{type(exc).__name__}: {exc}"
        state = call_side.get("state")
        if state is not None and hasattr(state, "route_sink"):
            state.route_sink = None
        return None


#: why :func:`load` fell back to the Python path, if it did (None: it did not)
LOAD_ERROR: str | None = None


def _configure(_fastpayload, call_side: dict):
    """:func:`load`'s setup of the imported extension (raises if anything in it fails)."""
    _fastpayload.configure(
        tensor_type=torch.Tensor, param_type=torch.nn.Parameter,
        name_txt=describe._name_txt, float_txt=describe._float_txt,
        dtype_txt=describe._dtype_json, device_txt=describe._device_json,
        dtype_json=describe.dtype_json, device_json=describe.device_json,
        tensor_json=describe._tensor_json, arg_json=describe.arg_json, name_head=describe.name_head,
        float_json=describe.float_json, entry=callsite._entry, one=callsite._one,
        strided=torch.strided, quantized_dtypes=describe.QUANTIZED_DTYPES,
        no_name_head=describe.name_head(""), max_cached=describe._MAX_CACHED,
        device_samples=_device_samples(), **call_side,
        **({} if "layout_samples" in call_side
           else dict(zip(("layout_samples", "layout_keys"), _layout_samples(), strict=True))),
        **({} if "grad_samples" in call_side else {"grad_samples": _grad_samples()}),
        torch_lib=getattr(torch._C, "__file__", None),
    )
    _fastpayload.use_direct("tracing", _tracing_read_agrees(_fastpayload, call_side["tracing"]))
    _fastpayload.use_direct("grad_mode", _grad_mode_read_agrees(_fastpayload, call_side["grad_enabled"]))
    state = call_side["state"]
    if hasattr(state, "route_sink"):
        state.route_sink = functools.partial(_fastpayload.set_route, state)
    return _fastpayload
