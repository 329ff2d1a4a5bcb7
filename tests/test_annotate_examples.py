"""The examples run (so they cannot rot) and emit the markers they are there to show.

Each example is run in-process with ``runpy`` after ``pyprof.init()`` (as ``pyprof run`` does, so the
example's own init() must be a harmless no-op) under a Recorder; lenet also runs as a plain script
in a subprocess, as a user would start it.
"""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import pyprof  # noqa: E402
from pyprof.annotate.recorder import Recorder  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _run_example(rel: str, argv: list[str] | None = None, steps: list | None = None) -> Recorder:
    """Run an example under init() and a Recorder; its pyprof.step() calls are appended to ``steps``."""
    path = EXAMPLES / rel
    old_argv = sys.argv
    sys.argv = [str(path), *(argv or [])]
    steps = [] if steps is None else steps
    count = lambda: steps.append(len(rec.payloads("op")))  # noqa: E731 (ops seen at each step)
    pyprof.annotate.add_step_callback(count)
    pyprof.init()
    try:
        with Recorder() as rec:
            runpy.run_path(str(path), run_name="__main__")
    finally:
        sys.argv = old_argv
        pyprof.annotate.remove_step_callback(count)
        pyprof.deinit()
    assert not rec.open_ranges()
    return rec


def _steady_state(steps: list) -> None:
    """The example loops long enough for ``pyprof run``'s default schedule (--wait 1 --warmup 1
    --active 5) and ends every iteration with pyprof.step(), each after the first (which holds the
    set-up before the loop) running the same ops."""
    assert len(steps) >= 7
    per_step = {b - a for a, b in zip(steps, steps[1:], strict=False)}
    assert len(per_step) == 1 and per_step != {0}


def test_simple_example(capsys):
    steps: list = []
    rec = _run_example("simple.py", steps=steps)
    _steady_state(steps)
    ops = {(p["ns"], p["op"]) for p in rec.payloads("op")}
    assert {("torch", "matmul"), ("torch.Tensor", "__add__"), ("torch.Tensor", "relu_"),
            ("torch.nn.functional", "softmax"), ("torch.nn.functional", "linear")} <= ops
    assert "simple: output (256, 64)" in capsys.readouterr().out


def test_lenet_example_in_process_with_steps():
    steps: list = []
    rec = _run_example("lenet.py", ["--steps", "2", "--batch", "4"], steps)
    assert len(steps) == 2
    paths = {p["path"] for p in rec.payloads("mod")}
    assert {"conv1", "conv2", "fc1", "fc2", "fc3"} <= paths
    assert len(rec.payloads("optim")) == 2
    nodes = {p["node"] for p in rec.payloads("bwd")}
    assert "ConvolutionBackward0" in nodes


def test_lenet_example_as_a_script():
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(EXAMPLES / "lenet.py"), "--steps", "2", "--batch", "4"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "lenet: 2 steps on" in proc.stdout


def test_user_annotation_example():
    steps: list = []
    rec = _run_example("user_annotation/resnet.py", steps=steps)
    _steady_state(steps)
    names = {p["name"] for p in rec.payloads("range")}
    assert names == {"shortcut", "head"}
    head_ops = [p for p in rec.payloads("op") if any(q.get("name") == "head" for q in p["_parents"])]
    assert {"adaptive_avg_pool2d", "linear"} <= {p["op"] for p in head_ops}


def test_custom_func_module_example():
    steps: list = []
    rec = _run_example("custom_func_module/custom.py", steps=steps)
    _steady_state(steps)
    wrapped = [p["op"] for p in rec.payloads("op") if p["ns"] == "wrap"]
    n = len(steps)  # two Gates per iteration, each one Scale forward and backward
    assert wrapped.count("Gate.forward") == 2 * n
    assert wrapped.count("Scale.forward") == 2 * n and wrapped.count("Scale.backward") == 2 * n
