"""pyprof from Python and notebooks, as the command line does it (docs/api.md).

``with pyprof.profile() as p:`` around your own loop runs it under ``pyprof.init()`` and torch.profiler on a
wait/warmup/active schedule that ``pyprof.step()`` advances (``pyprof run``'s machinery,
:mod:`pyprof.runner`); on leaving, the trace is parsed into records, and :class:`Profile` gives prof's table
and summaries as DataFrames, the HTML report, the advice, a folder ``pyprof prof DIR`` reads, a Perfetto
trace, and an HTML view in Jupyter. :func:`parse`, :func:`prof`, :func:`diff`, :func:`report` and
:func:`export` are the commands of the same names on any input they take (:mod:`pyprof.cli.inputs`: a
record file, a ``pyprof run`` folder, Parquet, or an export or trace, parsed first). Warnings are not
printed: DataFrames carry them in ``attrs["warnings"]``, a :class:`Profile` in ``warnings``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pyprof.errors import UsageError

SUMMARIES = ("op", "layer", "kernel", "dir", "step")


def _summary(df, by: str):
    """``pyprof prof --summary BY``'s table of prof's table ``df`` (raw numbers), its warnings kept."""
    from pyprof.prof import steps
    from pyprof.prof.summary import SUMMARY_NAMES, summarize

    if by not in SUMMARIES:
        raise UsageError(f"unknown summary {by!r}", f"use one of {', '.join(SUMMARIES)}")
    out = steps.summary(df) if by == "step" else summarize(df, by)[list(SUMMARY_NAMES)]
    out.attrs = {"warnings": list(df.attrs.get("warnings", [])), "steps": df.attrs.get("steps")}
    return out


def _said() -> tuple[list[str], Any]:
    """A list and the ``say`` that collects the lines the CLI would print (warnings, less the prefix)."""
    lines: list[str] = []
    return lines, lambda line: lines.append(line.removeprefix("pyprof: warning: ").removeprefix("pyprof: "))


def prof(path: str | os.PathLike, by: str | None = None, gpu: str | None = None,
         peak_flops: float | None = None, peak_bw: float | None = None):
    """prof's per-kernel table of ``path`` (``pyprof prof``: FLOPs, bytes, gap... docs/prof.md), or with
    ``by`` its summary (``--summary op|layer|kernel|dir|step``: the median per step, with the spread)."""
    from pyprof.cli import inputs

    lines, say = _said()
    df = inputs.table(os.fspath(path), say, gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw, workers=1)
    df.attrs["warnings"] = lines + list(df.attrs.get("warnings", []))
    return df if by is None else _summary(df, by)


def parse(path: str | os.PathLike, out: str | os.PathLike):
    """``pyprof parse PATH -o OUT``: the export's records written to ``out`` (all or nothing); returns the
    :class:`pyprof.parse.run.Result` (``written`` records, ``kernels``, ``warnings``...)."""
    from pyprof.parse.run import parse_file

    return parse_file(os.fspath(path), os.fspath(out))


def diff(a: str | os.PathLike, b: str | os.PathLike, by: str = "op,layer,kernel", threshold: float = 10.0,
         ignore_load: bool = False):
    """``pyprof diff A B --csv``: one row per group and grouping (column ``by`` first; times per step, the
    change, its p and verdict: :mod:`pyprof.report.diff`); ``attrs["verdict"]`` is the outcome
    (``regression``, ``inconclusive``, ``no regression``) and ``attrs["why"]`` its reasons. A side that ran
    under load makes it inconclusive unless ``ignore_load``."""
    import pandas as pd

    from pyprof.cli import inputs
    from pyprof.report import diff as diff_mod

    lines, say = _said()
    groups = diff_mod.by_groups(by)
    pa, pb = (inputs.profile(os.fspath(x), say) for x in (a, b))
    tables, _, outcome = diff_mod.compared(pa, pb, groups, threshold, diff_mod.MIN_SHARE, ignore_load)
    out = pd.concat([t.assign(by=g)[["by", *diff_mod.COLUMNS]] for g, t in tables.items()], ignore_index=True)
    out.attrs = {"verdict": outcome.kind, "why": list(outcome.why or outcome.regressions),
                 "warnings": lines + pa.warnings + [w for w in pb.warnings if w not in pa.warnings]}
    return out


def _advised(p, records: str):
    from pyprof.cli.advise_cmd import advice_for

    return advice_for(p, records, _said()[1])


def report(path: str | os.PathLike, out: str | os.PathLike = "report.html", gpu: str | None = None,
           peak_flops: float | None = None, peak_bw: float | None = None) -> Path:
    """``pyprof report PATH -o OUT``: the one-file HTML report (the ``report`` extra); returns its path."""
    from pyprof.cli import inputs
    from pyprof.report import page, require_plotly

    require_plotly()
    p = inputs.profile(os.fspath(path), _said()[1], gpu=gpu, peak_flops=peak_flops, peak_bw=peak_bw)
    page.write(p, os.fspath(out), advised=_advised(p, os.fspath(path)))
    return Path(out)


def export(path: str | os.PathLike, out: str | os.PathLike) -> Path:
    """``pyprof export --perfetto OUT PATH``: a trace for ui.perfetto.dev and chrome://tracing whose kernel
    events carry pyprof's columns (:mod:`pyprof.report.perfetto`); returns its path."""
    from pyprof.cli import inputs
    from pyprof.report import perfetto

    perfetto.write(inputs.profile(os.fspath(path), _said()[1]), os.fspath(out))
    return Path(out)


class Profile:
    """What ran inside ``with pyprof.profile(...) as p:`` (see the module docstring). ``out``: the folder
    for trace.json, records.dict and env.json (as ``pyprof run -o``; None: a temporary one, removed with
    this object: :meth:`save` keeps it); ``wait``/``warmup``/``active``/``steps_from``: ``pyprof run``'s
    schedule options; ``init``: ``pyprof.init()`` for the block (undone after); ``record_shapes``,
    ``with_stack``: torch.profiler's; ``cuda``: trace CUDA too (None: where it is available)."""

    def __init__(self, out: str | os.PathLike | None = None, *, wait: int = 1, warmup: int = 1, active: int = 5,
                 steps_from: str = "auto", init: bool = True, record_shapes: bool = True, with_stack: bool = False,
                 cuda: bool | None = None):
        from pyprof.runner import RunOptions, _check

        self.opts = RunOptions(wait=wait, warmup=warmup, active=active, step_on=steps_from, init=init,
                               record_shapes=record_shapes, with_stack=with_stack, cuda=cuda)
        _check(self.opts)
        self._out = out
        self.folder: Path | None = None
        self.steps = 0
        self._done: list[Any] = []
        self._profile = None

    # -- the profiled block ------------------------------------------------------------------------------
    def __enter__(self) -> Profile:
        import shutil
        import tempfile
        import weakref

        from pyprof.runner import Session, _fresh_output

        if self._out is None:
            self.folder = Path(tempfile.mkdtemp(prefix="pyprof-"))
            weakref.finalize(self, shutil.rmtree, str(self.folder), True)
        else:
            self.folder = _fresh_output(self._out)
        self._session = Session(self.opts, self.folder / "trace.json")
        self._session.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        session = self._session
        session.stop(flush=exc_type is None)
        self.steps = session.stepper.steps
        self._done = session.written
        self._conditions = session.stepper.conditions.result(session.device)
        if exc_type is None and self.folder is not None:  # (an exception in the block goes on as it was)
            self._finish(self.folder)

    def _finish(self, folder: Path) -> None:
        """The trace parsed into ``records.dict`` (with its header: steps, peaks) and ``env.json`` written."""
        import orjson

        from pyprof.atomic import atomic_output
        from pyprof.runner import run_env

        if not self._done:
            o = self.opts
            raise UsageError(f"the block marked {self.steps} iteration(s), fewer than wait + warmup + 1 = "
                             f"{o.wait + o.warmup + 1}, so nothing was recorded",
                             "call pyprof.step() once per iteration, run more, or lower wait/warmup")
        with atomic_output(folder / "env.json", "wb") as fh:
            fh.write(orjson.dumps(run_env(), option=orjson.OPT_INDENT_2))
        from pyprof.calibrate import write_run_records
        from pyprof.parse.kineto import KinetoSource

        source = KinetoSource(folder / "trace.json")
        lines, say = _said()
        write_run_records(source, list(source.records()), folder / "records.dict", self._conditions, True, say)
        self._said_lines = [*source.warnings, *lines]  # (what pyprof run says of its trace and peaks)

    # -- what it recorded ---------------------------------------------------------------------------------
    def _records(self) -> str:
        if self.folder is None or not (self.folder / "records.dict").is_file():
            raise UsageError("nothing profiled yet", "run your loop inside `with pyprof.profile() as p:` first")
        return str(self.folder / "records.dict")

    @property
    def profile(self):
        """The :class:`pyprof.report.profile.Profile` of the records (records and prof's table)."""
        if self._profile is None:
            from pyprof.cli import inputs

            lines, say = _said()
            self._profile = inputs.profile(self._records(), say)
            self._profile.df.attrs["said"] = [*getattr(self, "_said_lines", []), *lines]
        return self._profile

    @property
    def warnings(self) -> list[str]:
        """What ``pyprof prof`` would print on stderr about these records."""
        return [*self.profile.df.attrs.get("said", []), *self.profile.warnings]

    @property
    def table(self):
        """prof's per-kernel table (``pyprof prof``'s columns, raw numbers)."""
        return self.profile.df

    def summary(self, by: str = "op"):
        """``pyprof prof --summary BY``: one row per op, layer, kernel or dir (time per step: the median over
        the profiled steps, spread, calls, kernels, FLOPs, bytes, gap, bound), or per step."""
        return _summary(self.table, by)

    def advise(self):
        """``pyprof advise``: one row per suggested change, largest estimated saving per step first."""
        import pandas as pd

        from pyprof import advise as adv

        return pd.DataFrame(adv.as_json(_advised(self.profile, self._records())))

    def report(self, path: str | os.PathLike = "report.html") -> Path:
        """The HTML report (``pyprof report``; the ``report`` extra)."""
        return report(self._records(), path)

    def export(self, path: str | os.PathLike) -> Path:
        """A Perfetto / chrome://tracing trace with pyprof's columns (``pyprof export --perfetto``)."""
        return export(self._records(), path)

    def save(self, folder: str | os.PathLike) -> Path:
        """Copy trace.json, records.dict and env.json into ``folder`` (made; one already holding a run's
        records is refused): a folder ``pyprof prof DIR``, ``report`` and ``diff`` read."""
        import shutil

        records = Path(self._records())
        dest = Path(folder)
        if (dest / "records.dict").exists():
            raise UsageError(f"{dest} already holds a run's records", "give a new folder (nothing is overwritten)")
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("trace.json", "env.json", "records.dict"):  # the records last: their presence says done
            shutil.copyfile(records.with_name(name), dest / name)
        return dest

    def _repr_html_(self) -> str:
        """Jupyter's view: what was profiled, the summary per op and per step as ``pyprof prof`` prints
        them, and the warnings."""
        import html
        import io

        from pyprof.prof import summary_text

        if self._profile is None and (self.folder is None or not (self.folder / "records.dict").is_file()):
            return "<p>pyprof: nothing profiled yet</p>"
        buf = io.StringIO()
        summary_text.write(self.table, "op", buf, "aligned", 0, 10)
        summary_text.write(self.table, "step", buf, "aligned", 0)
        warn = "".join(f"<li>{html.escape(w)}</li>" for w in self.warnings)
        return (f"<div><b>pyprof</b>: {self.steps} steps marked, {len(self.table)} kernels; records in "
                f"<code>{html.escape(str(self.folder))}</code><pre>{html.escape(buf.getvalue())}</pre>"
                + (f"<ul>{warn}</ul>" if warn else "") + "</div>")
