"""``pyprof parse``: exports -> kernel records (one JSON object per line)."""

from __future__ import annotations

import contextlib
import os

import click

from pyprof.cli import owns_process, stderr_say
from pyprof.errors import PyprofError, UsageError
from pyprof.terminal import shown

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
  pyprof parse net.sqlite -o net.parquet           # Parquet (typed columns; the scale extra)
  pyprof parse rank*.sqlite -o ranks.parquet/      # a Parquet dataset: a file per input, rank/host/file
  pyprof parse run*/trace.json -o runs.parquet/    # same names: outputs run1-trace.parquet, run2-trace...
  pyprof parse --cluster tcp://head:8786 rank*.sqlite -o ranks/ --format parquet   # on Dask workers
  python parse/parse.py net.sqlite > net.dict      # NVIDIA PyProf's spelling

A summary line (kernels, share attributed to ranges, exporter and version) goes to stderr unless -q.
Bad input exits with status 2 and one line saying what is wrong; no partial output is left behind.
"""


@click.command("parse", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("inputs", nargs=-1, required=True, type=click.Path(dir_okay=True, path_type=str))
@click.option("-o", "--output", default=None, metavar="FILE|DIR",
              help="Output file (default: stdout). With several inputs: a folder, one .dict per input.")
@click.option("-j", "--jobs", type=int, default=None, help="Parallel processes for several inputs (default: CPUs).")
@click.option("--format", "fmt", type=click.Choice(["jsonl", "parquet"]), default=None,
              help="jsonl: JSON lines (.dict); parquet: typed columns, zstd, with rank/host/file columns "
                   "(a folder of one file per input for several inputs). Default: parquet when -o ends "
                   "in .parquet, else jsonl. Parquet needs pip install 'pyprof-torch[scale]'.")
@click.option("--cluster", metavar="ADDRESS", default=None,
              help="Parse on a Dask cluster, a task per file, into the -o folder: tcp://HOST:8786 (a running "
                   "scheduler; inputs and -o on a file system every worker sees) or local:N (N local "
                   "workers). A failing file is named and the others go on; exit 2 at the end if any failed.")
@click.option("--limit", "limit_specs", multiple=True, metavar="NAME=N",
              help="Raise a bound on what an export may ask (no real capture reaches the defaults): "
                   "inflate (bytes a .json.gz may inflate to, default 512 MiB or 100x its size), depth "
                   "(ranges open at once on a thread, 2000), text (characters of one range text, 16 MiB), "
                   "cross (ranges stacked again where ranges cross, per range, 16), chain (torch.profiler "
                   "ranges open around a range, on average, 64).")
@click.option("-q", "--quiet", is_flag=True, help="No summary line or warnings on stderr.")
@owns_process
def parse(inputs: tuple[str, ...], output: str | None, jobs: int | None, fmt: str | None, cluster: str | None,
          limit_specs: tuple[str, ...], quiet: bool) -> None:
    from pyprof.cli.memory import no_hugepage_madvise
    from pyprof.parse import limits

    no_hugepage_madvise()
    if limit_specs:
        try:
            spec = {**limits.parse_spec(os.environ.get(limits.ENV, "")),
                    **{k: v for s in limit_specs for k, v in limits.parse_spec(s).items()}}
        except ValueError as exc:
            raise UsageError(f"--limit: {exc}", "e.g. --limit depth=5000") from None
        os.environ[limits.ENV] = ",".join(f"{k}={v}" for k, v in spec.items())

    say = stderr_say(quiet)
    if fmt is None:
        fmt = "parquet" if output and output.rstrip(os.sep).endswith(".parquet") else "jsonl"
    created = output if output and not os.path.lexists(output) else None
    try:
        _parse(inputs, output, jobs, fmt, cluster, say)
    except BaseException:
        if created:
            _remove_empty_folder(created)
        raise


def _remove_empty_folder(path: str) -> None:
    """After a failure: the output folder this command created, where nothing was written into it."""
    with contextlib.suppress(OSError):
        if os.path.isdir(path) and not os.path.islink(path) and not os.listdir(path):
            os.rmdir(path)


def _parse(inputs: tuple[str, ...], output: str | None, jobs: int | None, fmt: str, cluster: str | None,
           say) -> None:
    """One input to one file (or stdout), else each input to its file in the ``-o`` folder; ``--format
    parquet`` and ``--cluster`` through :mod:`pyprof.scale` (the ``scale`` extra)."""
    from pyprof.parse.run import parse_file, parse_many

    scaled = cluster or fmt == "parquet"
    if scaled:
        from pyprof.scale.extra import require

        if fmt == "parquet":
            require("pyarrow", "duckdb", what="Parquet")  # pyarrow writes, DuckDB reads the records
        if cluster:
            require("dask", "distributed")
        if not output:
            raise UsageError("Parquet and --cluster write files, not stdout",
                             "add -o x.parquet (one input) or -o OUTDIR/")
    if not (cluster or len(inputs) > 1 or output and (output.endswith(os.sep) or os.path.isdir(output))):
        if scaled and output:  # (scaled: never without output, refused above)
            from pyprof.scale.parquet import parse_to_parquet

            res = parse_to_parquet(inputs[0], output, 0)
        else:
            res = parse_file(inputs[0], output)
        for w in res.warnings:
            say(f"pyprof: warning: {w}")
        say(f"pyprof parse: {res.summary()}")
        return
    if not output:
        raise UsageError(f"{len(inputs)} inputs need an output folder", "add -o OUTDIR/")
    if os.path.exists(output) and not os.path.isdir(output):
        raise UsageError(f"{output} is a file, but {'--cluster needs' if cluster else f'{len(inputs)} inputs need'} "
                         "an output folder", "give -o a folder name")
    if not scaled:
        results = parse_many(list(inputs), output, jobs)
    else:
        from pyprof.scale import cluster as run

        results = (run.parse_cluster(list(inputs), output, cluster, fmt) if cluster
                   else run.parse_local(list(inputs), output, fmt, jobs))
    _report_many(results, len(inputs), say)


def _report_many(results, n_inputs: int, say) -> None:
    """One line per parsed input (its warnings first) as the results come; the inputs that failed are
    named, each with its error, and then together (as given: inputs of ``pyprof run`` are all named
    ``trace.json``) in the one error that sets the exit status. A single input (``-o DIR/``) that
    failed is its own error line, the only one."""
    failed = []
    for res in results:
        if res.error:
            failed.append(res)
            if n_inputs > 1:
                click.echo(shown(f"pyprof: error: {res.error}"), err=True)
            continue
        for w in res.warnings:
            say(f"pyprof: warning: {os.path.basename(res.path)}: {w}")
        say(f"pyprof parse: {res.summary()} -> {res.out}")
    if failed and n_inputs == 1:
        raise PyprofError(failed[0].error)
    if failed:
        names = ", ".join(sorted(r.path for r in failed))
        rest = "none was written" if len(failed) == n_inputs else "the other outputs were written"
        raise PyprofError(f"{len(failed)} of {n_inputs} inputs could not be parsed: {names}",
                          f"fix or drop those files; {rest}")
