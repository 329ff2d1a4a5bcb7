"""Measure the achievable peaks of the machine at hand: GEMM FLOP/s per dtype and copy bandwidth.

On the GPU when one is present (``torch.cuda``), else on the CPU with all of torch's intra-op
threads. Each figure is the best of timed repetitions after a warm-up, within a time budget:

* **FLOP/s**: ``torch.mm`` of two ``n x n`` matrices, ``2 n^3`` FLOPs each, for float32, bfloat16 and
  float16 where the device runs them (a dtype that raises, or runs below 1% of float32 as CPU
  float16 does without native support, is reported and skipped, never saved as a peak);
* **bandwidth**: ``dst.copy_(src)`` of a large buffer, ``2 x size`` bytes moved (read + write).

The results go to :func:`pyprof.prof.devices.save_calibration` under the GPU's name or
:data:`pyprof.prof.devices.CPU_DEVICE`; ``pyprof prof`` uses them for CPU ops and unlisted GPUs.
torch is imported lazily, here only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class Calibration:
    device: str                       # name saved under: the GPU name or "cpu"
    description: str                  # what was measured (CPU model / GPU name, threads)
    flops: dict[str, float] = field(default_factory=dict)    # dtype -> FLOP/s
    bw: float | None = None           # bytes/s
    skipped: dict[str, str] = field(default_factory=dict)    # dtype -> why
    seconds: float = 0.0


def _timer(cuda: bool) -> Callable[[], float]:
    if cuda:
        import torch

        def now() -> float:
            torch.cuda.synchronize()
            return time.perf_counter()

        return now
    return time.perf_counter


def best_rate(fn: Callable[[], None], work: float, budget: float, cuda: bool, min_reps: int = 3) -> float:
    """``work / best time`` of calls to ``fn`` (after one warm-up call) within ``budget`` seconds."""
    now = _timer(cuda)
    fn()  # warm-up: allocation, library initialisation, frequency ramp
    best = float("inf")
    deadline = time.perf_counter() + budget
    reps = 0
    while reps < min_reps or time.perf_counter() < deadline:
        t0 = now()
        fn()
        dt = now() - t0
        best = min(best, dt)
        reps += 1
        if reps >= 1000:
            break
    return work / best if best > 0 else 0.0


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "CPU"


def measure(device: str | None = None, n: int | None = None, copy_mb: int | None = None,
            budget: float = 1.0, dtypes: tuple[str, ...] = DTYPES) -> Calibration:
    """Measure peaks on ``device`` (``"cuda"``/``"cpu"``; None: the GPU when present)."""
    import torch

    from pyprof.errors import UsageError
    from pyprof.prof.devices import CPU_DEVICE

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise UsageError(f"unknown device {device!r}", "use --device cpu or --device cuda")
    cuda = device == "cuda"
    if cuda and not torch.cuda.is_available():
        raise UsageError("--device cuda but torch sees no GPU", "run on a GPU machine or use --device cpu")
    t_start = time.perf_counter()
    if cuda:
        name = torch.cuda.get_device_name()
        cal = Calibration(name, name)
        n = n or 8192
        copy_mb = copy_mb or 1024
    else:
        cal = Calibration(CPU_DEVICE, f"{cpu_name()}, {torch.get_num_threads()} threads")
        n = n or 2048
        copy_mb = copy_mb or 256
    for name in dtypes:
        dtype = getattr(torch, name, None)
        if dtype is None:
            cal.skipped[name] = "not in this torch"
            continue
        try:
            a = torch.randn(n, n, device=device).to(dtype)
            b = torch.randn(n, n, device=device).to(dtype)
            c = torch.empty(n, n, device=device, dtype=dtype)
            # a quick probe first: a dtype the device emulates slowly would eat the whole budget
            probe = best_rate(lambda a=a, b=b, c=c: torch.mm(a[:256, :256], b[:256, :256], out=c[:256, :256]),
                              2.0 * 256**3, 0.05, cuda, min_reps=2)
            f32 = cal.flops.get("float32")
            if f32 and probe < 0.01 * f32:
                cal.skipped[name] = f"emulated ({probe / 1e9:.1f} GFLOP/s at 256x256, under 1% of float32)"
                continue
            rate = best_rate(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), 2.0 * n**3, budget, cuda)
        except (RuntimeError, TypeError) as exc:
            cal.skipped[name] = f"unsupported ({str(exc).splitlines()[0][:80]})"
            continue
        finally:
            a = b = c = None
        if rate > 0:
            cal.flops[name] = rate
        else:
            cal.skipped[name] = "no measurable time"
    elems = copy_mb * (1 << 20) // 4
    src = torch.ones(elems, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    cal.bw = best_rate(lambda s=src, d=dst: d.copy_(s), 2.0 * elems * 4, budget, cuda)
    del src, dst
    cal.seconds = time.perf_counter() - t_start
    return cal


def save(cal: Calibration, path=None):
    """Store a measurement with :func:`pyprof.prof.devices.save_calibration`; returns the path."""
    from pyprof.errors import PyprofError
    from pyprof.prof.devices import save_calibration

    if not cal.flops or not cal.bw:
        raise PyprofError(f"calibration of {cal.description} measured no peak", "nothing was saved")
    return save_calibration(cal.device, cal.flops, cal.bw, path)
