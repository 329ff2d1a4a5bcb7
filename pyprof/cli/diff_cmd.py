"""``pyprof diff``: two records files side by side per op, layer and kernel, with deltas; a CI gate with
``--fail-above``. Thin: options in, :mod:`pyprof.report.diff` out."""

from __future__ import annotations

import sys

import click

from pyprof import terminal
from pyprof.cli import stderr_say, terminal_width

HELP = """Compare records file B with A (the baseline): per op, layer and kernel, the time per step of
each side, the change, and whether the steps show it. A and B: record files, .parquet files, dataset
folders or `pyprof run` folders; an export or trace is parsed first.

\b
Examples:
  pyprof diff old/ new/                            two `pyprof run` folders
  pyprof diff -w 120 --by op --top 20 a.dict b.dict
  pyprof diff --csv a.dict b.dict > diff.csv
  pyprof diff --fail-above 10 main/ branch/        a CI gate: exit 1 on a shown regression

\b
The step is the sample: each side gives each op, layer and kernel one time per profiled step.
A change is the median of B's steps over A's; p is a one-sided Mann-Whitney U test of the steps
(the chance that they would be so ordered without a change). Verdict: slower/faster when the
change exceeds the threshold (--fail-above, else 10%) and p < 0.01; unclear when it exceeds it but
the steps do not show it (too few steps, too much spread); same within it; new/gone.
--fail-above PCT: exit 1 when the total time per step, or an op, layer or kernel holding at least
--min-share percent of a side's step, is slower by more than PCT percent and shown (each named on
stderr); exit 3 (inconclusive) when a side ran under load (other processes took over a quarter of
the CPUs while its steps ran: pyprof run measures it; --ignore-load judges anyway) or a change
above PCT could not be tested (fewer than 5 steps a side: pyprof run --active 5); else 0.
--per-sample: times per sample, each side's step divided by its batch size (pyprof run records it),
to compare runs of different batch sizes. pyprof's own errors exit 2.
Tables print human units (aligned to the terminal, or -w WIDTH); --csv and --json print raw
numbers (ns, TFLOP/s in the tflops columns, p).
"""

DROP = (("tflops_a", "tflops_b"), ("gap_a", "gap_b"), ("shapes",), ("time_a",), ("p",), ("delta_pct",))


@click.command("diff", help=HELP, context_settings={"max_content_width": 110})
@click.argument("a", type=click.Path(dir_okay=True))
@click.argument("b", type=click.Path(dir_okay=True))
@click.option("--by", "by", default="op,layer,kernel", show_default=True, metavar="LIST",
              help="Groupings compared, comma-separated: op, layer, kernel.")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, metavar="N",
              help="Rows per table (human output; --csv and --json print every row).")
@click.option("-w", "width", type=click.IntRange(min=0), default=None, metavar="WIDTH",
              help="Every line within WIDTH characters (default: the terminal's width; 0 and piped: no limit).")
@click.option("--csv", "as_csv", is_flag=True, help="CSV, raw numbers, one row per group (column `by` first).")
@click.option("--json", "as_json", is_flag=True, help="JSON lines, raw numbers (null = unknown or absent).")
@click.option("--fail-above", type=click.FloatRange(min=0), metavar="PCT",
              help="Exit 1 on a regression beyond PCT percent that the steps show, 3 when inconclusive (see above).")
@click.option("--min-share", type=click.FloatRange(min=0, max=100), default=1.0, show_default=True, metavar="PCT",
              help="Groups under this share of both sides' step are not judged.")
@click.option("--ignore-load", is_flag=True, help="Judge even where a side ran under load.")
@click.option("--per-sample", is_flag=True, help="Compare time per sample (each side's batch size, as pyprof run saw it).")
@click.option("--gpu", metavar="NAME", help="GPU of every record (a name the peak table matches).")
@click.option("--peak-flops", type=float, metavar="FLOP/S", help="Peak FLOP/s for every dtype.")
@click.option("--peak-bw", type=float, metavar="BYTES/S", help="Peak memory bandwidth in bytes/s.")
def diff(a, b, by, top, width, as_csv, as_json, fail_above, min_share, ignore_load, per_sample, gpu, peak_flops,
         peak_bw):
    from pyprof.cli import inputs
    from pyprof.errors import UsageError
    from pyprof.prof import noise
    from pyprof.report.diff import by_groups, compared

    if as_csv and as_json:
        raise UsageError("--csv and --json are exclusive", "choose one output style")
    groupings = by_groups(by)
    say = stderr_say()
    pa = inputs.profile(a, say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw)
    pb = inputs.profile(b, say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw)
    batches = (_batch(pa.df, a), _batch(pb.df, b)) if per_sample else (1.0, 1.0)
    pct = 10.0 if fail_above is None else fail_above
    for name, p in (("A", pa), ("B", pb)):
        line = noise.warning(noise.problems(p.df), f"{name} ({p.name})")
        if line:
            say(f"pyprof: warning: {line}")
    tables, tot, outcome = compared(pa, pb, groupings, pct, min_share, ignore_load, batches)
    out = sys.stdout
    if as_csv or as_json:
        _raw(tables, out, as_json)
    else:
        _human(tables, tot, out, terminal_width() if width is None else width, top, a, b, per_sample)
        out.write(f"\n{_outcome_line(outcome, pct, groupings)}\n")
    out.flush()
    if fail_above is not None:
        for line in outcome.regressions:
            click.echo(terminal.shown(f"pyprof: regression beyond {fail_above:g}%: {line}"), err=True)
        if outcome.kind == "inconclusive":
            click.echo(terminal.shown(f"pyprof: inconclusive: {'; '.join(outcome.why)}"), err=True)
        sys.exit(outcome.exit_code)


def _batch(df, name) -> float:
    """The batch size ``pyprof run`` saw for the records of ``name`` (``--per-sample``)."""
    from pyprof.errors import UsageError

    batch = ((df.attrs.get("header") or {}).get("conditions") or {}).get("batch")
    if not isinstance(batch, int) or batch <= 0:
        raise UsageError(f"--per-sample: {name} records no batch size",
                         "profile it with pyprof run (which records the batch size where it sees one), or drop --per-sample")
    return float(batch)


def _human(tables, tot, out, width, top, a, b, per_sample) -> None:
    from pyprof.prof import render, units
    from pyprof.report.diff import HUMAN

    unit = "per sample" if per_sample else "per step"
    out.write(f"A: {a} ({_steps(tot.steps_a)})\nB: {b} ({_steps(tot.steps_b)})\n"
              f"total time {unit}: {units.duration(tot.time_a)} -> {units.duration(tot.time_b)} "
              f"({units.FORMATS['+pct'](tot.delta_pct)}, p={units.number(tot.p)})\n")
    for g, table in tables.items():
        shown = table.head(top)
        out.write("\n" + render.fit_line(f"By {g} (top {len(shown)} of {len(table)}, largest change first; "
                                          f"times {unit})", width) + "\n")
        cols = [render.human_column(shown[n], k, scale) if k != "str" else [str(v) if v else "" for v in shown[n]]
                for n, _, k, scale in HUMAN]
        heads = [g.capitalize() if n == "key" else h for n, h, _, _ in HUMAN]
        names = [n for n, _, _, _ in HUMAN]
        render.write_aligned(cols, heads, [k != "str" for _, _, k, _ in HUMAN], out, width,
                             drop=[tuple(names.index(n) for n in group) for group in DROP])


def _outcome_line(outcome, pct: float, groupings) -> str:
    if outcome.kind == "inconclusive":
        return f"verdict: inconclusive: {'; '.join(outcome.why)}"
    if outcome.kind == "regression":
        return f"verdict: regression beyond {pct:g}%: {'; '.join(outcome.regressions)}"
    return f"verdict: no regression beyond {pct:g}% that the steps show ({', '.join(groupings)} and the total)"


def _steps(n: int) -> str:
    """How many steps a side holds."""
    return f"{n} step{'s' if n != 1 else ''}"


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
