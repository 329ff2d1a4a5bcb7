"""``pyprof prof``: the per-kernel table (or a summary) from parse's records. Thin: options in, API out."""

from __future__ import annotations

import sys

import click

from pyprof.cli import owns_process, stderr_say, terminal_width
from pyprof.prof import columns
from pyprof.prof.columns import SUMMARY_COLUMNS

SPLIT_RULE = (
    "Kernels sharing an opId and dir form one op instance; the instance's FLOPs and bytes\n"
    "(computed once from the op's shapes and dtypes) are split over its kernels in proportion\n"
    "to their durations, so per-kernel figures add up to the instance's exact totals.\n"
    "memcpy/memset records keep their own byte counts (a device-to-device copy twice: read and\n"
    "written), FLOPs n/a and no gap, and take no share of an op's cost."
)

PEAKS = (
    "Peaks, first that applies: derived from each record's device properties (SMs x clock x the\n"
    "architecture's rate per SM, pyprof/data/archs.csv; bandwidth as recorded); the datasheet table\n"
    "(pyprof/data/gpus.csv, matched from the gpu name; MIG slices get their share); the calibration\n"
    "file ($PYPROF_CALIBRATION or ~/.cache/pyprof/calibration.json, see `pyprof calibrate`; CPU\n"
    "records too); estimated (SMs with the architecture's typical clock and bandwidth, where the trace\n"
    "records neither). --gpu NAME picks a datasheet row; --peak-flops (FLOP/s, all dtypes) and\n"
    "--peak-bw (bytes/s) override. --summary ends with a '# peaks:' line per GPU saying which;\n"
    "--list-gpus prints the tables. ideal = max(flops / peak for the kernel's dtype and unit (tensor\n"
    "if tc=1), bytes / bandwidth); gap = sil / ideal. No peak known: ideal and gap print n/a, with\n"
    "one warning."
)


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


HELP = f"""Print one row per kernel: op, params, direction, FLOPs, bytes, tensor cores, roofline gap.

\b
Examples:
  pyprof prof net.dict                      space-separated, default columns
  pyprof prof -w 150 net.dict               aligned columns in human units, 150 characters wide
  pyprof prof --csv -c idx,op,kernel,sil,flops,bytes,gap net.dict > net.csv
  pyprof prof --json net.dict               JSON lines, raw values (null = unknown)
  pyprof prof --summary op --top 15 net.dict    per-op totals and the fix-this-first list
  pyprof parse net.sqlite | pyprof prof     reads stdin
  pyprof prof ranks.parquet/                a Parquet dataset: per-rank summary and stragglers
  pyprof prof --summary op ranks.parquet/   ... or, with -c/--summary, prof's table of its records
  pyprof prof trace.json                    an export or trace: parsed first (one line says so)
  pyprof prof --summary op pyprof-out/      a `pyprof run` folder: its records.dict
  python prof/prof.py --csv net.dict        the PyProf spelling

\b
Columns (-c, comma-separated, or `all`; default {",".join(columns.DEFAULT)}):
{_indent(columns.help_text())}
Unknown numbers print n/a (never 0), unknown text '-'.

\b
Split rule:
{_indent(SPLIT_RULE)}

\b
Summary columns (--summary op|layer|kernel|dir):
{_indent(chr(10).join(f"{n:<7} {m}" for n, _, _, m in SUMMARY_COLUMNS))}

\b
{PEAKS}
"""


@click.command("prof", help=HELP, context_settings={"max_content_width": 120})
@click.argument("file", required=False, type=click.Path(dir_okay=True, allow_dash=True))
@click.option("-c", "cols", metavar="COLS", help="Columns to print, in order (see the list above).")
@click.option("--csv", "as_csv", is_flag=True, help="CSV output.")
@click.option("--json", "as_json", is_flag=True, help="JSON lines output.")
@click.option("-w", "width", type=click.IntRange(min=0), default=None, metavar="WIDTH",
              help="Aligned columns in human units (ms, MFLOP, MB), every line within WIDTH characters; "
                   "0: space-separated raw numbers. Default: space-separated rows, and --summary "
                   "aligned to the terminal's width (no limit when piped or written to a file).")
@click.option("--summary", type=click.Choice(["op", "layer", "kernel", "dir", "step", "comm", "idle"]),
              help="Per-step figures per group instead of kernels (the median over the profiled steps, with their "
                   "spread); step: one row per step (wall time, calls, samples/s); comm: one row per collective "
                   "(bandwidths, exposed time; on a dataset, arrival skew across ranks); idle: GPU idle time and "
                   "launches per device and step.")
@click.option("--top", "top", type=click.IntRange(min=1), metavar="N",
              help="With --summary: only the N largest groups, plus the N-row fix-this-first list.")
@click.option("--sort", type=click.Choice(["time", "excess"]), default="time", show_default=True,
              help="With --summary: order groups by time or by time above the roofline.")
@click.option("--gpu", metavar="NAME", help="GPU of every record (a name the datasheet table matches, e.g. 'H100 SXM'); "
                                             "its datasheet peaks replace the derived ones.")
@click.option("--peak-flops", type=float, metavar="FLOP/S", help="Peak FLOP/s for every dtype (overrides the table).")
@click.option("--peak-bw", type=float, metavar="BYTES/S", help="Peak memory bandwidth in bytes/s (overrides the table).")
@click.option("--reprice", is_flag=True, help="Price with the calibration saved now, not the one the record file "
                                               "pins (the peaks it was first priced with).")
@click.option("-o", "--output", type=click.Path(allow_dash=True), default="-",
              help="Write here instead of stdout (all or nothing).")
@click.option("-j", "--jobs", type=click.IntRange(min=1), default=None, metavar="N",
              help="Processes decoding a large (64 MiB+) record file and formatting a long table. "
                   "Default: the CPUs (up to 8); -j 1 on a busy machine.")
@click.option("--skip-bad", is_flag=True,
              help="Skip records with a wrong-typed or impossible field (\"layer\": 5, a negative or NaN duration) "
                   "and print how many, instead of stopping at the first. Broken lines still stop.")
@click.option("-q", "--quiet", is_flag=True, help="No warnings on stderr.")
@click.option("--list-gpus", is_flag=True, help="Print the peak tables prof uses (per architecture, per GPU: datasheet "
                                                 "and derived) and, with FILE, where each of its GPUs' peaks come from.")
@owns_process
def prof(file, cols, as_csv, as_json, width, summary, top, sort, gpu, peak_flops, peak_bw, reprice, output, jobs,
         skip_bad, quiet, list_gpus):
    from pyprof.atomic import atomic_output
    from pyprof.cli import inputs
    from pyprof.cli.memory import tune_for_batch
    from pyprof.prof import noise, render, summary_text
    from pyprof.prof.load import skipping_bad
    from pyprof.prof.table import default_workers
    from pyprof.scale.parquet import is_parquet

    say = stderr_say(quiet)
    if list_gpus:
        return _list_gpus(file, gpu, peak_flops, peak_bw, output)
    per_kernel = {"-c": cols, "--summary": summary, "--gpu": gpu, "--peak-flops": peak_flops, "--peak-bw": peak_bw,
                  "--skip-bad": skip_bad}
    file = inputs.resolve(file)  # a `pyprof run` output folder: its records.dict
    if file not in (None, "-") and is_parquet(file) and not any(per_kernel.values()):
        from pyprof.scale.query import prof_dataset  # Parquet: per-rank summary and stragglers

        width = terminal_width(output) if width is None else width
        return prof_dataset(file, output, as_csv, as_json, width, top, jobs, per_kernel)
    style, width = _style(file, as_csv, as_json, width, summary, top, cols or sort != "time" or gpu or peak_flops or
                          peak_bw, output)
    if summary in ("comm", "idle"):
        writer = _idle_summary if summary == "idle" else _comm_summary
        return writer(file, inputs.record_sets(file, say), style, width, top, output, say)
    names = columns.parse_columns(cols)
    jobs = jobs or default_workers()
    tune_for_batch()
    with skipping_bad(skip_bad) as bad:
        df = inputs.table(file, say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw, workers=jobs, reprice=reprice)
    if bad.count:
        say(f"pyprof: warning: skipped {bad.count} record(s) with a wrong-typed or impossible field "
            f"(--skip-bad), the first: {bad.first_text()}")
    for line in [*df.attrs.get("warnings", []), noise.warning(noise.problems(df))]:
        if line:
            say(f"pyprof: warning: {line}")
    with atomic_output(output) as fh:
        if not summary:
            drop = () if cols else ("mod", "sub", "tc", "bytes")  # the default columns least needed
            render.write(df, names, fh, style, width, workers=jobs, drop=drop)
        else:
            summary_text.write(df, summary, fh, style, width, top, sort)
        if fh is sys.stdout:
            fh.flush()


def _style(file, as_csv: bool, as_json: bool, width: int | None, summary: str | None, top: int | None, table_options,
           output) -> tuple[str, int]:
    """Usage checks, then the style and width (0: none; a summary: the terminal's, none in a pipe)."""
    from pyprof.errors import UsageError

    if as_csv + as_json + bool(width) > 1:
        raise UsageError("--csv, --json and -w are exclusive", "choose one output style")
    aligned = bool(width) or (width is None and summary is not None and not (as_csv or as_json))
    if width is None and aligned:
        width = terminal_width(output)
    if top is not None and not summary:
        raise UsageError("--top needs --summary", "e.g. --summary op --top 10")
    if file in (None, "-") and sys.stdin.isatty():
        raise UsageError("no record file given and stdin is a terminal",
                         "give FILE (from `pyprof parse x.sqlite -o FILE`) or pipe records in")
    if summary in ("comm", "idle") and table_options:
        raise UsageError(f"--summary {summary} takes no -c, --sort, --gpu or peaks",
                         f"drop them (--summary {summary} prints its own columns)")
    return "csv" if as_csv else "json" if as_json else "aligned" if aligned else "space", width or 0


def _tables(fh, style: str, width: int):
    """``--summary comm`` and ``idle`` output: table(df, spec, drop) and title(text), a title only for a person."""
    from pyprof.prof import render

    said: list[str] = []

    def table(df, spec, drop=()) -> None:
        heads, fmts = {c[0]: c[1] for c in spec}, {c[0]: c[2] for c in spec}
        render.write(df, tuple(c[0] for c in spec), fh, style, width, heads, fmts, drop=drop)

    def title(text: str) -> None:
        if style in ("space", "aligned"):
            fh.write(("\n" if said else "") + (render.fit_line(text, width) if width else text) + "\n")
            said.append(text)
    return table, title


def _ranked(df, col: str, rank: str):
    """``col`` prefixed with the rank on a dataset of several ranks."""
    return df if rank == "-" else df.assign(**{col: rank + ":" + df[col]})


def _idle_summary(file, sets, style: str, width: int, top, output, say) -> None:
    """``--summary idle`` (:mod:`pyprof.prof.idle`) of the records themselves (it needs launch times)."""
    import pandas as pd

    from pyprof.atomic import atomic_output
    from pyprof.errors import InputError
    from pyprof.prof import idle

    df = pd.concat([_ranked(idle.idle(recs), "device", rank) for rank, recs in sets], ignore_index=True)
    cpu = df.empty  # a CPU trace: each thread's time inside and outside ops
    if cpu:
        df = pd.concat([_ranked(idle.cpu_idle(recs), "thread", rank) for rank, recs in sets], ignore_index=True)
    if df.empty:
        raise InputError(f"{file}: no GPU activity and no CPU op records",
                         "--summary idle needs a GPU trace or export, or a CPU trace with ops")
    with atomic_output(output) as fh:
        table, title = _tables(fh, style, width)
        if cpu:
            title("# a CPU trace: per thread, time inside ops and outside them (Python between ops, "
                  "dataloader and other waits outside ops); docs/prof.md")
            table(df, idle.CPU_IDLE_COLUMNS)
        else:
            title("# GPU idle per device and step: host = nothing queued, wait = queued but held, "
                  "other = launch unknown (docs/prof.md)")
            table(df, idle.IDLE_COLUMNS, idle.IDLE_DROP)


def _comm_summary(file, sets, style: str, width: int, top, output, say) -> None:
    """``--summary comm`` (:mod:`pyprof.prof.comm`) of the records themselves (it needs every record field)."""
    import pandas as pd

    from pyprof.atomic import atomic_output
    from pyprof.prof import comm

    per_rank = [comm.collectives(recs, rank) for rank, recs in sets]
    df = pd.concat(per_rank, ignore_index=True)
    if df.empty:  # one process (or no collective profiled): nothing to compare, which is no error
        say(f"pyprof: no collective in {file or 'stdin'}'s records: one process, or no torch.distributed call in "
            "the profiled steps, so there is nothing to compare (NCCL kernels, or gloo's ranges in a CPU trace, "
            "are what --summary comm reads)")
        return
    spec: tuple = comm.COMM_COLUMNS
    per, ranks = comm.skew(per_rank) if len(sets) > 1 else (None, None)
    if per is not None and style not in ("space", "aligned"):  # one table a program reads: each row's skew
        df = df.merge(per[["kind", "nth", "skew", "last"]], on=["kind", "nth"], how="left")
        spec = spec + (("nth", "Nth", "int", "Its ordinal among the collectives of its kind on its rank."),
                       ("skew", "Skew(ns)", "sci", "Its arrival skew across ranks."),
                       ("last", "Last", "str", "The rank that arrived last at it."))
    with atomic_output(output) as fh:
        table, title = _tables(fh, style, width)
        title("# collectives (nccl-tests bandwidths: algbw = size / time, busbw = algbw x factor; docs/prof.md)")
        table(df.head(top) if top else df, spec, comm.COMM_DROP)
        if style not in ("space", "aligned"):
            return
        title("# per kind")
        table(comm.totals(df), tuple(c for c in comm.TOTAL_COLUMNS if c[0] != "rank" or len(sets) > 1))
        if per is not None:
            title(f"# arrival skew across {len(sets)} ranks (the k-th collective of a kind on each rank)")
            table(per.head(top) if top else per, comm.SKEW_COLUMNS)
            title("# per rank: times last to arrive, and the others' wait for it")
            table(ranks, comm.RANK_COLUMNS)
        unknown = int(df["size"].isna().sum())
        if unknown:
            title(f"# {unknown} collective(s) without a recorded message size: size and bandwidths n/a")
        no_group = int((df["size"].notna() & df["busbw"].isna()).sum())
        if no_group:
            title(f"# {no_group} collective(s) without a recorded group size (older torch records none): busbw n/a")


def _list_gpus(file, gpu, peak_flops, peak_bw, output) -> None:
    """``--list-gpus``: :func:`pyprof.prof.devices.listing`, then FILE's devices and their peaks."""
    from pyprof.atomic import atomic_output
    from pyprof.cli import inputs
    from pyprof.prof.devices import listing

    text = listing()
    if file is not None:
        df = inputs.table(inputs.resolve(file), lambda _line: None, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw,
                          workers=1)
        text += f"\n# Devices of {file}\n" + "".join(f"{line}\n" for line in df.attrs.get("peaks", []))
    with atomic_output(output) as fh:
        fh.write(text)


