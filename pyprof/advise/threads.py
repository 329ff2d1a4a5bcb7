"""``threads``: CPU thread oversubscription, intra-op threads x processes above the physical cores.

Evidence: the profiled process's intra-op thread count and the machine's physical cores from ``pyprof
run``'s env.json (torch.get_num_threads(), /proc/cpuinfo), and the processes (``LOCAL_WORLD_SIZE``, or
the distinct processes in the records). torch.profiler does not record OpenMP's worker threads, so the
records alone cannot show the oversubscription: without env.json there is no advice. The saving is not
estimated: :data:`NO_ESTIMATE` says why.
"""

from __future__ import annotations

from pyprof.advise.common import Advice, Context, num
from pyprof.cpu_findings import thread_finding

NO_ESTIMATE = ("the cost of oversubscription depends on the scheduler and on what else runs on the cores; not "
               "modelled (on this project's shared 2-core machine 8 threads ran faster than 2: docs/advise.md)")

KINDS = {
    "threads": ("Run no more intra-op threads than physical cores: `torch.set_num_threads(cores // processes)` "
                "or OMP_NUM_THREADS=cores/processes in each process's environment.",
                "not estimated: " + NO_ESTIMATE),
}


def threads(ctx: Context) -> Advice | None:
    f = thread_finding(ctx.env or {}, ctx.records)  # pyprof run's finding: the same counts, the same rule
    if f is None or not f.warn:  # no thread count recorded, or no more threads than cores
        return None
    n, procs, cores = (f.numbers[k] for k in ("intra_op_threads", "processes", "physical_cores"))
    cpu_ns = float(sum(num(r.get("kDuration")) for r in ctx.records if r.get("device") is None))
    ev = [(f"{n} intra-op threads x {procs} process(es) = {n * procs} threads on {cores} physical cores "
           f"(env.json: torch.get_num_threads(), /proc/cpuinfo; processes: LOCAL_WORLD_SIZE or the records' pids)",
           None),
          (f"set torch.set_num_threads({max(cores // procs, 1)})", None)]
    return ctx.make("threads", *KINDS["threads"], None, ev, 0, cpu_ns, NO_ESTIMATE,
                     threads=max(cores // procs, 1))
