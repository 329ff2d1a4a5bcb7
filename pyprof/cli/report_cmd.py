"""``pyprof report``: the self-contained HTML page of a records file. Thin: options in,
:mod:`pyprof.report` out."""

from __future__ import annotations

import click

from pyprof.cli import stderr_say

HELP = """Write one self-contained HTML page about RECORDS (from `pyprof parse` or `pyprof run`: a
record file, a .parquet file or dataset folder; an export or trace is parsed first).

\b
Examples:
  pyprof report pyprof-out/records.dict -o report.html
  pyprof report new.dict --baseline old.dict -o report.html     with the deltas against old.dict
  pyprof run --report examples/lenet.py                         profile, then write pyprof-out/report.html

\b
The page: the roofline (every op instance: FLOPs per byte against FLOP/s achieved, with the
device's memory and compute roofs), time by layer (the module tree, forward / backward /
optimizer), fix this first (time above the roofline), one step's timeline by stream or thread
and the GPU time breakdown (busy, idle, exposed communication, exposed memcpy), sortable and
filterable per-op, per-layer, per-kernel and per-shape tables, the CPU findings, the devices,
where their peaks came from, and the pyprof version. plotly.js, styles and scripts are inlined:
the file opens offline and as a CI artifact. Needs the `report` extra (Plotly):
pip install 'pyprof-torch[report]'.
"""


@click.command("report", help=HELP, context_settings={"max_content_width": 110})
@click.argument("records", type=click.Path(dir_okay=True))
@click.option("-o", "--output", default="report.html", show_default=True, metavar="PATH",
              help="The HTML file to write (all or nothing).")
@click.option("--baseline", type=click.Path(dir_okay=True), metavar="RECORDS",
              help="Records of a baseline run: the page compares RECORDS with it (per op, layer, kernel).")
@click.option("--env", "env_path", type=click.Path(dir_okay=False), metavar="ENV.JSON",
              help="Thread settings of the profiled process (default: env.json beside RECORDS, as `pyprof run` "
                   "writes it).")
@click.option("--gpu", metavar="NAME", help="GPU of every record (a name the peak table matches).")
@click.option("--peak-flops", type=float, metavar="FLOP/S", help="Peak FLOP/s for every dtype (overrides the table).")
@click.option("--peak-bw", type=float, metavar="BYTES/S", help="Peak memory bandwidth in bytes/s.")
@click.option("-q", "--quiet", is_flag=True, help="No warnings on stderr.")
def report(records, output, baseline, env_path, gpu, peak_flops, peak_bw, quiet):
    from pathlib import Path

    from pyprof.report import require_plotly

    require_plotly()
    from pyprof.cli import inputs
    from pyprof.errors import InputError
    from pyprof.prof.units import nbytes
    from pyprof.report import page, profile

    env = None
    if env_path:
        env = profile.read_env(Path(env_path))
        if env is None:
            raise InputError(f"{env_path} is not a readable env.json", "give the env.json `pyprof run` wrote")
    say = stderr_say(quiet)
    p = inputs.profile(records, say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw, env=env)
    base = inputs.profile(baseline, say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw) if baseline else None
    for line in p.warnings:
        say(f"pyprof: warning: {line}")
    from pyprof.cli.advise_cmd import advice_for

    size = page.write(p, output, base, advice_for(p, records, say))
    click.echo(f"pyprof: wrote {output} ({nbytes(size)}, {len(p.records)} records)", err=True)
