"""``pyprof parse``: exports -> kernel records (one JSON object per line)."""

from __future__ import annotations

import os

import click

from pyprof.cli import owns_process
from pyprof.errors import PyprofError, UsageError

HELP = """Attribute every GPU kernel in a profile to the NVTX ranges, layer and op that launched it.

\b
Reads Nsight Systems SQLite exports (nsys 2021.2 .. 2026.x, and older layouts), nvprof/nvvp
databases (versions 9 .. 22) and torch.profiler JSON traces, and writes one JSON record per kernel
(and per memcpy/memset) with its name, duration, launch API, open NVTX ranges, and the decoded
layer, op, arguments, call site and direction (fprop/bprop/optim). Fields: docs/records.md.

\b
Examples:
  nsys profile --trace=cuda,nvtx -o net python train.py
  nsys export --type sqlite net.nsys-rep           # -> net.sqlite
  pyprof parse net.sqlite -o net.dict              # then: pyprof prof net.dict
  pyprof parse net.sqlite | head -1                # records to stdout
  pyprof parse rank*.sqlite -o out/ -j 4           # one output per input, in parallel
  python parse/parse.py net.sqlite > net.dict      # NVIDIA PyProf's spelling

A summary line (kernels, share attributed to ranges, exporter and version) goes to stderr unless -q.
Bad input exits with status 2 and one line saying what is wrong; no partial output is left behind.
"""


@click.command("parse", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=str))
@click.option("-o", "--output", default=None, metavar="FILE|DIR",
              help="Output file (default: stdout). With several inputs: a folder, one .dict per input.")
@click.option("-j", "--jobs", type=int, default=None, help="Parallel processes for several inputs (default: CPUs).")
@click.option("-q", "--quiet", is_flag=True, help="No summary line or warnings on stderr.")
@owns_process
def parse(inputs: tuple[str, ...], output: str | None, jobs: int | None, quiet: bool) -> None:
    from pyprof.cli.memory import no_hugepage_madvise
    from pyprof.parse.run import parse_file, parse_many

    no_hugepage_madvise()

    def say(msg: str) -> None:
        if not quiet:
            click.echo(msg, err=True)

    if len(inputs) == 1 and not (output and (output.endswith(os.sep) or os.path.isdir(output))):
        res = parse_file(inputs[0], output)
        for w in res.warnings:
            say(f"pyprof: warning: {w}")
        say(f"pyprof parse: {res.summary()}")
        return
    if not output:
        raise UsageError(f"{len(inputs)} inputs need an output folder", "add -o OUTDIR/")
    if os.path.exists(output) and not os.path.isdir(output):
        raise UsageError(f"{output} is a file, but {len(inputs)} inputs need an output folder",
                         "give -o a folder name")
    failed = []
    for res in parse_many(list(inputs), output, jobs):
        if res.error:
            failed.append(res)
            click.echo(f"pyprof: error: {res.error}", err=True)
            continue
        for w in res.warnings:
            say(f"pyprof: warning: {os.path.basename(res.path)}: {w}")
        say(f"pyprof parse: {res.summary()} -> {res.out}")
    if failed:
        raise PyprofError(f"{len(failed)} of {len(inputs)} inputs could not be parsed (see above)",
                          "fix or drop those files; the other outputs were written")
