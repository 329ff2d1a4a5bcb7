"""``pyprof calibrate``: measure and save this machine's peak FLOP/s per dtype and memory bandwidth."""

from __future__ import annotations

import click

HELP = """Measure achievable peaks (GEMM FLOP/s per dtype, copy bandwidth) and save them for `pyprof prof`.

\b
On the GPU when torch sees one, else on the CPU (all intra-op threads). float32, bfloat16 and
float16 GEMMs where the device runs them natively; bandwidth from a large copy (read + write).
Saved to --output, else $PYPROF_CALIBRATION, else ~/.cache/pyprof/calibration.json, under the
GPU's name or 'cpu'; prof uses them for CPU ops and for GPUs its peak table does not list.
--budget is the most time per measurement (default 1 s): each stops sooner once its best
3 runs agree within 5%. On the CPU also the latency floor (one op's dispatch: no op is priced
below it) and the copy bandwidth of cache-sized working sets (an op whose data fits a cache is
priced against that level's bandwidth). A peak is a best: a figure measured lower than the saved
one (a busy machine) never replaces it; the saved one is kept, and said (--replace overrides; a
new thread count or torch replaces the entry). The file also records when and how the figures
were taken (torch version, threads, load on the machine, spread of the runs); `pyprof run` warns
when saved peaks are over 30 days old, were taken under load or unstable, or used another thread
count. Record files keep the peaks they were priced with: `pyprof prof --reprice` uses these.

\b
Examples:
  pyprof calibrate                      measure and save
  pyprof calibrate --no-save            print only
  pyprof calibrate --device cpu --budget 0.2 --size 1024
"""


@click.command("calibrate", help=HELP, context_settings={"max_content_width": 110})
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--size", type=click.IntRange(min=64, max=32768), default=None, metavar="N",
              help="GEMM size n (n x n matrices; default 2048 on CPU, 8192 on GPU).")
@click.option("--copy-mb", type=click.IntRange(min=1, max=65536), default=None, metavar="MB",
              help="Copy buffer size in MiB (default 256 on CPU, 1024 on GPU).")
@click.option("--budget", type=click.FloatRange(min=0.01, max=10.0), default=1.0, show_default=True, metavar="S",
              help="Most seconds of timed repetitions per measurement.")
@click.option("--dtype", "dtypes", multiple=True, type=click.Choice(["float32", "bfloat16", "float16"]),
              help="Dtypes to measure (repeatable; default all three).")
@click.option("--repeat", type=click.IntRange(min=1, max=20), default=2, show_default=True, metavar="N",
              help="Measure N times and keep each figure's best.")
@click.option("-o", "--output", type=click.Path(), default=None, help="Calibration file to update.")
@click.option("--no-save", is_flag=True, help="Print the figures without saving them.")
@click.option("--replace", is_flag=True, help="Replace the saved figures even where they are better than these "
                                               "(after a hardware or BIOS change).")
def calibrate(device, size, copy_mb, budget, dtypes, repeat, output, no_save, replace):
    from pyprof import calibrate as cal_mod
    from pyprof.prof.units import byte_rate, duration

    dts = tuple(dtypes) if dtypes else cal_mod.DTYPES
    if "float32" not in dts and len(dts) > 0:
        dts = ("float32", *dts)  # the reference the others are judged against
    cal = cal_mod.measure(None if device == "auto" else device, size, copy_mb, budget, dts)
    for _ in range(repeat - 1):
        cal = cal.best_of(cal_mod.measure(None if device == "auto" else device, size, copy_mb, budget, dts))
    click.echo(f"pyprof calibrate: {cal.description} ({cal.seconds:.1f} s, best of {repeat})")
    for name, rate in cal.flops.items():
        click.echo(f"  GEMM {name:<9} {rate / 1e12:10.4f} TFLOP/s")
    for name, why in cal.skipped.items():
        click.echo(f"  GEMM {name:<9}        n/a  ({why})")
    click.echo(f"  copy bandwidth {cal.bw / 1e9:10.2f} GB/s" if cal.bw else "  copy bandwidth n/a")
    for moved, rate in cal.bw_levels:
        click.echo(f"    working sets to {moved / 2**20:g} MiB: {byte_rate(rate)}")
    if cal.floor:
        click.echo(f"  latency floor {duration(cal.floor)} (one op's dispatch: no op is priced below it)")
    click.echo(f"  taken with {_conditions(cal)}")
    found = cal_mod.condition_problems(cal.conditions())
    if found:
        click.echo(f"pyprof: warning: these figures may be off: {'; '.join(found)}; close other work and run "
                   "`pyprof calibrate` again (saved figures are only ever improved on)", err=True)
    if no_save:
        return
    path, kept = cal_mod.save(cal, output, replace=replace)
    click.echo(f"saved to {path} as {cal.device!r}" + (f"; kept the saved {', '.join(kept)}, better than these "
                                                        "(--replace replaces them)" if kept else ""))


def _conditions(cal) -> str:
    """``torch 2.13.0, 8 threads; other processes used 2% of 8 CPUs (load average 0.31); best runs spread up to 1.2%``."""
    load = cal.load
    parts = [f"torch {cal.torch}" + (f", {cal.threads} threads" if cal.threads else "")]
    busy, cpus, avg = load.get("busy_others"), load.get("cpus"), load.get("loadavg")
    avg_text = f"load average {avg[0]:.2f}" if avg else "load average n/a"
    if busy is not None:
        parts.append(f"other processes used {busy:.0%} of {cpus} CPUs ({avg_text})")
    else:
        parts.append(f"{avg_text} on {cpus} CPUs")
    if cal.spread:
        parts.append(f"best runs spread up to {max(cal.spread.values()):.1%}")
    return "; ".join(parts)
