"""An "optim" range around every optimizer step, from torch's global optimizer step hooks.

``register_optimizer_step_pre_hook`` / ``register_optimizer_step_post_hook`` (removable handles).
If ``step()`` raises, the post hook does not run; the next pre-hook on that thread first closes the
range left open (steps do not nest), so the NVTX stack is rebalanced at the next step.
"""

from __future__ import annotations

import threading

from pyprof import markers
from pyprof.annotate import emit

_tls = threading.local()
_handles: list = []
_texts: dict = {}


def _pre(optimizer, args, kwargs):
    st = getattr(_tls, "opt", None)
    if st is None:
        st = _tls.opt = []
    while st:  # a previous step raised before its post hook
        emit.pop(st.pop())
    if not emit.consumer_active():
        st.append(emit.NOTHING)
        return None
    cls = type(optimizer).__name__
    text = _texts.get(cls)
    if text is None:
        text = _texts[cls] = markers.encode(markers.make("optim", cls=cls))
    st.append(emit.push(text, cache=True))
    return None


def _post(optimizer, args, kwargs):
    st = getattr(_tls, "opt", None)
    if st:
        emit.pop(st.pop())
    return None


def install() -> None:
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    _handles.append(register_optimizer_step_pre_hook(_pre))
    _handles.append(register_optimizer_step_post_hook(_post))


def uninstall() -> None:
    while _handles:
        _handles.pop().remove()
