"""Load the optional C accelerator of the op range path (:mod:`pyprof.annotate._fastpayload`; its rules
and tests: docs/design.md, "The C accelerator of init()'s op path").

The extension's ``build(meta, args, kwargs, op_id, s0)`` writes the same text as
:func:`pyprof.annotate.ops.build_payload`, byte for byte, and its ``call(meta, fn, args, kwargs)``
does what :func:`pyprof.annotate.ops.call_marked` does, calling the Python code for everything it
does not handle itself. Where it was not built (no C compiler at install time), with
``PYPROF_PURE_PYTHON=1``, or if setting it up fails in any way, :func:`load` returns None and the op
wrapper runs the pure-Python path.
"""

from __future__ import annotations

import functools
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


#: why :func:`load` fell back to the Python path, if it did (None: it did not)
LOAD_ERROR: str | None = None


def load(**call_side):
    """The configured extension module, or None (see the module docstring).

    ``call_side``: the Python side ``call`` and ``build`` use, :data:`pyprof.annotate.ops.CALL_SIDE`
    (its ``state``'s ``route_sink`` then hands every new ``S.route`` to the extension).
    """
    global LOAD_ERROR
    ext = extension()
    if ext is None:
        return None
    state = call_side["state"]
    try:
        ext.configure(
            tensor_type=torch.Tensor, param_type=torch.nn.Parameter,
            name_txt=describe._name_txt, float_txt=describe._float_txt,
            dtype_txt=describe._dtype_json, device_txt=describe._device_json,
            dtype_json=describe.dtype_json, device_json=describe.device_json,
            tensor_json=describe._tensor_json, arg_json=describe.arg_json, name_head=describe.name_head,
            float_json=describe.float_json, entry=callsite._entry, one=callsite._one,
            strided=torch.strided, quantized_dtypes=describe.QUANTIZED_DTYPES,
            no_name_head=describe.name_head(""), max_cached=describe._MAX_CACHED, **call_side)
    except Exception as exc:  # noqa: BLE001 - the accelerator is optional: any failure takes the Python path
        LOAD_ERROR = f"{type(exc).__name__}: {exc}"
        state.route_sink = None
        return None
    LOAD_ERROR = None
    state.route_sink = functools.partial(ext.set_route, state)
    return ext
