"""Device peaks for the roofline: derived from the device's own properties, the datasheet table
(``pyprof/data/gpus.csv``), overrides and calibration.

Each :class:`Device` says where its peaks came from (:attr:`Device.origin`), the first that applies of
``given``, ``derived``, ``datasheet``, ``calibrated`` and ``estimated``: docs/prof.md ("Roofline") states
each.

No peak known: the caller shows ``n/a`` for ideal time and gap (never 0) and warns once.
"""

from __future__ import annotations

import csv
import functools
import io
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from pyprof import peaks
from pyprof.errors import UsageError
from pyprof.peaks import CPU_DEVICE

DEFAULT_FLOOR_NS = 1000.0
"""The latency floor of a device without a calibrated one: no kernel or op is priced below 1 us. The
fastest kernels of 24 corpus Nsight exports took 0.9-2.3 us; a CPU op's dispatch from Python, about 1.1 us
on the project's CPU (``pyprof calibrate`` measures it)."""

PEAK_COLUMNS = ("fp64", "fp64_tc", "fp32", "tf32_tc", "fp16", "fp16_tc", "bf16", "bf16_tc", "fp8_tc", "int8_tc")

_DTYPE_CLASS = {
    "float64": "fp64", "double": "fp64",
    "float32": "fp32", "float": "fp32", "tf32": "fp32",
    "float16": "fp16", "half": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8", "float8_e5m2fnuz": "fp8", "fp8": "fp8",
    "int8": "int8", "uint8": "int8",
}


#: the peak column of each dtype class on CUDA cores (the others: fp32's) and on tensor cores (fp32: TF32)
_CUDA_COLUMNS = ("fp64", "fp32", "fp16", "bf16")
_TENSOR_COLUMN = {"fp32": "tf32_tc", "fp64": "fp64_tc", "fp16": "fp16_tc", "bf16": "bf16_tc", "fp8": "fp8_tc",
                  "int8": "int8_tc", "int": "int8_tc"}


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
    source: str = ""  # how the peaks were found, in words (a datasheet's address, the properties used)
    origin: str = ""  # given, derived, datasheet, calibrated or estimated (see the module docstring)
    floor: float | None = None  # ns: the shortest time an op takes on it (dispatch, launch); None: the default
    bw_levels: tuple = ()  # ((bytes moved, bytes/s), ...): copy bandwidth by size, from calibration

    def floor_ns(self) -> float:
        """The latency floor (ns): calibrated, else :data:`DEFAULT_FLOOR_NS`."""
        return self.floor or DEFAULT_FLOOR_NS

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
            return f.get(_TENSOR_COLUMN[cls])
        col = cls if cls in _CUDA_COLUMNS else "fp32"
        return f.get(col) or (f.get("fp32") if col in ("fp16", "bf16") else None)

    def describe(self) -> str:
        """One line: where the peaks came from and the main ones (``derived from device properties: ...;
        fp32 19.5, tensor fp16 312 TFLOP/s; 1555 GB/s``)."""
        def tf(v):
            return "n/a" if v is None else f"{v / 1e12:.3g}"

        figures = (f"{tf(self.flops['any'])} TFLOP/s" if "any" in self.flops else
                   f"fp32 {tf(self.peak('float32', False))}, tensor fp16 {tf(self.peak('float16', True))} TFLOP/s")
        bw = "n/a" if self.bw is None else f"{self.bw / 1e9:.0f} GB/s"
        return f"{self.provenance}; {figures}; {bw}"

    @property
    def provenance(self) -> str:
        """Where the peaks came from: :attr:`origin`, then :attr:`source` (once where it says it already)."""
        origin = self.origin or "datasheet"
        if not self.source:
            return origin
        return self.source if self.source.startswith(origin) else f"{origin}: {self.source}"

    @property
    def has_tensor_cores(self) -> bool | None:
        if self.arch is None:
            return None
        return self.arch not in ("pascal", "maxwell", "kepler", "cpu")


@dataclass(frozen=True)
class GpuRow:
    """A datasheet row: the GPU's peaks and what a device of it reports (``cc``, ``sms``, boost ``mhz``,
    memory ``mem_gb``), and ``mig_sms``, the SMs of one MIG compute slice (0: no MIG)."""

    name: str
    pattern: re.Pattern
    device: Device
    cc: str = ""
    sms: int = 0
    mhz: float = 0.0
    mem_gb: float = 0.0
    mig_sms: int = 0


def _float(cell: str | None) -> float | None:
    cell = (cell or "").strip()
    return float(cell) if cell else None


def _data_rows(name: str) -> list[dict]:
    text = resources.files("pyprof").joinpath(f"data/{name}").read_text()
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return list(csv.DictReader(io.StringIO("\n".join(lines))))


@functools.lru_cache(maxsize=1)
def gpu_table() -> tuple[GpuRow, ...]:
    """The rows of ``pyprof/data/gpus.csv`` (comment lines start with ``#``), in match order."""
    rows = []
    for row in _data_rows("gpus.csv"):
        flops = {c: v * 1e12 for c in PEAK_COLUMNS if (v := _float(row[c])) is not None}
        bw = _float(row["bw_gbs"])
        dev = Device(row["name"], row["arch"] or None, flops, bw * 1e9 if bw else None, row["source"], "datasheet")
        rows.append(GpuRow(row["name"], re.compile(row["match"], re.IGNORECASE), dev, row["cc"].strip(),
                           int(_float(row["sms"]) or 0), _float(row["mhz"]) or 0.0, _float(row["mem_gb"]) or 0.0,
                           int(_float(row["mig_sms"]) or 0)))
    return tuple(rows)


_MIG = re.compile(r"\bmig\s+(\d+)g\.(\d+)gb", re.IGNORECASE)


def match_gpu(name: str | None) -> Device | None:
    """The datasheet peaks for a GPU name from an export (``NVIDIA H100 80GB HBM3`` -> H100 SXM), else None.

    A MIG slice (``NVIDIA A30 MIG 2g.12gb``) gets its share of its GPU's row: FLOP/s scaled by its SMs
    (``N`` compute slices of the row's ``mig_sms`` each, over the GPU's SMs), bandwidth by its memory
    (``M`` GB over the GPU's). A slice of a GPU without those figures, or named otherwise, is not matched.
    """
    if not name:
        return None
    mig = _MIG.search(name)
    if "mig" in name.lower().split() and mig is None:
        return None
    gpu = name[:mig.start()] if mig else name
    row = next((r for r in gpu_table() if r.pattern.search(gpu)), None)
    if row is None or mig is None:
        return row.device if row is not None else None
    if not (row.mig_sms and row.sms and row.mem_gb):
        return None
    n, m = int(mig.group(1)), int(mig.group(2))
    f_share = min(n * row.mig_sms, row.sms) / row.sms
    b_share = min(m / row.mem_gb, 1.0)
    d = row.device
    return Device(name, d.arch, {k: v * f_share for k, v in d.flops.items()}, d.bw * b_share if d.bw else None,
                  f"{d.source} ; MIG {n}g.{m}gb: {min(n * row.mig_sms, row.sms)} of {row.sms} SMs, "
                  f"{m} of {row.mem_gb:g} GB", "datasheet")


# -- derived from the device's properties ------------------------------------------------------------


@dataclass(frozen=True)
class ArchRow:
    """One row of ``pyprof/data/archs.csv``: operations per clock per SM by peak column, the typical boost
    clock (MHz) and bandwidth per SM (bytes/s), the columns halved on GeForce parts."""

    vendor: str
    cc: str
    arch: str
    mhz: float
    bw_per_sm: float
    per_clock: dict[str, float]
    geforce_half: frozenset
    source: str


@functools.lru_cache(maxsize=1)
def arch_table() -> dict[tuple[str, str], ArchRow]:
    """``(vendor, cc)`` -> :class:`ArchRow`; ``cc`` is ``"8.6"`` or a major version alone (``"10"``)."""
    out = {}
    for row in _data_rows("archs.csv"):
        per_clock = {c: v for c in PEAK_COLUMNS if (v := _float(row[c])) is not None}
        out[(row["vendor"], row["cc"])] = ArchRow(row["vendor"], row["cc"], row["arch"], float(row["mhz"]),
                                                  float(row["bw_per_sm_gbs"]) * 1e9, per_clock,
                                                  frozenset(row["geforce_half"].split()), row["source"])
    return out


def vendor(name: str | None, props: dict | None) -> str:
    """``amd`` for AMD GPUs (by name, or a 64-wide warp, which only AMD GPUs have), else ``nvidia``."""
    low = (name or "").lower()
    if low.startswith("amd") or "radeon" in low or "instinct" in low or (props or {}).get("warp") == 64:
        return "amd"
    return "nvidia"


def arch_row(vendor_name: str, cc: str | None) -> ArchRow | None:
    """The architecture row of a compute capability (``"8.6"``): the exact one, else its major version's."""
    if not cc:
        return None
    table = arch_table()
    return table.get((vendor_name, cc)) or table.get((vendor_name, cc.split(".")[0]))


def _positive(props: dict, key: str) -> float | None:
    v = props.get(key)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None


def derive(name: str | None, props: dict | None) -> Device | None:
    """Peaks from a device's recorded properties (a record's ``gpuProps``), or None without an SM count
    and a known compute capability. ``origin`` is ``derived`` when the clock and the bandwidth were
    recorded, ``estimated`` when the architecture's typical figure stood in for either."""
    if not isinstance(props, dict):
        return None
    sms = _positive(props, "sms")
    cc = props.get("cc")
    vend = vendor(name, props)
    row = arch_row(vend, cc if isinstance(cc, str) else None)
    if sms is None or row is None:
        return None
    low = (name or "").lower()
    geforce = "geforce" in low
    no_tc = vend == "nvidia" and " gtx " in f" {low} "  # GTX 16 (Turing without tensor cores)
    clock, bw, guessed = _positive(props, "clock"), _positive(props, "bw"), []
    if clock is None:  # not recorded: the architecture's typical figure, said to be one
        clock = row.mhz * 1e6
        guessed.append(f"typical {row.arch} clock {row.mhz:g} MHz")
    if bw is None:
        bw = row.bw_per_sm * sms
        guessed.append(f"typical {row.arch} bandwidth {row.bw_per_sm / 1e9:g} GB/s per SM")
    flops = {col: sms * clock * ops * (0.5 if geforce and col in row.geforce_half else 1.0)
             for col, ops in row.per_clock.items() if not (no_tc and col.endswith("_tc"))}
    unit = "CUs" if vend == "amd" else "SMs"
    text = (f"{int(sms)} {unit} x {clock / 1e9:.3g} GHz x {row.arch} (cc {cc}) rates per clock"
            + (", GeForce" if geforce and row.geforce_half else "") + (", no tensor cores" if no_tc else ""))
    if guessed:
        return Device(name or "", row.arch, flops, bw, f"estimated from {text}; " + ", ".join(guessed),
                      "estimated")
    return Device(name or "", row.arch, flops, bw, f"derived from device properties: {text}; bandwidth recorded",
                  "derived")


# Where a derived peak and the datasheet differ by more than 5%, and why: (datasheet rows, peak columns,
# reason). tests/test_prof_peaks.py holds every other row and column to 5% and these to their reason's range.
DATASHEET_DIFFERENCES: tuple[tuple[tuple[str, ...], tuple[str, ...], str], ...] = (
    (("NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H100 SXM", "NVIDIA H200 SXM", "NVIDIA B200"),
     ("tf32_tc", "fp16_tc", "bf16_tc", "fp8_tc", "int8_tc"),
     "boost clock vs the datasheet's tensor clock: NVIDIA gives Hopper and Blackwell tensor-core peaks at a lower "
     "clock (H100 SXM and H200 1830 MHz, H100 PCIe 1620, H100 NVL 1545, B200 about 1860) than the maximum boost "
     "clock the device reports and its FP32/FP64 figures use (1980, 1755, 1785, 1965 MHz), so the derived "
     "tensor peaks are 6 to 16% higher"),
)


def row_props(row: GpuRow) -> dict:
    """What a device of a datasheet row reports (``gpuProps``): its compute capability, SMs, boost clock and
    bandwidth; the input :func:`derive` gets for it."""
    return {"cc": row.cc, "sms": row.sms, "clock": int(row.mhz * 1e6), "bw": int(row.device.bw or 0)}


LIST_COLUMNS = ("fp32", "tf32_tc", "fp16_tc", "fp8_tc", "int8_tc")


def listing() -> str:
    """``pyprof prof --list-gpus``: the per-architecture rates, then each datasheet GPU with its datasheet
    peaks and the peaks derived from its SMs and clock (the check of the derivation)."""
    out = ["# Architectures (pyprof/data/archs.csv): operations per clock per SM (AMD: per CU), typical clock",
           "vendor cc    arch       MHz  GB/s/SM " + " ".join(f"{c:>7}" for c in PEAK_COLUMNS)]
    for row in arch_table().values():
        out.append(f"{row.vendor:<6} {row.cc:<5} {row.arch:<9} {row.mhz:>5g} {row.bw_per_sm / 1e9:>8g} "
                   + " ".join(f"{row.per_clock.get(c, 0):>7g}" if c in row.per_clock else f"{'-':>7}"
                              for c in PEAK_COLUMNS))
    out += ["", "# GPUs (pyprof/data/gpus.csv): datasheet TFLOP/s / derived from SMs x MHz (GeForce halving applied);"
            " bandwidth GB/s",
            f"{'name':<22} {'cc':<4} {'SMs':>4} {'MHz':>5} " + " ".join(f"{c:>15}" for c in LIST_COLUMNS) + "    GB/s"]
    for gpu in gpu_table():
        derived = derive(gpu.name, row_props(gpu))
        cells = []
        for c in LIST_COLUMNS:
            d, v = gpu.device.flops.get(c), derived.flops.get(c) if derived else None
            cells.append(f"{'-' if d is None else f'{d / 1e12:.4g}':>7}/{'-' if v is None else f'{v / 1e12:.4g}':<7}")
        out.append(f"{gpu.name:<22} {gpu.cc:<4} {gpu.sms:>4} {gpu.mhz:>5g} " + " ".join(cells)
                   + f" {(gpu.device.bw or 0) / 1e9:>7g}")
    out += ["", "A record's GPU is derived from its recorded properties first (SMs, clock, bandwidth, compute",
            "capability), then matched to the datasheet rows, then the calibration file, then estimated from its",
            "SMs with the architecture's typical clock and bandwidth; --peak-flops/--peak-bw override."]
    return "\n".join(out) + "\n"


# -- calibration -------------------------------------------------------------------------------------


def calibrated(entries: dict[str, Any], source: str) -> dict[str, Device]:
    """Devices from calibration entries (:mod:`pyprof.peaks`: the file's, or those a record file pins),
    ``source`` saying where they come from."""
    out = {}
    for name, entry in entries.items():
        if not isinstance(entry, dict):
            continue
        flops: dict[str, float] = {}
        for dtype, value in (entry.get("flops") or {}).items():
            cls = dtype_class(dtype)
            if cls is None:
                continue
            # calibrate measures what the hardware does; a matmul peak is a tensor-core peak for the
            # dtype where the GPU has them, and the only peak for CPUs: fill both columns.
            if cls in _CUDA_COLUMNS:
                flops.setdefault(cls, float(value))
            if cls != "int":
                flops.setdefault(_TENSOR_COLUMN[cls], float(value))
        arch = "cpu" if name == CPU_DEVICE else None
        levels = tuple((float(b), float(r)) for b, r in entry.get("bw_levels") or () if r > 0)
        floor = entry.get("floor")
        out[name] = Device(name, arch, flops, float(entry["bw"]) if entry.get("bw") else None, source, "calibrated",
                           floor=float(floor) if isinstance(floor, (int, float)) and floor > 0 else None,
                           bw_levels=levels)
    return out


def load_calibration(path=None) -> dict[str, Device]:
    """Calibrated devices by name, from the calibration file (``{}`` when there is none)."""
    return calibrated(peaks.read(path)["devices"], f"calibration {peaks.path(path)}")


def pinned_calibration(pinned: Any) -> dict[str, Device]:
    """Calibrated devices from the peaks a record file pins (its header's ``peaks``)."""
    entries = pinned.get("devices") if isinstance(pinned, dict) else None
    where = pinned.get("file") if isinstance(pinned, dict) else None
    return calibrated(entries if isinstance(entries, dict) else {},
                      f"calibration pinned in the record file (from {where})" if where else "calibration pinned")


# -- resolution --------------------------------------------------------------------------------------


def override_device(name: str | None, peak_flops: float | None, peak_bw: float | None,
                    base: Device | None) -> Device | None:
    """Apply ``--peak-flops`` (FLOP/s, every dtype) and ``--peak-bw`` (bytes/s) over ``base``."""
    if peak_flops is None and peak_bw is None:
        return base
    if peak_flops is not None and not peak_flops > 0 or peak_bw is not None and not peak_bw > 0:
        raise UsageError("--peak-flops and --peak-bw must be positive", "give FLOP/s and bytes/s, e.g. 3.1e14 2e12")
    was = base or Device("override", None)
    given = " and ".join(w for w, v in (("--peak-flops", peak_flops), ("--peak-bw", peak_bw)) if v is not None)
    kept = f"; the rest {was.origin}: {was.source}" if base is not None and (peak_flops is None or peak_bw is None) else ""
    return Device(name or was.name, was.arch, {"any": float(peak_flops)} if peak_flops is not None else dict(was.flops),
                  float(peak_bw) if peak_bw is not None else was.bw, f"command-line override ({given}){kept}", "given",
                  floor=was.floor, bw_levels=was.bw_levels if peak_bw is None else ())


def props_key(props: Any) -> Any:
    """A hashable stand-in for a record's ``gpuProps`` (equal properties, equal keys)."""
    if isinstance(props, dict):
        return tuple(sorted((str(k), v if isinstance(v, (int, float, str)) else repr(v)) for k, v in props.items()))
    return None


class DeviceResolver:
    """Maps a record's GPU name and device properties (None for CPU) to a :class:`Device`, caching each
    distinct pair; the order is the module docstring's."""

    def __init__(self, gpu: str | None = None, peak_flops: float | None = None, peak_bw: float | None = None,
                 calibration: dict[str, Device] | None = None, pinned: dict | None = None):
        self.gpu = gpu
        self.peak_flops = peak_flops
        self.peak_bw = peak_bw
        self._calibration = calibration if calibration is not None or pinned is None else pinned_calibration(pinned)
        self._cache: dict[tuple, Device | None] = {}
        if gpu is not None and match_gpu(gpu) is None and gpu not in self.calibration and peak_flops is None:
            names = ", ".join(r.name for r in gpu_table())
            raise UsageError(f"--gpu {gpu!r} matches no GPU in the peak table",
                             f"use one of: {names}; or give --peak-flops and --peak-bw")

    @property
    def calibration(self) -> dict[str, Device]:
        if self._calibration is None:
            self._calibration = load_calibration()
        return self._calibration

    def resolve(self, gpu_name: str | None, is_cpu: bool = False, props: dict | None = None) -> Device | None:
        key = (gpu_name, is_cpu, props_key(props))
        if key in self._cache:
            return self._cache[key]
        name = self.gpu or gpu_name
        if is_cpu and self.gpu is None:
            base = self.calibration.get(CPU_DEVICE)
        elif self.gpu is not None:
            base = match_gpu(name) or (self.calibration.get(name) if name is not None else None)
        else:
            derived = derive(name, props)
            base = derived if derived is not None and derived.origin == "derived" else None
            base = base or match_gpu(name) or (self.calibration.get(name) if name else None) or derived
        dev = override_device(name, self.peak_flops, self.peak_bw, base)
        self._cache[key] = dev
        return dev
