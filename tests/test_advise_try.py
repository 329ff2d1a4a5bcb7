"""``pyprof advise --try``: each change's patch and its undo, the trial runner, the statistics of the
measured saving and the comparison of results, and the command end to end on a small training script
(timings themselves are not asserted: the machine is shared; scripts/ab_try_train.py holds the check
of measured against an independent A/B)."""

from __future__ import annotations

import json
import random
import textwrap

import orjson
import pytest
from click.testing import CliRunner

from pyprof.advise import changes, measure
from pyprof.cli.main import cli

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")
nn = torch.nn

SCRIPT = textwrap.dedent("""
    import sys, torch
    from torch import nn
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(400, 16)), batch_size=8)
    for i, (x,) in enumerate(data):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        if "--fail" in sys.argv and i == 2:
            raise RuntimeError("broken on purpose")
""")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(SCRIPT)
    return path


def test_every_change_is_undone():
    before = (torch.optim.AdamW.__init__, torch.optim.Adam.__init__, torch.utils.data.DataLoader.__init__,
              torch.Tensor.backward, torch.set_num_threads, torch.get_num_threads(),
              torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    from torch.nn.modules import module as mm

    hooks = dict(mm._global_forward_pre_hooks)
    for name in changes.CHANGES:
        changes.apply(name, {"workers": 2, "threads": 1})()
    assert before == (torch.optim.AdamW.__init__, torch.optim.Adam.__init__, torch.utils.data.DataLoader.__init__,
                      torch.Tensor.backward, torch.set_num_threads, torch.get_num_threads(),
                      torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    assert dict(mm._global_forward_pre_hooks) == hooks


def test_optimizers_become_fused_or_foreach_whatever_the_script_asked():
    p = [nn.Parameter(torch.ones(3))]
    undo = changes.apply("optim")
    try:
        assert torch.optim.AdamW(p, foreach=False).defaults["fused"] is True
        assert torch.optim.SGD(p, lr=0.1).defaults["fused"] is True
        assert torch.optim.RMSprop(p, foreach=False).defaults["foreach"] is True  # no fused RMSprop
    finally:
        undo()
    assert not torch.optim.AdamW(p, foreach=False).defaults["fused"]


def test_loaders_get_workers_and_roots_get_channels_last_compile_and_autocast():
    undo = changes.apply("dataloader", {"workers": 3})
    try:
        loader = torch.utils.data.DataLoader(list(range(10)), num_workers=0)
        assert loader.num_workers == 3 and loader.persistent_workers
    finally:
        undo()
    conv = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU())
    seen = []
    conv[0].register_forward_pre_hook(lambda m, a: seen.append(a[0].is_contiguous(memory_format=torch.channels_last)))
    undo = changes.apply("channels_last")
    try:
        conv(torch.randn(2, 3, 8, 8))
        assert seen == [True] and conv[0].weight.is_contiguous(memory_format=torch.channels_last)
    finally:
        undo()
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    undo = changes.apply("bf16")
    try:
        out = model(torch.randn(4, 8))
        assert out.dtype == torch.bfloat16 and torch.is_autocast_enabled("cpu")
        out.float().sum().backward()  # autocast ends before the backward
        assert not torch.is_autocast_enabled("cpu")
    finally:
        undo()
    undo = changes.apply("compile")
    try:
        model(torch.randn(4, 8))
        assert "forward" in model.__dict__ and "forward" not in model[0].__dict__  # the root only
    finally:
        undo()
    assert "forward" not in model.__dict__


def test_threads_are_set_and_held():
    n = torch.get_num_threads()
    undo = changes.apply("threads", {"threads": 1})
    try:
        torch.set_num_threads(8)
        assert torch.get_num_threads() == 1
    finally:
        undo()
    assert torch.get_num_threads() == n


def test_the_interval_covers_the_median_as_often_as_it_says():
    rng = random.Random(0)
    for n in (4, 6, 10):
        lo, hi, level = measure.interval([rng.gauss(0, 1) for _ in range(n)])
        covered = sum(lo <= 0 <= hi for lo, hi, _ in (measure.interval([rng.expovariate(1) - 0.6931 for _ in range(n)])
                                                      for _ in range(20000))) / 20000
        assert covered == pytest.approx(level, abs=0.01), n
    assert measure.interval([3.0, 1.0, 2.0, 5.0, 4.0, 0.0])[:2] == (0.0, 5.0)
    assert measure.interval([float(i) for i in range(10)])[:2] == (1.0, 8.0)


def test_results_are_equal_within_the_tolerance_and_not_compared_when_the_script_varies():
    run = lambda losses: {"losses": losses}  # noqa: E731
    a = [1.0, 0.9, 0.8]
    assert measure.results([run(a), run(a)], [run([1.0, 0.9, 0.80002])], 1e-4)["results_equal"] is True
    r = measure.results([run(a)], [run([1.0, 0.9, 0.81])], 1e-4)
    assert r["results_equal"] is False and r["max_abs_diff"] == pytest.approx(0.01)
    assert measure.results([run(a), run([1.0, 0.95, 0.8])], [run(a)], 1e-4)["results_equal"] is None
    assert measure.results([run(a)], [run([])], 1e-4)["results_equal"] is None
    assert measure.results([run(a)], [run([1.0, float("nan")])], 1e-4)["results_equal"] is False
    r = measure.results([run([1e38, 3e38])], [run([1e38, float("inf")])], 1e-4)  # a loss overflowed
    assert r["results_equal"] is False and r["max_abs_diff"] is None and "infinite" in r["results_note"]
    assert measure.results([run([1.0, float("nan")])], [run([1.0, float("nan")])], 1e-4)["results_equal"] is True
    tiny = [2e-5, 1e-5]  # losses near zero: the absolute tolerance (1e-5) decides
    assert measure.results([run(tiny)], [run([2.2e-5, 0.9e-5])], 1e-4)["results_equal"] is True
    assert measure.results([run(tiny)], [run([4e-5, 1e-5])], 1e-4)["results_equal"] is False


def test_a_trial_times_the_steps_asked_and_records_the_losses(script):
    r = measure.trial(str(script), [], "optim", {}, 6, 300)
    assert r["error"] is None and len(r["times"]) == 6 and all(t > 0 for t in r["times"])
    assert len(r["losses"]) == 7  # ended at the 7th boundary, after its backward
    plain = measure.trial(str(script), [], None, {}, 6, 300)
    assert plain["losses"][0] == r["losses"][0]  # the first loss: before any update
    assert {"cpus", "loadavg", "busy_others"} <= set(r["load"])
    bad = measure.trial(str(script), ["--fail"], None, {}, 50, 300)
    assert bad["error"] == "RuntimeError: broken on purpose"


def test_the_command_tries_the_advice_and_keeps_it(script, tmp_path, monkeypatch):
    """End to end, with the advice fixed (which advice a run of a tiny model gets depends on the load)."""
    from pyprof import advise as adv
    from pyprof.advise.common import Advice

    made = [Advice("optim", None, "c", "f", now_s=1.0), Advice("attention", 0.5, "c", "f", now_s=1.0),
            Advice("dataloader", 0.2, "c", "f", now_s=0.2, params={"workers": 2})]
    monkeypatch.setattr(adv, "_RULES", tuple((lambda ctx, a=a: a) for a in made))
    monkeypatch.setattr(measure, "MAX_PAIRS", 1)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["advise", "--try", "--json", "-q", "--try-budget", "1", "-o", str(out), str(script)])
    assert res.exit_code == 0, res.output
    items = orjson.loads(res.stdout)
    assert [a["kind"] for a in items] == ["attention", "dataloader", "optim"]
    assert json.loads((out / "advice.json").read_text()) == items
    assert items[0]["not_tried"] == "needs an edit of the script" and items[0]["measured_s"] is None
    for a in items[1:]:
        assert {"measured_s", "measured_ci", "results_equal", "max_abs_diff", "trials"} <= set(a)
        assert a["trials"] == 1 and a["measured_ci"] == [a["measured_s"]] * 2 and a["results_equal"] is True
    assert items[1]["change"] == "dataloader" and items[1]["params"] == {"workers": 2}
    assert items[1]["max_abs_diff"] == 0  # the same batches, loaded in workers
    assert not torch.optim.AdamW([nn.Parameter(torch.ones(1))]).defaults["fused"]  # nothing left patched here
    text = adv.tried(made[2])
    assert text.startswith("tried (DataLoader(num_workers=W") and ", workers=2): " in text
    assert "(one pair of runs: no interval; step " in text and "; results kept (" in text


def test_run_try_tries_the_advice_of_its_own_profile(script, tmp_path, monkeypatch):
    """``pyprof run --try``: the run's summary, then its advice with each change timed and kept."""
    from pyprof import advise as adv
    from pyprof.advise.common import Advice

    made = [Advice("optim", None, "c", "f", now_s=1.0)]
    monkeypatch.setattr(adv, "_RULES", tuple((lambda ctx, a=a: a) for a in made))
    monkeypatch.setattr(measure, "MAX_PAIRS", 1)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["run", "--try", "--try-budget", "1", "--no-calibrate", "-o", str(out), str(script)])
    assert res.exit_code == 0, res.output
    kept = json.loads((out / "advice.json").read_text())
    assert [a["kind"] for a in kept] == ["optim"] and kept[0]["trials"] == 1 and kept[0]["change"] == "optim"
    assert "Summary by op" in res.stdout and "tried (" in res.stdout.split("Summary by op")[1]
    assert not torch.optim.AdamW([nn.Parameter(torch.ones(1))]).defaults["fused"]  # nothing left patched here


def test_bad_try_input_is_one_line_and_exit_2_or_1(script, tmp_path):
    from pyprof.cli.main import main

    for args, code in ((["advise", "--try", str(tmp_path / "none.py")], 2), (["advise", str(script), "x"], 2),
                       (["advise", "--try", "-q", "-o", str(tmp_path / "o"), str(script), "--fail"], 1)):
        with pytest.raises(SystemExit) as err:
            main(args)
        assert err.value.code == code, args


def test_the_measurement_reads_beside_the_estimate():
    from pyprof import advise as adv
    from pyprof.advise.common import Advice

    a = Advice("optim", 0.004, "c", "f", now_s=0.01)
    a.measured = {"change": "optim", "params": {}, "measured_s": 0.0048, "measured_ci": [0.0035, 0.0089],
                  "ci_level": 0.9844, "trials": 7, "step_s": [0.0398, 0.0337], "results_equal": True,
                  "results_note": "largest loss difference 3e-05", "busy_others": 0.4,
                  "measured_note": "unreliable: other processes used 40% of the CPUs during the trials"}
    text = adv.tried(a)
    assert "saves 4.80 ms per step (interval 3.50 ms .. 8.90 ms at 98%, 7 pairs of runs; step 39.8 ms -> 33.7 ms)" \
        in text and "estimated 4.00 ms; results kept" in text and text.count("40%") == 1
    a.measured.update(measured_s=-0.001, measured_ci=[-0.002, 0.001], results_equal=False, busy_others=0.1,
                      measured_note="no measurable change")
    text = adv.tried(a)
    assert "costs 1.00 ms per step" in text and "CHANGES RESULTS: not recommended" in text
    assert text.endswith("no measurable change; other processes used 10% of the CPUs")
    assert adv.as_json(adv.Advised([a], 1, True, 0.05))[0]["measured_s"] == -0.001


def test_a_script_that_calls_pyprof_step_is_timed_at_it_once_a_step(tmp_path):
    path = tmp_path / "stepped.py"
    path.write_text(SCRIPT.replace("        opt.step()\n", "        opt.step()\n        pyprof.step()\n")
                    .replace("import sys, torch", "import sys, torch, pyprof"))
    r = measure.trial(str(path), [], None, {}, 5, 300)
    assert r["error"] is None and len(r["times"]) == 5 and len(r["losses"]) == 6


def test_pairs_alternate_until_the_interval_is_tight_and_bf16_scripts_get_its_tolerance(monkeypatch):
    calls = []
    rng = random.Random(1)

    def fake(script, args, change, params, steps, timeout):
        calls.append(change)
        step = 0.050 if change is None else 0.040  # the change saves 10 ms a step, give or take noise
        return {"times": [step + rng.uniform(-1e-3, 1e-3) for _ in range(steps)], "error": None,
                "losses": [1.0, 0.9] if change is None else [1.0, 0.9 * 1.001], "load": {"busy_others": 0.5}}

    monkeypatch.setattr(measure, "trial", fake)
    m = measure.measure("s.py", [], "optim", {}, 1e6, 12)
    assert calls[:4] == [None, "optim", "optim", None]  # which variant goes first alternates
    assert m["trials"] == 6 and m["ci_level"] > 0.95  # tight at the first pair count that reaches 95%
    assert m["measured_ci"][0] <= m["measured_s"] <= m["measured_ci"][1] and 0.008 < m["measured_s"] < 0.012
    assert m["results_equal"] is False  # 1e-3 relative: beyond float32's tolerance
    assert "unreliable: other processes used 50%" in m["measured_note"]
    assert measure.measure("s.py", [], "optim", {}, 1e6, 12, rtol=0.02)["results_equal"] is True
