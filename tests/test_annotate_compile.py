"""``torch.compile`` under ``pyprof.init()``: TorchDynamo captures the same graphs, graph breaks and
compiles (recompiles included) as without it, and computes the same results.

One child process (torch's tables and TorchDynamo's import are process-wide, so the order is the
test's to choose): ``init()`` first, then TorchDynamo imported and each model compiled with a
Recorder consuming markers (the wrappers' marker path and the ``Module.__call__`` patch live, and
Dynamo imported through :mod:`pyprof.annotate.torchtables`); then without pyprof (the reference);
then under ``init()`` again with Dynamo already imported, through a torch.profiler session that
starts and stops between steps; last, trained with an optimizer as ``pyprof run`` runs a script
(:func:`pyprof.runner.run_script`: its profiler schedule, ``init()``, and the profiler steps it takes
at optimizer steps, deferred to the next module call), with and without ``init()``, against the same
training without pyprof; and beside a global module hook of the user's (pyprof's hooks mode).
Dynamo's counters (``torch._dynamo.utils.counters``) of each run are compared: graphs, graph breaks,
recompiles and the frames it compiled. The ``eager`` backend: what pyprof could change is Dynamo's
capture, which this backend runs in full, without Inductor's code generation (seconds per model).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

REPO = Path(__file__).resolve().parent.parent


def _models():
    import torch.nn as nn
    import torch.nn.functional as F

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))

        def forward(self, x):
            return self.net(x)

    class CNN(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3, padding=1)
            self.bn = nn.BatchNorm2d(4)
            self.fc = nn.Linear(4 * 4 * 4, 4)

        def forward(self, x):
            x = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
            return self.fc(x.flatten(1))

    class Transformer(nn.Module):
        """Attention written out (matmul, softmax, dropout, transposes), SDPA, and nn's encoder layer
        (``F.multi_head_attention_forward``)."""

        def __init__(self, d=16, heads=2):
            super().__init__()
            self.heads = heads
            self.ln = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.proj = nn.Linear(d, d)
            self.drop = nn.Dropout(0.1)
            self.layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.1, batch_first=True)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for y in self.qkv(self.ln(x)).chunk(3, dim=-1))
            att = self.drop(torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1))
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
            x = x + F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
            return self.layer(x)

    return {"mlp": (MLP, (4, 16)), "cnn": (CNN, (2, 3, 8, 8)), "transformer": (Transformer, (2, 5, 16))}


def _counts(name: str, scenario: str) -> dict:
    """Compile model ``name`` afresh, run three training steps; Dynamo's counters and the losses."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    cls, shape = _models()[name]
    torch.manual_seed(0)
    model, x = cls(), torch.randn(*shape)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager")
    opt = torch.optim.SGD(model.parameters(), lr=0.01) if scenario in ("train", "run") else None
    ctx = hook = None
    if scenario in ("hook", "hook_recorder"):  # the user's global module hook: pyprof in hooks mode
        from torch.nn.modules.module import register_module_forward_pre_hook

        hook = register_module_forward_pre_hook(lambda module, inputs: None)
    if scenario in ("recorder", "hook_recorder"):
        from pyprof.annotate.recorder import Recorder

        ctx = rec = Recorder()
        ctx.__enter__()
    losses = []
    for i in range(3):
        if scenario == "profiler" and i == 1:  # a profiled step between unprofiled ones
            ctx = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            ctx.__enter__()
        torch.manual_seed(i)
        loss = compiled(x).square().mean()
        loss.backward()
        if opt is not None:  # under pyprof run: a profiler step, taken at the next module call
            opt.step()
            opt.zero_grad()
        losses.append(loss.item())
        if scenario == "profiler" and i == 1:
            ctx.__exit__(None, None, None)
            ctx = None
    if ctx is not None:
        ctx.__exit__(None, None, None)
    if hook is not None:
        hook.remove()
    paths = sorted({p["path"] for p in rec.payloads("mod")}) if scenario.endswith("recorder") else None
    return {"graphs": counters["stats"]["unique_graphs"], "breaks": sum(counters["graph_break"].values()),
            "recompiles": sum(counters["recompiles"].values()), "compiles": counters["frames"]["total"],
            "compiled_ok": counters["frames"]["ok"], "losses": losses, "paths": paths}


_RUN_SCRIPT = """\
import json, sys
sys.path.insert(0, {tests!r})
from test_annotate_compile import _counts
json.dump({{n: _counts(n, "run") for n in {names!r}}}, open({out!r}, "w"))
"""


def _many() -> dict:
    """Dynamo's counters for a program that compiles every model and keeps them all: their calls go
    through one ``Module.__call__`` (pyprof's under ``init()``), whose frame must not be recompiled, or
    its shapes made dynamic, for a model seen after another."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    runs = [(torch.compile(cls(), backend="eager"), torch.randn(*shape)) for cls, shape in _models().values()]
    for _ in range(2):
        for compiled, x in runs:
            compiled(x).sum().backward()
    return {k: dict(v) for k, v in counters.items() if k in ("stats", "frames", "recompiles", "graph_break")}


def _run_counts(names, init: bool = True) -> dict:
    """``_counts(name, "run")`` for each model, in a script run as ``pyprof run`` runs it (``init=False``:
    as ``pyprof run --no-init`` does)."""
    import tempfile

    from pyprof.runner import RunOptions, run_script

    with tempfile.TemporaryDirectory() as tmp:
        script, out = Path(tmp) / "train.py", Path(tmp) / "counts.json"
        script.write_text(_RUN_SCRIPT.format(tests=str(Path(__file__).resolve().parent), names=list(names),
                                             out=str(out)))
        result = run_script(script, [], Path(tmp) / "out", RunOptions(wait=1, warmup=1, active=1, init=init))
        counts = json.loads(out.read_text())
    counts["_steps"] = result.steps
    return counts


def _child() -> None:
    import pyprof

    out: dict = {"dynamo_imported_first": "torch._dynamo" in sys.modules}
    pyprof.init()
    with torch.device("meta"):  # torch's table of factory functions, built after init()
        out["meta_device"] = str(torch.zeros(2).device)
    out["with_init"] = {n: _counts(n, "recorder") for n in _models()}
    pyprof.deinit()
    out["finder_left"] = [type(f).__name__ for f in sys.meta_path if "pyprof" in type(f).__module__]
    out["without"] = {n: _counts(n, "none") for n in _models()}
    pyprof.init()
    out["with_init_again"] = {n: _counts(n, "profiler") for n in _models()}
    pyprof.deinit()
    out["train"] = {n: _counts(n, "train") for n in _models()}
    out["run"] = _run_counts(_models())
    out["run_no_init"] = _run_counts(_models(), init=False)
    out["many"] = _many()
    pyprof.init()
    out["many_init"] = _many()
    pyprof.deinit()
    out["hook"] = _counts("transformer", "hook")
    pyprof.init()
    out["hook_init"] = _counts("transformer", "hook_recorder")
    pyprof.deinit()
    print("RESULT " + json.dumps(out))


@pytest.fixture(scope="module")
def result() -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, __file__], capture_output=True, text=True, env=env, timeout=900,
                          cwd=str(REPO))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_dynamo_is_imported_under_init(result):
    assert result["dynamo_imported_first"] is False  # so the first run went through pyprof's finder
    assert result["finder_left"] == []


def test_device_context_still_redirects_factories(result):
    assert result["meta_device"] == "meta"


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
def test_same_graphs_breaks_and_compiles(result, model):
    ref = result["without"][model]
    assert ref["graphs"] >= 1
    for run in ("with_init", "with_init_again"):
        got = result[run][model]
        keys = ("graphs", "breaks", "recompiles", "compiles", "compiled_ok")
        assert {k: got[k] for k in keys} == {k: ref[k] for k in keys}, run


@pytest.mark.parametrize("run", ["run", "run_no_init"])
@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
def test_same_frames_graphs_breaks_and_recompiles_under_pyprof_run(result, model, run):
    # every frame Dynamo compiled counts: a pyprof hook compiled as a graphless frame of its own (one
    # more guarded cache lookup per call) is a program the user did not write
    assert result[run]["_steps"] == 3 * len(_models())  # the optimizer steps drove the profiler
    ref, got = result["train"][model], result[run][model]
    assert ref["graphs"] >= 1
    keys = ("graphs", "breaks", "recompiles", "compiles", "compiled_ok")
    assert {k: got[k] for k in keys} == {k: ref[k] for k in keys}
    assert got["losses"] == pytest.approx(ref["losses"], rel=1e-6)


def test_pyprof_hooks_beside_a_users_global_hook_add_no_frame(result):
    # a global module hook of the user's puts pyprof's module attribution into hooks mode: its hooks
    # must not be compiled into frames of their own either, nor change the module paths recorded
    ref, got = result["hook"], result["hook_init"]
    keys = ("graphs", "breaks", "recompiles", "compiles", "compiled_ok")
    assert {k: got[k] for k in keys} == {k: ref[k] for k in keys}
    assert got["losses"] == pytest.approx(ref["losses"], rel=1e-6)
    assert got["paths"] == result["with_init"]["transformer"]["paths"]


def test_several_compiled_models_in_one_program_compile_as_without_pyprof(result):
    assert result["many"]["stats"]["unique_graphs"] >= len(_models())
    assert result["many_init"] == result["many"]


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
def test_same_results(result, model):
    ref = result["without"][model]["losses"]
    for run in ("with_init", "with_init_again"):
        assert result[run][model]["losses"] == pytest.approx(ref, rel=1e-6), run


if __name__ == "__main__":
    _child()
