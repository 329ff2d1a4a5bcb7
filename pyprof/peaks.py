"""The calibration file (this machine's measured peaks) and the peaks a record file pins.

``pyprof calibrate`` (and ``pyprof run``, once, where none is saved) measure a device's peaks; they are kept
in one JSON file (``$PYPROF_CALIBRATION``, else ``~/.cache/pyprof/calibration.json``)::

    {"version": 1, "devices": {"cpu": {"flops": {"float32": ...}, "bw": ..., "bw_levels": [[bytes, bytes/s]],
                                       "floor": ns, "saved": "2026-12-07T12:00:00+00:00", "measured": {...},
                                       "kept": {"float32": "2026-12-01T09:00:00+00:00"}}}}

A busy machine can only make a peak look lower and the floor (the shortest time an op can take:
dispatch or launch) higher, so :func:`save` keeps the best figures of the saved and the new measurement
(:func:`merge`; ``kept`` names each one kept, with when it was taken), unless told to ``replace`` or
measured with another thread count or torch, which replaces the saved entry whole.

A record file pins what it was priced with (:func:`pinned`, the header's ``peaks``): a later calibration
changes how new runs are priced, never an older run's numbers, unless the user asks to re-price.
No torch and nothing of prof here: parse, prof and calibrate all read it.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
from pathlib import Path
from typing import Any

import orjson

from pyprof.atomic import atomic_output
from pyprof.errors import InputError, UsageError
from pyprof.terminal import shown

CPU_DEVICE = "cpu"
"""The calibration key of CPU records (records whose ``device`` is null)."""
#: per-entry measurements that are a set of conditions, not a figure to keep the best of
_SAME_SETUP = ("threads", "torch")
_REDO = "delete it or run `pyprof calibrate` again"


def path(given: str | os.PathLike | None = None) -> Path:
    """``given``, else ``$PYPROF_CALIBRATION``, else ``~/.cache/pyprof/calibration.json``."""
    if given is not None:
        return Path(given)
    env = os.environ.get("PYPROF_CALIBRATION")
    return Path(env) if env else Path.home() / ".cache" / "pyprof" / "calibration.json"


def read(given: str | os.PathLike | None = None) -> dict[str, Any]:
    """The calibration file's content (``{"version": 1, "devices": {}}`` where there is none)."""
    target = path(given)
    if not target.exists():
        return {"version": 1, "devices": {}}
    try:
        data = orjson.loads(target.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise InputError(f"calibration file {target} is unreadable ({exc})", _REDO) from None
    if not isinstance(data, dict) or not isinstance(data.get("devices"), dict):
        raise InputError(f"calibration file {target} is not a pyprof calibration", _REDO)
    for name, found in data["devices"].items():
        problem = _problem(found)
        if problem:
            raise InputError(shown(f"calibration file {target}: device {name!r}: {problem}", 300), _REDO)
    return data


def _problem(found: Any) -> str | None:
    """What is wrong with one device's entry (``flops``: dtype -> FLOP/s, ``bw``: bytes/s, ``floor``: ns,
    ``bw_levels``: [bytes, bytes/s] pairs; each a positive finite number), or None."""
    def rate(v) -> bool:
        return v.__class__ in (int, float) and math.isfinite(v) and v > 0

    if not isinstance(found, dict):
        return "not an object"
    flops = found.get("flops") or {}
    if not isinstance(flops, dict):
        return '"flops" is not an object of rates'
    bad = next((k for k, v in flops.items() if not rate(v)), None)
    if bad is not None:
        return f'"flops" of {bad} is {flops[bad]!r:.40}, not a positive number of FLOP/s'
    for key in ("bw", "floor"):
        if found.get(key) is not None and not rate(found[key]):
            return f'"{key}" is {found[key]!r:.40}, not a positive number'
    levels = found.get("bw_levels") or []
    if not isinstance(levels, list) or not all(isinstance(v, list) and len(v) == 2 and all(map(rate, v)) for v in levels):
        return '"bw_levels" is not a list of [bytes, bytes/s] pairs'
    return None


def entry(device: str, given: str | os.PathLike | None = None) -> dict | None:
    """The saved entry of one device (``flops``, ``bw``, and where present ``bw_levels``, ``floor``,
    ``saved``, ``measured``, ``kept``), or None."""
    found = read(given)["devices"].get(device)
    return found if isinstance(found, dict) else None


def _setup_changed(old: dict, conditions: dict | None) -> bool:
    was, now = old.get("measured") or {}, conditions or {}
    return any(was.get(k) is not None and now.get(k) is not None and was[k] != now[k] for k in _SAME_SETUP)


def _busy(entry: dict) -> float:
    """The share of the CPUs other processes took while ``entry`` was measured (1 where unknown)."""
    v = (entry.get("measured") or {}).get("busy_others")
    return float(v) if isinstance(v, (int, float)) else 1.0


def _keep_levels(out: dict, old: dict, keep) -> None:
    """``out``'s bandwidth per level, the higher of its own and ``old``'s (``keep``: told each one kept)."""
    levels = {int(b): float(r) for b, r in (out.get("bw_levels") or [])}
    for b, r in old.get("bw_levels") or []:
        if r > levels.get(int(b), 0.0):
            levels[int(b)] = float(r)
            keep(f"bw at {int(b)} bytes")
    if levels:
        out["bw_levels"] = sorted([b, r] for b, r in levels.items())


def merge(old: dict | None, new: dict) -> tuple[dict, list[str]]:
    """``new`` (an entry just measured) kept with the best figures of ``old`` (the saved entry of the same
    setup): the higher peak, the lower floor, the higher bandwidth per level. Returns the entry and the
    figures kept from ``old`` (those ``new`` measured worse)."""
    if not old or _setup_changed(old, new.get("measured")):
        return new, []
    kept: dict[str, Any] = {}  # figure -> when the measurement it is kept from was taken
    out = dict(new, flops=dict(new["flops"]), kept=kept)

    def keep(name: str) -> None:
        kept[name] = (old.get("kept") or {}).get(name) or old.get("saved")

    for dtype, v in (old.get("flops") or {}).items():
        if isinstance(v, (int, float)) and v > out["flops"].get(dtype, 0.0):
            out["flops"][dtype] = float(v)
            keep(dtype)
    if isinstance(old.get("bw"), (int, float)) and old["bw"] > out["bw"]:
        out["bw"] = float(old["bw"])
        keep("bw")
    if isinstance(old.get("floor"), (int, float)) and (out.get("floor") is None or old["floor"] < out["floor"]):
        out["floor"] = float(old["floor"])
        keep("floor")
    _keep_levels(out, old, keep)
    if _busy(old) < _busy(new):  # the quieter measurement's conditions describe the figures kept best
        out["measured"], out["saved"] = old.get("measured"), old.get("saved", out["saved"])
    if not kept:
        del out["kept"]
    return out, list(kept)


def save(device: str, flops: dict, bw: float, given=None, conditions: dict | None = None, *,
         floor: float | None = None, bw_levels: list | None = None, replace: bool = False) -> tuple[Path, list[str]]:
    """Store a measurement of ``device`` (FLOP/s per dtype name, bytes/s; ``floor`` ns; ``bw_levels``
    ``[[bytes moved, bytes/s], ...]``; ``conditions``: how it was taken, saved as ``measured``), keeping the
    saved entry's better figures (:func:`merge`) unless ``replace``. Other devices are kept. Returns the
    path and the figures kept from the saved entry."""
    if not device:
        raise UsageError("a calibration needs a device name", "pass the GPU name or 'cpu'")
    new: dict[str, Any] = {"flops": {str(k).removeprefix("torch."): float(v) for k, v in flops.items()},
                           "bw": float(bw),
                           "saved": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
    if floor is not None and floor > 0:
        new["floor"] = float(floor)
    if bw_levels:
        new["bw_levels"] = [[int(b), float(r)] for b, r in bw_levels if r > 0]
    problem = _problem(new)  # (what read() would refuse is never written)
    if problem:
        raise UsageError(f"calibration of {device}: {problem}", "nothing was saved")
    if conditions is not None:
        new["measured"] = dict(conditions)
    target = path(given)
    data = read(target)
    data["devices"][device], kept = merge(None if replace else data["devices"].get(device), new)
    target.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(target, "wb") as fh:
        fh.write(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return target, kept


def pinned(given: str | os.PathLike | None = None) -> dict[str, Any]:
    """What a record file's header keeps of the peaks it is priced with: the calibration file's path and
    its entries as they are now (``{"file": ..., "devices": {}}`` where there is none: the file is then
    priced without calibration for good)."""
    target = path(given)
    return {"file": str(target), "devices": read(target)["devices"]}
