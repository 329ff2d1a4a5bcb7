"""Process-wide switches of the instrumentation, in one small object read on every call.

The wrappers installed by ``init()`` read :data:`S` first thing on every call, so the fields are
plain attributes (no properties): ``S.idle`` is True while nobody can consume a marker (no NVTX tool
attached, no :class:`~pyprof.annotate.recorder.Recorder` active, payloads not forced on); then a
wrapper only asks torch whether a torch.profiler session is running and otherwise calls the original
function straight away. Options of :func:`pyprof.annotate.init` live here too.
"""

from __future__ import annotations

import threading

#: Bits of :attr:`_State.route`: the switches the C accelerator needs on every op and module range,
#: read there as one int instead of five attributes (``_fastpayload.c`` has the same numbers).
ROUTE_NVTX, ROUTE_RECORDERS, ROUTE_NESTED, ROUTE_BACKWARD, ROUTE_DEPTH_ONE = 1, 2, 4, 8, 16


class _State:
    # slots: the wrappers read S.idle on every call, and a slot read is the interpreter's fastest
    # attribute load (no instance dict that C code could turn into a slower split dict)
    __slots__ = ("initialized", "idle", "nvtx", "always", "nested", "stack_depth", "backward", "recorders",
                 "listeners", "route", "route_sink")

    def __init__(self) -> None:
        self.initialized = False
        self.idle = True            # no consumer: wrappers take the plain path (unless torch.profiler runs)
        self.nvtx = False           # an NVTX tool (nsys) is attached: ranges go to the NVTX domain
        self.always = False         # lazy=False: build payloads even with no consumer
        self.nested = False         # emit ranges for ops called inside ops too
        self.stack_depth = 1        # call-site frames kept in "trace"
        self.backward = True        # register per-node backward ranges
        self.recorders: tuple = ()  # active Recorders (a tuple, replaced on change: read without a lock)
        self.listeners: list = []   # called after every refresh (the module patch follows consumers)
        self.route = 0              # the ROUTE_* bits of the fields above (see refresh)
        self.route_sink = None      # called with the new route on every refresh (the C accelerator keeps it)

    def refresh(self) -> None:
        """Recompute :attr:`idle` and :attr:`route` after a consumer came or went or an option was
        set (the fields above are only ever changed together with a refresh), and tell the listeners."""
        self.idle = not (self.nvtx or self.always or self.recorders)
        self.route = ((ROUTE_NVTX if self.nvtx else 0) | (ROUTE_RECORDERS if self.recorders else 0)
                      | (ROUTE_NESTED if self.nested else 0) | (ROUTE_BACKWARD if self.backward else 0)
                      | (ROUTE_DEPTH_ONE if self.stack_depth == 1 else 0))
        if self.route_sink is not None:
            self.route_sink(self.route)
        for fn in tuple(self.listeners):
            fn()


S = _State()
LOCK = threading.RLock()
