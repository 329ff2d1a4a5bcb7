"""``pyprof run``: profile a script with torch.profiler and pyprof markers, then parse, prof and summarise.

Thin: options in, :mod:`pyprof.runner` / :mod:`pyprof.parse.kineto` / :mod:`pyprof.prof` /
:mod:`pyprof.cpu_findings` out (what it writes: :data:`HELP`).

Unlike ``parse`` and ``prof``, ``run`` does not own its process (:mod:`pyprof.process`): the user's
script has just run in it, with its threads (intra-op pools, CUDA, DataLoader workers), and a forked
child could deadlock on a lock one of them held. So the trace is parsed and the table built and printed
in this process, on one core, and must not fork or pause the garbage collector
(``tests/test_process_policy.py``).
"""

from __future__ import annotations

import sys

import click

from pyprof.cli import terminal_width
from pyprof.terminal import shown

HELP = """Run SCRIPT (with its ARGS) under torch.profiler with pyprof.init(), then parse, prof and summarise.

\b
Examples:
  pyprof run examples/lenet.py                 CPU or GPU, results in ./pyprof-out/ (later: -2, -3...)
  pyprof run -o out --active 5 train.py --epochs 1
  pyprof run --steps-from all script.py        profile everything, even a script with iterations
  pyprof run examples/lenet.py --report        also write pyprof-out/report.html
  pyprof run --try train.py                    then time each advised change (pyprof advise --try)

\b
The script runs in this process (runpy) as __main__ with sys.argv = [SCRIPT, *ARGS].
Iterations are counted at pyprof.step() calls, else at optimizer.step(), else at backward()
calls; the profiler skips --wait steps, warms up --warmup steps and records --active steps.
A script with none of these is profiled whole, first calls included (one line says so).
Output in DIR: trace.json (chrome trace), records.dict (kernel records, for
`pyprof prof DIR/records.dict`), env.json (threads). Without -o, DIR is ./pyprof-out, or where
that holds an earlier run the first of ./pyprof-out-2, -3... that holds none: no run overwrites
another unless -o names its folder. A CPU-only run treats every CPU op's
self time as its kernel.

\b
A failing script: its traceback is printed as Python prints it, nothing is parsed, and
pyprof exits with status 1 (sys.exit(n) exits 1 too; sys.exit(0) is a success).
pyprof's own errors (bad options, no step recorded) are one line, exit status 2.
"""


@click.command("run", help=HELP, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False,
                                                   "max_content_width": 110})
@click.argument("script", type=click.Path(dir_okay=False), required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-o", "--output", "out_dir", default=None, metavar="DIR",
              help="Folder for trace.json, records.dict and env.json (replaced where it holds a run).  "
                   "[default: ./pyprof-out, or the first of ./pyprof-out-2, -3... not holding a run]")
@click.option("--wait", type=click.IntRange(min=0), default=1, show_default=True, help="Steps skipped first.")
@click.option("--warmup", type=click.IntRange(min=0), default=1, show_default=True, help="Steps traced but dropped.")
@click.option("--active", type=click.IntRange(min=1), default=5, show_default=True,
              help="Steps recorded (5 or more a side let `pyprof diff` show a change).")
@click.option("--steps-from", "step_on", type=click.Choice(["auto", "pyprof", "optimizer", "all"]), default="auto",
              show_default=True, help="What marks an iteration; 'all' profiles the whole script without a schedule.")
@click.option("--no-init", is_flag=True, help="Do not call pyprof.init() (aten-level ops only).")
@click.option("--with-stack", is_flag=True, help="Record Python stacks (call sites without pyprof markers; slower).")
@click.option("--no-shapes", is_flag=True, help="Do not record input shapes (no FLOPs for aten-only ops).")
@click.option("--summary", "by", type=click.Choice(["op", "layer", "kernel", "dir", "step"]), default="op",
              show_default=True, help="How the printed summary groups kernels (the steps are listed after it).")
@click.option("--top", type=click.IntRange(min=1), default=10, show_default=True, help="Summary rows printed.")
@click.option("--peak-flops", type=float, metavar="FLOP/S", help="Peak FLOP/s for the roofline (else calibration/table).")
@click.option("--peak-bw", type=float, metavar="BYTES/S", help="Peak bandwidth for the roofline.")
@click.option("--no-calibrate", is_flag=True,
              help="Do not measure the CPU's peaks when none are saved (ideal time and gap then show n/a).")
@click.option("-w", "width", type=click.IntRange(min=0), default=None, metavar="WIDTH",
              help="Summary lines within WIDTH characters (default: the terminal's width; piped: no limit).")
@click.option("--try", "try_", is_flag=True,
              help="Then advise, and time each advised change that can be made without editing the script, "
                   "on the script run unprofiled with and without it (as `pyprof advise --try`); the advice "
                   "with its measured savings is printed and kept in DIR/advice.json.")
@click.option("--try-budget", type=click.FloatRange(min=1), default=300, show_default=True, metavar="SECONDS",
              help="--try: seconds of trials in all, shared among the changes.")
@click.option("--report", is_flag=False, flag_value="", default=None, metavar="[PATH.html]",
              help="Also write the HTML report (`pyprof report`; default DIR/report.html). May also come last, "
                   "after the script's arguments: pyprof run train.py --report.")
def run(script, args, out_dir, wait, warmup, active, step_on, no_init, with_stack, no_shapes, by, top,
        peak_flops, peak_bw, no_calibrate, width, try_, try_budget, report):
    import time
    from pathlib import Path

    import orjson

    from pyprof.atomic import atomic_output
    from pyprof.calibrate import write_run_records
    from pyprof.cpu_findings import findings, format_findings
    from pyprof.parse.kineto import KinetoSource
    from pyprof.prof import noise
    from pyprof.records import header
    from pyprof.runner import RunOptions, run_script

    script, args, report = _report_option(script, args, report)
    if report is not None:  # before the script runs: a missing extra fails fast
        from pyprof.report import require_plotly

        require_plotly()
    opts = RunOptions(wait=wait, warmup=warmup, active=active, step_on=step_on, init=not no_init,
                      record_shapes=not no_shapes, with_stack=with_stack)
    if out_dir is None:
        from pyprof.runner import DEFAULT_OUT, new_run_folder

        out_dir = new_run_folder()
        if out_dir.name != DEFAULT_OUT:
            click.echo(f"pyprof: ./{DEFAULT_OUT} holds an earlier run: this run writes ./{out_dir} "
                       "(-o DIR chooses)", err=True)
    result = run_script(script, list(args), out_dir, opts)
    out = Path(out_dir)
    with atomic_output(out / "env.json", "wb") as fh:
        fh.write(orjson.dumps(result.env, option=orjson.OPT_INDENT_2))

    t_parse = time.perf_counter()
    source = KinetoSource(result.trace)
    records = list(source.records())
    t_parse = time.perf_counter() - t_parse
    say = lambda line: click.echo(shown(line), err=True)  # noqa: E731
    calibrate = not (no_calibrate or peak_flops or peak_bw)
    facts = write_run_records(source, records, out / "records.dict", result.conditions, calibrate, say)
    for line in source.warnings:
        click.echo(shown(f"pyprof: warning: {line}"), err=True)
    mode = "GPU kernels" if source.gpu_mode else "CPU ops (self time)"
    for line in result.notes:
        say(f"pyprof: {line}")
    steps = "whole script" if result.whole else f"{result.steps} steps counted at {result.step_source}"
    click.echo(f"pyprof: {steps}; {source.n_events} trace events -> "
               f"{len(records)} {mode}; wrote {out / 'trace.json'}, {out / 'records.dict'}")
    t_prof = time.perf_counter()
    df = _summary(records, header("kineto", facts), by, top, peak_flops, peak_bw, width)
    if not source.gpu_mode or any(r.get("device") is None for r in records):
        cpu = [r for r in records if r.get("device") is None]
        sys.stdout.write("\n" + format_findings(findings(cpu, result.env)))
    t_prof = time.perf_counter() - t_prof
    sys.stdout.flush()
    if report is not None or try_:  # the report's advice, and the one --try times
        from pyprof.cli.advise_cmd import advice_for
        from pyprof.report import profile

        name = str(out / "records.dict")
        p = profile.from_records(records, name=name, peak_flops=peak_flops, peak_bw=peak_bw, env=result.env, df=df)
        advice = advice_for(p, name, say)
    if report is not None:
        from pyprof.prof.units import nbytes
        from pyprof.report import page

        path = report or str(out / "report.html")
        click.echo(f"pyprof: wrote {path} ({nbytes(page.write(p, path, advised=advice))})", err=True)
    click.echo("\n" + timing_line(result.times, t_parse, t_prof))
    line = noise.warning(noise.problems(df))
    if line:
        say(f"pyprof: warning: {line}")
    if try_:  # each advised change timed on the unprofiled script
        from pyprof import advise as adv
        from pyprof.cli.advise_cmd import tried_advice

        tried_advice(p, advice, script, list(args), try_budget, out, say)
        click.echo("\n" + adv.format_text(advice), nl=False)


def timing_line(times: dict, parse: float, prof: float) -> str:
    """``pyprof run``'s last line: where the time went (wall seconds), against the script's own run time."""
    def s(x: float) -> str:
        return f"{x:.0f}" if x >= 10 else f"{x:.1f}" if x >= 0.1 else f"{x:.2g}"

    return (f"pyprof run: script {s(times['script'])} s, profiled steps {s(times['profiled'])} s, "
            f"trace export {s(times['export'])} s, parse {s(parse)} s, prof {s(prof)} s")


def _report_option(script, args, report):
    """``(script, args, report)`` with ``--report`` read where a user puts it: before SCRIPT (``--report
    PATH.html``, ``--report=PATH``, or bare, where click took SCRIPT for its value: a value not ending in
    .html is the script) or last, after the script's arguments (``--report``, ``--report=PATH``,
    ``--report PATH.html``). ``report``: None (no report), "" (the default path) or a path."""
    from pyprof.errors import UsageError

    html = (".html", ".htm")
    args = list(args)
    if report and not report.lower().endswith(html):
        args = ([script] if script is not None else []) + args
        script, report = report, ""
    if args and args[-1] == "--report":
        args.pop()
        report = report or ""
    elif args and args[-1].startswith("--report="):
        report = args.pop().split("=", 1)[1]
    elif len(args) >= 2 and args[-2] == "--report" and args[-1].lower().endswith(html):
        report = args.pop()
        args.pop()
    if script is None:
        raise UsageError("no SCRIPT given", "pyprof run [OPTIONS] SCRIPT [ARGS]..., e.g. pyprof run train.py")
    return script, tuple(args), report


def _summary(records, head, by, top, peak_flops, peak_bw, width=None):
    """The prof summary (per ``by``, ``top`` rows, the fix-this-first list), then the steps, on stdout in
    human units within ``width`` characters (None: the terminal's); returns prof's table."""
    from pyprof.prof import summary_text
    from pyprof.prof.table import build

    width = terminal_width() if width is None else width
    df = build(records, peak_flops=peak_flops, peak_bw=peak_bw, header=head)
    for line in df.attrs.get("warnings", []):
        click.echo(shown(f"pyprof: warning: {line}"), err=True)
    summary_text.write(df, by, sys.stdout, "aligned", width, top, first_rows=min(top, 5))
    if by != "step":
        summary_text.write(df, "step", sys.stdout, "aligned", width)
    return df
