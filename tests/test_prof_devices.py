"""GPU peak table, name matching (real export names), peak lookup per dtype/unit, calibration files."""

from __future__ import annotations

import sqlite3

import orjson
import pytest

try:
    from conftest import corpus_file
except ImportError:  # tests/ collected as a package
    from tests.conftest import corpus_file

from pyprof.errors import InputError, UsageError
from pyprof.peaks import save as save_calibration
from pyprof.prof import devices
from pyprof.prof.devices import DeviceResolver, load_calibration, match_gpu

NAMES = {
    "Tesla V100-SXM2-16GB": "Tesla V100 SXM2",
    "Tesla V100-SXM2-32GB": "Tesla V100 SXM2",
    "Tesla V100-PCIE-16GB": "Tesla V100 PCIe",
    "Tesla T4": "Tesla T4",
    "NVIDIA A10": "NVIDIA A10",
    "NVIDIA A100-SXM4-40GB": "NVIDIA A100 40GB",
    "NVIDIA A100-PCIE-40GB": "NVIDIA A100 40GB",
    "NVIDIA A100-SXM4-80GB": "NVIDIA A100 80GB SXM",
    "NVIDIA A100 80GB PCIe": "NVIDIA A100 80GB PCIe",
    "NVIDIA L4": "NVIDIA L4",
    "NVIDIA L40S": "NVIDIA L40S",
    "NVIDIA GeForce RTX 3090": "GeForce RTX 3090",
    "NVIDIA GeForce RTX 4090": "GeForce RTX 4090",
    "NVIDIA H100 80GB HBM3": "NVIDIA H100 SXM",
    "NVIDIA H100 PCIe": "NVIDIA H100 PCIe",
    "NVIDIA H200": "NVIDIA H200 SXM",
    "NVIDIA B200": "NVIDIA B200",
    "Tesla P100-PCIE-16GB": "Tesla P100 PCIe",
}


@pytest.mark.parametrize("name,row", NAMES.items())
def test_match_gpu(name, row):
    dev = match_gpu(name)
    assert dev is not None and dev.name == row


# (a MIG slice of a listed GPU matches its share: tests/test_prof_peaks.py; the A10 has no MIG)
@pytest.mark.parametrize("name", ["NVIDIA GeForce RTX 3070 Ti", "NVIDIA A10 MIG 1g.6gb", "Orin", "", None,
                                  "NVIDIA GeForce RTX 3090 Ti", "Intel(R) Iris(R) Xe Graphics"])
def test_unlisted_gpus_do_not_match(name):
    assert match_gpu(name) is None


def test_table_rows_are_complete_and_cited():
    rows = devices.gpu_table()
    required = ["V100", "T4", "A10", "A100 40GB", "A100 80GB", "L4", "L40S", "RTX 3090", "RTX 4090",
                "H100 SXM", "H100 PCIe", "H200", "B200"]
    names = [r.name for r in rows]
    for want in required:
        assert any(want in n for n in names), want
    for r in rows:
        d = r.device
        assert r.device.source.split()[-1].startswith("http") or "http" in d.source, r.name
        assert d.bw and d.bw > 1e11, r.name
        assert d.flops.get("fp32"), r.name
        for unit in ("fp16", "bf16", "tf32", "fp64"):
            tc = d.flops.get(f"{unit}_tc")
            base = d.flops.get(unit if unit != "tf32" else "fp32")
            if tc and base:
                assert tc >= base, (r.name, unit)


def test_peak_per_dtype_and_unit():
    h100 = match_gpu("NVIDIA H100 80GB HBM3")
    assert h100.peak("float32", tensor=True) == pytest.approx(494.5e12)  # TF32
    assert h100.peak("float32", tensor=False) == pytest.approx(67e12)
    assert h100.peak("bfloat16", tensor=True) == pytest.approx(989.5e12)
    assert h100.peak("torch.float16", tensor=True) == pytest.approx(989.5e12)
    assert h100.peak("float8_e4m3fn", tensor=True) == pytest.approx(1979e12)
    assert h100.peak("float64", tensor=True) == pytest.approx(67e12)
    assert h100.bw == pytest.approx(3.35e12)
    # no separate CUDA-core fp16 figure listed: the fp32 peak stands in
    assert h100.peak("float16", tensor=False) == pytest.approx(67e12)
    v100 = match_gpu("Tesla V100-SXM2-16GB")
    assert v100.peak("bfloat16", tensor=True) is None  # Volta has no bf16 tensor cores


@pytest.mark.corpus
@pytest.mark.parametrize("file,expected", [
    ("josiahdavis__profiling-lm", "Tesla V100 SXM2"),
    ("Lianhang666__gpu4__report1", "Tesla T4"),
    ("zx3xyy__assignment2", "NVIDIA A100 80GB SXM"),
    ("hpcgroup__pipit", "NVIDIA A100 40GB"),
    ("danae-pan__hpc_assignment3", "NVIDIA H100 PCIe"),
    ("NVIDIA__Fuser__report1", "NVIDIA H200 SXM"),
    ("LeiWang1999__memfusion", "GeForce RTX 3090"),
    ("present42__CudaPractice", "GeForce RTX 4090"),
])
def test_corpus_gpu_names_match(file, expected):
    path = corpus_file(file)
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        if "StringTable" in tables:
            q = "select s.value from CUPTI_ACTIVITY_KIND_DEVICE d join StringTable s on s._id_ = d.name"
        else:
            q = "select name from TARGET_INFO_GPU"
        names = {r[0] for r in con.execute(q)}
    finally:
        con.close()
    assert {match_gpu(n).name for n in names if match_gpu(n)} == {expected}


def test_calibration_roundtrip(tmp_path, monkeypatch):
    path = tmp_path / "cal.json"
    monkeypatch.setenv("PYPROF_CALIBRATION", str(path))
    assert load_calibration() == {}
    save_calibration("cpu", {"float32": 1.5e11, "torch.bfloat16": 3e11}, 4e10)
    save_calibration("NVIDIA GeForce RTX 3070 Ti", {"float16": 8e13}, 5e11)
    cal = load_calibration()
    assert set(cal) == {"cpu", "NVIDIA GeForce RTX 3070 Ti"}
    assert cal["cpu"].peak("float32", tensor=False) == pytest.approx(1.5e11)
    assert cal["cpu"].peak("bfloat16", tensor=False) == pytest.approx(3e11)
    assert cal["cpu"].bw == pytest.approx(4e10)
    assert cal["NVIDIA GeForce RTX 3070 Ti"].peak("float16", tensor=True) == pytest.approx(8e13)
    saved = orjson.loads(path.read_bytes())
    assert saved["devices"]["cpu"]["flops"]["bfloat16"] == 3e11
    # the resolver uses it for CPU records and for the unlisted GPU, the table for listed ones
    r = DeviceResolver()
    assert r.resolve(None, is_cpu=True).bw == pytest.approx(4e10)
    assert r.resolve("NVIDIA GeForce RTX 3070 Ti").bw == pytest.approx(5e11)
    assert r.resolve("NVIDIA H200").name == "NVIDIA H200 SXM"
    assert r.resolve("unknown gpu") is None


def test_calibration_explicit_path_and_errors(tmp_path):
    path = tmp_path / "sub" / "c.json"
    assert save_calibration("cpu", {"float32": 1e11}, 1e10, path) == (path, [])
    assert "cpu" in load_calibration(path)
    with pytest.raises(UsageError):
        save_calibration("cpu", {"float32": 0}, 1e10, path)
    with pytest.raises(UsageError):
        save_calibration("cpu", {"float32": 1e11}, -1, path)
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(InputError, match="calibration"):
        load_calibration(bad)


def test_resolver_rejects_unknown_gpu_option():
    with pytest.raises(UsageError, match="matches no GPU"):
        DeviceResolver(gpu="Voodoo 5", calibration={})
    assert DeviceResolver(gpu="Voodoo 5", peak_flops=1e12, calibration={}).resolve(None).peak("float32", False) == 1e12
