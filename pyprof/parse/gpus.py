"""GPU names for kernel records: ``KERNEL.deviceId`` (the process-local CUDA ordinal) -> a name.

nsys (schema doc §3.7): 2025.1+ ``TARGET_INFO_CUDA_DEVICE(gpuId, cudaId, pid)`` -> ``TARGET_INFO_GPU.id``;
2021.2-2024.x ``TARGET_INFO_GPU.cuDevice`` after ``CUDA_VISIBLE_DEVICES`` remapping (read from
``META_DATA_CAPTURE`` when present), CUDA adapters only (non-empty ``chipName``); <= 2021.1
``TARGET_INFO_CUDA_GPU(deviceId, pid)``. Never ``TARGET_INFO_GPU.id`` directly. Unknown -> None.
nvprof: ``CUPTI_ACTIVITY_KIND_DEVICE(id, name)``.

Device properties (the record's ``gpuProps``, what prof derives peaks from), by GPU name: nsys 2021.2+
``TARGET_INFO_GPU``; nsys <= 2021.1 ``TARGET_INFO_CUDA_GPU`` and nvprof ``CUPTI_ACTIVITY_KIND_DEVICE``
(their columns and units: :data:`_NSYS_PROPS`, :data:`_CUPTI_PROPS`).
"""

from __future__ import annotations

import re

from pyprof.parse.db import Database


def _visible_devices(db: Database) -> list[int] | None:
    if not db.has("META_DATA_CAPTURE"):
        return None
    for (value,) in db.execute("SELECT value FROM META_DATA_CAPTURE WHERE value LIKE 'CUDA_VISIBLE_DEVICES=%'"):
        m = re.match(r'CUDA_VISIBLE_DEVICES="?([^"]*)"?', str(value))
        if m:
            try:
                return [int(x) for x in m.group(1).split(",") if x.strip()]
            except ValueError:
                return None  # UUIDs: cannot remap by ordinal
    return None


def nsys_gpu_names(db: Database, pids: list, devices: list) -> list:
    """GPU name per activity (its pid and device: ints, None or -1 where unknown), or None where it
    cannot be told."""
    by_pid_dev, by_dev = _cuda_device_names(db), _system_names(db)
    if {"deviceId", "pid", "name"} <= set(db.columns("TARGET_INFO_CUDA_GPU")):
        for dev, pid, name in db.execute("SELECT deviceId, pid, name FROM TARGET_INFO_CUDA_GPU"):
            by_pid_dev.setdefault((pid, dev), name)
            by_dev.setdefault(dev, name)
    names = {}
    for p, d in dict.fromkeys(zip(pids, devices, strict=True)):
        name = by_pid_dev.get((p, d))
        if name is None and d is not None and d >= 0:
            name = by_dev.get(int(d))
        names[(p, d)] = name
    if len(names) == 1:
        return [next(iter(names.values()))] * len(pids)
    return [names[(p, d)] for p, d in zip(pids, devices, strict=True)]


def _cuda_device_names(db: Database) -> dict[tuple, str]:
    """(pid, CUDA device) -> GPU name, from TARGET_INFO_CUDA_DEVICE's gpuId into TARGET_INFO_GPU."""
    gpu_cols = db.columns("TARGET_INFO_GPU")
    if "id" not in gpu_cols or "name" not in gpu_cols or not db.has("TARGET_INFO_CUDA_DEVICE"):
        return {}
    by_id = dict(db.execute("SELECT id, name FROM TARGET_INFO_GPU"))
    rows = db.execute("SELECT gpuId, cudaId, pid FROM TARGET_INFO_CUDA_DEVICE") if by_id else ()
    return {(pid, cuda_id): by_id[gpu_id] for gpu_id, cuda_id, pid in rows if gpu_id in by_id}


def _system_names(db: Database) -> dict[int, str]:
    """CUDA device -> GPU name, from TARGET_INFO_GPU's cuDevice (the system's numbering, remapped where
    CUDA_VISIBLE_DEVICES reordered it); a device whose rows name several GPUs gets none."""
    gpu_cols = db.columns("TARGET_INFO_GPU")
    if "cuDevice" not in gpu_cols:
        return {}
    chip = "chipName" in gpu_cols
    cands: dict[int, set] = {}
    for row in db.execute("SELECT cuDevice, name" + (", chipName" if chip else "") + " FROM TARGET_INFO_GPU"):
        if not chip or row[2]:
            cands.setdefault(row[0], set()).add(row[1])
    system = {d: next(iter(n)) for d, n in cands.items() if len(n) == 1}
    visible = _visible_devices(db)
    return system if visible is None else {i: system[d] for i, d in enumerate(visible) if d in system}


def nvprof_gpu_names(db: Database, devices: list, strings: dict[int, str | None]) -> list:
    """nvprof: CUPTI_ACTIVITY_KIND_DEVICE.id -> StringTable name."""
    names = {}
    if {"id", "name"} <= set(db.columns("CUPTI_ACTIVITY_KIND_DEVICE")):
        names = {i: strings.get(n) for i, n in db.execute("SELECT id, name FROM CUPTI_ACTIVITY_KIND_DEVICE")}
    return [names.get(d) if d is not None else None for d in devices]


def _num(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def device_props(major, minor, sms, clock_hz, bw_bytes, mem_bytes, warp) -> dict | None:
    """A ``gpuProps`` object: the known ones of these (positive integers), None when none is known."""
    props = {}
    if isinstance(major, int) and isinstance(minor, int) and major > 0 and minor >= 0:
        props["cc"] = f"{major}.{minor}"
    for key, v in (("sms", sms), ("clock", clock_hz), ("bw", bw_bytes), ("mem", mem_bytes), ("warp", warp)):
        if _num(v) is not None:
            props[key] = v
    return props or None


def _by_name(rows) -> dict[str, dict]:
    """name -> properties, from ``(name, props)`` rows; a name whose rows disagree gets none."""
    out: dict[str, dict | None] = {}
    for name, props in rows:
        if not name or props is None:
            continue
        out[name] = props if out.get(name, props) == props else None
    return {k: v for k, v in out.items() if v is not None}


#: a device table's property columns (SMs, clock, bandwidth, memory, compute capability major and minor,
#: warp size) and the unit of its clock and bandwidth: nsys 2021.2+ (Hz, bytes/s); the CUPTI device
#: record, as nvprof and nsys <= 2021.1 (TARGET_INFO_CUDA_GPU) store it (kHz, kB/s)
_NSYS_PROPS = ("smCount", "clockRate", "memoryBandwidth", "totalMemory", "computeMajor", "computeMinor",
               "threadsPerWarp"), 1
_CUPTI_PROPS = ("numMultiprocessors", "coreClockRate", "globalMemoryBandwidth", "globalMemorySize",
                "computeCapabilityMajor", "computeCapabilityMinor", "numThreadsPerWarp"), 1000


def _device_rows(db: Database, table: str, key: str, props: tuple[tuple[str, ...], int]) -> list[tuple]:
    """``(key, gpuProps)`` for each row of a device table (``key``: the column naming the device)."""
    names, unit = props
    cols = set(db.columns(table))
    if not {key, names[0], names[4], names[5]} <= cols:  # (SMs and compute capability: the least told)
        return []
    have = [c if c in cols else "NULL" for c in (key, *names)]

    def scaled(v):
        return v * unit if _num(v) is not None else None

    return [(k, device_props(major, minor, sms, scaled(clock), scaled(bw), mem, warp))
            for k, sms, clock, bw, mem, major, minor, warp in db.execute(
                "SELECT " + ", ".join(have) + f' FROM "{table}"')]


def nsys_gpu_props(db: Database) -> dict[str, dict]:
    """GPU name -> its ``gpuProps`` (see the module docstring); names without properties are absent."""
    return _by_name(_device_rows(db, "TARGET_INFO_GPU", "name", _NSYS_PROPS) +
                    _device_rows(db, "TARGET_INFO_CUDA_GPU", "name", _CUPTI_PROPS))


def nvprof_gpu_props(db: Database, devices: list) -> list:
    """nvprof: ``gpuProps`` per activity device (CUPTI_ACTIVITY_KIND_DEVICE.id), None where unknown."""
    by_id = dict(_device_rows(db, "CUPTI_ACTIVITY_KIND_DEVICE", "id", _CUPTI_PROPS))
    return [by_id.get(d) if d is not None else None for d in devices]
