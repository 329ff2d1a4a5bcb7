"""One trial of ``pyprof advise --try``, in a fresh process: the script run unprofiled, as ``python
SCRIPT ARGS`` would run it, with one change of :mod:`pyprof.advise.changes` applied (or none), timed
at its step boundaries::

    python -m pyprof.advise.trial SPEC.json

SPEC: ``script``, ``args``, ``change`` (None: the script as written), ``params`` (the change's),
``steps`` (the run ends, its result written, after this many boundaries: a long script need not run
to its end) and ``out`` (where the result goes). A step boundary is ``pyprof.step()``, or
``optimizer.step()`` in a script that never calls it (as ``pyprof run`` counts them); on a GPU it
synchronises, so that a step's time is its kernels'. The result (JSON): ``times`` (seconds between
boundaries), ``losses`` (the value of every scalar ``backward()`` was called on, in order: what the
parent compares across variants) and ``error``. torch, ``random`` and numpy are seeded alike in
every trial, so that an unseeded script computes the same in each.
"""

from __future__ import annotations

import json
import os
import sys
import time


def run(spec: dict) -> dict:
    import random
    import runpy

    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from pyprof import annotate
    from pyprof.advise.changes import apply

    stamps: dict[str, list[float]] = {"optimizer": [], "pyprof": []}
    losses: list[float] = []
    result: dict = {"times": [], "losses": losses, "error": None}

    def finish() -> dict:
        s = stamps["pyprof"] if len(stamps["pyprof"]) > 1 else stamps["optimizer"]
        result["times"] = [b - a for a, b in zip(s, s[1:], strict=False)]
        with open(spec["out"], "w") as fh:
            json.dump(result, fh)
        return result

    def stamp(source: str) -> None:
        if source == "optimizer" and stamps["pyprof"]:
            return
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
        stamps[source].append(time.perf_counter())
        if len(stamps[source]) > spec["steps"]:
            finish()
            sys.stdout.flush()
            os._exit(0)  # the steps asked for are timed: the rest of the script is not needed

    orig = torch.Tensor.backward

    def backward(self, *args, **kwargs):
        if self.numel() == 1:
            losses.append(float(self.detach().float()))
        return orig(self, *args, **kwargs)

    torch.Tensor.backward = backward
    hook = register_optimizer_step_post_hook(lambda *_: stamp("optimizer"))
    annotate.add_step_callback(lambda: stamp("pyprof"))
    undo = apply(spec["change"], spec.get("params")) if spec.get("change") else None
    torch.manual_seed(0)
    random.seed(0)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(0)
    sys.argv = [spec["script"], *spec["args"]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(spec["script"])))
    try:
        runpy.run_path(spec["script"], run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            result["error"] = f"exited with status {exc.code!r}"
    except Exception as exc:  # the script failed under the change: the parent reports it
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    finally:
        if undo:
            undo()
        hook.remove()
        torch.Tensor.backward = orig
    return finish()


if __name__ == "__main__":
    with open(sys.argv[1]) as fh:
        run(json.load(fh))
