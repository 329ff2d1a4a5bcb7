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

\b
Kinds: tf32 (fp32 GEMMs/convs off tensor cores), bf16 (autocast), align (fp16/bf16 dims not
multiples of 8), fuse (chains of memory-bound pointwise ops), layout (channels_last instead of
layout transforms), optim (foreach/fused optimizers), dataloader (waits in DataLoader.__next__, read
from the trace: the one given, or trace.json beside pyprof run's records), threads (more intra-op
threads than cores, from pyprof run's env.json), launch (host-bound GPU idle: CUDA graphs), comm
(exposed collectives). Per step: divided by the ProfilerStep ranges recorded (pyprof run records
them). Estimates are models (docs/advise.md, with how they compared with measured savings), not
measurements: check a change by profiling it.
"""


@click.command("advise", help=HELP, context_settings={"max_content_width": 110})
@click.argument("records", type=click.Path(dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per advice, largest saving first.")
@click.option("--gpu", metavar="NAME", help="GPU of every record (a name the peak table matches).")
@click.option("--peak-flops", type=float, metavar="FLOP/S", help="Peak FLOP/s for every dtype (overrides the table).")
@click.option("--peak-bw", type=float, metavar="BYTES/S", help="Peak memory bandwidth in bytes/s.")
@click.option("-q", "--quiet", is_flag=True, help="No warnings on stderr.")
def advise(records, as_json, gpu, peak_flops, peak_bw, quiet):
    import orjson

    from pyprof import advise as adv
    from pyprof.cli import inputs

    say = stderr_say(quiet)
    p = inputs.profile(records, say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw)
    for line in p.warnings:
        say(f"pyprof: warning: {line}")
    result = advice_for(p, records, say)
    if as_json:
        click.echo(orjson.dumps(adv.as_json(result), option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(adv.format_text(result), nl=False)


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
