"""``pyprof advise``: the changes that would save the most time per step. Thin: options in,
:mod:`pyprof.advise` out."""

from __future__ import annotations

import click

from pyprof.cli import stderr_say

HELP = """Rank concrete changes by the time each would save per step, with the evidence (ops, layers,
call sites) and the formula of every estimate. RECORDS: a record file or Parquet from `pyprof parse` or
`pyprof run` (an export or trace is parsed first).

\b
Examples:
  pyprof advise pyprof-out/records.dict
  pyprof advise net.dict --json > advice.json     one object per advice: kind, saved_s, evidence, formula
  pyprof advise --try train.py --epochs 1         profile, advise, then time each change on the script

\b
Kinds: tf32 (fp32 GEMMs/convs off tensor cores), bf16 (autocast; GPU, or a CPU with native bf16),
align (fp16/bf16 dims not multiples of 8), attention (hand-written: scaled_dot_product_attention),
fuse (chains of memory-bound pointwise ops), compile (op-dense modules), layout (channels_last),
copies (the CPU findings' copies, by call site), optim (foreach/fused optimizers), dataloader (waits
in DataLoader.__next__, read from the trace: the one given, or trace.json beside pyprof run's
records), threads (more intra-op threads than cores, from pyprof run's env.json), launch (host-bound
GPU idle: CUDA graphs), comm (exposed collectives). Ranked by the estimated saving, then the
unestimated by the time they cover; none under 1% of the step (the mean ProfilerStep wall time).
Estimates are models (docs/advise.md): --try measures them.

\b
--try SCRIPT [ARGS]: profile SCRIPT (pyprof run, into -o DIR), advise, then run the script unprofiled
with and without each change that can be made from outside it (fused/foreach optimizers, DataLoader
workers, channels_last, torch.compile, thread count, bf16 autocast, TF32), each run a fresh process,
in alternating pairs, until the saving's interval is tight or --try-budget runs out. Each advice then
shows the measured saving per step beside the estimate, its interval, whether the losses stayed
within the change's tolerance, and the machine's load; DIR/advice.json keeps them.
"""


@click.command("advise", help=HELP, context_settings={"max_content_width": 110, "ignore_unknown_options": True,
                                                      "allow_interspersed_args": False})
@click.argument("records", type=click.Path(dir_okay=True))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per advice, largest saving first.")
@click.option("--try", "try_", is_flag=True, help="RECORDS is a SCRIPT (with ARGS): profile it, advise, and time "
              "each change that can be applied without editing it.")
@click.option("--try-budget", type=click.FloatRange(min=1), default=300, show_default=True, metavar="SECONDS",
              help="--try: seconds of trials in all, shared among the changes.")
@click.option("-o", "--output", "out_dir", default="pyprof-out", show_default=True, metavar="DIR",
              help="--try: the folder pyprof run profiles into; advice.json is written there.")
@click.option("--gpu", metavar="NAME", help="GPU of every record (a name the peak table matches).")
@click.option("--peak-flops", type=float, metavar="FLOP/S", help="Peak FLOP/s for every dtype (overrides the table).")
@click.option("--peak-bw", type=float, metavar="BYTES/S", help="Peak memory bandwidth in bytes/s.")
@click.option("-q", "--quiet", is_flag=True, help="No warnings on stderr.")
def advise(records, args, as_json, try_, try_budget, out_dir, gpu, peak_flops, peak_bw, quiet):
    import orjson

    from pyprof import advise as adv
    from pyprof.cli import inputs
    from pyprof.errors import UsageError

    say = stderr_say(quiet)
    if args and not try_:
        raise UsageError(f"unexpected arguments after {records}: {' '.join(args)}", "give one RECORDS path, or "
                         "--try SCRIPT [ARGS] to profile and try a script")
    script, records = records, (_profile(records, args, out_dir, quiet) if try_ else records)
    p = inputs.profile(records, say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw)
    for line in p.warnings:
        say(f"pyprof: warning: {line}")
    result = advice_for(p, records, say)
    if try_:
        tried_advice(p, result, script, list(args), try_budget, out_dir, say)
    if as_json:
        click.echo(orjson.dumps(adv.as_json(result), option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(adv.format_text(result), nl=False)


def _profile(script, args, out_dir, quiet) -> str:
    """``pyprof run -o out_dir script args`` in a fresh process (the script's output and pyprof run's
    summary not shown; its warnings and the script's errors are); the records' path."""
    import os
    import subprocess
    import sys

    from pyprof.errors import UsageError
    from pyprof.runner import ScriptFailed

    if not os.path.isfile(script):
        raise UsageError(f"{script}: no such script", "give the path of a Python file after --try")
    r = subprocess.run([sys.executable, "-m", "pyprof", "run", "-o", out_dir, script, *args], stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL if quiet else None)
    if r.returncode:
        raise ScriptFailed(f"pyprof run {script} exited with status {r.returncode}", "nothing was tried; "
                           "see its messages above")
    return os.path.join(out_dir, "records.dict")


def tried_advice(p, result, script: str, args: list[str], budget: float, out_dir, say) -> None:
    """Time each change of ``result`` (advice for the profile ``p`` of ``script``) on the unmodified
    script (:func:`pyprof.advise.measure.try_advice`), and keep the advice with its measurements in
    ``out_dir/advice.json``: what ``advise --try`` and ``run --try`` do after profiling."""
    from pathlib import Path

    import orjson

    from pyprof import advise as adv
    from pyprof.advise.measure import try_advice
    from pyprof.atomic import atomic_output

    low = bool(p.df["dtype"].isin(["bfloat16", "float16", "torch.bfloat16", "torch.float16"]).any())
    try_advice(result, script, args, budget, say, low_precision=low)
    with atomic_output(Path(out_dir) / "advice.json", "wb") as fh:
        fh.write(orjson.dumps(adv.as_json(result), option=orjson.OPT_INDENT_2))


def advice_for(p, records, say):
    """``pyprof advise``'s result for the profile ``p`` of the records at ``records`` (a path), with the
    DataLoader waits of the trace beside them where there is one (the report's advice section too)."""
    from pyprof import advise as adv
    from pyprof.advise.spans import read_spans, trace_beside
    from pyprof.errors import InputError

    spans = None
    trace = trace_beside(records)
    if trace is not None:
        try:
            spans = read_spans(trace)
        except InputError as exc:  # the records are read: only the dataloader advice is lost
            say(f"pyprof: warning: {trace}: not read for DataLoader waits ({exc})")
    return adv.advise(p, spans)
