"""Dynamo's graphs, graph breaks and recompiles for the zoo's compiled models, with and without pyprof.

    python scripts/dynamo_counts.py                      # mlp_compiled attn_compiled cnn_compiled
    python scripts/dynamo_counts.py attn_compiled --steps 3
    python scripts/dynamo_counts.py --no-init            # as pyprof run --no-init runs it

Each (model, mode) runs in a fresh child process (Dynamo's caches and counters are process-wide): the
model of :mod:`scripts.validation.zoo` compiled with ``torch.compile`` (Inductor, default mode) and trained
for ``--steps`` SGD steps, either plainly (``plain``) or as ``pyprof run`` runs a script (``pyprof``:
:func:`pyprof.runner.run_script`, ``pyprof.init()``, torch.profiler's schedule, one wait and one
warm-up step; ``--no-init``: without ``pyprof.init()``). From ``torch._dynamo.utils.counters``: the
unique graphs, the graph breaks (sum over reasons), the recompiles (``recompiles`` counter) and the
frames Dynamo compiled (``frames`` total: a frame of a hook Dynamo compiles shows here only). The
losses of both modes must be bit-identical. Prints one line per model; exit status 1 when any count or
loss differs. Needs torch; runs on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("mlp_compiled", "attn_compiled", "cnn_compiled")


_SCRIPT = """\
import json, sys
from scripts.dynamo_counts import train
json.dump(train({name!r}, {steps}, pyprof_step=True), open({out!r}, "w"))
"""


def child(name: str, mode: str, steps: int) -> dict:
    """``plain``: train here. ``pyprof``: train in a script run as ``pyprof run`` runs it (run_script:
    torch.profiler, ``pyprof.init()``, its step schedule and its deferred-step callback); ``noinit``:
    the same without ``pyprof.init()``."""
    if mode == "plain":
        return train(name, steps)
    import tempfile

    from pyprof.runner import RunOptions, run_script

    with tempfile.TemporaryDirectory() as tmp:
        script, out = Path(tmp) / "train.py", Path(tmp) / "counts.json"
        script.write_text(_SCRIPT.format(name=name, steps=steps, out=str(out)))
        run_script(script, [], Path(tmp) / "out",
                   RunOptions(wait=1, warmup=1, active=max(1, steps - 2), init=mode != "noinit"))
        return json.loads(out.read_text())


def train(name: str, steps: int, pyprof_step: bool = False) -> dict:
    """``steps`` SGD steps of the zoo's compiled model ``name``; Dynamo's counters and the losses."""
    import torch
    from torch._dynamo.utils import counters

    from scripts.validation import zoo

    case = zoo.CASES[name]
    model, x = zoo.build(name)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    run = torch.compile(model)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        losses.append(zoo.step(case, run, x).item())
        opt.step()
        if pyprof_step:
            import pyprof

            pyprof.step()
    return {"graphs": counters["stats"]["unique_graphs"], "breaks": sum(counters["graph_break"].values()),
            "recompiles": sum(counters["recompiles"].values()), "frames": counters["frames"]["total"],
            "losses": losses, "torch": torch.__version__}


def run_child(name: str, mode: str, steps: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, __file__, "--child", name, mode, str(steps)], capture_output=True,
                          text=True, env=env, cwd=str(ROOT), timeout=1800)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}
    return json.loads(lines[-1][len("RESULT "):])


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        print("RESULT " + json.dumps(child(argv[1], argv[2], int(argv[3]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=[], choices=[[], *MODELS], metavar="MODEL")
    ap.add_argument("--steps", type=int, default=3, help="training steps per run (default 3, at least 3)")
    ap.add_argument("--no-init", action="store_true", help="run as pyprof run --no-init (no pyprof.init())")
    args = ap.parse_args(argv)
    bad = False
    print(f"{'model':<16} {'torch':<14} {'graphs':>13} {'breaks':>13} {'recompiles':>13} {'frames':>13}  losses")
    for name in args.models or MODELS:
        plain = run_child(name, "plain", args.steps)
        init = run_child(name, "noinit" if args.no_init else "pyprof", args.steps)
        if "error" in plain or "error" in init:
            print(f"{name:<16} FAILED: {plain.get('error') or init.get('error')}")
            bad = True
            continue
        cells = [f"{plain[k]:>5} / {init[k]:<5}" for k in ("graphs", "breaks", "recompiles", "frames")]
        same = plain["losses"] == init["losses"]
        bad = bad or not same or any(plain[k] != init[k] for k in ("graphs", "breaks", "recompiles", "frames"))
        print(f"{name:<16} {plain['torch']:<14} {' '.join(cells)}  {'identical' if same else 'DIFFER'}")
    print(f"(each cell: without pyprof / under pyprof run{' --no-init' if args.no_init else ''})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
