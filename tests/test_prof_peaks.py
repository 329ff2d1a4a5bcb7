"""Peaks derived from a device's recorded properties (SMs x clock x rate per SM of its architecture), held
to the datasheet table; MIG slices; every GPU the corpus records gets a FLOP/s peak and a bandwidth."""

from __future__ import annotations

import gzip
import json
import sqlite3

import pytest

try:
    from conftest import CORPUS, corpus_file, corpus_files, corpus_params, read_record_file, run_main
except ImportError:  # tests/ collected as a package
    from tests.conftest import CORPUS, corpus_file, corpus_files, corpus_params, read_record_file, run_main

from pyprof.parse.db import Database
from pyprof.parse.gpus import nsys_gpu_props, nvprof_gpu_props
from pyprof.prof import devices
from pyprof.prof.devices import DATASHEET_DIFFERENCES, DeviceResolver, derive, gpu_table, match_gpu

TOLERANCE = 0.05


def _explained(name: str, col: str) -> bool:
    return any(name in names and col in cols for names, cols, _ in DATASHEET_DIFFERENCES)


@pytest.mark.parametrize("row", gpu_table(), ids=lambda r: r.name)
def test_derived_peaks_agree_with_the_datasheet(row):
    """Every datasheet figure of every row, derived from the row's compute capability, SMs and boost clock:
    within 5%, or a listed difference that is really there (above 5%, below 20%)."""
    dev = derive(row.name, devices.row_props(row))
    assert dev is not None and dev.origin == "derived" and dev.arch == row.device.arch
    for col, sheet in row.device.flops.items():
        got = dev.flops.get(col)
        assert got is not None, (row.name, col)
        err = abs(got / sheet - 1)
        if _explained(row.name, col):
            assert TOLERANCE < err < 0.20, (row.name, col, got, sheet)
        else:
            assert err <= TOLERANCE, (row.name, col, got / 1e12, sheet / 1e12)
    assert dev.bw == pytest.approx(row.device.bw)


def test_listed_differences_name_real_rows_and_columns():
    names = {r.name for r in gpu_table()}
    for rows, cols, why in DATASHEET_DIFFERENCES:
        assert set(rows) <= names and set(cols) <= set(devices.PEAK_COLUMNS) and why


def test_every_architecture_row_is_usable():
    for (vendor, cc), row in devices.arch_table().items():
        assert vendor in ("nvidia", "amd") and row.mhz > 0 and row.bw_per_sm > 0, (vendor, cc)
        assert row.per_clock.get("fp32"), (vendor, cc)
        assert row.geforce_half <= set(row.per_clock), (vendor, cc)


def _nsys_rows(path) -> list[dict]:
    """TARGET_INFO_GPU / TARGET_INFO_CUDA_GPU rows by hand SQL, as name -> props in base units."""
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    con.row_factory = sqlite3.Row
    tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    out = {}
    if "TARGET_INFO_GPU" in tables:
        cols = {r[1] for r in con.execute("PRAGMA table_info(TARGET_INFO_GPU)")}
        if "smCount" in cols:
            for r in con.execute("SELECT * FROM TARGET_INFO_GPU WHERE smCount > 0"):
                out[r["name"]] = {"cc": f"{r['computeMajor']}.{r['computeMinor']}", "sms": r["smCount"],
                                  "clock": r["clockRate"], "bw": r["memoryBandwidth"]}
    if "TARGET_INFO_CUDA_GPU" in tables:
        for r in con.execute("SELECT * FROM TARGET_INFO_CUDA_GPU"):
            out[r["name"]] = {"cc": f"{r['computeCapabilityMajor']}.{r['computeCapabilityMinor']}",
                              "sms": r["numMultiprocessors"], "clock": r["coreClockRate"] * 1000,
                              "bw": r["globalMemoryBandwidth"] * 1000}
    con.close()
    return out


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params(corpus_files("nsys")), ids=lambda p: p.name[:40])
def test_corpus_nsys_properties_and_peaks(path):
    """The reader's properties are the tables' (hand SQL); each GPU's peaks are derived from them, and
    where the datasheet lists the GPU they agree with it as the table's rows do."""
    want = _nsys_rows(path)
    with Database(path) as db:
        got = nsys_gpu_props(db)
    for name, props in want.items():
        assert {k: got[name][k] for k in props} == props, name
        dev = DeviceResolver(calibration={}).resolve(name, False, got[name])
        assert dev is not None and dev.origin == "derived", name
        assert dev.peak("float32", False) and dev.bw, name
        sheet = match_gpu(name)
        if sheet is None or "MIG" in name:
            continue
        for col, v in sheet.flops.items():
            err = abs(dev.flops[col] / v - 1)
            assert err <= TOLERANCE or _explained(sheet.name, col) and err < 0.20, (name, col)
        assert dev.bw == pytest.approx(sheet.bw, rel=TOLERANCE), name


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params(corpus_files("nvprof")), ids=lambda p: p.name[:40])
def test_corpus_nvprof_peaks(path):
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    want = {i: (sms, clock * 1000, bw * 1000) for i, sms, clock, bw in con.execute(
        "SELECT id, numMultiprocessors, coreClockRate, globalMemoryBandwidth FROM CUPTI_ACTIVITY_KIND_DEVICE")}
    con.close()
    with Database(path) as db:
        got = nvprof_gpu_props(db, list(want))
    for (dev_id, (sms, clock, bw)), props in zip(want.items(), got, strict=True):
        assert (props["sms"], props["clock"], props["bw"]) == (sms, clock, bw), dev_id
        dev = DeviceResolver(calibration={}).resolve("nvprof GPU", False, props)
        assert dev.origin == "derived" and dev.bw == bw
        assert dev.peak("float32", False) == pytest.approx(sms * clock * devices.arch_row("nvidia", props["cc"]).per_clock["fp32"])


def _meta(path) -> dict:
    """A trace's ``deviceProperties`` (decoded where it stands, not the whole trace: the test stays fast)."""
    with gzip.open(path) as fh:
        text = fh.read().decode("utf-8", "replace")
    at = text.find('"deviceProperties"')
    if at < 0:
        return {}
    start = text.index("[", at)
    return {"deviceProperties": json.JSONDecoder().raw_decode(text, start)[0]}


def _kineto_traces():
    return sorted((CORPUS / "kineto").glob("*.json.gz")) if (CORPUS / "kineto").is_dir() else []


@pytest.mark.corpus
@pytest.mark.parametrize("path", corpus_params(_kineto_traces()), ids=lambda p: p.name[:40])
def test_corpus_kineto_gpus_get_peaks(path):
    """torch.profiler records SMs and compute capability, no clock or bandwidth: the datasheet where it
    lists the GPU, else estimated; every trace that names its GPU gets both peaks."""
    from pyprof.parse.kineto.source import _devices

    names, props = _devices(_meta(path))
    for dev_id, name in names.items():
        dev = DeviceResolver(calibration={}).resolve(name, False, props.get(dev_id))
        assert dev is not None and dev.origin in ("datasheet", "estimated"), name
        assert dev.peak("float32", False) and dev.peak("bfloat16", True) and dev.bw, name


@pytest.mark.corpus
def test_amd_mi250_trace_is_estimated_as_cdna2():
    """The HTA MI250 trace (104 CUs per device, gfx90a, no clock or bandwidth): estimated at CDNA 2's
    1.7 GHz; AMD gives one MI250 GCD (= an MI210) 181 dense FP16 matrix TFLOP/s and 1638 GB/s."""
    from pyprof.parse.kineto.source import _devices

    path = CORPUS / "kineto" / "facebookresearch__HolisticTraceAnalysis__amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    if not path.exists():
        pytest.skip("corpus absent")
    props = _devices(_meta(path))[1][0]
    assert props["warp"] == 64 and props["sms"] == 104
    dev = DeviceResolver(calibration={}).resolve("AMD Radeon Graphics", False, props)
    assert dev.origin == "estimated" and dev.arch == "cdna2"
    assert dev.peak("float16", True) == pytest.approx(181e12, rel=TOLERANCE)
    assert dev.bw == pytest.approx(1638e9, rel=TOLERANCE)


A30_MIG = "IllusiveAldebaran__nussinov-gpu__report3.sqlite"


@pytest.mark.corpus
def test_a30_mig_slice_gets_its_share(tmp_path, capsys):
    """The corpus's A30 MIG 2g.12gb export: parse records the slice's 28 SMs and bandwidth, prof derives
    half the A30's compute and half its bandwidth (2 of 4 compute slices, 12 of 24 GB) and says so; the
    name alone gives the same share of the datasheet row."""
    out = tmp_path / "mig.dict"
    code, _, err = run_main(capsys, ["parse", corpus_file(A30_MIG), "-o", out])
    assert code == 0, err
    recs = read_record_file(out)
    props = {json.dumps(r["gpuProps"], sort_keys=True) for r in recs}
    assert len(props) == 1 and recs[0]["gpu"] == "NVIDIA A30 MIG 2g.12gb" and recs[0]["gpuProps"]["sms"] == 28
    a30 = match_gpu("NVIDIA A30")
    dev = DeviceResolver(calibration={}).resolve(recs[0]["gpu"], False, recs[0]["gpuProps"])
    by_name = match_gpu("NVIDIA A30 MIG 2g.12gb")
    for d in (dev, by_name):
        for col in ("fp32", "tf32_tc", "fp16_tc", "int8_tc", "fp64_tc"):
            assert d.flops[col] == pytest.approx(a30.flops[col] / 2, rel=TOLERANCE), col
        assert d.bw == pytest.approx(a30.bw / 2, rel=TOLERANCE)
    assert dev.origin == "derived" and by_name.origin == "datasheet"
    code, text, err = run_main(capsys, ["prof", out, "--summary", "op", "-w", "0"])
    assert code == 0, err
    peaks = [ln for ln in text.splitlines() if ln.startswith("# peaks:")]
    assert len(peaks) == 1 and "NVIDIA A30 MIG 2g.12gb: derived from device properties: 28 SMs" in peaks[0]
    assert "no peak" not in err


def test_estimated_where_clock_and_bandwidth_are_missing():
    full = derive("NVIDIA GeForce RTX 4060 Laptop GPU", {"cc": "8.9", "sms": 24, "clock": 2010000000,
                                                         "bw": 256032000000})
    part = derive("NVIDIA GeForce RTX 4060 Laptop GPU", {"cc": "8.9", "sms": 24})
    assert full.origin == "derived" and part.origin == "estimated"
    assert "typical ada clock" in part.source and "bandwidth" in part.source
    # GeForce: FP32-accumulate tensor math at half the rate of the same chip's professional parts
    pro = derive("NVIDIA RTX 4000 Ada Generation", {"cc": "8.9", "sms": 24, "clock": 2010000000, "bw": 1})
    assert full.flops["fp16_tc"] * 2 == pytest.approx(pro.flops["fp16_tc"])
    assert full.flops["int8_tc"] == pytest.approx(pro.flops["int8_tc"])
    assert derive("x", {"cc": "8.9"}) is None and derive("x", {"sms": 3}) is None and derive("x", None) is None


def test_gtx_16_has_no_tensor_peaks():
    dev = derive("NVIDIA GeForce GTX 1650", {"cc": "7.5", "sms": 16, "clock": 1560000000, "bw": 128032000000})
    assert dev.peak("float16", True) is None and dev.peak("float32", False) == pytest.approx(16 * 1.56e9 * 128)


def test_resolution_order():
    props = {"cc": "8.0", "sms": 108, "clock": 1410000000, "bw": 1555200000000}
    r = DeviceResolver(calibration={})
    assert r.resolve("NVIDIA A100-SXM4-40GB", False, props).origin == "derived"
    assert r.resolve("NVIDIA A100-SXM4-40GB", False, {"cc": "8.0", "sms": 108}).origin == "datasheet"
    assert r.resolve("NVIDIA A100-SXM4-40GB", False, None).origin == "datasheet"
    given = DeviceResolver(peak_bw=1e12, calibration={}).resolve("NVIDIA A100-SXM4-40GB", False, props)
    assert given.origin == "given" and given.bw == 1e12 and "derived" in given.source
    assert given.peak("float32", False) == pytest.approx(108 * 1.41e9 * 128)


def test_list_gpus(capsys):
    code, text, err = run_main(capsys, ["prof", "--list-gpus"])
    assert code == 0, err
    for row in gpu_table():
        assert row.name in text
    for row in devices.arch_table().values():
        assert f" {row.arch} " in text


def test_record_files_without_gpu_props_stay_on_the_fast_reader(tmp_path):
    """Record files written before ``gpuProps`` existed: read by the block reader, not line by line, with
    the field null; the GPU then gets its datasheet peaks by name."""
    import orjson

    from pyprof.prof.fastread import read_columns
    from pyprof.prof.table import build_file
    from pyprof.records import FIELD_NAMES

    rec = {k: None for k in FIELD_NAMES} | {
        "kind": "kernel", "source": "nsys", "kShortName": "k", "kLongName": "k", "kDuration": 5, "start": 1,
        "end": 6, "device": 0, "gpu": "NVIDIA A100-SXM4-40GB", "ranges": [], "layer": [], "trace": [], "seqId": [],
        "altSeqId": [], "dir": ""}
    rec["opId"] = rec.pop("opId")  # parse's order: opId last but one
    rec["subSeqId"] = rec.pop("subSeqId")
    path = tmp_path / "old.dict"
    path.write_bytes(b"".join(orjson.dumps({k: v for k, v in rec.items() if k != "gpuProps"}) + b"\n"
                              for _ in range(3)))
    cols = read_columns(path)
    assert list(cols.index.values()) == [0]  # one static part, decoded by the block reader
    assert cols.arrays()["gpuProps"].tolist() == [None] * 3
    assert build_file(path, workers=1).attrs["peaks"][0].startswith("NVIDIA A100-SXM4-40GB: datasheet: ")


@pytest.mark.corpus
def test_report_says_where_the_peaks_came_from(tmp_path, capsys):
    """The report's device list (the page's "where their peaks came from" table): the MIG export's slice,
    derived from its recorded properties."""
    from pyprof.report import profile

    out = tmp_path / "mig.dict"
    code, _, err = run_main(capsys, ["parse", corpus_file(A30_MIG), "-o", out])
    assert code == 0, err
    (info,) = profile.load(out).devices
    assert info.label == "NVIDIA A30 MIG 2g.12gb"
    assert info.source.startswith("derived from device properties: 28 SMs x 1.44 GHz x ampere (cc 8.0)")
