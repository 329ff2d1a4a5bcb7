"""``pyprof calibrate``: measured peaks are positive, plausible, saved, and read back by prof."""

from __future__ import annotations

import time

import orjson
import pytest

pytest.importorskip("torch")

from pyprof.calibrate import AGREE, gemm_size, measure, time_stable  # noqa: E402
from pyprof.cli.main import main  # noqa: E402
from pyprof.peaks import CPU_DEVICE  # noqa: E402
from pyprof.prof.devices import DeviceResolver, load_calibration  # noqa: E402


def test_the_rate_is_work_over_the_best_time(monkeypatch):
    """The work divided by the fastest timed call, on the clock ``_timer`` gives (a fake one here: each
    call advances it by the next duration, the first the untimed warm-up), at least three calls timed."""
    from pyprof import calibrate

    clock, calls = [0.0], []
    durations = [9.0, 0.5, 0.25, 0.4, 0.3, 0.26, 0.25, 1.0]
    monkeypatch.setattr(calibrate, "_timer", lambda cuda: (lambda: clock[0]))

    def fn():
        clock[0] += durations[len(calls)]
        calls.append(1)

    assert time_stable(fn, 2.0, budget=100.0).rate == 2.0 / 0.25
    assert len(calls) == 7  # warm-up and six timed: it stops once the best three (0.25, 0.25, 0.26 s) agree
    monkeypatch.undo()
    calls.clear()

    def sleeps():  # the real clock: a call that sleeps 10 ms takes at least that, so at most 100 per s
        calls.append(1)
        time.sleep(0.01)

    assert 0 < time_stable(sleeps, 1.0, budget=0.05).rate <= 100
    assert len(calls) >= 4  # warm-up + at least three timed calls


def test_a_slow_dtype_is_timed_on_a_gemm_that_fits_the_budget():
    """bfloat16 on a CPU without native support runs at ~0.3 GFLOP/s: AGREE runs of 1024^3 would take
    ~21 s of a 0.2 s quick calibration. The side shrinks so that they fit; a fast dtype keeps n."""
    slow = gemm_size(1024, 0.3e9, 0.2)
    assert slow % 64 == 0 and 256 <= slow < 1024
    assert AGREE * 2.0 * 256**3 / 0.3e9 < 0.5  # the floor itself: well under a second
    fast = 50e9
    assert gemm_size(1024, fast, 0.2) == 1024
    fit = gemm_size(4096, fast, 0.2)
    assert AGREE * 2.0 * fit**3 / fast <= 0.2 < AGREE * 2.0 * (fit + 64) ** 3 / fast
    assert gemm_size(1024, 0.0, 0.2) == gemm_size(1024, float("nan"), 0.2) == 256


def test_measure_cpu_small():
    cal = measure("cpu", n=256, copy_mb=8, budget=0.05, dtypes=("float32", "bfloat16"))
    assert cal.device == CPU_DEVICE
    assert cal.flops["float32"] > 1e8  # any CPU of this decade does > 0.1 GFLOP/s in a 256^3 GEMM
    assert cal.bw > 1e8
    assert set(cal.flops) | set(cal.skipped) == {"float32", "bfloat16"}


def test_cli_saves_and_prof_reads_back(tmp_path, capsys):
    path = tmp_path / "cal.json"
    with pytest.raises(SystemExit) as info:
        main(["calibrate", "--device", "cpu", "--size", "256", "--copy-mb", "8", "--budget", "0.05",
              "--dtype", "float32", "-o", str(path)])
        raise SystemExit(0)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "GEMM float32" in out and "copy bandwidth" in out and str(path) in out
    data = orjson.loads(path.read_bytes())
    entry = data["devices"][CPU_DEVICE]
    assert entry["flops"]["float32"] > 0 and entry["bw"] > 0
    dev = DeviceResolver(calibration=load_calibration(path)).resolve(None, is_cpu=True)
    assert dev is not None and dev.bw == entry["bw"]
    assert dev.peak("float32", False) == entry["flops"]["float32"]


def test_cli_cuda_without_gpu_is_a_usage_error(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    with pytest.raises(SystemExit) as info:
        main(["calibrate", "--device", "cuda", "--no-save"])
    assert info.value.code == 2
    assert "no GPU" in capsys.readouterr().err
