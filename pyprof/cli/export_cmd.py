"""``pyprof export``: a profile as a trace for Perfetto and chrome://tracing. Thin: options in,
:mod:`pyprof.report.perfetto` out."""

from __future__ import annotations

import click

from pyprof.cli import stderr_say

HELP = """Write RECORDS as a Perfetto / chrome://tracing trace (JSON) whose kernel events carry pyprof's
columns: op, dir, layer, module, call site, params (shapes), FLOPs, bytes, ideal time, gap, bound,
tensor cores, what priced it, step. Module ranges are slices on a track of their own per device (the
span of each module's kernels), the profiled steps slices with per-step counters (kernel time, FLOPs,
kernels). RECORDS: a record file, a `pyprof run` folder, Parquet, or an export or trace (parsed first).

\b
Examples:
  pyprof export --perfetto lenet.json pyprof-out/     then open lenet.json in ui.perfetto.dev
  pyprof export --perfetto net.json net.sqlite
"""


@click.command("export", help=HELP, context_settings={"max_content_width": 110})
@click.argument("records", type=click.Path(dir_okay=True))
@click.option("--perfetto", "out", required=True, metavar="OUT.json", help="The trace to write (all or nothing).")
@click.option("--gpu", metavar="NAME", help="GPU of every record (a name the peak table matches).")
@click.option("--peak-flops", type=float, metavar="FLOP/S", help="Peak FLOP/s for every dtype (overrides the table).")
@click.option("--peak-bw", type=float, metavar="BYTES/S", help="Peak memory bandwidth in bytes/s.")
@click.option("-q", "--quiet", is_flag=True, help="No warnings on stderr.")
def export(records, out, gpu, peak_flops, peak_bw, quiet):
    from pyprof.cli import inputs
    from pyprof.prof.units import nbytes
    from pyprof.report import perfetto

    say = stderr_say(quiet)
    p = inputs.profile(records, say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw)
    for line in p.warnings:
        say(f"pyprof: warning: {line}")
    size = perfetto.write(p, out)
    say(f"pyprof: wrote {out} ({nbytes(size)}, {len(p.records)} kernels); open it in ui.perfetto.dev or chrome://tracing")
