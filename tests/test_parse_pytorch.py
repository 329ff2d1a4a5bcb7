"""Decoded fields on the PyTorch exports of the corpus: op, layer, direction, args, seq ids.

Expected values come from hand SQL over each file and an independent reading of the marker text
(``ast.literal_eval`` of the PyProf dict strings, string splitting of emit_nvtx text), never from the
parser's own output.
"""

from __future__ import annotations

import ast
import sqlite3

import pytest

from pyprof.parse.source import open_source
from tests.conftest import corpus_file

pytestmark = pytest.mark.corpus


def _connect(path):
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    c.text_factory = lambda b: b.decode("utf-8", "replace")
    return c


def _records(path):
    return list(open_source(path).records())


def _lists(v):
    if isinstance(v, dict):
        return {k: _lists(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_lists(x) for x in v]
    return v


def _nsys_open_texts(c, corr, pid):
    """Hand SQL: the texts open on the launching thread at the API call's start, outermost first."""
    gt, t = c.execute("SELECT globalTid, start FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE correlationId = ? AND "
                      "((globalTid >> 24) & 16777215) = ? ORDER BY rowid", (corr, pid)).fetchone()
    return [r[0] for r in c.execute(
        "SELECT COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)) FROM NVTX_EVENTS WHERE globalTid = ? "
        "AND eventType = 59 AND start <= ? AND \"end\" > ? ORDER BY start, \"end\" DESC", (gt, t, t))]


def test_dlprof_emit_nvtx_and_pyprof_dicts():
    path = corpus_file("MohanadOdema__DLProf")
    c = _connect(path)
    # a forward-only capture: no autograd node text anywhere
    assert c.execute("SELECT COUNT(*) FROM NVTX_EVENTS WHERE text LIKE '%Backward%'").fetchone()[0] == 0
    recs = [r for r in _records(path) if r["kind"] == "kernel"]
    assert len(recs) == 59
    n_conv = 0
    for r in recs:
        texts = _nsys_open_texts(c, r["correlationId"], r["pid"])
        ops = [ast.literal_eval(t) for t in texts if t.startswith("{'mod'")]
        atens = [t.split(",")[0] for t in texts if t.startswith("aten::")]
        traces = [ast.literal_eval(t)["traceMarker"] for t in texts if t.startswith("{'traceMarker'")]
        seqs = [int(t.split("seq = ")[1]) for t in texts if t.startswith("aten::") and "seq = " in t]
        assert ops, "every kernel of this file runs under a PyProf op marker"
        assert (r["mod"], r["op"]) == (ops[-1]["mod"], ops[-1]["op"])
        assert r["args"] == _lists(ops[-1]["args"])
        assert r["aten"] == (atens[-1] if atens else None)
        assert r["trace"] == list(reversed(traces[-1]))
        assert r["seqId"] == sorted(set(seqs), key=seqs.index)
        assert r["dir"] == "fprop"
        if "aten::cudnn_convolution, seq = 0" in texts:
            n_conv += 1
            assert (r["mod"], r["op"], r["aten"]) == ("torch.nn.functional", "conv2d", "aten::cudnn_convolution")
            assert [a["shape"] for a in r["args"]] == [[32, 3, 32, 32], [6, 3, 3, 3], [6]]
            assert r["seqId"] == [0]
    assert n_conv > 0
    # kernels of one op instance share opId and are numbered in launch order
    by_op = {}
    for r in sorted(recs, key=lambda r: r["apiStart"]):
        by_op.setdefault(r["opId"], []).append(r["subSeqId"])
    assert all(v == list(range(len(v))) for v in by_op.values())


def test_josiahdavis_backward_kernels_link_to_forward_op():
    path = corpus_file("josiahdavis__profiling-lm")
    c = _connect(path)
    recs = [r for r in _records(path) if r["kind"] == "kernel"]
    strings = dict(c.execute("SELECT _id_, value FROM StringTable"))
    ranges = []  # (tid, start, end, text) from MARKER start/end rows paired by id
    for s_obj, s_t, e_t, name in c.execute(
            "SELECT s.objectId, s.timestamp, e.timestamp, s.name FROM CUPTI_ACTIVITY_KIND_MARKER s JOIN "
            "CUPTI_ACTIVITY_KIND_MARKER e ON e.id = s.id AND e.flags = 4 WHERE s.flags = 2"):
        ranges.append((int.from_bytes(s_obj[4:8], "little") & 0xFFFFFFFF, s_t, e_t, strings[name]))

    def open_at(tid, t):
        return sorted((r for r in ranges if r[0] == tid and r[1] <= t < r[2]), key=lambda r: (r[1], -r[2]))

    bwd = [r for r in recs if any("Backward" in x["text"] or "autograd::" in x["text"] for x in r["ranges"])]
    fwd = [r for r in recs if r not in bwd]
    assert bwd and fwd
    linked = 0
    for r in bwd:
        assert r["dir"] == "bprop"
        nodes = [x for x in open_at(r["tid"], r["apiStart"]) if "Backward" in x[3] or "autograd::" in x[3]]
        node = nodes[-1][3]
        assert r["bwdNode"] == node.split(",")[0]
        if ", seq = " not in node:
            continue
        seq = int(node.split("seq = ")[1])
        assert r["altSeqId"][-1] == seq
        # the forward: the last top-level range `name, seq = N` on another thread before the backward...
        fw = [x for x in ranges if x[3].endswith(f", seq = {seq}") and "Backward" not in x[3]
              and x[0] != r["tid"] and x[1] < r["apiStart"]]
        top = [x for x in fw if not any(y is not x and y[1] <= x[1] and x[2] <= y[2] for y in fw)]
        if not top:
            continue
        f = max(top, key=lambda x: x[1])
        # ...and the innermost PyProf op marker around it gives op and args
        marks = [x for x in open_at(f[0], f[1]) if x[3].startswith("{'mod'")]
        if not marks:
            continue
        want = ast.literal_eval(marks[-1][3])
        assert (r["mod"], r["op"]) == (want["mod"], want["op"]), node
        assert r["args"] == _lists(want["args"])
        linked += 1
    assert linked >= 10
    for r in fwd:
        if r["ranges"]:
            marks = [ast.literal_eval(x["text"]) for x in r["ranges"] if x["text"].startswith("{'mod'")]
            if marks:
                assert r["op"] == marks[-1]["op"]
            assert r["dir"] == "fprop"


def test_mmagic_pyprof_dicts_on_nsys():
    path = corpus_file("mmagic_vsr_v2__net")
    c = _connect(path)
    recs = _records(path)
    with_op = [r for r in recs if r["ranges"]]
    assert with_op
    for r in with_op:
        texts = _nsys_open_texts(c, r["correlationId"], r["pid"])
        ops = [ast.literal_eval(t) for t in texts if t.startswith("{'mod'")]
        traces = [ast.literal_eval(t)["traceMarker"] for t in texts if t.startswith("{'traceMarker'")]
        assert (r["mod"], r["op"]) == (ops[-1]["mod"], ops[-1]["op"])
        assert r["args"] == _lists(ops[-1]["args"])
        assert r["trace"] == list(reversed(traces[-1]))
        assert r["dir"] == "fprop"
    stacks = [r for r in with_op if r["op"] == "stack"]
    assert stacks and all(r["mod"] == "torch" for r in stacks)
    for r in recs:
        if not r["ranges"]:
            assert r["op"] is None and r["dir"] == "" and r["opId"] is None and r["subSeqId"] is None


def test_cs336_user_ranges_hint_direction():
    recs = _records(corpus_file("jsun-012__assignment2-systems"))
    seen = set()
    for r in recs:
        texts = [x["text"] for x in r["ranges"] if x["domain"] is None]
        inner = [t for t in texts if t in ("Forward", "Backward", "Benchmark Forward Only")]
        if not inner:
            continue
        want = "bprop" if inner[-1] == "Backward" else "fprop"
        assert r["dir"] == want, texts
        seen.add(want)
    assert seen == {"fprop", "bprop"}
    # ranges without a direction word give none
    for r in _records(corpus_file("zx3xyy__assignment2-systems")):
        assert r["dir"] == "" and r["op"] is None


def test_legacy_emit_nvtx_bare_names():
    recs = [r for r in _records(corpus_file("askliar__nlp-information-retrieval")) if r["kind"] == "kernel"]
    bwd = [r for r in recs if any(x["text"].endswith("Backward") or "Backward1" in x["text"]
                                  or x["text"].startswith("N5torch8autograd") for x in r["ranges"])]
    assert bwd
    assert all(r["dir"] == "bprop" for r in bwd)
    fwd = [r for r in recs if r["ranges"] and r not in bwd]
    assert fwd
    for r in fwd:
        names = [x["text"] for x in r["ranges"]]
        assert r["dir"] == "fprop"
        assert (r["mod"], r["op"]) == ("aten", names[0])  # the outermost op the program called
        assert r["aten"] == names[-1]


def test_tensorrt_registered_strings_and_domains():
    recs = [r for r in _records(corpus_file("LeiWang1999__memfusion")) if r["kind"] == "kernel"]
    assert recs and all(r["ranges"] for r in recs)
    assert all(x["domain"] == "TensorRT" for r in recs for x in r["ranges"])
    assert all(r["op"] is None for r in recs)  # TensorRT layer names are not PyTorch ops
