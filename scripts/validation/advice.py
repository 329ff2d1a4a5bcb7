"""``pyprof advise --try`` on the validation zoo's models and on the advice cases, and the table of
estimated vs measured savings that docs/advise.md holds (``scripts/validate.py --advise``).

Each case is a script as a user runs it: a zoo model trained by :func:`scripts.validation.zoo.train`
(SGD, ``pyprof.step()`` per step), a case of :mod:`scripts.validation.advice_models` in its
``before`` variant, the GPT-style user script (``gpt_user.py``) or issue 41's training script
(``try_train.py``). ``pyprof advise --try --json`` profiles it, advises and times every change it can
apply (pyprof/advise/measure.py); one row per advice: the estimate, the measured saving with its
interval, the two step times, measured / estimated, whether the losses stayed within the change's
tolerance, and the share of the CPUs other processes used during the trials.

``python scripts/validation/advice.py`` rewrites docs/advise.md's generated part (:func:`markdown`: the
kinds and --try, from pyprof/advise/) and keeps its measured part; ``scripts/validate.py --advise
--write`` writes both.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODELS = HERE / "advice_models.py"
ZOO = ("gpt", "lstm", "moe_einsum", "packed_rnn", "unet", "sepconv", "tcn", "broadcast_lora", "bert",
       "checkpoint_llama", "custom_function", "convnet_bf16")
#: case -> (script, arguments, what it is)
CASES: dict[str, tuple[Path | str, list[str], str]] = {
    "try_train": (HERE / "try_train.py", ["--steps", "60"], "issue 41: MLP 64-256x10-8, for-loop AdamW, "
                  "DataLoader of 8 samples x 3 ms sleep"),
    "gpt_user": (HERE / "gpt_user.py", ["--steps", "40", "--threads", "1"], "issue 40: GPT (2 x 128, hand-written "
                 "attention) + 7-layer MLP, AdamW"),
    "optim": (MODELS, ["optim", "before", "--steps", "60"], "12 x Linear(256, 256), batch 8, AdamW foreach=False"),
    "fuse": (MODELS, ["fuse", "before", "--steps", "40"], "Linear, 5 pointwise ops on [2048, 256], Linear; SGD"),
    "dataloader": (MODELS, ["dataloader", "before", "--steps", "60"], "MLP 64-2048-2048-8, 8 samples x 5 ms sleep"),
    "layout": (MODELS, ["layout", "before", "--steps", "40"], "3 x Conv2d 16-32-32-16 on [8, 16, 56, 56]; SGD"),
    "threads": (MODELS, ["threads", "before", "--steps", "60"], "MLP 512-1024-512, batch 64, 4 threads per core"),
    **{z: ("zoo", [z], f"zoo `{z}` (SGD)") for z in ZOO},
}
HEADER = ("| case | kind | change tried | estimated saved/step | measured saved/step (interval, confidence, pairs) "
          "| step before -> after | measured / estimated | results | others' CPU share |")


def script_of(case: str, workdir: Path) -> tuple[str, list[str]]:
    script, args, _ = CASES[case]
    if script != "zoo":
        return str(script), args
    path = workdir / f"zoo_{case}.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\nfrom scripts.validation.zoo import train\n"
                    f"train({case!r}, 30)\n")
    return str(path), []


def run_case(case: str, budget: float, workdir: Path) -> list[dict] | str:
    """The advice of ``pyprof advise --try --json`` on the case (a string: why it failed)."""
    script, args = script_of(case, workdir)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    r = subprocess.run([sys.executable, "-m", "pyprof", "advise", "--try", "--json", "-q", "--try-budget",
                        str(budget), "-o", str(workdir / case), script, *args], capture_output=True, text=True,
                       env=env, timeout=budget * 4 + 1800)
    if r.returncode:
        return (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1][:200]
    return json.loads(r.stdout)


def run(cases: list[str], budget: float, workdir: Path, log=print) -> dict[str, list[dict] | str]:
    out = {}
    for case in cases:
        t0 = time.perf_counter()
        out[case] = got = run_case(case, budget, workdir)
        log(f"{case}: {got if isinstance(got, str) else f'{len(got)} advice'} ({time.perf_counter() - t0:.0f} s)")
    return out


def _ms(s) -> str:
    return "n/a" if s is None else f"{s * 1e3:.2f} ms"


def row(case: str, a: dict) -> str:
    est = _ms(a["saved_s"]) if a["saved_s"] is not None else (
        f"not estimated (withdrawn model: {_ms(a['model_s'])})" if a.get("model_s") is not None else "not estimated")
    if a.get("not_tried") or not a.get("change"):
        return f"| {case} | `{a['kind']}` | not tried: {a.get('not_tried', 'n/a')} | {est} | | | | | |"
    change = a["change"] + "".join(f", {k}={v}" for k, v in (a.get("params") or {}).items())
    if a.get("measured_s") is None:
        return f"| {case} | `{a['kind']}` | {change} | {est} | {a.get('measured_note')} | | | | |"
    lo, hi = a["measured_ci"]
    meas = (f"{_ms(a['measured_s'])} ({_ms(lo)} .. {_ms(hi)}, {a['ci_level']:.0%}, {a['trials']})"
            + (f"; {a['measured_note']}" if a.get("measured_note") else ""))
    ratio = f"{a['measured_s'] / a['saved_s']:.2f}" if a["saved_s"] else "n/a"
    res = {True: "kept", False: "**CHANGED**", None: "not compared"}[a["results_equal"]]
    res += f" (max diff {a['max_abs_diff']:.2g})" if a.get("max_abs_diff") is not None else ""
    busy = "n/a" if a.get("busy_others") is None else f"{a['busy_others']:.0%}"
    return (f"| {case} | `{a['kind']}` | {change} | {est} | {meas} | {_ms(a['step_s'][0])} -> {_ms(a['step_s'][1])} "
            f"| {ratio} | {res} | {busy} |")


def table(results: dict[str, list[dict] | str]) -> str:
    rows = [HEADER, "|" + "---|" * (HEADER.count(" | ") + 1)]
    for case, got in results.items():
        if isinstance(got, str) or not got:
            rows.append(f"| {case} | | {'error: ' + got if got else 'no advice'} | | | | | | |")
        else:
            rows += [row(case, a) for a in got]
    return "\n".join(rows) + "\n"


DOC = ROOT / "docs" / "advise.md"
MEASURED = "## Predicted vs measured"


def markdown() -> str:
    """docs/advise.md's generated part: pyprof.advise's docstring, the kinds with their changes and formulas,
    the constants, then how --try measures and the changes it applies (pyprof/advise/measure.py, changes.py)."""
    import re

    from pyprof import advise as adv
    from pyprof.advise import changes, measure
    from pyprof.prof.noise import BUSY_SHARE

    def plain(doc):
        doc = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", doc.strip()).replace("``", "`")
        for name, fmt in (("WARM", "{:g}"), ("MIN_LEVEL", "{:.0%}"), ("TIGHT", "{:.0%}"), ("ATOL", "{:g}")):
            doc = doc.replace(f"`{name}`", fmt.format(getattr(measure, name)))
        return doc.replace("`pyprof.prof.noise.BUSY_SHARE`", f"{BUSY_SHARE:.0%}")

    out = ["# pyprof advise", "", "Generated by `python scripts/validation/advice.py` from pyprof/advise/; the measured "
           "part at the end by `scripts/validate.py --advise --write`.", "", plain(adv.__doc__.split("\n\n", 1)[1]), "",
           "| kind | change | estimate |", "|---|---|---|"]
    out += [f"| `{k}` | {change} | {formula} |" for k, (change, formula) in adv.KINDS.items()]
    out += ["", f"Constants: a kernel is never assumed faster than {adv.MIN_KERNEL_NS / 1e3:g} us; advice saving less "
            f"than {adv.MIN_SHARE:.1%} of a step is not shown, nor an unestimated one covering less (the step: the mean "
            "`ProfilerStep#N` wall time where the trace is at hand, else the kernel time per step); estimated "
            "advice comes first, largest saving first, then the unestimated, largest time covered first. "
            "`pyprof advise --json` prints one object per advice with `kind`, `saved_s` (seconds per step; null "
            "where not estimated, with `no_estimate`), `now_s`, `kernels`, `change`, `evidence` and `formula`; "
            "with `--try`, also `change` (the one tried), `params`, `measured_s`, `measured_ci`, `ci_level`, "
            "`trials`, `step_s` (before, after), `results_equal`, `max_abs_diff`, `results_note`, `busy_others`, "
            "`loadavg` and `measured_note` (or `not_tried`).", "", "## `pyprof advise --try`", "",
            plain(measure.__doc__), "", plain(changes.__doc__), "",
            "| change | advice kinds | what the trial applies | loss tolerance (relative) |", "|---|---|---|---|"]
    out += [f"| `{name}` | {', '.join(f'`{k}`' for k in c.kinds)} | {c.what} | {c.rtol:g} |"
            for name, c in changes.CHANGES.items()]
    return "\n".join(out) + "\n"


def write_doc(measured: str | None = None) -> None:
    """docs/advise.md: :func:`markdown`, then ``measured`` (None: the measured part it holds now)."""
    if measured is None:
        old = DOC.read_text() if DOC.exists() else ""
        measured = old[old.index(MEASURED):] if MEASURED in old else ""
    DOC.write_text(markdown() + ("\n" + measured if measured else ""))


#: what the table showed, written after reading it (kept with the command that makes the table)
NOTES = ""


def section(results: dict[str, list[dict] | str], command: str, began: str, loads: tuple) -> str:
    """docs/advise.md's measured part: the command, the machine and its load, the table, the notes."""
    import torch

    from pyprof.calibrate import cpu_name

    cases = "; ".join(f"{c}: {CASES[c][2]}" for c in results)
    return (f"{MEASURED}\n\n`{command}` on {cpu_name()} ({os.cpu_count()} CPUs, torch "
            f"{torch.__version__}), {began}; load average {loads[0]:.1f} at the start, {loads[1]:.1f} at the end "
            f"(the machine is shared with other sessions). Cases: {cases}.\n\n{table(results)}"
            + (f"\n{NOTES}\n" if NOTES else ""))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    write_doc()
