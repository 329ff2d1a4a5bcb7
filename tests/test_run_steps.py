"""Where ``pyprof run`` finds a script's iterations: pyprof.step(), else optimizer.step(), else backward()
calls; each real loop below must count one step per iteration, and each recorded step must hold one
iteration's work (the same ops in every recorded step). A script with none is profiled whole and says
that first calls are included. Scripts run in-process through :func:`pyprof.runner.run_script`."""

from __future__ import annotations

import collections
import textwrap

import orjson
import pytest

torch = pytest.importorskip("torch")

from pyprof.runner import RunOptions, run_script  # noqa: E402

ITERATIONS = 7

BACKWARD_MODULES = """
import torch
from torch import nn
net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
x = torch.randn(16, 32)
for i in range(7):
    net.zero_grad()
    net(x).pow(2).mean().backward()
    with torch.no_grad():
        for p in net.parameters():
            p -= 0.01 * p.grad
"""

BACKWARD_FUNCTIONAL = """
import torch
w = torch.randn(32, 8, requires_grad=True)
x = torch.randn(16, 32)
for i in range(7):
    (x @ w).relu().sum().backward()
    with torch.no_grad():
        w -= 0.01 * w.grad
        w.grad = None
"""

OPTIMIZER = """
import torch
from torch import nn
net = nn.Linear(32, 8)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x = torch.randn(16, 32)
for i in range(7):
    opt.zero_grad()
    net(x).sum().backward()
    opt.step()
"""

OPTIMIZER_FUNCTIONAL = """
import torch
w = torch.randn(32, 8, requires_grad=True)
opt = torch.optim.SGD([w], lr=0.01)
x = torch.randn(16, 32)
for i in range(7):
    opt.zero_grad()
    (x @ w).relu().sum().backward()
    opt.step()
"""

PYPROF_STEP = """
import torch, pyprof
from torch import nn
net = nn.Linear(32, 8)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
x = torch.randn(16, 32)
for i in range(7):
    opt.zero_grad()
    net(x).sum().backward()
    opt.step()
    pyprof.step()
"""

LBFGS = """
import torch
from torch import nn
net = nn.Linear(32, 8)
opt = torch.optim.LBFGS(net.parameters(), max_iter=2)
x = torch.randn(16, 32)
def closure():
    opt.zero_grad()
    loss = net(x).pow(2).sum()
    loss.backward()
    return loss
for i in range(7):
    opt.step(closure)
"""


def _run(tmp_path, body: str, **opts):
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(body))
    result = run_script(script, [], tmp_path / "out", RunOptions(**{"active": 3, **opts}))
    return result, orjson.loads(result.trace.read_bytes())["traceEvents"]


def _per_step(events: list[dict], names: tuple[str, ...]) -> list[collections.Counter]:
    """For each recorded ProfilerStep, how many CPU ops of ``names`` ran inside it (by time)."""
    steps = sorted((e for e in events if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
    ops = [e for e in events if e.get("cat") == "cpu_op" and e["name"] in names]
    return [collections.Counter(o["name"] for o in ops if s["ts"] <= o["ts"] < s["ts"] + s["dur"]) for s in steps]


def _steady(per_step: list[collections.Counter]) -> None:
    assert len(per_step) == 3  # --active 3
    assert per_step[0] and all(c == per_step[0] for c in per_step), per_step


@pytest.mark.parametrize("body, source, ops", [
    (BACKWARD_MODULES, "backward()", ("aten::addmm", "aten::mm")),
    (BACKWARD_FUNCTIONAL, "backward()", ("aten::mm",)),
    (OPTIMIZER, "optimizer.step()", ("aten::addmm", "aten::mm")),
    (OPTIMIZER_FUNCTIONAL, "optimizer.step()", ("aten::mm",)),
    (PYPROF_STEP, "pyprof.step()", ("aten::addmm", "aten::mm")),
    (LBFGS, "optimizer.step()", ("aten::addmm", "aten::mm")),
], ids=["backward-modules", "backward-functional", "optimizer", "optimizer-functional", "pyprof-step", "lbfgs"])
def test_one_step_per_iteration_each_holding_one_iteration(tmp_path, body, source, ops):
    result, events = _run(tmp_path, body)
    assert (result.steps, result.step_source, result.whole, result.notes) == (ITERATIONS, source, False, [])
    _steady(_per_step(events, ops))


def test_an_optimizer_step_is_never_inside_another_profiler_step(tmp_path):
    """LBFGS calls its closure (modules, backward) inside its own step: no boundary is taken in there,
    not even the first one (before pyprof wraps the optimizer's step; recorded with no wait)."""
    _, events = _run(tmp_path, LBFGS, wait=0, warmup=0)
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    for opt in (e for e in events if e.get("name", "").startswith("Optimizer.step#LBFGS")):
        inside = [s for s in steps if s["ts"] <= opt["ts"] and opt["ts"] + opt["dur"] <= s["ts"] + s["dur"]]
        assert len(inside) == 1, opt


def test_steps_from_optimizer_ignores_backward_calls(tmp_path):
    with pytest.raises(Exception, match="marked no iteration"):
        _run(tmp_path, BACKWARD_MODULES, step_on="optimizer")


def test_no_iteration_profiles_the_whole_script_and_says_first_calls_are_in(tmp_path):
    result, _ = _run(tmp_path, "import torch\nfor _ in range(3):\n    torch.randn(8, 8) @ torch.randn(8, 8)\n")
    assert result.whole and result.steps == 0
    [line] = result.notes
    assert "first-call costs" in line and "allocation" in line and "pyprof.step()" in line


def test_backward_is_restored_after_the_run_even_when_the_script_fails(tmp_path):
    backward, tensor_backward = torch.autograd.backward, torch.Tensor.backward
    _run(tmp_path, BACKWARD_MODULES)
    assert torch.autograd.backward is backward
    with pytest.raises(Exception, match="failed"):
        _run(tmp_path, BACKWARD_MODULES + "\nraise ValueError('boom')\n")
    assert torch.autograd.backward is backward and torch.Tensor.backward is tensor_backward
