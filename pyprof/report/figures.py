"""Plotly figures of the report's data: roofline, time by layer, one step's timeline, the GPU time
breakdown and the baseline's deltas. Each function takes the data its module computed and returns a
``plotly.graph_objects.Figure``; none computes a figure of its own. Plotly (the ``report`` extra) is
imported here and in :mod:`pyprof.report.page` only.
"""

from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from pyprof.prof import units
from pyprof.report import layers as layers_mod
from pyprof.report import roofline as roofline_mod
from pyprof.report.breakdown import Breakdown
from pyprof.report.timeline import Timeline

DIR_COLOURS = {"fprop": "#1f77b4", "bprop": "#d62728", "optim": "#2ca02c", "other": "#7f7f7f"}
DIR_NAMES = {"fprop": "forward", "bprop": "backward", "optim": "optimizer", "other": "other"}
PALETTE = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
           "#bab0ac", "#86bcb6", "#d37295", "#a0cbe8")
TEMPLATE = "plotly_white"
FONT = {"family": "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif", "size": 12}


def _esc(text, limit: int = 160) -> str:
    """Text for a Plotly hover label: escaped (a kernel's ``<float>`` is not a tag), cut to ``limit``."""
    s = str(text)
    return html.escape(s if len(s) <= limit else s[: limit - 1] + "\u2026", quote=False)


def _layout(**kw) -> dict:
    return {"template": TEMPLATE, "font": FONT, "margin": {"l": 70, "r": 20, "t": 30, "b": 50},
            "hoverlabel": {"align": "left"}, **kw}


def roofline(pts: pd.DataFrame, rfs: list[roofline_mod.Roof]) -> go.Figure:
    """Points coloured by direction and sized by time, over the roofs (dashed: not tensor cores)."""
    fig = go.Figure()
    lo, hi = roofline_mod.x_range(pts, rfs)
    many_devices = len({r.device for r in rfs}) > 1
    for i, roof in enumerate(rfs):
        xs, ys = roofline_mod.roof_line(roof, lo, hi)
        name = f"{roof.device}: {roof.label}" if many_devices else roof.label
        peak = units.flop_rate(roof.peak) if roof.peak else "no FLOP/s peak"
        bw = units.byte_rate(roof.bw) if roof.bw else "no bandwidth"
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines", name=f"roof: {_esc(name, 80)}", legendgroup="roofs",
            line={"color": "#444" if roof.tensor else "#888", "width": 1.5 if roof.tensor else 1.2,
                  "dash": "solid" if roof.tensor else "dash"},
            hovertemplate=f"{_esc(name)}<br>peak {peak}, memory {bw}<extra></extra>", showlegend=i < 8))
    tmax = float(pts["time"].max()) if len(pts) else 1.0
    for d in roofline_mod.DIRECTIONS:
        part = pts[pts["dir"] == d] if len(pts) else pts
        if not len(part):
            continue
        size = 6 + 30 * np.sqrt(part["time"].to_numpy() / tmax)
        fig.add_trace(go.Scatter(
            x=part["ai"].to_numpy(), y=part["rate"].to_numpy(), mode="markers", name=DIR_NAMES[d],
            marker={"color": DIR_COLOURS[d], "size": size, "opacity": 0.7, "line": {"width": 0.5, "color": "#fff"}},
            text=[_point_text(r) for r in part.itertuples(index=False)],
            hovertemplate="%{text}<extra></extra>"))
    fig.update_layout(**_layout(
        height=560, xaxis={"type": "log", "title": "arithmetic intensity (FLOP per byte)", "range":
                           [math.log10(lo), math.log10(hi)]},
        yaxis={"type": "log", "title": "achieved FLOP/s", "tickformat": "~s"}, legend={"orientation": "v", "x": 1.01, "y": 1}))
    return fig


def _point_text(r) -> str:
    lines = [f"<b>{_esc(r.op)}</b> ({DIR_NAMES.get(r.dir, r.dir)})" + (f" x{r.count}" if r.count > 1 else ""),
             f"layer: {_esc(r.module)}", f"shapes: {_esc(r.params)}", f"call site: {_esc(r.site)}",
             f"kernels: {_esc(r.kernels)}",
             f"time {units.duration(r.time)}, {units.flop(r.flops)}, {units.nbytes(r.bytes)}",
             f"{units.flop_rate(r.rate)} at {units.number(r.ai)} FLOP/B" + (", tensor cores" if r.tc else "")]
    return "<br>".join(lines)


def layers(tree: layers_mod.Tree) -> go.Figure:
    """The module tree as an icicle: the root, then forward / backward / optimizer, then layers."""
    total = tree.values[0] if tree.values else 0
    text = [f"{units.duration(v)} ({units.percent(v / total * 100 if total else float('nan'))}); "
            f"own {units.duration(o)}" for v, o in zip(tree.values, tree.own, strict=True)]
    dirs = {"forward": "fprop", "backward": "bprop", "optimizer": "optim"}
    colours = [DIR_COLOURS[dirs.get(i.split("/")[1], "other")] if "/" in i else "#dddddd" for i in tree.ids]
    fig = go.Figure(go.Icicle(
        ids=tree.ids, labels=[_esc(v, 60) for v in tree.labels], parents=tree.parents, values=tree.values,
        branchvalues="total", text=text, marker={"colors": colours},
        hovertemplate="<b>%{label}</b><br>%{text}<extra></extra>", textinfo="label+percent root",
        tiling={"orientation": "v"}, maxdepth=6, sort=False))  # forward, backward, optimizer, as the tree orders them
    fig.update_layout(**_layout(height=520, margin={"l": 10, "r": 10, "t": 30, "b": 10}))
    return fig


def timeline(tl: Timeline) -> go.Figure:
    """One bar per kernel (ms from the step's start) on its lane, one trace (colour) per layer."""
    fig = go.Figure()
    bars = tl.bars
    for i, layer in enumerate(dict.fromkeys(bars.groupby("layer")["dur"].sum().sort_values(ascending=False).index)):
        part = bars[bars["layer"] == layer]
        fig.add_trace(go.Bar(
            y=part["lane"].tolist(), x=(part["dur"] / 1e6).to_numpy(), base=(part["start"] / 1e6).to_numpy(),
            orientation="h", name=_esc(layer, 50), marker={"color": PALETTE[i % len(PALETTE)], "line": {"width": 0}},
            text=[f"{_esc(k)}<br>op {_esc(o)} ({_esc(d)}), layer {_esc(layer)}<br>"
                  f"start {units.duration(s)}, {units.duration(t)}"
                  for k, o, d, s, t in zip(part["kernel"], part["op"], part["dir"], part["start"], part["dur"],
                                           strict=True)],
            textposition="none", hovertemplate="%{text}<extra></extra>"))
    fig.update_layout(**_layout(
        height=max(340, 140 + 36 * len(tl.lanes)), barmode="overlay", bargap=0.25,
        xaxis={"title": "ms from the step's start"},
        yaxis={"categoryorder": "array", "categoryarray": list(reversed(tl.lanes)), "automargin": True},
        legend={"title": {"text": "layer"}}))
    return fig


BREAKDOWN_PARTS = (("busy", "busy (compute)", "#59a14f"), ("comm_exposed", "exposed communication", "#e15759"),
                   ("memcpy_exposed", "exposed memcpy", "#f28e2b"), ("idle", "idle", "#bab0ac"))


def part_label(b: Breakdown, attr: str, label: str) -> str:
    """What a part of a device's window is: on the CPU, busy is time in ops and idle is Python between
    them (the interpreter, the data loader, waits), not an idle machine."""
    if b.device != "CPU":
        return label
    return {"busy": "in ops", "idle": "Python between ops (and waits)"}.get(attr, label)


def breakdown(items: list[Breakdown]) -> go.Figure:
    """Each device's window as one stacked bar: busy, exposed communication, exposed memcpy, idle."""
    fig = go.Figure()
    names = [_esc(b.device, 400) for b in items]  # (a GPU name is data: Plotly's labels read markup)
    for attr, label, colour in BREAKDOWN_PARTS:
        vals = [b.share(attr) for b in items]
        fig.add_trace(go.Bar(
            y=names, x=vals, orientation="h", name=label, marker={"color": colour},
            text=[f"{part_label(b, attr, label)}: {units.duration(getattr(b, attr))} of {units.duration(b.window)} "
                  f"({units.percent(v)})" for b, v in zip(items, vals, strict=True)],
            textposition="none", hovertemplate="%{text}<extra></extra>"))
    fig.update_layout(**_layout(height=110 + 40 * max(len(items), 1), barmode="stack",
                                xaxis={"title": "% of the device's window", "range": [0, 100]},
                                yaxis={"automargin": True}, legend={"orientation": "h", "x": 0, "y": 1.02,
                                                                     "yanchor": "bottom"}))
    return fig


def deltas(table: pd.DataFrame, what: str, n: int = 20) -> go.Figure:
    """The ``n`` largest changes in time (B - A, ms) as bars: red slower, green faster."""
    top = table.head(n).iloc[::-1]
    d = top["delta"].to_numpy() / 1e6
    fig = go.Figure(go.Bar(
        y=[_esc(k, 50) for k in top["key"].tolist()], x=d, orientation="h",
        marker={"color": ["#d62728" if v > 0 else "#2ca02c" for v in d]},
        text=[f"{_esc(k)}: {units.duration(a)} -> {units.duration(b)} ({units.FORMATS['+pct'](p)})"
              for k, a, b, p in zip(top["key"], top["time_a"], top["time_b"], top["delta_pct"], strict=True)],
        textposition="none", hovertemplate="%{text}<extra></extra>", name="change"))
    fig.update_layout(**_layout(height=140 + 22 * max(len(top), 1), xaxis={"title": f"change in time per {what}, ms "
                                                                                  "(B - A)"},
                                yaxis={"automargin": True}))
    return fig
