"""Range-text decoding: the emit_nvtx grammar in every form, pyprof and PyProf markers, direction,
and backward-to-forward linking -- on hand-written texts, and end to end on an export carrying
pyprof's own markers (a corpus file copied and edited in tmp_path)."""

from __future__ import annotations

import json
import shutil
import sqlite3

import pytest

from pyprof import markers
from pyprof.parse.decode import BackwardLinker, classify, decode, forward_seqs, id_key, link
from pyprof.parse.source import open_source
from tests.conftest import corpus_file


@pytest.mark.parametrize("text, name, seq, stashed, sizes, node", [
    ("mul", "mul", None, None, None, False),  # only with bare_names (legacy PyTorch)
    ("add_, seq = 38", "add_", 38, None, None, False),
    ("aten::relu, seq = 4", "aten::relu", 4, None, None, False),
    ("aten::mm, stashed seq = 3", "aten::mm", None, 3, None, False),
    ("aten::mm, stashed seq=3", "aten::mm", None, 3, None, False),
    ("aten::addmm, seq = 12, op_id = 40, sizes = [[4], [2, 3], [3, 4]], input_op_ids = [(1, 0), (2, 0)]",
     "aten::addmm", 12, None, [[4], [2, 3], [3, 4]], False),
    ("aten::empty, op_id = 7, sizes = [[], []]", "aten::empty", None, None, [[], []], False),
    ("AddmmBackward", "AddmmBackward", None, None, None, True),
    ("NllLossBackward, seq = 128", "NllLossBackward", 128, None, None, True),
    ("AddmmBackward0, seq = 5, op_id = 9", "AddmmBackward0", 5, None, None, True),
    ("N5torch8autograd14AccumulateGradE", "torch::autograd::AccumulateGrad", None, None, None, True),
    ("torch::autograd::AccumulateGrad", "torch::autograd::AccumulateGrad", None, None, None, True),
    ("autograd::engine::evaluate_function: MmBackward0", "MmBackward0", None, None, None, True),
])
def test_emit_nvtx_grammar(text, name, seq, stashed, sizes, node):
    i = classify(text, True)
    assert i.kind == "aten"
    assert (i.name, i.seq, i.stashed, i.sizes, i.is_bwd_node) == (name, seq, stashed, sizes, node)


@pytest.mark.parametrize("text, kind", [
    ("mul", "plain"), ("Forward", "hint"), ("computing softmax", "plain"), ("FusionCache::get", "plain"),
    ("layer:conv1", "layer"), ("init_model", "plain"), ("", "plain"), (None, "plain"),
])
def test_user_ranges_are_not_ops_without_legacy_mode(text, kind):
    assert classify(text).kind == kind


def test_direction_rules():
    assert decode(["Forward", "aten::mm, seq = 1"]).fields["dir"] == "fprop"
    assert decode(["Backward", "aten::mm"]).fields["dir"] == "bprop"
    assert decode(["aten::mm, stashed seq = 1"]).fields["dir"] == "bprop"
    assert decode(["MmBackward0, seq = 3", "aten::mm, seq = 0"]).fields["dir"] == "bprop"
    assert decode(["optimizer step"]).fields["dir"] == "optim"
    assert decode([markers.encode(markers.make("optim", cls="AdamW")), "aten::add_"]).fields["dir"] == "optim"
    assert decode(["benchmark_loop", "warmup"]).fields["dir"] == ""
    assert decode([]).fields["dir"] == ""


def test_pyprof_markers_decode():
    mod = markers.encode(markers.make("mod", path="encoder.layers.3", cls="Block"))
    mod2 = markers.encode(markers.make("mod", path="encoder.layers.3.attn", cls="Attention"))
    op = markers.encode(markers.make("op", ns="torch.nn.functional", op="linear", cdtype="bfloat16", seq=[41, 42],
                                     id=7, trace=["train.py:42:forward"],
                                     args=[{"name": "input", "type": "tensor", "shape": [8, 16], "dtype": "float32"}]))
    d = decode(["layer:block", mod, mod2, op, "aten::linear, seq = 41", "aten::addmm, seq = 41"])
    f = d.fields
    assert f["layer"] == ["block", "encoder.layers.3", "encoder.layers.3.attn"]
    assert (f["mod"], f["op"], f["cdtype"]) == ("torch.nn.functional", "linear", "bfloat16")
    assert f["args"][0]["shape"] == [8, 16]
    assert f["trace"] == ["train.py:42:forward"]
    assert f["aten"] == "aten::addmm"
    assert f["seqId"] == [41, 42]
    assert f["dir"] == "fprop"
    assert d.op_pos == 3  # the op marker is the op instance
    assert forward_seqs(op) == (41, 42, id_key(7))  # its seqs, and its id as an exact key
    assert forward_seqs("aten::mm, seq = 3") == (3,) and forward_seqs("MmBackward0, seq = 3") == ()


def test_innermost_op_marker_wins_and_legacy_trace_is_reversed():
    outer = "{'mod': 'torch.nn.functional', 'op': 'embedding', 'args': []}"
    inner = "{'mod': 'torch', 'op': 'embedding', 'args': [{'name': '', 'type': 'tensor', 'shape': (3, 4), 'dtype': 'float32'}]}"
    trace = "{'traceMarker': ['main.py:1', 'model.py:20', 'functional.py:300']}"
    f = decode([trace, outer, inner, "embedding, seq = 5"]).fields
    assert (f["mod"], f["op"]) == ("torch", "embedding")
    assert f["args"] == [{"name": "", "type": "tensor", "shape": [3, 4], "dtype": "float32"}]
    assert f["trace"] == ["functional.py:300", "model.py:20", "main.py:1"]


def test_malformed_markers_are_counted_not_fatal():
    d = decode(['{"pyprof":1,"k":"op","ns":', "{'mod': broken", '{"pyprof":99,"k":"op"}', "aten::mm"])
    assert d.malformed == 3
    assert d.fields["aten"] == "aten::mm"


def test_backward_linker_dict_then_time():
    lk = BackwardLinker()
    a, b = {"op": "mm", "mod": "torch"}, {"op": "addmm", "mod": "torch"}
    lk.add(1, 5, 100, a)
    lk.add(1, 5, 300, b)   # seq numbers restart (a second iteration): the latest earlier forward wins
    lk.add(2, 5, 50, {"op": "other"})
    assert lk.find_op(1, 5, 200)[0] is a and lk.find_op(1, 5, 400)[0] is b and lk.find_op(1, 5, 10) is None
    assert lk.find_op(1, 6, 200) is None and lk.find_op(1, None, 200) is None
    bwd = decode(['{"pyprof":1,"k":"bwd","node":"MmBackward0","seq":5}']).fields
    merged = link(bwd, {"op": "mm", "mod": "torch", "args": [1], "cdtype": None, "layer": ["fc"], "trace": ["t.py:1"]})
    assert (merged["op"], merged["layer"], merged["dir"], merged["bwdNode"]) == ("mm", ["fc"], "bprop", "MmBackward0")
    assert bwd["op"] is None  # inputs are not changed


@pytest.mark.corpus
def test_pyprof_markers_end_to_end(tmp_path):
    """An export carrying pyprof's own markers: module path, op marker with seq, and a backward kernel on
    another thread under a `bwd` marker -> linked to the forward op, its args, layer and trace."""
    src = corpus_file("MohanadOdema__DLProf")
    f = tmp_path / "pyprof.sqlite"
    shutil.copyfile(src, f)
    f.chmod(0o644)
    op = markers.encode(markers.make("op", ns="torch.nn.functional", op="conv2d", seq=[41], id=7,
                                     trace=["net.py:10:forward"],
                                     args=[{"name": "input", "type": "tensor", "shape": [32, 3, 32, 32],
                                            "dtype": "float32"}]))
    mod = markers.encode(markers.make("mod", path="features.0", cls="Conv2d"))
    bwd = markers.encode(markers.make("bwd", node="ConvolutionBackward0", seq=41))
    with sqlite3.connect(f) as c:
        s, e, gt = c.execute("SELECT start, \"end\", globalTid FROM NVTX_EVENTS WHERE text LIKE "
                             "'{''mod'': ''torch.nn.functional'', ''op'': ''conv2d''%' ORDER BY start").fetchone()
        c.execute("UPDATE NVTX_EVENTS SET text = ? WHERE start = ? AND globalTid = ?", (op, s, gt))
        c.execute("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, globalTid, domainId) VALUES (?, ?, 59, ?, ?, 0)",
                  (s - 10, e + 10, mod, gt))
        # a backward thread in the same process: bwd range, one runtime call, one kernel
        t0 = c.execute("SELECT MAX(\"end\") FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0] + 1000
        bgt = gt + 1
        c.execute("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, globalTid, domainId) VALUES (?, ?, 59, ?, ?, 0)",
                  (t0, t0 + 500, bwd, bgt))
        name_id = c.execute("SELECT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                            "ON k.correlationId = r.correlationId").fetchone()[0]
        c.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, \"end\", eventClass, globalTid, correlationId, nameId, "
                  "returnValue, callchainId) VALUES (?, ?, 0, ?, 999999, ?, 0, 0)", (t0 + 10, t0 + 20, bgt, name_id))
        cols = [r[1] for r in c.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        sel = ", ".join({"start": f"{t0 + 100}", "end": f"{t0 + 200}", "correlationId": "999999"}.get(x, x) for x in cols)
        c.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(cols)}) SELECT {sel} FROM "
                  "CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1")
    recs = list(open_source(f).records())
    fwd = [r for r in recs if r["kind"] == "kernel" and any(x["text"] == op for x in r["ranges"])]
    assert fwd
    for r in fwd:
        assert r["layer"] == ["features.0"] and r["trace"] == ["net.py:10:forward"] and r["seqId"][0] == 41
        assert (r["mod"], r["op"], r["dir"]) == ("torch.nn.functional", "conv2d", "fprop")
    (b,) = [r for r in recs if r["correlationId"] == 999999]
    assert b["dir"] == "bprop" and b["bwdNode"] == "ConvolutionBackward0" and b["altSeqId"] == [41]
    assert (b["mod"], b["op"], b["layer"], b["trace"]) == ("torch.nn.functional", "conv2d", ["features.0"],
                                                           ["net.py:10:forward"])
    # one backward instance per forward op instance: the forward op's id, in another direction
    assert b["args"] == fwd[0]["args"] and b["subSeqId"] == 0 and {r["opId"] for r in fwd} == {b["opId"]}
    assert json.loads(json.dumps(b)) == b


def test_a_user_range_named_backward_is_a_hint_not_an_autograd_node():
    assert classify("Backward").kind == "hint"
    assert classify("Backward", True).kind == "hint"
    assert classify("MmBackward0").is_bwd_node and classify("NllLossBackward, seq = 1").is_bwd_node


@pytest.mark.corpus
def test_cs336_is_not_read_as_legacy_emit_nvtx():
    """jsun's ranges ("Forward", "Backward", "cublasCreate_v2") are user/library ranges, not op names."""
    recs = list(open_source(corpus_file("jsun-012__assignment2-systems")).records())
    assert all(r["op"] is None and r["aten"] is None and r["bwdNode"] is None for r in recs)


def test_backward_range_links_by_forward_op_id_where_ops_share_a_seq():
    # multi_head_attention_forward (a composite) and the inner linear that created autograd node 5 both read
    # the counter as 5 before running; the bwd range names the inner op's id, so it links to the linear.
    outer = markers.encode(markers.make("op", ns="torch.nn.functional", op="multi_head_attention_forward",
                                        seq=[5], id=10, args=[]))
    inner = markers.encode(markers.make("op", ns="torch.nn.functional", op="linear", seq=[5], id=11,
                                        args=[{"name": "input", "type": "tensor", "shape": [4, 8], "dtype": "float32"}]))
    bwd = markers.encode(markers.make("bwd", node="AddmmBackward0", seq=5, id=11))
    d = decode([bwd])
    assert d.fields["altSeqId"] == [5] and d.fields["dir"] == "bprop"  # the record still shows the real seq
    lk = BackwardLinker()
    for t, text in ((100, outer), (110, inner)):
        for key in forward_seqs(text):
            lk.add(1, key, t, {"op": decode([text]).fields["op"]})
    assert lk.find_op(1, d.link_seq, 500)[0] == {"op": "linear"}
    # a bwd range from an older pyprof without "id" falls back to the seq (latest forward op with seq 5)
    old = decode([markers.encode(markers.make("bwd", node="AddmmBackward0", seq=5))])
    assert old.link_seq == 5 and lk.find_op(1, old.link_seq, 500)[0] == {"op": "linear"}
    lk2 = BackwardLinker()
    lk2.add(1, 5, 100, {"op": "linear"})
    lk2.add(1, 5, 120, {"op": "dropout"})  # made no node, same seq: seq alone picks the wrong op
    lk2.add(1, id_key(11), 100, {"op": "linear"})
    assert lk2.find_op(1, 5, 500)[0] == {"op": "dropout"} and lk2.find_op(1, d.link_seq, 500)[0] == {"op": "linear"}


def test_pyprof_range_names_a_layer():
    """``pyprof.range("attn")`` names a layer, like a ``layer:attn`` NVTX range; its kernels' op stays."""
    from pyprof import markers

    rng = markers.encode(markers.make("range", name="attn"))
    op = markers.encode(markers.make("op", ns="torch", op="mm", args=[]))
    d = decode([rng, op])
    assert d.fields["layer"] == ["attn"] and d.fields["op"] == "mm"
    assert decode([markers.encode(markers.make("range", name="layer:blk"))]).fields["layer"] == ["blk"]


def test_a_compiled_region_names_the_op_of_its_own_work():
    """torch.compile's generated kernels run under ``Torch-Compiled Region: F/N`` with no aten op: the
    region names their op; an aten op inside the region (an extern GEMM) stays the op."""
    d = decode(["ProfilerStep#2", "Torch-Compiled Region: 0/0"])
    assert (d.fields["op"], d.fields["mod"], d.fields["dir"]) == ("Torch-Compiled Region: 0/0", "torch.compile", "fprop")
    assert decode(["Torch-Compiled Region: 0/0", "aten::mm"]).fields["op"] == "mm"


def _bwd_texts():
    return ["autograd::engine::evaluate_function: MmBackward0",
            markers.encode(markers.make("bwd", node="MmBackward0", seq=542, id=64, nseq=544)), "MmBackward0"]


def test_a_forward_re_run_by_a_backward_node_is_a_recompute():
    """torch.utils.checkpoint re-runs a block inside the node whose saved tensor it rebuilds: module
    ranges open inside the node's, or an op marker that builds a graph (it has a seq), are ``recomp``,
    charged to their own modules and not linked to the node's forward op. An op marker without a seq
    under a node (a custom Function's backward) stays ``bprop`` run as itself."""
    blk = markers.encode(markers.make("mod", path="layers.1", cls="LlamaBlock"))
    lin = markers.encode(markers.make("mod", path="layers.1.mlp.up_proj", cls="Linear"))
    op = markers.encode(markers.make("op", ns="torch.nn.functional", op="linear", seq=[600], id=90, args=[]))
    f = decode([*_bwd_texts(), blk, lin, op, "aten::linear", "aten::mm"]).fields
    assert (f["dir"], f["opDir"], f["op"]) == ("recomp", None, "linear")
    assert f["layer"] == ["layers.1", "layers.1.mlp.up_proj"]
    assert decode([*_bwd_texts(), op, "aten::mm"]).fields["dir"] == "recomp"  # no module: its graph says
    plain = markers.encode(markers.make("op", ns="torch", op="matmul", id=91, args=[]))  # no seq: grad off
    f = decode([*_bwd_texts(), plain, "aten::mm"]).fields
    assert (f["dir"], f["opDir"]) == ("bprop", "fprop")


def test_an_aten_op_of_a_compiled_backward_graph_keeps_its_own_op():
    """The backward node of a compiled region links to the region's forward "op", which has no model:
    the aten ops its graph calls (an SDPA backward kernel) are priced as themselves, in the region's
    layers; under an ordinary node's forward op, an aten op is that op's backward."""
    own = decode(["CompiledFunctionBackward", "aten::_scaled_dot_product_flash_attention_for_cpu_backward"]).fields
    assert own["opDir"] == "fprop"
    region = {"mod": "torch.compile", "op": "Torch-Compiled Region: 0/0", "args": None, "layer": ["Block"]}
    got = link(own, region)
    assert (got["op"], got["mod"], got["opDir"], got["layer"]) == (
        "_scaled_dot_product_flash_attention_for_cpu_backward", "aten", "fprop", ["Block"])
    fwd = {"mod": "torch.nn.functional", "op": "linear", "args": [], "layer": ["fc"]}
    assert (link(own, fwd)["op"], link(own, fwd)["opDir"]) == ("linear", None)
