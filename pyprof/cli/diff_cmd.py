"""``pyprof diff``: two records files side by side per op, layer and kernel, with deltas; a CI gate with
``--fail-above``. Thin: options in, :mod:`pyprof.report.diff` out."""

from __future__ import annotations

import sys

import click

from pyprof.cli import stderr_say

HELP = """Compare records file B with A (the baseline): per op, layer and kernel, the time, FLOPs and
roofline gap of each side and the change in time, largest change first. A and B: record files,
.parquet files or dataset folders; an export or trace is parsed first.

\b
Examples:
  pyprof diff old/records.dict new/records.dict
  pyprof diff -w 120 --by op --top 20 a.dict b.dict
  pyprof diff --csv a.dict b.dict > diff.csv
  pyprof diff --fail-above 5 main.dict branch.dict     exit 1 on a regression beyond 5%

\b
Each side's step count (torch.profiler's ProfilerStep#N ranges) is shown; where both files hold
steps and their counts differ, time and FLOPs are compared per step. --fail-above PCT: exit
status 1 when the total time, or the time of one op, layer or kernel holding at least --min-share
percent of either total, grew by more than PCT percent (each regression is named on stderr); 0
otherwise. pyprof's own errors exit 2.
Tables print human units (aligned to the terminal, or -w WIDTH); --csv and --json print raw
numbers (ns, FLOPs).
"""

DROP = (("flops_a", "flops_b"), ("gap_a", "gap_b"), ("time_a",), ("delta_pct",))  # left out first, in pairs
HUMAN = (("key", "", "str"), ("time_a", "Time A", "dur"), ("time_b", "Time B", "dur"), ("delta", "B - A", "+dur"),
         ("delta_pct", "Change", "+pct"), ("flops_a", "FLOPs A", "flop"), ("flops_b", "FLOPs B", "flop"),
         ("gap_a", "Gap A", "num"), ("gap_b", "Gap B", "num"), ("status", "", "str"))


def _by_list(value: str) -> list[str]:
    from pyprof.errors import UsageError
    from pyprof.report.diff import BY

    names = [v.strip() for v in value.split(",") if v.strip()]
    bad = [n for n in names if n not in BY]
    if bad or not names:
        raise UsageError(f"unknown --by {bad[0] if bad else value!r}", "use op, layer, kernel or a comma list")
    return names


@click.command("diff", help=HELP, context_settings={"max_content_width": 110})
@click.argument("a", type=click.Path(dir_okay=True))
@click.argument("b", type=click.Path(dir_okay=True))
@click.option("--by", "by", default="op,layer,kernel", show_default=True, metavar="LIST",
              help="Groupings compared, comma-separated: op, layer, kernel.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, metavar="N",
              help="Rows per table (human output; --csv and --json print every row).")
@click.option("-w", "width", type=click.IntRange(min=0), default=None, metavar="WIDTH",
              help="Every line within WIDTH characters (default: the terminal's width; 0: no limit).")
@click.option("--csv", "as_csv", is_flag=True, help="CSV, raw numbers, one row per group (column `by` first).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, raw numbers (null = unknown or absent).")
@click.option("--fail-above", type=click.FloatRange(min=0), metavar="PCT",
              help="Exit 1 when time grew by more than PCT percent (see above).")
@click.option("--min-share", type=click.FloatRange(min=0, max=100), default=1.0, show_default=True, metavar="PCT",
              help="With --fail-above: groups under this share of both totals are not judged.")
@click.option("--gpu", metavar="NAME", help="GPU of every record (a name the peak table matches).")
@click.option("--peak-flops", type=float, metavar="FLOP/S", help="Peak FLOP/s for every dtype.")
@click.option("--peak-bw", type=float, metavar="BYTES/S", help="Peak memory bandwidth in bytes/s.")
def diff(a, b, by, top, width, as_csv, as_json, fail_above, min_share, gpu, peak_flops, peak_bw):
    import shutil

    from pyprof.cli import inputs
    from pyprof.errors import UsageError
    from pyprof.prof import render, units
    from pyprof.report import diff as diff_mod

    if as_csv and as_json:
        raise UsageError("--csv and --json are exclusive", "choose one output style")
    groupings = _by_list(by)
    say = stderr_say()
    pa = inputs.profile(a, say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw)
    pb = inputs.profile(b, say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw)
    na, nb = diff_mod.step_count(pa.records), diff_mod.step_count(pb.records)
    scale = diff_mod.scale_for(pa.records, pb.records)
    tot = diff_mod.total(pa.df, pb.df, scale)
    tables = {g: diff_mod.compare(pa.df, pb.df, g, scale) for g in groupings}
    out = sys.stdout
    if as_csv or as_json:
        _raw(tables, out, as_json)
    else:
        if width is None:
            width = shutil.get_terminal_size((80, 24)).columns
        per = " per step" if scale.per_step else ""
        out.write(f"A: {a} ({_steps(na)})\nB: {b} ({_steps(nb)})\n"
                  f"total time{per}: {units.duration(tot.time_a)} -> {units.duration(tot.time_b)} "
                  f"({units.FORMATS['+pct'](tot.delta_pct)})\n")
        for g, table in tables.items():
            shown = table.head(top)
            out.write("\n" + render.fit_line(f"By {g} (top {len(shown)} of {len(table)}, largest change first)",
                                              width) + "\n")
            cols = [units.column(shown[n].tolist(), k) if k != "str" else [str(v) if v else "" for v in shown[n]]
                    for n, _, k in HUMAN]
            heads = [g.capitalize() if n == "key" else h for n, h, _ in HUMAN]
            names = [n for n, _, _ in HUMAN]
            render.write_aligned(cols, heads, [k != "str" for _, _, k in HUMAN], out, width,
                                 drop=[tuple(names.index(n) for n in group) for group in DROP])
    out.flush()
    if fail_above is not None:
        lines = diff_mod.regressions_all(tables, tot, fail_above, min_share)
        for line in lines:
            click.echo(f"pyprof: regression beyond {fail_above:g}%: {line}", err=True)
        if lines:
            sys.exit(1)


def _steps(n: int) -> str:
    """How many steps a side holds, as the header says it."""
    return "no ProfilerStep ranges" if n == 0 else f"{n} step{'s' if n != 1 else ''}"


def _raw(tables, out, as_json: bool) -> None:
    """Every row of every table, raw numbers."""
    import csv
    import math

    import orjson

    from pyprof.report.diff import COLUMNS

    def clean(v):
        return None if isinstance(v, float) and math.isnan(v) else v

    if as_json:
        for g, table in tables.items():
            for row in table.itertuples(index=False):
                out.write(orjson.dumps({"by": g, **{k: clean(v) for k, v in zip(COLUMNS, row, strict=True)}},
                                       option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
        return
    from pyprof.prof.render import csv_safe, printable

    def cell(v):  # a name is text in a spreadsheet (no formula) and carries no control character
        if isinstance(v, str):
            return csv_safe(printable([v]))[0]
        return "" if clean(v) is None else v

    w = csv.writer(out, lineterminator="\n")
    w.writerow(("by",) + COLUMNS)
    for g, table in tables.items():
        for row in table.itertuples(index=False):
            w.writerow([g] + [cell(v) for v in row])
