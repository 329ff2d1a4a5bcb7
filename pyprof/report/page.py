"""The report page: one self-contained HTML file (plotly.js, styles and scripts inlined; nothing is
fetched, so it opens offline and as a CI artifact), at most :data:`MAX_BYTES`.

Its sections are those of :data:`NAV`, in that order; the tables sort (click a header) and filter (type
in the box). Every chart's data comes from its module (:mod:`pyprof.report`); this module only lays it out.
"""

from __future__ import annotations

import html
import math
import sys
from importlib import resources
from typing import Any

import orjson
import pandas as pd

from pyprof.atomic import atomic_output
from pyprof.cpu_findings import findings, format_findings
from pyprof.errors import OutputError
from pyprof.prof import units
from pyprof.prof.summary import summarize
from pyprof.report import breakdown as breakdown_mod
from pyprof.report import diff as diff_mod
from pyprof.report import figures, layers, roofline, shapes, tables, timeline
from pyprof.report.profile import Profile
from pyprof.version import __version__

MAX_BYTES = 8 * 1024 * 1024
SHAPE_ROWS = 300
#: the navigation bar's link to each section, in page order (collectives, advice and baseline: where shown)
NAV = {"overview": "Overview", "fix-first": "Fix first", "roofline": "Roofline", "layers": "Layers",
       "timeline": "Step", "tables": "Tables", "shapes": "Shapes", "collectives": "Collectives",
       "advice": "Advice", "baseline": "Baseline", "findings": "Findings"}


def plotly_js() -> str:
    """plotly.js as shipped inside the Plotly Python package (no network)."""
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _asset(name: str) -> str:
    return resources.files("pyprof.report").joinpath(name).read_text(encoding="utf-8")


def _e(text: Any) -> str:
    return html.escape("" if text is None else str(text))


def _figures_json(figs: dict[str, Any]) -> str:
    """The figures by element id as one JSON object (Plotly's own encoder: numpy arrays, NaN), safe inside
    ``<script type="application/json">``: no ``</`` can close the element."""
    body = ",".join(f"{orjson.dumps(k).decode()}:{f.to_json(validate=False)}" for k, f in figs.items())
    return ("{" + body + "}").replace("</", "<\\/")


# -- tables ------------------------------------------------------------------------------------------


#: characters of one text cell shown on the page (the arguments of a torch.cat of 4,000 tensors, a 100 MB
#: marker): longer text is cut, with a mark. :func:`write` lowers it when the page would pass MAX_BYTES.
CELL_CHARS = [2000]


def _cut(text: str) -> str:
    limit = CELL_CHARS[0]
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def _cells(values: list, kind: str, scale: float) -> tuple[list[str], list[str]]:
    """(display text, raw value for sorting) of a column."""
    if kind == "str":
        text = ["-" if v is None or (isinstance(v, float) and math.isnan(v)) or v == "" else _cut(str(v))
                for v in values]
        return text, text
    if kind == "int":
        text = ["-" if v is None or (isinstance(v, float) and math.isnan(v)) else str(int(v)) for v in values]
        return text, text
    raw = [None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) * scale for v in values]
    return units.column(raw, kind), ["" if v is None else repr(v) for v in raw]


def table_html(df: pd.DataFrame, columns, table_id: str, max_rows: int = tables.MAX_ROWS,
               filterable: bool = True) -> str:
    """``df`` as a sortable (and filterable) HTML table; ``columns``: (name, header, kind, scale)
    where kind is ``str``, ``int`` or a :mod:`pyprof.prof.units` kind. Rows past ``max_rows`` are left
    out, and a line says how many."""
    shown = df.head(max_rows)
    cols = [_cells(shown[name].tolist(), kind, scale) for name, _, kind, scale in columns]
    numeric = [kind != "str" for _, _, kind, _ in columns]
    parts = []
    if filterable:
        parts.append(f'<div><input class="filter" type="search" data-table="{table_id}" '
                     f'placeholder="filter rows (op, layer, kernel, shape...)">'
                     f'<span class="count" id="{table_id}-count">{len(shown)} rows</span></div>')
    parts.append(f'<div class="scroll"><table class="sortable" id="{table_id}"><thead><tr>')
    parts.extend(f'<th class="{"num" if n else "text"}">{_e(h)}</th>' for (_, h, _, _), n in zip(columns, numeric, strict=True))
    parts.append("</tr></thead><tbody>")
    for r in range(len(shown)):
        parts.append("<tr>")
        for (text, raw), n in zip(cols, numeric, strict=True):
            if n:
                parts.append(f'<td class="num" data-v="{_e(raw[r])}">{_e(text[r])}</td>')
            else:
                parts.append(f'<td class="text">{_e(text[r])}</td>')
        parts.append("</tr>")
    parts.append("</tbody></table></div>")
    if len(df) > len(shown):
        parts.append(f'<p class="note">{len(df) - len(shown)} more rows (the smallest) left out of this page.</p>')
    return "".join(parts)


def _keyed(columns, key_header: str) -> list:
    """``columns`` with ``key_header`` as the header of the ``key`` column (what the rows are grouped by)."""
    return [(n, key_header if n == "key" else h, k, s) for n, h, k, s in columns]


# -- sections ----------------------------------------------------------------------------------------


def _section(sid: str, title: str, body: str, note: str = "") -> str:
    note_html = f'<p class="note">{note}</p>' if note else ""
    return f'<section id="{sid}"><h2>{_e(title)}</h2>{note_html}{body}</section>'


def _card(value: str, key: str) -> str:
    return f'<div class="card"><div class="v">{_e(value)}</div><div class="k">{_e(key)}</div></div>'


def _overview(p: Profile, rfs: list[roofline.Roof], n_steps: int) -> str:
    kernels = int((p.df["kind"] == "kernel").sum()) if len(p.df) else 0
    cards = [_card(units.duration(p.total_ns), "kernel time (all records)"), _card(str(len(p.df)), "records"),
             _card(str(kernels), "kernels")]
    if n_steps:
        cards.append(_card(str(n_steps), "profiled steps"))
        cards.append(_card(units.duration(p.total_ns / n_steps), "kernel time per step"))
    rows = []
    for d in p.devices:
        dev = d.device
        mine = [r for r in rfs if r.device == d.label and r.peak] if dev is not None else []
        peaks = "; ".join(f"{r.label} {units.flop_rate(r.peak)}" for r in mine)
        bw = units.byte_rate(dev.bw) if dev is not None and dev.bw else "-"
        rows.append([d.label, d.kernels, units.duration(d.time_ns), dev.name if dev is not None else "-",
                     peaks or "-", bw, d.source])
    devices = "<h3>Devices and where their peaks came from</h3>" + _plain_table(
        [("device", False), ("records", True), ("time", True), ("peaks of", False), ("compute peaks", False),
         ("memory bandwidth", True), ("source", False)], rows)
    warn = ""
    if p.warnings:
        warn = "<h3>prof's warnings</h3><ul class='warnings'>" + "".join(f"<li>{_e(w)}</li>" for w in p.warnings) + "</ul>"
    return _section("overview", "Overview", f'<div class="cards">{"".join(cards)}</div>{devices}{warn}',
                    f"Records: {_e(p.name)}")


def _fix_first(p: Profile) -> str:
    first = tables.fix_this_first(p.df)
    if not len(first):
        return _section("fix-first", "Fix this first", "<p>No op has a known ideal time (no peaks, or no FLOP/byte "
                        "model): nothing to rank.</p>")
    body = table_html(first, _keyed(tables.SUMMARY, "Op"), "t-fix", filterable=False)
    return _section("fix-first", "Fix this first", body,
                    "The ops with the most time above the roofline (time - ideal time, summed over their kernels "
                    "with a known ideal): what reaching the roofline would save, largest first.")


def _plain_table(columns: list[tuple[str, bool]], rows: list[list[Any]],
                 html_cols: tuple[int, ...] = ()) -> str:
    """A table without sorting or filter: ``columns`` (header, numeric), ``rows`` of cell values (escaped,
    but for the columns of ``html_cols``, which hold markup)."""
    def cls(numeric: bool) -> str:
        return " class='num'" if numeric else ""

    head = "".join(f"<th{cls(n)}>{_e(h)}</th>" for h, n in columns)
    body = "".join("<tr>" + "".join(f"<td{cls(n)}>{v if i in html_cols else _e(v)}</td>"
                                    for i, ((_, n), v) in enumerate(zip(columns, row, strict=True))) + "</tr>"
                   for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _chart(fid: str) -> str:
    return f'<div class="chart" id="{fid}"></div>'


def build(p: Profile, baseline: Profile | None = None, advised: Any = None) -> str:
    """The page of ``p`` (with the comparison against ``baseline`` where given, and ``pyprof advise``'s
    result ``advised``, a :class:`pyprof.advise.Advised`, as its own section) as HTML text."""
    figs: dict[str, Any] = {}
    pts = roofline.points(p)
    rfs = roofline.roofs(p, pts)
    tl = timeline.one_step(p)
    sections = [_overview(p, rfs, tl.steps), _fix_first(p)]

    merged = " Past a few thousand instances, equal calls are merged into one point (hover: xN)." \
        if len(pts) and int(pts["count"].max()) > 1 else ""
    if len(pts):
        figs["fig-roofline"] = figures.roofline(pts, rfs)
        chart = _chart("fig-roofline")
    else:
        chart = ("<p>No op instance has both FLOPs and bytes known (ops without a FLOP/byte model, or a trace "
                 "without argument shapes and dtypes: see prof's warnings above), so none can be placed.</p>")
    sections.append(_section(
        "roofline", "Roofline", chart,
        f"Each point is an op instance (its kernels together): FLOPs per byte moved against FLOP/s achieved, both "
        f"from prof's cost models; size is time, colour the direction. Lines are the roofs of the devices: memory "
        f"bandwidth up to each compute peak (solid: tensor cores, dashed: other units). {len(pts)} points; "
        f"instances without FLOPs or bytes (copies, views) are not drawn.{merged}"))

    tree = layers.tree(p.df)
    figs["fig-layers"] = figures.layers(tree)
    sections.append(_section(
        "layers", "Time by layer", _chart("fig-layers"),
        "The module tree (click a box to zoom in, the top bar to zoom out), split into forward, backward and "
        "optimizer; a box's width is the kernel time of its layer and everything under it."))

    tl_note = (f"Step {_e(tl.step)} (the median of {tl.steps} steps by kernel time)" if tl.step
               else "The records from their first (no ProfilerStep ranges)")
    tl_note += f", {len(tl.bars)} kernels over {units.duration(tl.span_ns)}, coloured by layer."
    if tl.left_out:
        tl_note += f" The {tl.left_out} shortest kernels are not drawn."
    if p.is_cpu:
        tl_note += " CPU ops are drawn at their start with their self time."
    if len(tl.bars):
        figs["fig-timeline"] = figures.timeline(tl)
        body = _chart("fig-timeline")
    else:
        body = "<p>The records carry no start times.</p>"
    items = breakdown_mod.breakdown(p.records)
    if items:
        figs["fig-breakdown"] = figures.breakdown(items)
        body += "<h3>Where the time went</h3>" + _chart("fig-breakdown") + _breakdown_table(items)
    sections.append(_section(
        "timeline", "One step", body,
        tl_note + " Below: each device's window (first start to last end) split into busy, exposed communication "
        "(NCCL kernels while no compute kernel runs), exposed memcpy/memset (while nothing else runs) and idle."))

    tabs = [f"<h3>Per {by}</h3>"
            + table_html(summarize(p.df, by), _keyed(tables.SUMMARY, by.capitalize()), f"t-{by}")
            for by in ("op", "layer", "kernel")]
    sections.append(_section("tables", "Tables", "".join(tabs),
                             "prof's summaries. Click a header to sort, type to filter. Gap: time / ideal time "
                             "(1 = at the roofline)."))

    sh = shapes.by_shape(p)
    shape_cols = [("op", "Op", "str", 1.0), ("dir", "Dir", "str", 1.0), ("gemm", "GEMM", "str", 1.0),
                  ("params", "Arguments", "str", 1.0), ("count", "Count", "int", 1.0),
                  ("total", "Total", "dur", 1.0), ("mean", "Mean", "dur", 1.0), ("median", "Median", "dur", 1.0),
                  ("std", "Std dev", "dur", 1.0), ("rate_mean", "FLOP/s mean", "flops", 1.0),
                  ("rate_median", "FLOP/s median", "flops", 1.0), ("rate_std", "FLOP/s std dev", "flops", 1.0),
                  ("flops", "FLOPs each", "flop", 1.0)]
    sections.append(_section(
        "shapes", "Per shape", table_html(sh, shape_cols, "t-shapes", max_rows=SHAPE_ROWS),
        "Each op by its unique arguments (GEMMs with batch, M, N, K and dtype): how many instances ran, and the "
        "mean, median and standard deviation of their time and achieved FLOP/s."))

    optional = {"collectives": _collectives(p), "advice": _advice(advised) if advised is not None else "",
                "baseline": _baseline(p, baseline, figs) if baseline is not None else ""}
    sections += [s for s in optional.values() if s] + [_findings(p)]
    body = "".join(sections)
    nav = "".join(f'<a href="#{sid}">{_e(t)}</a>' for sid, t in NAV.items() if optional.get(sid, True))
    fig_json = _figures_json(figs)
    title = f"pyprof report: {p.name}"
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
        f'content="width=device-width, initial-scale=1"><meta name="generator" content="pyprof {__version__}">'
        f"<title>{_e(title)}</title><style>{_asset('page.css')}</style>"
        f'<script>{plotly_js()}</script></head><body>'
        f'<header><h1>pyprof report</h1><div class="sub">{_e(p.name)}'
        + (f" compared with {_e(baseline.name)}" if baseline is not None else "")
        + f" &middot; pyprof {_e(__version__)}</div></header><nav>{nav}</nav><main>{body}</main>"
        f'<footer>Written by pyprof {_e(__version__)} (<code>pyprof report</code>); one self-contained '
        f"file: plotly.js and every style and script are inlined, nothing is fetched.</footer>"
        f'<script type="application/json" id="pyprof-figures">{fig_json}</script>'
        f"<script>{_asset('page.js')}</script></body></html>")
    return page


COMM_TABLE = [("idx", "#", "int", 1.0), ("op", "Op", "str", 1.0), ("kind", "Kind", "str", 1.0),
              ("dtype", "Dtype", "str", 1.0), ("size", "Size", "byte", 1.0), ("group", "Group", "int", 1.0),
              ("time", "Time", "dur", 1.0), ("algbw", "AlgBW", "bps", 1e9), ("busbw", "BusBW", "bps", 1e9),
              ("exposed", "Exposed", "dur", 1.0), ("overlap", "Overlapped", "dur", 1.0),
              ("device", "Device", "str", 1.0), ("lane", "Stream/thread", "str", 1.0)]


def _collectives(p: Profile) -> str:
    """The collectives of ``--summary comm`` (:mod:`pyprof.prof.comm`); empty where there are none."""
    from pyprof.prof import comm

    df = comm.collectives(p.records)
    if df.empty:
        return ""
    exposed = units.duration(float(df["exposed"].sum()))
    return _section(
        "collectives", "Collectives", table_html(df, COMM_TABLE, "t-comm"),
        f"Each collective's run (its NCCL kernels, or gloo's range on a CPU): message size, algorithm and bus "
        f"bandwidth as nccl-tests counts them (docs/prof.md), and the part of it no compute kernel on another "
        f"stream (op on another thread) hid: {exposed} exposed in all. `pyprof prof --summary comm` prints the "
        f"same, and on a dataset of ranks their arrival skew.")


def _advice(advised: Any) -> str:
    """``pyprof advise``'s changes (:mod:`pyprof.advise`), largest estimated saving first: what to change,
    the saving per step, the evidence and the formula (or why no estimate is given)."""
    if not advised.items:
        return _section("advice", "Advice", "<p>No change found that the advice models can estimate.</p>")
    rows = []
    for i, a in enumerate(advised.items, 1):
        if a.saved_s is None:
            saved, share = "not estimated", "-"
        else:
            saved = units.duration(a.saved_s * 1e9)
            share = f"{a.saved_s / advised.step_s:.1%}" if advised.step_s else "-"
        basis = ("no estimate: " + a.no_estimate) if a.no_estimate else a.formula
        evidence = "".join(f"<li>{_e(_cut(e))}</li>" for e in a.evidence)
        rows.append([i, a.kind, saved, share, a.change, f"<ul>{evidence}</ul>", _cut(basis)])
    steps = f"{advised.steps} step{'s' if advised.steps != 1 else ''}" if advised.steps_recorded \
        else "no ProfilerStep ranges: the whole window as one step"
    body = _plain_table([("#", True), ("kind", False), ("saves per step", True), ("of the step", True),
                         ("change", False), ("evidence", False), ("estimate", False)], rows, html_cols=(5,))
    return _section("advice", "Advice", body,
                    f"What `pyprof advise` would change, largest estimated saving first ({steps}; step "
                    f"{_e(units.duration(advised.step_s * 1e9))}). Each estimate is a model, its formula "
                    f"beside it; docs/advise.md says which were checked against measured savings.")


def _breakdown_table(items: list[breakdown_mod.Breakdown]) -> str:
    rows = [[b.device, units.duration(b.window),
             *(f"{units.duration(getattr(b, a))} ({units.percent(b.share(a))})"
               for a in ("busy", "comm_exposed", "memcpy_exposed", "idle")),
             units.duration(b.comm), units.duration(b.memcpy)] for b in items]
    cpu = any(b.device == "CPU" for b in items)
    return _plain_table([("device", False), ("window", True),
                         ("busy" + (" (CPU: in ops)" if cpu else ""), True),
                         ("exposed communication", True), ("exposed memcpy", True),
                         ("idle" + (" (CPU: Python between ops)" if cpu else ""), True),
                         ("communication (all)", True), ("memcpy (all)", True)], rows)


def _baseline(p: Profile, base: Profile, figs: dict) -> str:
    sides = {by: (diff_mod.side(base.df, by), diff_mod.side(p.df, by)) for by in diff_mod.BY}
    tot = diff_mod.total(*sides["op"])
    parts = [f'<div class="cards">{_card(units.duration(tot.time_a), "baseline (A) time per step")}'
             f'{_card(units.duration(tot.time_b), "this run (B) time per step")}'
             f'{_card(units.FORMATS["+pct"](tot.delta_pct), f"change (p={units.number(tot.p)})")}</div>']
    for by, (sa, sb) in sides.items():
        table = diff_mod.compare(sa, sb)
        fid = f"fig-delta-{by}"
        if by == "op" and len(table):
            figs[fid] = figures.deltas(table, by)
            parts.append(_chart(fid))
        parts.append(f"<h3>Per {by}</h3>" + table_html(table, _keyed(diff_mod.HUMAN, by.capitalize()), f"t-diff-{by}"))
    return _section("baseline", "Compared with the baseline", "".join(parts),
                    f"A: {_e(base.name)}; B: {_e(p.name)}. Time per step (the median over each side's "
                    f"{tot.steps_a} and {tot.steps_b} steps), sorted by the size of the change; p: a one-sided "
                    "Mann-Whitney U test of the steps; verdict at 10% (pyprof diff --help).")


def _findings(p: Profile) -> str:
    cpu = [r for r in p.records if r.get("device") is None]
    if not cpu:
        return _section("findings", "CPU findings", "<p>No CPU records (a GPU trace): the CPU findings are about "
                        "CPU ops.</p>")
    text = format_findings(findings(cpu, p.env or {}))
    note = "" if p.env else "No env.json beside the records: the thread settings of the profiled process are unknown."
    return _section("findings", "CPU findings", f"<pre>{_e(text)}</pre>", note)


def write(p: Profile, path, baseline: Profile | None = None, advised: Any = None) -> int:
    """Write the page to ``path`` all or nothing; returns its size in bytes. A page that would pass
    :data:`MAX_BYTES` (text cells of megabytes: huge markers, ops of thousands of arguments) is built
    again with its text cells cut shorter, and says so on stderr; one that passes it even so is one line
    (:class:`~pyprof.errors.OutputError`), never a partial page."""
    full = CELL_CHARS[0]
    try:
        for chars in (full, 200, 40):
            CELL_CHARS[0] = chars
            data = build(p, baseline, advised).encode("utf-8")
            if len(data) <= MAX_BYTES:
                break
        else:
            raise OutputError(f"the report would be {len(data):,} bytes even with its text cut to {chars} "
                              f"characters a cell, over the page's cap of {MAX_BYTES:,}",
                              "read the records with `pyprof prof --summary op` instead")
    finally:
        CELL_CHARS[0] = full
    if chars != full:
        print(f"pyprof: warning: the report passed {MAX_BYTES >> 20} MB: its table cells are cut to {chars} "
              "characters (the records hold the full text)", file=sys.stderr)
    with atomic_output(path, "wb") as fh:
        fh.write(data)
    return len(data)
