"""Measure the achievable peaks of the machine at hand: GEMM FLOP/s per dtype and copy bandwidth.

On the GPU when one is present (``torch.cuda``), else on the CPU with all of torch's intra-op
threads. Each figure is the best of timed repetitions after a warm-up, repeated until the best
:data:`AGREE` runs agree within :data:`STABLE_WITHIN` or the time budget is spent (:func:`time_stable`):

* **FLOP/s**: ``torch.mm`` of two ``n x n`` matrices, ``2 n^3`` FLOPs each (``n`` smaller where a
  dtype other than float32 is so slow that the runs would not fit the budget: :func:`gemm_size`), for float32, bfloat16 and
  float16 where the device runs them (a dtype that raises, or runs below 1% of float32 as CPU
  float16 does without native support, is reported and skipped, never saved as a peak);
* **bandwidth**: ``dst.copy_(src)`` of a large buffer, ``2 x size`` bytes moved (read + write).

On the CPU also its latency floor (:func:`dispatch_floor`) and the copy bandwidth of cache-sized working
sets (:func:`copy_levels`), which the roofline uses for ops whose data fits a cache.

The results go to :func:`pyprof.peaks.save` under the GPU's name or :data:`pyprof.peaks.CPU_DEVICE`,
each figure the best of the saved and the new one; ``pyprof prof`` uses them for CPU ops and unlisted GPUs.

A peak taken while other work held the CPUs can be a fraction of the real one, and a saved peak is
reused by every later run. So each calibration records how it was taken (:meth:`Calibration.conditions`),
and :func:`problems` / :func:`saved_warning` judge a saved one against the run at hand: older than
:data:`MAX_AGE_DAYS`, taken under load or unstable, or taken with another thread count. torch is
imported lazily, here only.
"""

from __future__ import annotations

import datetime as _dt
import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyprof import peaks
from pyprof.atomic import atomic_output
from pyprof.errors import InputError, PyprofError, UsageError
from pyprof.machine import LoadProbe, cpu_name
from pyprof.prof.noise import BUSY_SHARE  # (the measurement's load is judged as a run's)
from pyprof.prof.units import byte_rate, flop_rate
from pyprof.records import write_records

DTYPES = ("float32", "bfloat16", "float16")

AGREE = 3
"""How many of the fastest runs must agree before a timing counts as stable."""
STABLE_WITHIN = 0.05
"""Largest spread (slowest of the :data:`AGREE` best over the best, minus 1) of a stable timing."""
BUSY_LOAD_PER_CPU = 0.5
"""1-minute load average per CPU above which a measurement counts as taken under load, where the
other processes' share cannot be read (no ``/proc/stat``)."""
MAX_AGE_DAYS = 30
"""A saved calibration older than this is reported as old (drivers, BIOS, torch change under it)."""


@dataclass
class Calibration:
    device: str                       # name saved under: the GPU name or "cpu"
    description: str                  # what was measured (CPU model / GPU name, threads)
    flops: dict[str, float] = field(default_factory=dict)    # dtype -> FLOP/s
    bw: float | None = None           # bytes/s
    skipped: dict[str, str] = field(default_factory=dict)    # dtype -> why
    seconds: float = 0.0
    spread: dict[str, float] = field(default_factory=dict)   # dtype or "bw" -> spread of its best runs
    torch: str | None = None          # torch.__version__ it was measured with
    threads: int | None = None        # torch intra-op threads (CPU only)
    load: dict[str, Any] = field(default_factory=dict)       # see LoadProbe.result
    floor: float | None = None        # ns: the shortest an op takes (CPU: dispatch of a 1-element add)
    bw_levels: list = field(default_factory=list)            # [[bytes moved, bytes/s]] by copy size (CPU)

    def best_of(self, other: Calibration) -> Calibration:
        """This measurement with ``other``'s better figures (a repeat of it): the higher peaks and
        bandwidths, the lower floor; the conditions of the later one."""
        def higher(mine: dict, theirs: dict) -> dict:
            return {**mine, **{k: max(v, mine.get(k, 0.0)) for k, v in theirs.items()}}

        levels = higher(dict(map(tuple, self.bw_levels)), dict(map(tuple, other.bw_levels)))
        return Calibration(self.device, self.description, higher(self.flops, other.flops),
                           max(filter(None, (self.bw, other.bw)), default=None), dict(self.skipped),
                           self.seconds + other.seconds, dict(other.spread), other.torch, other.threads,
                           dict(other.load), min(filter(None, (self.floor, other.floor)), default=None),
                           sorted([b, r] for b, r in levels.items()))

    def conditions(self) -> dict[str, Any]:
        """How the figures were taken, saved beside them (``measured``) and judged by :func:`problems`:
        ``torch``, ``threads`` (CPU), ``cpus``, ``loadavg`` (1/5/15 min, at the start), ``busy_others``
        (share of the usable CPUs' time other processes took during the measurement; None where
        unreadable), ``spread`` per figure and ``seconds``."""
        return {"torch": self.torch, "threads": self.threads, **self.load,
                "spread": {k: round(v, 4) for k, v in self.spread.items() if math.isfinite(v)},
                "seconds": round(self.seconds, 3)}


def _timer(cuda: bool) -> Callable[[], float]:
    if cuda:
        import torch

        def now() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()

        return now
    return time.perf_counter


@dataclass
class Timing:
    """One timed figure: ``rate`` = work / best time; ``spread`` over the :data:`AGREE` best runs."""

    rate: float
    best: float       # seconds
    spread: float     # (slowest of the best runs - best) / best; inf where the best run took no time
    reps: int         # timed runs (after the warm-up)


def _spread(times: list[float], agree: int) -> float:
    best = sorted(times)[:agree]
    return (best[-1] - best[0]) / best[0] if best[0] > 0 else math.inf


def time_stable(fn: Callable[[], object], work: float, budget: float, cuda: bool = False, *, min_reps: int = 3,
                agree: int = AGREE, tol: float = STABLE_WITHIN, max_reps: int = 1000,
                clock: Callable[[], float] | None = None) -> Timing:
    """Time ``fn`` (after one warm-up call) until its ``agree`` fastest runs agree within ``tol``, or
    ``budget`` seconds have passed (at least ``min_reps`` runs, at most ``max_reps``).

    Stopping at agreement keeps a quiet machine's calibration short; running on while the best runs
    disagree gives a busy machine's moments of quiet a chance to show, and a figure that never settles
    is reported by its ``spread``. ``clock`` (seconds; default ``time.perf_counter``, after a CUDA
    synchronize on the GPU) also measures the budget, so a test can drive the loop with a fake one."""
    now = clock or _timer(cuda)
    fn()  # warm-up: allocation, library initialisation, frequency ramp
    times: list[float] = []
    deadline = now() + budget
    while True:
        t0 = now()
        fn()
        times.append(now() - t0)
        n = len(times)
        if (n >= max_reps or n >= max(min_reps, agree) and _spread(times, agree) <= tol
                or n >= min_reps and now() >= deadline):
            break
    best = min(times)
    return Timing(work / best if best > 0 else 0.0, best, _spread(times, agree), len(times))


_PROBE_N = 256
"""Side of the probe GEMM that sizes each dtype's measurement (:func:`gemm_size`)."""


def gemm_size(n: int, probe_rate: float, budget: float) -> int:
    """The side of the timed GEMMs: ``n``, or smaller where the probe's rate says that :data:`AGREE`
    runs of ``n x n`` would not fit in ``budget`` (a dtype the CPU runs slowly, such as bfloat16
    without native support at a fraction of a GFLOP/s: 1024^3 would take seconds per run). A multiple
    of 64, at least the probe's side."""
    if probe_rate <= 0 or not math.isfinite(probe_rate):
        return _PROBE_N
    fit = int((probe_rate * budget / (2.0 * AGREE)) ** (1.0 / 3.0)) // 64 * 64
    return max(_PROBE_N, min(n, fit))


def _mm(n: int, dtype: Any, device: str) -> Callable[[], object]:
    """A call of ``torch.mm`` of two random ``n x n`` matrices of ``dtype`` into a third."""
    import torch

    a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
    return functools.partial(torch.mm, a, b, out=torch.empty(n, n, device=device, dtype=dtype))


def _measure_gemms(cal: Calibration, dtypes: tuple[str, ...], device: str, n: int, budget: float, cuda: bool) -> None:
    """The FLOP/s of ``n``-square matrix products per dtype of ``dtypes`` (see :func:`measure`) into ``cal``,
    or why one was skipped."""
    import torch

    for name in dtypes:
        dtype = getattr(torch, name, None)
        if dtype is None:
            cal.skipped[name] = "not in this torch"
            continue
        try:
            mm: Any = _mm(_PROBE_N, dtype, device)  # (None once timed: its matrices freed)
            # a quick probe first: a dtype the device emulates slowly would eat the whole budget
            probe = time_stable(mm, 2.0 * _PROBE_N**3, 0.05, cuda, min_reps=2).rate
            f32 = cal.flops.get("float32")
            if f32 and probe < 0.01 * f32:
                cal.skipped[name] = f"emulated ({probe / 1e9:.1f} GFLOP/s at 256x256, under 1% of float32)"
                continue
            # float32, the reference, keeps n: a 256^3 probe under-reads a fast dtype's rate
            m = n if name == "float32" else gemm_size(n, probe, budget)
            if m != _PROBE_N:
                mm = _mm(m, dtype, device)
            timing = time_stable(mm, 2.0 * m**3, budget, cuda)
        except (RuntimeError, TypeError) as exc:
            cal.skipped[name] = f"unsupported ({str(exc).splitlines()[0][:80]})"
            continue
        finally:
            mm = None
        if timing.rate > 0:
            cal.flops[name] = timing.rate
            cal.spread[name] = timing.spread
        else:
            cal.skipped[name] = "no measurable time"


def measure(device: str | None = None, n: int | None = None, copy_mb: int | None = None,
            budget: float = 1.0, dtypes: tuple[str, ...] = DTYPES) -> Calibration:
    """Measure peaks on ``device`` (``"cuda"``/``"cpu"``; None: the GPU when present), each figure by
    :func:`time_stable` within ``budget`` seconds, with the conditions it was taken under."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise UsageError(f"unknown device {device!r}", "use --device cpu or --device cuda")
    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise UsageError("--device cuda but torch sees no GPU", "run on a GPU machine or use --device cpu")
    t_start = time.perf_counter()
    probe_load = LoadProbe()
    if cuda:
        name = torch.cuda.get_device_name()
        cal = Calibration(name, name)
    else:
        threads = torch.get_num_threads()
        cal = Calibration(peaks.CPU_DEVICE, f"{cpu_name()}, {threads} threads", threads=threads)
    n, copy_mb = n or (8192 if cuda else 2048), copy_mb or (1024 if cuda else 256)
    _measure_gemms(cal, dtypes, device, n, budget, cuda)
    elems = copy_mb * (1 << 20) // 4
    src = torch.ones(elems, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    timing = time_stable(functools.partial(dst.copy_, src), 2.0 * elems * 4, budget, cuda)
    cal.bw = timing.rate
    if timing.rate > 0:
        cal.spread["bw"] = timing.spread
    del src, dst
    if not cuda:  # (a GPU's floor is its shortest kernel, which the host cannot time: the default stands)
        cal.floor = dispatch_floor(budget)
        cal.bw_levels = copy_levels(cal.floor, cal.bw, budget)
    cal.torch = str(torch.__version__)
    cal.load = probe_load.result()
    cal.seconds = time.perf_counter() - t_start
    return cal


#: copy sizes (each buffer, bytes) whose bandwidth the CPU roofline uses for working sets that fit
#: in a cache level: L2-sized, last-level-sized, and beyond (the main copy is DRAM-sized)
LEVEL_BYTES = (256 << 10, 2 << 20, 16 << 20)
_FLOOR_CALLS = 200


def dispatch_floor(budget: float) -> float:
    """The CPU's latency floor (ns): the time of one ``torch.add`` of 1-element tensors, dispatch and all
    (the best of blocks of :data:`_FLOOR_CALLS` calls): no op on this CPU takes less."""
    import torch

    a, b, c = torch.ones(1), torch.ones(1), torch.empty(1)

    def block() -> None:
        for _ in range(_FLOOR_CALLS):
            torch.add(a, b, out=c)

    return time_stable(block, 1.0, min(budget, 0.2)).best / _FLOOR_CALLS * 1e9


def copy_levels(floor: float | None, dram: float | None, budget: float) -> list[list[float]]:
    """``[[bytes moved, bytes/s], ...]``: the copy bandwidth of working sets of :data:`LEVEL_BYTES` (read +
    written), each call's dispatch (``floor``, ns) taken out; a level no faster than ``dram`` is left out."""
    import torch

    out = []
    for size in LEVEL_BYTES:
        src = torch.ones(size // 4)
        dst = torch.empty_like(src)
        best = time_stable(functools.partial(dst.copy_, src), 1.0, min(budget, 0.2)).best
        t = best - (floor or 0.0) / 1e9
        if t > 0 and (dram is None or 2.0 * size / t > dram):
            out.append([2 * size, 2.0 * size / t])
    return out


def save(cal: Calibration, path=None, replace: bool = False):
    """Store a measurement with :func:`pyprof.peaks.save` (keeping the saved entry's better figures unless
    ``replace``); returns the path and the figures kept from the saved entry."""
    if not cal.flops or not cal.bw:
        raise PyprofError(f"calibration of {cal.description} measured no peak", "nothing was saved")
    return peaks.save(cal.device, cal.flops, cal.bw, path, conditions=cal.conditions(), floor=cal.floor,
                      bw_levels=cal.bw_levels, replace=replace)


# -- how far to trust a calibration ------------------------------------------------------------------


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else None


def condition_problems(conditions: Any, threads: int | None = None) -> list[str]:
    """Why peaks taken under ``conditions`` (a saved ``measured`` block) may be wrong for a run with
    ``threads`` intra-op threads (None: not checked), one short phrase each; [] when none.

    Under load: other processes took more than :data:`BUSY_SHARE` of the CPUs during the measurement,
    or, where that was not readable, the load average exceeded :data:`BUSY_LOAD_PER_CPU` per CPU.
    Unstable: a figure's best runs spread more than :data:`STABLE_WITHIN`. A field that is absent or
    not a number is not judged; a block that is absent altogether is reported as unknown."""
    if not isinstance(conditions, dict):
        return ["taken under unknown load and thread count (none recorded)"]
    out = []
    cpus = _number(conditions.get("cpus"))
    busy = _number(conditions.get("busy_others"))
    load = conditions.get("loadavg")
    load1 = _number(load[0]) if isinstance(load, list) and load else None
    where = f" of {cpus:.0f} CPUs" if cpus else " of the CPUs"
    if busy is not None:
        if busy > BUSY_SHARE:
            out.append(f"taken under load (other processes used {busy:.0%}{where})")
    elif load1 is not None and cpus and load1 / cpus > BUSY_LOAD_PER_CPU:
        out.append(f"taken under load (load average {load1:.1f} on {cpus:.0f} CPUs)")
    spreads = conditions.get("spread")
    if isinstance(spreads, dict):
        judged = {k: v for k, v in ((k, _number(v)) for k, v in spreads.items()) if v is not None}
        if judged:
            key = max(judged, key=judged.__getitem__)
            if judged[key] > STABLE_WITHIN:
                what = "copy" if key == "bw" else f"{key} GEMM"
                out.append(f"unstable (best {what} runs {judged[key]:.0%} apart)")
    saved_threads = _number(conditions.get("threads"))
    if threads and saved_threads and int(saved_threads) != threads:
        out.append(f"taken with {int(saved_threads)} threads (this run uses {threads})")
    return out


def _parse_time(saved: Any) -> _dt.datetime | None:
    if not isinstance(saved, str):
        return None
    try:
        when = _dt.datetime.fromisoformat(saved)
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=_dt.timezone.utc)


def problems(conditions: Any, saved: Any, threads: int | None = None, now: _dt.datetime | None = None) -> list[str]:
    """:func:`condition_problems`, preceded by the age: ``saved`` (ISO time) older than
    :data:`MAX_AGE_DAYS` days at ``now`` (default: the current time), or absent (unknown age)."""
    when = _parse_time(saved)
    now = now or _dt.datetime.now(_dt.timezone.utc)
    out = []
    if when is None:
        out.append("of unknown age")
    elif (now - when).days > MAX_AGE_DAYS:
        out.append(f"{(now - when).days} days old")
    return out + condition_problems(conditions, threads)


def saved_warning(threads: int | None = None, path=None, now: _dt.datetime | None = None) -> str | None:
    """One line on why the saved CPU peaks (``path``, else the default calibration file) may not fit a
    run with ``threads`` intra-op threads, naming the fix; None when they fit or none are saved."""
    entry = peaks.entry(peaks.CPU_DEVICE, path)
    if entry is None:
        return None
    found = problems(entry.get("measured"), entry.get("saved"), threads, now)
    if not found:
        return None
    when = _parse_time(entry.get("saved"))
    where = f"{peaks.path(path)}" + (f", saved {when.date().isoformat()}" if when else "")
    return (f"saved CPU peaks ({where}) may not fit this run: {'; '.join(found)}; "
            "run `pyprof calibrate` on a quiet machine to replace them")


# -- a run's records and the CPU peaks they are priced with -------------------------------------------


def ensure_cpu_peaks(say: Callable[[str], None]) -> None:
    """Measure and save this CPU's peaks when no calibration holds them, so the roofline is never blank;
    when one does, say in one line (``say``) if it may not fit this run (old, of unknown age, taken under
    load or unstable, or with another thread count: :func:`saved_warning`).

    The thread count is torch's now, after the script ran in this process (it may have set it). A quick
    measurement (about a second: a 1024x1024 GEMM per dtype and a 64 MiB copy, each stopping once its best
    runs agree) is saved like ``pyprof calibrate`` would, with the conditions it was taken under; a warning
    follows when those make it unreliable."""
    import torch

    try:
        if peaks.entry(peaks.CPU_DEVICE) is not None:
            line = saved_warning(threads=torch.get_num_threads())
            if line:
                say(f"pyprof: warning: {line}")
            return
        cal = measure("cpu", n=1024, copy_mb=64, budget=0.2)
        path, _ = save(cal)
    except (PyprofError, OSError) as exc:
        say(f"pyprof: warning: could not calibrate the CPU ({exc}); ideal time and gap show n/a")
        return
    # (in human units: a CPU's 0.3 GFLOP/s of bfloat16 printed as "0 GFLOP/s" read as a zero measurement)
    rates = ", ".join(f"{k} {flop_rate(v)}" for k, v in cal.flops.items())
    say(f"pyprof: no saved CPU peaks: measured {rates}, copy {byte_rate(cal.bw)} in {cal.seconds:.1f} s, saved to "
        f"{path} (`pyprof calibrate` measures longer)")
    found = condition_problems(cal.conditions())
    if found:
        say(f"pyprof: warning: the CPU peaks just saved may be off: {'; '.join(found)}; run `pyprof calibrate` on "
            "a quiet machine to replace them")


def write_run_records(source, records: list, path, conditions: dict | None, calibrate: bool,
                      say: Callable[[str], None]) -> dict[str, Any]:
    """Write a profiled run's ``records`` (of the trace ``source``) to ``path``, its header holding the
    steps, the ``conditions`` its steps ran under and the peaks it is priced with (measured first where
    ``calibrate`` and the run has CPU records, so that the header pins them); returns the header facts."""
    if calibrate and any(r.get("device") is None for r in records):
        ensure_cpu_peaks(say)
    try:
        pinned = peaks.pinned()
    except InputError:  # (an unreadable calibration file: prof says why)
        pinned = None
    facts = {**source.facts(), "conditions": conditions or None, "peaks": pinned}
    with atomic_output(path, "wb") as fh:
        write_records(records, fh, facts=facts)
    return facts
