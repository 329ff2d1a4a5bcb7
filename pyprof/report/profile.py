"""A profile to report on: the kernel records, prof's per-kernel table of them, the devices they ran on
with the peaks prof used, and the profiled process's environment.

Everything the charts show comes from prof (:func:`pyprof.prof.table.build`: FLOPs, bytes, tensor
cores, ideal time, gap) and from the records themselves (times, streams, threads, arguments, NVTX
ranges); the report computes no cost of its own. ``df`` row ``i`` is ``records[i]``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pandas as pd

from pyprof.errors import InputError
from pyprof.prof import noise
from pyprof.prof.devices import Device, DeviceResolver, props_key
from pyprof.records import read_header


@dataclass(frozen=True)
class DeviceInfo:
    """One device of the profile: ``label`` (the records' GPU name, ``unknown GPU``, or ``CPU``), its
    peaks (None: unknown; ``--gpu`` and the peak options apply), where they came from, its records' count
    and time."""

    label: str
    device: Device | None
    is_cpu: bool
    kernels: int
    time_ns: float

    @property
    def source(self) -> str:
        if self.device is None:
            return "no peaks known (pass --gpu, --peak-flops/--peak-bw, or run `pyprof calibrate`)"
        return self.device.provenance


@dataclass
class Profile:
    """A records file and what prof makes of it (see the module docstring)."""

    name: str
    records: list[dict[str, Any]]
    df: pd.DataFrame
    devices: list[DeviceInfo] = field(default_factory=list)
    env: dict[str, Any] | None = None

    @property
    def warnings(self) -> list[str]:
        """prof's warnings, then the noise line where the timings may not hold (:mod:`pyprof.prof.noise`)."""
        line = noise.warning(noise.problems(self.df))
        return list(self.df.attrs.get("warnings", [])) + ([line] if line else [])

    @property
    def total_ns(self) -> float:
        return float(self.df["sil"].fillna(0).sum())

    @property
    def is_cpu(self) -> bool:
        """Only CPU records (a CPU trace of ``pyprof run``)."""
        return bool(self.devices) and all(d.is_cpu for d in self.devices)


def from_records(records: list[dict[str, Any]], name: str = "records", gpu: str | None = None,
                 peak_flops: float | None = None, peak_bw: float | None = None,
                 env: dict[str, Any] | None = None, calibration: dict | None = None,
                 df: pd.DataFrame | None = None, header: dict[str, Any] | None = None) -> Profile:
    """A :class:`Profile` of records already in memory (``pyprof run`` has them; ``df``: prof's table of
    them where already built with the same peak options; ``header``: their record file's, whose pinned
    peaks price them)."""
    from pyprof.prof.table import build

    header = header or (df.attrs.get("header") if df is not None else None) or {}
    if not header.get("steps") and df is None:  # (records kept their ranges: the steps are there)
        from pyprof.prof.steps import from_records as steps_of

        header = {**header, "steps": steps_of(records) or None}
    resolver = DeviceResolver(gpu, peak_flops, peak_bw, calibration, pinned=header.get("peaks"))
    if df is None:
        df = build(records, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw, calibration=resolver.calibration,
                   header=header)
    return Profile(name, records, df, _devices(records, df, resolver), env)


def load(path: str | os.PathLike, gpu: str | None = None, peak_flops: float | None = None,
         peak_bw: float | None = None, env: dict[str, Any] | None = None) -> Profile:
    """The profile of a records file (``pyprof parse`` or ``pyprof run`` output), read with its records'
    ``ranges`` (the ``ProfilerStep#N`` steps the timeline and ``diff`` count), so that it equals the
    profile ``pyprof run --report`` makes of the same records. ``env``: the profiled process's settings;
    None reads ``env.json`` beside the file where ``pyprof run`` wrote one."""
    from pyprof.prof.load import read_records

    records = read_records(path, keep_ranges=True)
    name = os.fspath(path)
    if env is None and name != "-":
        env = read_env(Path(name).with_name("env.json"))
    return from_records(records, "<stdin>" if name == "-" else name, gpu, peak_flops, peak_bw, env,
                        header=read_header(path))


_COUNT, _FLAG = (lambda v: v.__class__ is int and v >= 0, "a whole number"), (lambda v: v.__class__ is bool, "a flag")
#: the fields of ``env.json`` that are read (``runner.run_env``): their test
_ENV = {**dict.fromkeys(("intra_op_threads", "inter_op_threads", "logical_cpus", "usable_cpus", "physical_cores",
                         "processes"), _COUNT), "mkldnn": _FLAG, "cuda": _FLAG, "torch": (lambda v: v.__class__ is str, "a text"),
        "vars": (lambda v: v.__class__ is dict and all(x.__class__ is str for kv in v.items() for x in kv), "texts")}


def read_env(path: Path) -> dict[str, Any] | None:
    """``pyprof run``'s ``env.json`` (threads, cores), or None where absent or unreadable; a field of
    the wrong type (``"processes": "x"``) is one :class:`~pyprof.errors.InputError` line naming it."""
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    bad = next((k for k, (ok, _) in _ENV.items() if isinstance(data, dict) and data.get(k) is not None
                and not ok(data[k])), None)
    if bad is not None:
        raise InputError(f'{path}: "{bad}" is {orjson.dumps(data[bad]).decode()[:60]}, expected {_ENV[bad][1]}',
                         "give the env.json `pyprof run` wrote, or correct that field")
    return data if isinstance(data, dict) else None


def _devices(records: list[dict[str, Any]], df: pd.DataFrame, resolver: DeviceResolver) -> list[DeviceInfo]:
    """Each distinct device of the records (GPU name, or the CPU), largest time first."""
    seen: dict[tuple, list] = {}
    sil = df["sil"].fillna(0).tolist() if len(df) else []
    for rec, t in zip(records, sil, strict=True):
        is_cpu = rec.get("device") is None  # as prof tells CPU records (pyprof.prof.table)
        props = None if is_cpu else rec.get("gpuProps")
        key = (None if is_cpu else rec.get("gpu") or "unknown GPU", is_cpu, props_key(props))
        entry = seen.setdefault(key, [0, 0.0, props])
        entry[0] += 1
        entry[1] += t
    out = []
    for (gpu, is_cpu, _), (n, t, props) in seen.items():
        dev = resolver.resolve(None if is_cpu else gpu, is_cpu, props)
        out.append(DeviceInfo("CPU" if is_cpu else gpu, dev, is_cpu, n, t))
    return sorted(out, key=lambda d: -d.time_ns)
