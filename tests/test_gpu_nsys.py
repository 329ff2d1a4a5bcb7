"""scripts/nsys_capture.py without a GPU: its arguments, its stage time limits (a fake ``nsys`` on PATH that
hangs, one that works and writes an export built like a real one: tests/nsys_synth.py), the fixture check,
and the kept Nsight fixtures where there are some (tests/fixtures/gpu/nsys_*.sqlite)."""

from __future__ import annotations

import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("nsys_capture", HERE.parent / "scripts" / "nsys_capture.py")
cap = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cap)

FAKE = '''#!{python}
import sys, time
sys.path.insert(0, {tests!r})
args = sys.argv[1:]
out = args[args.index("-o") + 1]
if args[0] == "profile":
    if {hang!r} == "profile":
        time.sleep(600)
    open(out + ".nsys-rep", "w").write("rep")
elif args[0] == "export":
    if {hang!r} == "export":
        time.sleep(600)
    from nsys_synth import Export
    ex = Export()
    t = ex.track(name="python")
    w = '{{"name":"weight","type":"tensor","shape":[16,32],"dtype":"float32"}}'
    x = '{{"name":"input","type":"tensor","shape":[8,32],"dtype":"float32"}}'
    with t.range('{{"pyprof":1,"k":"mod","path":"fc","cls":"Linear"}}', domain="pyprof"):
        with t.range('{{"pyprof":1,"k":"op","ns":"torch.nn.functional","op":"linear","args":[' + x + ',' + w
                     + '],"id":1,"seq":[3]}}', domain="pyprof"):
            t.launch("ampere_sgemm_32x32_sliced1x4_tn")
    with t.range('{{"pyprof":1,"k":"bwd","node":"MmBackward0","seq":3,"id":1,"nseq":3}}', domain="pyprof"):
        t.launch("ampere_sgemm_32x32_sliced1x4_nn")
    ex.write(out)
'''


def _fake(tmp_path: Path, name: str, hang: str = "") -> str:
    d = tmp_path / name
    d.mkdir()
    path = d / "nsys"
    path.write_text(FAKE.format(python=sys.executable, tests=str(HERE), hang=hang))
    path.chmod(0o755)
    return str(path)


def test_arguments(capsys):
    assert cap.main(["out", "--models", "resnet"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "nsys_capture: error: unknown model 'resnet' (known: lenet, compiled, cudagraph); see --help"]
    assert cap.main(["out", "--profile-timeout", "0"]) == 2
    assert cap.main([]) == 2
    with pytest.raises(SystemExit) as e:
        cap.main(["--help"])
    assert e.value.code == 0


def test_no_nsys_found(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cap, "find_nsys", lambda given: given)
    assert cap.main([str(tmp_path / "out")]) == 2
    assert "no nsys found" in capsys.readouterr().err


def test_a_hanging_stage_is_cut_off_and_the_next_nsys_tried(tmp_path, monkeypatch):
    """The first nsys hangs in ``profile`` (killed at its limit), the second in ``export``; the third gets
    through: its export is parsed, every kernel attributed."""
    monkeypatch.setattr(cap, "reference_flops", lambda *a: None)  # (torch's count needs the GPU)
    fakes = [_fake(tmp_path, "a", hang="profile"), _fake(tmp_path, "b", hang="export"), _fake(tmp_path, "c")]
    t0 = time.monotonic()
    rc = cap.main([str(tmp_path / "out"), "--models", "lenet", "--profile-timeout", "3", "--export-timeout", "3",
                   *[a for f in fakes for a in ("--nsys", f)]])
    assert time.monotonic() - t0 < 60
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    tries = summary["models"][0]["tries"]
    assert [t["nsys"] for t in tries] == fakes and rc == 0
    assert tries[0]["profile"]["timed_out"] and "export" not in tries[0]
    assert tries[1]["profile"]["ok"] and tries[1]["export"]["timed_out"] and "parse" not in tries[1]
    assert tries[2]["parse"]["ok"] and tries[2]["figures"]["kernels"] == tries[2]["figures"]["attributed"] == 2


def test_the_fixture_check(tmp_path):
    """``check`` passes an export against its own figures, and names what differs otherwise."""
    fake = _fake(tmp_path, "c")
    import subprocess

    subprocess.run([fake, "export", "--type", "sqlite", "-o", str(tmp_path / "x.sqlite"), "rep"], check=True)
    got = cap.figures(tmp_path / "x.sqlite")
    assert got["flops"]["fprop"] == 2 * 8 * 32 * 16 and got["ops"] == ["linear"]  # linear [8,32] x [16,32]^T
    assert cap.check(tmp_path / "x.sqlite", got) == []
    assert cap.check(tmp_path / "x.sqlite", {**got, "torch_flops": got["family_flops"]["fprop"]})  # bprop too
    wrong = cap.check(tmp_path / "x.sqlite", {**got, "kernels": 3, "flops": {"fprop": 1.0}})
    assert len(wrong) == 2 and wrong[0].startswith("kernels: 2")
    # slimming keeps what pyprof reads: the same figures from a smaller file
    small = cap.slim(tmp_path / "x.sqlite", tmp_path / "y.sqlite")
    assert cap.figures(small) == got and small.stat().st_size <= (tmp_path / "x.sqlite").stat().st_size


@pytest.mark.parametrize("model", sorted(json.loads(cap.EXPECTED.read_text())) if cap.EXPECTED.exists() else [])
def test_kept_nsight_fixtures(model):
    """A real capture of pyprof's markers (kept by ``--keep`` on a lent GPU): every kernel attributed, the
    figures it was kept with, and torch's FLOPs where they agreed then."""
    assert cap.check(cap.FIXTURES / f"nsys_{model}.sqlite", json.loads(cap.EXPECTED.read_text())[model]) == []
