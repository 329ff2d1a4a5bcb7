"""``dataloader``: the time each step waits in ``DataLoader.__next__`` (torch.profiler's
``enumerate(DataLoader)#...`` range, read from the trace: see :mod:`pyprof.advise.spans`).

With ``num_workers=0`` (``_SingleProcessDataLoaderIter``) the batch is loaded inside that range, on the
training thread; with workers (``_MultiProcessingDataLoaderIter``) the range is the wait for a worker's
batch. Either way workers loading ahead hide it while they keep up: the step then takes its other time
``C = step - D`` and ``W`` workers keep up when each loads a batch in ``W x C`` (a batch loaded in ``D``
needs ``W >= D / C``; loading that is CPU-bound needs that many free cores too).
"""

from __future__ import annotations

import math
import statistics

from pyprof.advise.common import Advice, Context
from pyprof.advise.spans import LOADER_PREFIX, STEP_PREFIX
from pyprof.prof.units import duration as us

KINDS = {
    "dataloader": ("Load batches ahead in worker processes: `DataLoader(..., num_workers=W, pin_memory=True)` "
                   "with W from the evidence (more workers, or a larger `prefetch_factor`, where workers already "
                   "run), or make each batch cheaper to load.",
                   "saved = D, the median over the steps of the time inside `enumerate(DataLoader)#...__next__` on the step's "
                   "thread (the trace's ranges inside each `ProfilerStep#N`); workers hide it when "
                   "W >= D / (step - D)"),
}


def dataloader(ctx: Context) -> Advice | None:
    spans = ctx.spans or {}
    steps, loads = spans.get(STEP_PREFIX) or [], spans.get(LOADER_PREFIX) or []
    if not steps or not loads:
        return None
    waits, lengths, kinds = [], [], set[str]()
    for tid, s0, dur, _ in steps:
        inside = [(d, name) for t, s, d, name in loads if t == tid and s0 <= s < s0 + dur]
        waits.append(sum(d for d, _ in inside))
        lengths.append(dur)
        kinds.update(name.split("#", 1)[1].split(".", 1)[0] for _, name in inside)
    # medians: on a busy machine one step's wait can be several times the others'
    wait, step = statistics.median(waits), statistics.median(lengths)
    if wait <= 0:
        return None
    ctx.claimed["dataloader"] = wait / 1e9
    rest = max(step - wait, 1.0)
    workers = max(1, math.ceil(wait / rest))
    single = any("SingleProcess" in k for k in kinds)
    ev = [(f"{us(wait)} per step in DataLoader.__next__ ({wait / step:.1%} of the {us(step)} step; "
           f"{len(steps)} steps: {', '.join(us(w) for w in waits[:6])}{' ...' if len(waits) > 6 else ''})", None),
          (f"{', '.join(sorted(kinds))}: " + (f"loading on the training thread; num_workers={workers} keeps up "
                                               f"if loading is I/O-bound or has free cores" if single else
                                               "waiting for the workers: raise num_workers or prefetch_factor"),
           None)]
    return ctx.make("dataloader", *KINDS["dataloader"], wait * ctx.per_step, ev, 0, wait * ctx.per_step,
                     workers=max(workers, 2))
