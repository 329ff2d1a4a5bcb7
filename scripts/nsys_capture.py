"""Capture pyprof's own markers with Nsight Systems, end to end, and keep the exports as test fixtures.

    python scripts/nsys_capture.py OUT                       # every nsys found; lenet, compiled, cudagraph
    python scripts/nsys_capture.py OUT --models lenet --nsys /opt/nvidia/nsight-systems/2025.1/bin/nsys
    python scripts/nsys_capture.py OUT --keep                # also copy the exports into tests/fixtures/gpu/
    python scripts/nsys_capture.py --check                   # the kept fixtures against their expectations

Run it first whenever a GPU is lent (docs/gpu.md): it is the only check of the workflow pyprof exists for,
``init()`` -> ``nsys`` -> ``parse`` -> ``prof``. For each model (a small script that calls ``pyprof.init()``:
LeNet, a ``torch.compile``'d MLP, an MLP replayed as a ``torch.cuda.CUDAGraph``) and each ``nsys`` on the
machine (``--nsys``, else ``PATH``, ``/opt/nvidia/nsight-systems*``, the one Nsight Compute bundles,
``/usr/local/cuda*``), until one finishes, three stages each with its own time limit (the process group is
killed at the limit, and the next ``nsys`` is tried):

1. ``nsys profile --trace=cuda,nvtx --sample=none --cpuctxsw=none`` (no CPU sampling or context-switch
   tracing: what made a capture of a 3-step LeNet run past 150 s), writing a ``.nsys-rep``;
2. ``nsys export --type sqlite`` of it, separately (``--export=sqlite`` in the profile step waits for the
   whole export before returning, where the stage limits cannot tell the two apart);
3. ``pyprof parse`` of the export, then prof's table: kernels, the share attributed to an op, FLOPs per
   direction; and the model's FLOPs by torch's FlopCounterMode (one step, on the same GPU, outside nsys).

``OUT/summary.json`` holds every stage's outcome and time; ``--keep`` copies the smallest export of each
model, with the tables pyprof never reads dropped (the parse of the copy checked to equal the original's),
to ``tests/fixtures/gpu/nsys_MODEL.sqlite``, and its figures to ``tests/fixtures/gpu/nsys_expected.json``,
which ``tests/test_gpu_nsys.py`` then checks on every machine (:func:`check`). Exit status: 0 when every
model was captured, parsed and fully attributed; 1 otherwise; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "gpu"
EXPECTED = FIXTURES / "nsys_expected.json"
MODELS = ("lenet", "compiled", "cudagraph")
FAMILIES = ("gemm", "conv", "attention")

MLP = '''
import json, sys, torch
from torch import nn
import pyprof
mode, steps = sys.argv[1], int(sys.argv[2])
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)).cuda()
x, y = torch.randn(64, 256, device="cuda"), torch.randint(0, 10, (64,), device="cuda")
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
def step(run):
    loss = nn.functional.cross_entropy(run(x), y)
    loss.backward()
    return loss
if "--reference" in sys.argv:  # one step's FLOPs by torch's count, no markers
    from torch.utils.flop_counter import FlopCounterMode
    with FlopCounterMode(display=False) as fc:
        step(model)
    print(json.dumps({"flops": fc.get_total_flops()}))
    sys.exit()
pyprof.init()
if mode == "cudagraph":
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step(model)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=False)
    with torch.cuda.graph(g):
        step(model)
    for _ in range(steps):
        g.replay(); opt.step(); pyprof.step()
else:
    run = torch.compile(model)
    for _ in range(steps):
        opt.zero_grad(); step(run); opt.step(); pyprof.step()
torch.cuda.synchronize()
'''
LENET_REFERENCE = '''
import json, sys, torch
sys.path.insert(0, "examples")
from lenet import LeNet
from torch.utils.flop_counter import FlopCounterMode
torch.manual_seed(0)
model = LeNet().cuda()
x, y = torch.randn(8, 1, 32, 32, device="cuda"), torch.randint(0, 10, (8,), device="cuda")
with FlopCounterMode(display=False) as fc:
    torch.nn.functional.cross_entropy(model(x), y).backward()
print(json.dumps({"flops": fc.get_total_flops()}))
'''


def find_nsys(given: list[str]) -> list[str]:
    """``given``, else every distinct ``nsys`` executable on the machine."""
    if given:
        return given
    found = [shutil.which("nsys"), *sorted(glob.glob("/opt/nvidia/nsight-systems*/*/bin/nsys")),
             *sorted(glob.glob("/opt/nvidia/nsight-systems*/bin/nsys")),
             *sorted(glob.glob("/opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys")),
             *sorted(glob.glob("/usr/local/cuda*/bin/nsys"))]
    out: list[str] = []
    for p in found:
        if p and os.access(p, os.X_OK) and os.path.realpath(p) not in {os.path.realpath(q) for q in out}:
            out.append(p)
    return out


def stage(cmd: list[str], limit: float, log: Path) -> dict:
    """Run ``cmd`` in its own process group, killed whole after ``limit`` seconds: {ok, rc, seconds,
    timed_out}; its output goes to ``log``."""
    t0 = time.monotonic()
    with open(log, "wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        try:
            rc = proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return {"ok": False, "rc": None, "seconds": round(time.monotonic() - t0, 1), "timed_out": True}
    return {"ok": rc == 0, "rc": rc, "seconds": round(time.monotonic() - t0, 1), "timed_out": False}


def model_command(model: str, out: Path, steps: int) -> list[str]:
    if model == "lenet":
        return [sys.executable, "examples/lenet.py", "--steps", str(steps), "--batch", "8"]
    script = out / "mlp.py"
    script.write_text(MLP)
    return [sys.executable, str(script), model, str(steps)]


def reference_flops(model: str, out: Path, steps: int, limit: float) -> float | None:
    """torch's FlopCounterMode count of ``steps`` training steps of ``model`` (run once, without nsys)."""
    if model == "lenet":
        (out / "lenet_ref.py").write_text(LENET_REFERENCE)
        cmd = [sys.executable, str(out / "lenet_ref.py")]
    else:
        cmd = [*model_command(model, out, 1), "--reference"]
    log = out / f"{model}_reference.log"
    if not stage(cmd, limit, log)["ok"]:
        return None
    last = log.read_text().strip().splitlines()[-1]
    return float(json.loads(last)["flops"]) * (steps + 3 * (model == "cudagraph"))  # (+ its 3 warm-up steps)


def figures(export: Path) -> dict:
    """What the export says: kernels, those attributed to an op, GEMM/conv/attention FLOPs per direction,
    all FLOPs per direction, and the ops seen (pyprof parse + prof, as a user runs them)."""
    from pyprof.parse import open_source
    from pyprof.prof import build
    from pyprof.prof.ops import family

    df = build(open_source(export).records(), peak_flops=1e12, peak_bw=1e11)
    k = df[df["kind"] == "kernel"]
    fam: dict = {}
    for d, op, mod, fl in zip(k["dir"], k["op"], k["mod"], k["flops"], strict=True):
        if op is not None and fl == fl and family(op, mod) in FAMILIES:
            fam[d] = fam.get(d, 0.0) + float(fl)
    return {"kernels": int(len(k)), "attributed": int(k["op"].notna().sum()),
            "family_flops": fam, "flops": {d: float(v) for d, v in k.groupby("dir")["flops"].sum().items()},
            "ops": sorted({str(o) for o in k["op"].dropna()})}


def check(export: Path, expected: dict, rel: float = 1e-9) -> list[str]:
    """Problems of a kept export against its expected figures (none: it parses as when it was kept, with
    every kernel attributed, and its GEMM/conv/attention FLOPs within 1% of torch's count)."""
    got = figures(export)
    problems = [f"{k}: {got[k]!r}, expected {expected[k]!r}" for k in ("kernels", "attributed", "ops")
                if got[k] != expected[k]]
    if got["attributed"] != got["kernels"]:
        problems.append(f"{got['kernels'] - got['attributed']} of {got['kernels']} kernels have no op")
    for d, v in expected["flops"].items():
        if abs(got["flops"].get(d, 0.0) - v) > rel * max(abs(v), 1.0):
            problems.append(f"{d} FLOPs {got['flops'].get(d, 0.0):.6g}, expected {v:.6g}")
    ref = expected.get("torch_flops")
    ours = sum(got["family_flops"].values())
    if ref and abs(ours - ref) > 0.01 * ref:
        problems.append(f"GEMM/conv/attention FLOPs {ours:.6g}, torch's {ref:.6g} ({ours / ref:.4f}x)")
    return problems


def slim(src: Path, dst: Path) -> Path:
    """A copy of export ``src`` at ``dst`` without the tables pyprof never reads (their names are not in
    its parser's schema), vacuumed; ``src`` itself where the copy would parse differently."""
    import pyprof.parse

    names = "".join(p.read_text() for p in Path(pyprof.parse.__file__).parent.glob("*.py"))
    shutil.copyfile(src, dst)
    with sqlite3.connect(dst) as db:
        for (t,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            if t not in names:
                db.execute(f'DROP TABLE "{t}"')
    with sqlite3.connect(dst) as db:
        db.execute("VACUUM")
    if figures(dst) != figures(src):
        shutil.copyfile(src, dst)
    return dst


def capture(model: str, nsys_list: list[str], out: Path, args) -> dict:
    """Every stage for one model, each ``nsys`` in turn until one gets through."""
    result: dict = {"model": model, "tries": []}
    for nsys in nsys_list:
        base = out / f"{model}_{len(result['tries'])}"
        tried: dict = {"nsys": nsys}
        result["tries"].append(tried)
        graph = ["--cuda-graph-trace=node"] if model == "cudagraph" else []  # (each node a kernel of its own)
        tried["profile"] = stage([nsys, "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none", *graph,
                                  "--force-overwrite=true", "-o", str(base), *model_command(model, out, args.steps)],
                                 args.profile_timeout, base.with_suffix(".profile.log"))
        rep = base.with_suffix(".nsys-rep")
        if not rep.exists():
            continue
        tried["export"] = stage([nsys, "export", "--type", "sqlite", "--force-overwrite=true", "-o",
                                 str(base.with_suffix(".sqlite")), str(rep)], args.export_timeout,
                                base.with_suffix(".export.log"))
        sqlite = base.with_suffix(".sqlite")
        if not sqlite.exists():
            continue
        tried["parse"] = stage([sys.executable, "-m", "pyprof", "parse", str(sqlite), "-o", str(base.with_suffix(".dict"))],
                               args.parse_timeout, base.with_suffix(".parse.log"))
        if tried["parse"]["ok"]:
            tried["figures"] = figures(sqlite)
            tried["bytes"] = sqlite.stat().st_size
            result["export"] = str(sqlite)
            break
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, nargs="?", help="folder for the captures, logs and summary.json")
    ap.add_argument("--models", nargs="+", default=list(MODELS), help=f"of {', '.join(MODELS)} (default all)")
    ap.add_argument("--nsys", action="append", default=[], help="an nsys to use (repeatable; default: all found)")
    ap.add_argument("--steps", type=int, default=3, help="training steps profiled per model (default 3)")
    ap.add_argument("--profile-timeout", type=float, default=180, help="seconds for nsys profile (default 180)")
    ap.add_argument("--export-timeout", type=float, default=120, help="seconds for nsys export (default 120)")
    ap.add_argument("--parse-timeout", type=float, default=120, help="seconds for pyprof parse (default 120)")
    ap.add_argument("--keep", action="store_true", help="copy the exports and their figures into tests/fixtures/gpu/")
    ap.add_argument("--check", action="store_true", help="check the kept fixtures against their expected figures")
    args = ap.parse_args(argv)
    bad = [m for m in args.models if m not in MODELS]
    if bad or args.steps < 1 or min(args.profile_timeout, args.export_timeout, args.parse_timeout) <= 0:
        what = f"unknown model {bad[0]!r} (known: {', '.join(MODELS)})" if bad else "steps and timeouts must be positive"
        print(f"nsys_capture: error: {what}; see --help", file=sys.stderr)
        return 2
    if args.check:
        return run_check()
    if args.out is None:
        print("nsys_capture: error: no OUT folder; give one (or --check)", file=sys.stderr)
        return 2
    nsys_list = find_nsys(args.nsys)
    if not nsys_list:
        print("nsys_capture: error: no nsys found (PATH, /opt/nvidia, /usr/local/cuda); pass --nsys PATH",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    summary = {"nsys": nsys_list, "models": []}
    for model in args.models:
        got = capture(model, nsys_list, args.out, args)
        got["torch_flops"] = reference_flops(model, args.out, args.steps, args.parse_timeout) if "export" in got else None
        summary["models"].append(got)
        print(report(got))
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1))
    if args.keep:
        keep(summary["models"], args.out)
    ok = all("export" in m and m["tries"][-1]["figures"]["attributed"] == m["tries"][-1]["figures"]["kernels"]
             for m in summary["models"])
    return 0 if ok else 1


def report(got: dict) -> str:
    lines = [f"== {got['model']}"]
    for t in got["tries"]:
        stages = ", ".join(f"{s} {'ok' if t[s]['ok'] else 'timed out' if t[s]['timed_out'] else 'rc ' + str(t[s]['rc'])}"
                           f" {t[s]['seconds']} s" for s in ("profile", "export", "parse") if s in t)
        lines.append(f"  {t['nsys']}: {stages}")
        if "figures" in t:
            f = t["figures"]
            lines.append(f"  {f['kernels']} kernels, {f['attributed']} with an op; FLOPs {f['flops']}; "
                         f"GEMM/conv/attention {sum(f['family_flops'].values()):.6g}, torch {got.get('torch_flops')}")
    return "\n".join(lines)


def keep(models: list[dict], out: Path) -> None:
    expected = json.loads(EXPECTED.read_text()) if EXPECTED.exists() else {}
    for m in models:
        if "export" not in m:
            continue
        dst = slim(Path(m["export"]), FIXTURES / f"nsys_{m['model']}.sqlite")
        got, ref = figures(dst), m.get("torch_flops")
        ratio = sum(got["family_flops"].values()) / ref if ref else None
        # torch's count is kept as the expectation only where the capture agreed with it (else the ratio)
        expected[m["model"]] = {**got, "nsys": m["tries"][-1]["nsys"], "bytes": dst.stat().st_size,
                                **({"torch_flops": ref} if ratio and abs(ratio - 1) <= 0.01 else {"torch_ratio": ratio})}
        print(f"kept {dst} ({dst.stat().st_size / 1e6:.2f} MB); GEMM/conv/attention FLOPs {ratio} of torch's")
    EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


def run_check() -> int:
    if not EXPECTED.exists():
        print("nsys_capture: no kept Nsight fixtures yet (run it with --keep on a GPU)")
        return 0
    bad = 0
    for model, exp in json.loads(EXPECTED.read_text()).items():
        problems = check(FIXTURES / f"nsys_{model}.sqlite", exp)
        bad += bool(problems)
        print(f"{model}: " + ("ok" if not problems else "; ".join(problems)))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
