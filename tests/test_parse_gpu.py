"""GPU names: KERNEL.deviceId (process-local ordinal) -> name, per nsys-schema.md §3.7, never TARGET_INFO_GPU.id."""

from __future__ import annotations

import sqlite3

import pytest

from pyprof.parse.db import Database
from pyprof.parse.gpus import nsys_gpu_names
from pyprof.parse.source import open_source
from tests.conftest import corpus_file


def _gpus(name):
    return {r["gpu"] for r in open_source(corpus_file(name)).records() if r["kind"] == "kernel"}


@pytest.mark.corpus
@pytest.mark.parametrize("name, gpu", [
    ("Athrun0109__CS336", "NVIDIA RTX 5000 Ada Generation Laptop GPU"),  # Windows: Intel/Microsoft adapters too
    ("cestwc__balinski", "NVIDIA GeForce RTX 3090"),                     # TARGET_INFO_CUDA_DEVICE (2025.5)
    ("danae-pan__hpc_assignment3", "NVIDIA H100 PCIe"),                  # CUDA_VISIBLE_DEVICES="1"
    ("josiahdavis__profiling-lm", "Tesla V100-SXM2-16GB"),               # nvprof DEVICE table
    ("MohanadOdema__DLProf", "NVIDIA GeForce RTX 2070 SUPER"),
])
def test_corpus_gpu_names(name, gpu):
    assert _gpus(name) == {gpu}


@pytest.mark.corpus
def test_oldest_layout_uses_cuda_gpu_table():
    path = corpus_file("PolPuigPuy__OpenACC_Project_PolPuig__report2.sqlite")
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    want = {n for (n,) in c.execute("SELECT name FROM TARGET_INFO_CUDA_GPU")}
    assert len(want) == 1
    assert _gpus("PolPuigPuy__OpenACC_Project_PolPuig__report2.sqlite") == want


def _synthetic(folder, with_cuda_device: bool, visible: str | None):
    folder.mkdir()
    f = folder / "gpus.sqlite"
    with sqlite3.connect(f) as c:
        c.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT, cuDevice INTEGER, chipName TEXT)")
        c.executemany("INSERT INTO TARGET_INFO_GPU VALUES (?, ?, ?, ?)",
                      [(0, "GPU-A", 1, "GA100"), (1, "GPU-B", 0, "GH100"), (2, "Intel Iris", 0, "")])
        if with_cuda_device:
            c.execute("CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER)")
            c.executemany("INSERT INTO TARGET_INFO_CUDA_DEVICE VALUES (?, ?, ?)", [(0, 0, 7), (1, 1, 7)])
        if visible is not None:
            c.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT)")
            c.execute("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
                      (f'CUDA_VISIBLE_DEVICES="{visible}"',))
    return Database(f)


def test_mapping_rules(tmp_path):
    acts = ([7, 7], [0, 1])  # (pid, device) of two activities
    # 2025.1+: the per-process CUDA_DEVICE table decides (gpuId -> TARGET_INFO_GPU.id)
    with _synthetic(tmp_path / "a", True, None) as db:
        assert nsys_gpu_names(db, *acts) == ["GPU-A", "GPU-B"]
    # older: cuDevice (system ordinal), CUDA adapters only; never TARGET_INFO_GPU.id
    with _synthetic(tmp_path / "b", False, None) as db:
        assert nsys_gpu_names(db, *acts) == ["GPU-B", "GPU-A"]
    # CUDA_VISIBLE_DEVICES="1": process ordinal 0 is system device 1
    with _synthetic(tmp_path / "c", False, "1") as db:
        assert nsys_gpu_names(db, *acts) == ["GPU-A", None]
