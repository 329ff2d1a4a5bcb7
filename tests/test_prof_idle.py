"""``pyprof prof --summary idle``: GPU idle time split into host / wait / other, and launch statistics.

Checked against a small timeline worked by hand, and on the corpus' GPU traces against Holistic Trace
Analysis' idle time breakdown, computed here by HTA's rule (per stream: a gap is *host wait* when the next
kernel's launch call began after the previous kernel on the stream ended) straight from the raw trace,
at ns resolution with every step kept.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from conftest import CORPUS, hand_union, run_main

from pyprof.parse.kineto import KinetoSource
from pyprof.prof.idle import gaps, idle

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}


def _k(start, end, api, stream=7, step="ProfilerStep#1", kind="kernel", api_end=None):
    return {"kind": kind, "device": 0, "stream": stream, "start": start, "end": end, "kDuration": end - start,
            "apiStart": api, "apiEnd": api_end if api_end is not None else (None if api is None else api + 5),
            "ranges": [{"text": step, "domain": None}]}


def test_a_timeline_by_hand():
    recs = [
        _k(100, 200, 10),                # busy 100..200
        _k(150, 260, 20, stream=9),      # another stream: busy until 260, no gap
        _k(300, 310, 270),               # gap 260..300: launched at 270, after the GPU went idle: host
        _k(400, 450, 280, api_end=390),  # gap 310..400: queued at 280, held: wait
        _k(500, 520, None, kind="memcpy"),  # gap 450..500: no launch in the trace: other
        _k(530, 540, 525, step="ProfilerStep#2"),  # gap 520..530: host, in step 2
    ]
    g = gaps(pd_acts(recs))
    assert list(zip(g["g0"], g["g1"], g["cat"], strict=True)) == [
        (260, 300, "host"), (310, 400, "wait"), (450, 500, "other"), (520, 530, "host")]
    df = idle(recs)
    one, two, every = (df.iloc[i].to_dict() for i in range(3))
    assert (one["step"], two["step"], every["step"]) == ("ProfilerStep#1", "ProfilerStep#2", "all")
    assert (one["host"], one["wait"], one["other"], one["idle"]) == (40, 90, 50, 180)
    assert (two["host"], two["idle"]) == (10, 10)
    assert every["busy"] == 160 + 10 + 50 + 20 + 10 and every["idle"] == 190
    assert every["idle_pct"] == pytest.approx(190 / (250 + 190) * 100)
    # launches: five kernels (the memcpy is none), queued 90, 130, 30, 120 and 5 ns before they started
    assert every["kernels"] == 5
    assert every["delay"] == pytest.approx((90 + 130 + 30 + 120 + 5) / 5)
    # shorter than their launch call: only the fourth (50 ns; its call took 110 ns, 280..390)
    assert every["short_pct"] == pytest.approx(100 / 5)
    assert every["tiny_pct"] == 100.0  # all under 10 us


def pd_acts(recs):
    from pyprof.prof.idle import activities

    (acts,) = activities(recs).values()
    return acts


def _raw(path: Path) -> list[dict]:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def _hta_breakdown(events: list[dict]) -> dict[str, dict[str, int]]:
    """HTA's idle time breakdown per ``device:stream``, by its rule, from the raw events (ns)."""
    runtime = {e["args"]["correlation"]: round(e["ts"] * 1000) for e in events
               if e.get("cat") in ("cuda_runtime", "cuda_driver", "Runtime") and "correlation" in e.get("args", {})}
    streams: dict[str, list] = {}
    for e in events:
        if e.get("cat") in GPU_CATS and e.get("ph") == "X":
            a, s = e["args"], round(e["ts"] * 1000)
            streams.setdefault(f"{a['device']}:{a['stream']}", []).append(
                (s, s + round(e["dur"] * 1000), runtime.get(a.get("correlation"))))
    out = {}
    for key, ks in streams.items():
        ks.sort(key=lambda k: k[0])
        got = {"host": 0, "kernel_wait": 0, "other": 0}
        for prev, cur in zip(ks[:-1], ks[1:], strict=True):
            gap = cur[0] - prev[1]
            cat = "host" if cur[2] is not None and cur[2] > prev[1] else "kernel_wait" if gap < 30 else "other"
            got[cat] += gap
        out[key] = got
    return out


HTA_TRACES = ["trace_diff__control__control", "mi250_minitoy_train", "bert-small-uncased", "nsfw_image_detection"]
_LOADED: dict[str, tuple] = {}


def _trace(name: str) -> tuple[Path, list[dict], list[dict]]:
    """(path, raw events, records) of a corpus trace, read once per test module; skips where absent."""
    if name not in _LOADED:
        found = sorted((CORPUS / "kineto").glob(f"*{name}*")) if (CORPUS / "kineto").is_dir() else []
        if len(found) != 1:
            pytest.skip(f"corpus trace {name!r} not found under {CORPUS}/kineto")
        _LOADED[name] = (found[0], _raw(found[0]), list(KinetoSource(found[0]).records()))
    return _LOADED[name]


@pytest.mark.parametrize("name", HTA_TRACES)
def test_host_wait_equals_hta_per_stream_on_the_corpus(name):
    _, events, recs = _trace(name)
    hta = _hta_breakdown(events)
    df = idle(recs, by_stream=True, per_step=False)
    assert sorted(df["device"]) == sorted(hta)
    for row in df.to_dict("records"):
        h = hta[row["device"]]
        total = h["host"] + h["kernel_wait"] + h["other"]
        # where the definitions coincide: equal to the ns (the issue asks for 1 point)
        assert row["host"] == h["host"], row["device"]
        assert row["idle"] == total
        assert row["wait"] + row["other"] == h["kernel_wait"] + h["other"]


def test_device_view_and_steps_on_a_corpus_nccl_trace(capsys):
    _, events, recs = _trace("trace_diff__control__control")
    df = idle(recs)
    steps, every = df[df["step"] != "all"], df[df["step"] == "all"].iloc[0]
    # six ProfilerSteps, every kernel in one; the steps' idle adds up to the device's
    assert list(steps["step"]) == [f"ProfilerStep#{n}" for n in range(1009, 1015)]
    assert steps["kernels"].sum() == every["kernels"] == sum(1 for e in events if e.get("cat") == "kernel")
    assert steps["idle"].sum() == every["idle"]
    assert (steps["host"] + steps["wait"] + steps["other"] == steps["idle"]).all()
    # the device view: idle = span - union of every GPU activity, from the raw events
    busy, span = hand_union(events, lambda e: e.get("cat") in GPU_CATS)
    assert every["busy"] == busy
    assert every["idle"] == span - busy


def test_cli_idle(capsys):
    path, _, recs = _trace("mi250_minitoy_train")  # (a small trace: the CLI parses it again)
    code, out, err = run_main(capsys, ["prof", "--summary", "idle", "--csv", path])
    assert code == 0, err
    last = out.splitlines()[-1].split(",")
    assert last[1] == "all" and float(last[3]) == idle(recs).iloc[-1]["idle"]
