"""This machine's CPUs and how busy other processes keep them (no torch): :class:`LoadProbe` measures
the share of the usable CPUs' time others took over an interval, for ``pyprof calibrate`` (its
measurements) and ``pyprof run`` (its profiled steps); :func:`cpu_name` names the CPU."""

from __future__ import annotations

import os
import platform
from typing import Any


def usable_cpus() -> list[int] | None:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def cpu_jiffies(cpus: list[int] | None, stat: str = "/proc/stat") -> tuple[int, int] | None:
    """(busy, total) clock ticks since boot summed over ``cpus`` (all CPUs when None), from ``stat``
    (``/proc/stat``); None where that cannot be read."""
    try:
        with open(stat) as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    wanted = {f"cpu{i}" for i in cpus} if cpus is not None else {"cpu"}
    busy = total = 0
    found = False
    for line in lines:
        parts = line.split()
        if not parts or parts[0] not in wanted:
            continue
        try:
            v = [int(x) for x in parts[1:9]]
        except ValueError:
            return None
        v += [0] * (8 - len(v))
        user, nice, system, idle, iowait, irq, softirq, steal = v
        b = user + nice + system + irq + softirq + steal
        busy += b
        total += b + idle + iowait
        found = True
    return (busy, total) if found else None


def own_cpu_seconds() -> float:
    """CPU seconds this process and those it started (DataLoader workers...) have taken: its own, its
    ended children's, and its live descendants' (from /proc)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system + _descendants_ticks() / _tick_rate()


def _tick_rate() -> int:
    return os.sysconf("SC_CLK_TCK")


def _descendants_ticks(proc: str = "/proc") -> int:
    """CPU clock ticks (user + system) of this process's live descendants; 0 where /proc is unreadable."""
    children: dict[int, list[tuple[int, int]]] = {}
    for name in os.listdir(proc) if os.path.isdir(proc) else ():
        try:
            with open(f"{proc}/{name}/stat", "rb") as fh:
                f = fh.read().rsplit(b")", 1)[1].split()  # after "(comm)": state, ppid, ... utime, stime
            children.setdefault(int(f[1]), []).append((int(name), int(f[11]) + int(f[12])))
        except (OSError, IndexError, ValueError):
            continue  # not a process, or one that ended meanwhile
    total, todo = 0, [os.getpid()]
    while todo:
        for pid, ticks in children.get(todo.pop(), ()):
            total, todo = total + ticks, todo + [pid]
    return total


class LoadProbe:
    """How busy the machine was around a measurement: the load average and CPU count at the start,
    and the share of the usable CPUs' time that processes other than this one took until
    :meth:`result` (from /proc/stat, the CPU time of this process and of those it started taken
    out). The load average alone cannot tell: it counts this process too, and ``pyprof run``
    calibrates right after the script it profiled kept the CPUs busy."""

    def __init__(self) -> None:
        try:
            self.loadavg: list[float] | None = [round(x, 2) for x in os.getloadavg()]
        except (AttributeError, OSError):
            self.loadavg = None
        self.cpu_ids = usable_cpus()
        self.cpus = len(self.cpu_ids) if self.cpu_ids else os.cpu_count()
        self._jiffies = cpu_jiffies(self.cpu_ids)
        self._own = own_cpu_seconds()

    def result(self) -> dict[str, Any]:
        """``cpus``, ``loadavg`` and ``busy_others`` (None where /proc/stat is unreadable or no tick passed)."""
        busy_others = None
        end = cpu_jiffies(self.cpu_ids)
        if self._jiffies and end:
            d_busy, d_total = end[0] - self._jiffies[0], end[1] - self._jiffies[1]
            own = (own_cpu_seconds() - self._own) * _tick_rate()
            if d_total > 0:
                busy_others = round(min(max((d_busy - own) / d_total, 0.0), 1.0), 3)
        return {"cpus": self.cpus, "loadavg": self.loadavg, "busy_others": busy_others}


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "CPU"
