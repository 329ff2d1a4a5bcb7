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

import os

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


def load(**call_side):
    """The configured extension module (``build``, ``call``, ``module_call``), or None (see module docstring).

    ``call_side``: what :mod:`pyprof.annotate.ops` hands over for ``call`` (``state``, ``ids``, ``compiler``,
    ``tracing``, ``grad_enabled``, ``get_seq``, ``push``, ``pop``, ``nothing`` and ``nvtx_only``
    (emit's tokens), ``profiler`` (torch.autograd.profiler), ``hook_op``,
    ``build_payload``, ``meta_type``: :class:`~pyprof.annotate.ops.OpMeta`, whose ``packed`` slot is then
    read in place) and for the autocast part of ``build`` (``cdtype_json``, ``any_autocast``).
    """
    _fastpayload = extension()
    if _fastpayload is None:
        return None
    _fastpayload.configure(
        tensor_type=torch.Tensor, param_type=torch.nn.Parameter,
        name_txt=describe._name_txt, float_txt=describe._float_txt,
        dtype_txt=describe._dtype_json, device_txt=describe._device_json,
        dtype_json=describe.dtype_json, device_json=describe.device_json,
        tensor_json=describe._tensor_json, arg_json=describe.arg_json, name_head=describe.name_head,
        float_json=describe.float_json, entry=callsite._entry, one=callsite._one,
        no_name_head=describe.name_head(""), max_cached=describe._MAX_CACHED,
        device_samples=_device_samples(), **call_side,
    )
    return _fastpayload
