"""Device peaks for the roofline: the GPU table (``pyprof/data/gpus.csv``), overrides and calibration.

Where a peak comes from, in order:

1. ``--peak-flops`` / ``--peak-bw`` (or ``peak_flops=``/``peak_bw=`` in the API): one FLOP/s figure used for
   every dtype and unit, one bandwidth;
2. the GPU table: dense vendor datasheet figures per GPU, matched by regex against the GPU name in the
   record (``gpu`` field) or ``--gpu NAME``; each row cites its source;
3. a calibration file (``$PYPROF_CALIBRATION`` or ``~/.cache/pyprof/calibration.json``), written by
   ``pyprof calibrate`` through :func:`save_calibration`: used for CPU records (device name
   :data:`CPU_DEVICE`) and for GPUs the table does not list.

No peak known: the caller shows ``n/a`` for ideal time and gap (never 0) and warns once.
"""

from __future__ import annotations

import csv
import datetime as _dt
import functools
import io
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import orjson

from pyprof.errors import InputError, UsageError

CPU_DEVICE = "cpu"
"""Calibration key for CPU records (records whose ``device`` is null)."""

PEAK_COLUMNS = ("fp64", "fp64_tc", "fp32", "tf32_tc", "fp16", "fp16_tc", "bf16", "bf16_tc", "fp8_tc", "int8_tc")

_DTYPE_CLASS = {
    "float64": "fp64", "double": "fp64",
    "float32": "fp32", "float": "fp32", "tf32": "fp32",
    "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8", "fp8": "fp8",
    "int8": "int8", "uint8": "int8",
}


def dtype_class(dtype: str | None) -> str | None:
    """``torch.bfloat16`` / ``bfloat16`` -> ``bf16``; integer/bool dtypes -> ``int``; unknown -> None."""
    if not dtype:
        return None
    d = str(dtype).lower().removeprefix("torch.")
    if d in _DTYPE_CLASS:
        return _DTYPE_CLASS[d]
    if d.startswith("float8"):
        return "fp8"
    if d.startswith(("int", "uint", "bool", "long", "short")):
        return "int"
    if d.startswith("complex"):
        return "fp64" if "128" in d else "fp32"
    return None


@dataclass(frozen=True)
class Device:
    """Peaks of one device: FLOP/s by column of :data:`PEAK_COLUMNS` (absent = unknown), bytes/s."""

    name: str
    arch: str | None
    flops: dict[str, float] = field(default_factory=dict)  # FLOP/s
    bw: float | None = None  # bytes/s
    source: str = ""

    def peak(self, dtype: str | None, tensor: bool) -> float | None:
        """FLOP/s for math in ``dtype`` on tensor cores (``tensor``) or CUDA cores; None when unknown.

        Tensor: fp32 means TF32. CUDA cores: fp16/bf16 fall back to the fp32 peak where the vendor lists
        no separate figure (a conservative, slower peak); integer math is taken at the fp32 rate.
        """
        cls = dtype_class(dtype) or "fp32"
        f = self.flops
        if "any" in f:  # a single override figure
            return f["any"]
        if tensor:
            col = {"fp32": "tf32_tc", "fp64": "fp64_tc", "fp16": "fp16_tc", "bf16": "bf16_tc",
                   "fp8": "fp8_tc", "int8": "int8_tc", "int": "int8_tc"}[cls]
            return f.get(col)
        col = {"fp64": "fp64", "fp32": "fp32", "fp16": "fp16", "bf16": "bf16"}.get(cls, "fp32")
        return f.get(col) or (f.get("fp32") if col in ("fp16", "bf16") else None)

    @property
    def has_tensor_cores(self) -> bool | None:
        if self.arch is None:
            return None
        return self.arch not in ("pascal", "maxwell", "kepler", "cpu")


@dataclass(frozen=True)
class GpuRow:
    name: str
    pattern: re.Pattern
    device: Device


def _float(cell: str) -> float | None:
    cell = cell.strip()
    return float(cell) if cell else None


@functools.lru_cache(maxsize=1)
def gpu_table() -> tuple[GpuRow, ...]:
    """The rows of ``pyprof/data/gpus.csv`` (comment lines start with ``#``), in match order."""
    text = resources.files("pyprof").joinpath("data/gpus.csv").read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    rows = []
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        flops = {c: _float(row[c]) * 1e12 for c in PEAK_COLUMNS if _float(row[c]) is not None}
        bw = _float(row["bw_gbs"])
        dev = Device(row["name"], row["arch"] or None, flops, bw * 1e9 if bw else None, row["source"])
        rows.append(GpuRow(row["name"], re.compile(row["match"], re.IGNORECASE), dev))
    return tuple(rows)


def match_gpu(name: str | None) -> Device | None:
    """The table row for a GPU name from an export (``NVIDIA H100 80GB HBM3`` -> H100 SXM), else None.

    MIG slices (``A30 MIG 2g.12gb``) are not matched: a slice has a fraction of the peaks.
    """
    if not name or "mig" in name.lower().split():
        return None
    for row in gpu_table():
        if row.pattern.search(name):
            return row.device
    return None


# -- calibration -------------------------------------------------------------------------------------


def calibration_path(path: str | os.PathLike | None = None) -> Path:
    """``path``, else ``$PYPROF_CALIBRATION``, else ``~/.cache/pyprof/calibration.json``."""
    if path is not None:
        return Path(path)
    env = os.environ.get("PYPROF_CALIBRATION")
    if env:
        return Path(env)
    return Path.home() / ".cache" / "pyprof" / "calibration.json"


def save_calibration(device_name: str, flops_by_dtype: dict, bw: float, path=None,
                     conditions: dict | None = None) -> Path:
    """Record measured peaks of one device (FLOP/s per dtype name, e.g. ``{"float32": 1.2e12}``; bytes/s).

    Other devices already in the file are kept; this device's entry is replaced. The file is JSON::

        {"version": 1, "devices": {"NVIDIA A100-SXM4-40GB": {"flops": {"float32": ...}, "bw": ...,
                                   "saved": "2026-05-01T12:00:00+00:00", "measured": {...}}}}

    ``saved`` is when the entry was written (UTC, just after the measurement); ``conditions``, stored as
    ``measured``, says how the peaks were taken (torch version and threads, load, spread of the runs:
    see :meth:`pyprof.calibrate.Calibration.conditions`) so a later run can tell a figure taken on a
    busy machine or with other settings from a trustworthy one. Use :data:`CPU_DEVICE` as
    ``device_name`` for the CPU. Returns the path written.
    """
    if not device_name:
        raise UsageError("save_calibration needs a device name", "pass the GPU name or 'cpu'")
    flops = {}
    for dtype, value in flops_by_dtype.items():
        v = float(value)
        if not v > 0:
            raise UsageError(f"calibrated peak for {dtype!r} is {value!r}", "peaks must be positive FLOP/s")
        flops[str(dtype).removeprefix("torch.")] = v
    if not float(bw) > 0:
        raise UsageError(f"calibrated bandwidth is {bw!r}", "bandwidth must be positive bytes/s")
    target = calibration_path(path)
    data = _read_calibration(target) if target.exists() else {"version": 1, "devices": {}}
    data["devices"][device_name] = {
        "flops": flops,
        "bw": float(bw),
        "saved": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    if conditions is not None:
        data["devices"][device_name]["measured"] = dict(conditions)
    target.parent.mkdir(parents=True, exist_ok=True)
    from pyprof.atomic import atomic_output

    with atomic_output(target, "wb") as fh:
        fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return target


def calibration_entry(device_name: str, path=None) -> dict | None:
    """The saved entry of one device as written by :func:`save_calibration` (``flops``, ``bw``, and where
    present ``saved`` and ``measured``), for judging how far to trust it; None when there is no
    calibration file or it holds no such device. Entries from files written without ``saved`` or
    ``measured`` come back without them."""
    target = calibration_path(path)
    if not target.exists():
        return None
    entry = _read_calibration(target)["devices"].get(device_name)
    return entry if isinstance(entry, dict) else None


def load_calibration(path=None) -> dict[str, Device]:
    """Calibrated devices by name (``{}`` when there is no calibration file)."""
    target = calibration_path(path)
    if not target.exists():
        return {}
    data = _read_calibration(target)
    out = {}
    for name, entry in data["devices"].items():
        flops = {}
        for dtype, value in (entry.get("flops") or {}).items():
            cls = dtype_class(dtype)
            if cls is None:
                continue
            # calibrate measures what the hardware does; a matmul peak is a tensor-core peak for the
            # dtype where the GPU has them, and the only peak for CPUs: fill both columns.
            col = {"fp32": "fp32", "fp64": "fp64", "fp16": "fp16", "bf16": "bf16"}.get(cls)
            if col:
                flops.setdefault(col, float(value))
            tc = {"fp32": "tf32_tc", "fp64": "fp64_tc", "fp16": "fp16_tc", "bf16": "bf16_tc",
                  "fp8": "fp8_tc", "int8": "int8_tc"}.get(cls)
            if tc:
                flops.setdefault(tc, float(value))
        arch = "cpu" if name == CPU_DEVICE else None
        out[name] = Device(name, arch, flops, float(entry["bw"]) if entry.get("bw") else None,
                           f"calibration {target}")
    return out


def _read_calibration(target: Path) -> dict:
    try:
        data = orjson.loads(target.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise InputError(f"calibration file {target} is unreadable ({exc})",
                         "delete it or run `pyprof calibrate` again") from None
    if not isinstance(data, dict) or not isinstance(data.get("devices"), dict):
        raise InputError(f"calibration file {target} is not a pyprof calibration",
                         "delete it or run `pyprof calibrate` again")
    return data


# -- resolution --------------------------------------------------------------------------------------


def override_device(name: str | None, peak_flops: float | None, peak_bw: float | None,
                    base: Device | None) -> Device | None:
    """Apply ``--peak-flops`` (FLOP/s, every dtype) and ``--peak-bw`` (bytes/s) over ``base``."""
    if peak_flops is None and peak_bw is None:
        return base
    if peak_flops is not None and not peak_flops > 0 or peak_bw is not None and not peak_bw > 0:
        raise UsageError("--peak-flops and --peak-bw must be positive", "give FLOP/s and bytes/s, e.g. 3.1e14 2e12")
    flops = {"any": float(peak_flops)} if peak_flops is not None else dict(base.flops if base else {})
    bw = float(peak_bw) if peak_bw is not None else (base.bw if base else None)
    arch = base.arch if base else None
    return Device(name or (base.name if base else "override"), arch, flops, bw, "command-line override")


class DeviceResolver:
    """Maps a record's GPU name (None for CPU) to a :class:`Device`, caching each distinct name."""

    def __init__(self, gpu: str | None = None, peak_flops: float | None = None, peak_bw: float | None = None,
                 calibration: dict[str, Device] | None = None):
        self.gpu = gpu
        self.peak_flops = peak_flops
        self.peak_bw = peak_bw
        self._calibration = calibration
        self._cache: dict[str | None, Device | None] = {}
        if gpu is not None and match_gpu(gpu) is None and gpu not in self.calibration and peak_flops is None:
            names = ", ".join(r.name for r in gpu_table())
            raise UsageError(f"--gpu {gpu!r} matches no GPU in the peak table",
                             f"use one of: {names}; or give --peak-flops and --peak-bw")

    @property
    def calibration(self) -> dict[str, Device]:
        if self._calibration is None:
            self._calibration = load_calibration()
        return self._calibration

    def resolve(self, gpu_name: str | None, is_cpu: bool = False) -> Device | None:
        key = (gpu_name, is_cpu)
        if key in self._cache:
            return self._cache[key]
        name = self.gpu or gpu_name
        if is_cpu and self.gpu is None:
            base = self.calibration.get(CPU_DEVICE)
        else:
            base = match_gpu(name) or (self.calibration.get(name) if name else None)
        dev = override_device(name, self.peak_flops, self.peak_bw, base)
        self._cache[key] = dev
        return dev
