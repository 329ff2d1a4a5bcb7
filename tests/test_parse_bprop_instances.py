"""One backward instance per forward op instance, on Nsight-style input (synthetic exports, tests/nsys_synth.py).

A forward op can create several autograd nodes (``F.linear`` -> ``AddmmBackward0`` and ``TBackward0``;
``F.cross_entropy`` -> ``LogSoftmaxBackward0`` and ``NllLossBackward0``). pyprof.init() opens a ``bwd`` range
around each node on the thread that runs it, carrying the forward op's ``seq`` and ``id``. The parse rule
under test: every backward kernel linked to a forward op instance takes that instance's ``opId`` (with
``dir`` "bprop"), so all nodes of one forward op form ONE backward instance whose kernels ``subSeqId``
numbers 0..n-1 in launch order, and the kernels take the forward op's ``layer``. ``prof`` groups kernels
by (opId, dir), so the op's backward cost is charged once -- not once per node, which is what made
backward FLOPs several times FlopCounterMode's before.

Expected values are written down from the scenario (which kernel runs under which node of which op), never
taken from the parser's output; kernels are found by their correlation ids. The texts are made with
pyprof's own encoder (:func:`pyprof.markers.encode`), in the key order the instrumentation writes
(:func:`test_marker_texts_are_the_instrumentations` checks that against the instrumentation itself).
Backward ranges run on a second thread, as PyTorch's autograd engine runs CUDA work on its device thread.
"""

from __future__ import annotations

import json

import pytest

from pyprof import markers
from pyprof.parse.source import open_source
from tests.conftest import read_record_file, run_main
from tests.nsys_synth import Export, Track

F = "torch.nn.functional"


def _tensor(name: str, shape: list, grad: bool, dtype: str = "float32") -> dict:
    return {"name": name, "type": "tensor", "shape": shape, "dtype": dtype, "device": "cuda:0", "contig": True,
            "grad": grad}


LINEAR_ARGS = [_tensor("input", [32, 64], True), _tensor("weight", [128, 64], True), _tensor("bias", [128], True)]
RELU_ARGS = [_tensor("input", [32, 128], True), {"name": "inplace", "type": "bool", "value": False}]
CE_ARGS = [_tensor("input", [32, 10], True), _tensor("target", [32], False, "int64")]


def op_marker(op: str, args: list, seq: int, op_id: int, line: int) -> str:
    """An op range text, keys in the order ops.build_payload writes them."""
    return markers.encode(markers.make("op", ns=F, op=op, args=args, seq=[seq], id=op_id,
                                       trace=[f"train.py:{line}:forward"]))


def mod_marker(path: str, cls: str, rep: str) -> str:
    return markers.encode(markers.make("mod", path=path, cls=cls, repr=rep))


def bwd_marker(node: str, seq: int, op_id: int, nseq: int) -> str:
    """A backward-node range text: the forward op's seq and id, and the node's own sequence number."""
    return markers.encode(markers.make("bwd", node=node, seq=seq, id=op_id, nseq=nseq))


def _records(path) -> dict[int, dict]:
    """Kernel records by correlation id."""
    return {r["correlationId"]: r for r in open_source(path).records() if r["kind"] == "kernel"}


def _estimate(op: str, args: list, direction: str):
    from pyprof.prof.ops import OpCall, estimate

    return estimate(OpCall(op, args, direction, None, F))


# -- the scenario: fc (F.linear) then act (F.relu); backward on the autograd thread ---------------------
# F.linear's forward, with grad on, takes autograd sequence numbers 17 (TBackward0, the weight
# transpose) and 18 (AddmmBackward0): its marker carries seq [17] and the nodes' ranges seq 17 with
# nseq 18 and 17. F.relu comes next: seq [19], one node ReluBackward0 (nseq 19). The backward runs the
# nodes in reverse: relu's, then AddmmBackward0 (two GEMMs: grad of input and of weight), then
# TBackward0. (pyprof itself does not hook a view node internal to an op, such as linear's TBackward0; it
# stands here for any second node of one op that launches kernels, as cross_entropy's nodes do, which the
# parser must treat the same way: the prof test below runs both.)
LINEAR, RELU = (17, 3), (19, 4)  # (seq, op id)


def _forward(main: Track, pyprof_domain: bool = True) -> dict[str, int]:
    dom = "pyprof" if pyprof_domain else None
    with main.range(mod_marker("fc", "Linear", "Linear(in_features=64, out_features=128, bias=True)"), dom):
        with main.range(op_marker("linear", LINEAR_ARGS, *LINEAR, line=10), dom):
            fwd = main.launch("ampere_sgemm_32x128_tn", duration=6_000).correlation
    with main.range(mod_marker("act", "ReLU", "ReLU()"), dom):
        with main.range(op_marker("relu", RELU_ARGS, *RELU, line=11), dom):
            relu = main.launch("vectorized_elementwise_kernel", duration=2_000).correlation
    return {"linear": fwd, "relu": relu}


def _flat_backward(grad: Track) -> dict[str, int]:
    """Each node's range on its own, one after another."""
    k = {}
    with grad.range(bwd_marker("ReluBackward0", *RELU, nseq=19), "pyprof"):
        k["relu"] = grad.launch("vectorized_elementwise_kernel", duration=2_000).correlation
    with grad.range(bwd_marker("AddmmBackward0", *LINEAR, nseq=18), "pyprof"):
        k["dgrad"] = grad.launch("ampere_sgemm_32x64_nn", duration=3_000).correlation
        k["wgrad"] = grad.launch("ampere_sgemm_128x64_tn", duration=7_000).correlation
    with grad.range(bwd_marker("TBackward0", *LINEAR, nseq=17), "pyprof"):
        k["t"] = grad.launch("reduce_kernel", duration=1_000).correlation
    return k


def _capture(tmp_path, backward=_flat_backward, name="x.sqlite") -> tuple[str, dict[str, int]]:
    ex = Export()
    ks = _forward(ex.track(name="python3"))
    ks.update({f"b_{k}": v for k, v in backward(ex.track(tid=ex.pid + 7, name="pt_autograd_0")).items()})
    return ex.write(tmp_path / name), ks


def test_nodes_of_one_forward_op_are_one_backward_instance(tmp_path):
    """AddmmBackward0's two kernels and TBackward0's kernel, all of one F.linear call, take the forward
    kernel's opId with dir bprop, the forward op's op/args/layer, and subSeqId 0, 1, 2 in launch order;
    the unrelated relu's backward kernel is its own instance (its forward's opId)."""
    path, k = _capture(tmp_path)
    recs = _records(path)
    assert len(recs) == 6
    fwd, relu = recs[k["linear"]], recs[k["relu"]]
    assert (fwd["dir"], fwd["op"], fwd["layer"], fwd["subSeqId"]) == ("fprop", "linear", ["fc"], 0)
    assert (relu["dir"], relu["op"], relu["layer"], relu["subSeqId"]) == ("fprop", "relu", ["act"], 0)
    assert fwd["opId"] is not None and relu["opId"] is not None and fwd["opId"] != relu["opId"]

    bwd = [recs[k[n]] for n in ("b_dgrad", "b_wgrad", "b_t")]  # in launch order
    assert [r["apiStart"] for r in bwd] == sorted(r["apiStart"] for r in bwd)
    for r in bwd:
        assert r["tid"] == 4242 + 7
        assert (r["opId"], r["dir"]) == (fwd["opId"], "bprop")
        assert (r["mod"], r["op"], r["args"], r["layer"]) == (F, "linear", LINEAR_ARGS, ["fc"])
    assert [r["subSeqId"] for r in bwd] == [0, 1, 2]
    assert [r["bwdNode"] for r in bwd] == ["AddmmBackward0", "AddmmBackward0", "TBackward0"]
    assert [r["ranges"][-1]["text"] for r in bwd] == [bwd_marker("AddmmBackward0", *LINEAR, nseq=18)] * 2 + [
        bwd_marker("TBackward0", *LINEAR, nseq=17)]
    assert {x["domain"] for r in bwd for x in r["ranges"]} == {"pyprof"}

    rb = recs[k["b_relu"]]
    assert (rb["opId"], rb["dir"], rb["op"], rb["layer"], rb["subSeqId"]) == (relu["opId"], "bprop", "relu", ["act"], 0)
    # four instances in all: each op once forward and once backward
    assert len({(r["opId"], r["dir"]) for r in recs.values()}) == 4


def _nested_backward(grad: Track) -> dict[str, int]:
    """A user range ``layer:step`` around the whole backward; linear's AddmmBackward0 range opened inside
    relu's node range, and its TBackward0 range inside AddmmBackward0's (nodes run from inside another
    node, as under reentrant checkpointing or a node that calls into instrumented code)."""
    k = {}
    with grad.range("layer:step"):
        with grad.range(bwd_marker("ReluBackward0", *RELU, nseq=19), "pyprof"):
            k["relu"] = grad.launch("vectorized_elementwise_kernel", duration=2_000).correlation
            with grad.range(bwd_marker("AddmmBackward0", *LINEAR, nseq=18), "pyprof"):
                k["dgrad"] = grad.launch("ampere_sgemm_32x64_nn", duration=3_000).correlation
                with grad.range(bwd_marker("TBackward0", *LINEAR, nseq=17), "pyprof"):
                    k["t"] = grad.launch("reduce_kernel", duration=1_000).correlation
                k["wgrad"] = grad.launch("ampere_sgemm_128x64_tn", duration=7_000).correlation
    return k


def test_nested_backward_ranges_and_a_layer_range_on_the_autograd_thread(tmp_path):
    """The innermost node range decides which forward op a kernel belongs to; the kernels take that op's
    layer (["fc"]), not the ``layer:step`` range open on the autograd thread, which stays in ``ranges``;
    subSeqId follows launch order across the nested nodes (dgrad, t, wgrad)."""
    path, k = _capture(tmp_path, _nested_backward)
    recs = _records(path)
    fwd, relu = recs[k["linear"]], recs[k["relu"]]
    step = {"text": "layer:step", "domain": None}
    lin = [recs[k[n]] for n in ("b_dgrad", "b_t", "b_wgrad")]  # launch order
    for r in lin:
        assert (r["opId"], r["dir"], r["op"], r["args"]) == (fwd["opId"], "bprop", "linear", LINEAR_ARGS)
        assert r["layer"] == ["fc"]
        assert r["ranges"][0] == step
    assert [r["subSeqId"] for r in lin] == [0, 1, 2]
    assert [r["bwdNode"] for r in lin] == ["AddmmBackward0", "TBackward0", "AddmmBackward0"]
    assert [len(r["ranges"]) for r in lin] == [3, 4, 3]
    rb = recs[k["b_relu"]]
    assert (rb["opId"], rb["dir"], rb["op"], rb["layer"], rb["subSeqId"]) == (relu["opId"], "bprop", "relu", ["act"], 0)
    assert rb["ranges"] == [step, {"text": bwd_marker("ReluBackward0", *RELU, nseq=19), "domain": "pyprof"}]


# -- prof: the backward priced once ---------------------------------------------------------------------
def _cross_entropy_capture(tmp_path) -> tuple[str, dict[str, int]]:
    """F.cross_entropy as pyprof records it: one op range (seq [10], id 7), two nodes that both launch
    kernels (NllLossBackward0 nseq 11 runs first, then LogSoftmaxBackward0 nseq 10)."""
    ex = Export()
    main, grad = ex.track(), ex.track(tid=ex.pid + 7, name="pt_autograd_0")
    k = {}
    with main.range(mod_marker("loss", "CrossEntropyLoss", "CrossEntropyLoss()"), "pyprof"):
        with main.range(op_marker("cross_entropy", CE_ARGS, 10, 7, line=20), "pyprof"):
            k["f_softmax"] = main.launch("cunn_SoftMaxForward", duration=2_000).correlation
            k["f_nll"] = main.launch("nll_loss_forward_reduce_cuda_kernel_2d", duration=1_000).correlation
    with grad.range(bwd_marker("NllLossBackward0", 10, 7, nseq=11), "pyprof"):
        k["b_fill"] = grad.launch("vectorized_elementwise_kernel", duration=1_000).correlation
        k["b_nll"] = grad.launch("nll_loss_backward_reduce_cuda_kernel_2d", duration=1_000).correlation
    with grad.range(bwd_marker("LogSoftmaxBackward0", 10, 7, nseq=10), "pyprof"):
        k["b_softmax"] = grad.launch("cunn_SoftMaxBackward", duration=2_000).correlation
    return ex.write(tmp_path / "ce.sqlite"), k


@pytest.mark.parametrize("case", ["linear", "cross_entropy"])
def test_prof_prices_the_backward_once(tmp_path, case):
    """Summed over an op's backward kernels, prof's FLOPs (and bytes) are ONE estimate of the op's bprop
    cost, not one per node; the forward likewise one fprop estimate."""
    from pyprof.prof import build

    if case == "linear":
        path, k = _capture(tmp_path)
        op, args, fwd_keys, bwd_keys = "linear", LINEAR_ARGS, ["linear"], ["b_dgrad", "b_wgrad", "b_t"]
    else:
        path, k = _cross_entropy_capture(tmp_path)
        op, args, fwd_keys, bwd_keys = "cross_entropy", CE_ARGS, ["f_softmax", "f_nll"], ["b_fill", "b_nll", "b_softmax"]
    recs = list(open_source(path).records())
    df = build(recs)
    row = {r["correlationId"]: i for i, r in enumerate(recs)}
    for keys, direction in ((bwd_keys, "bprop"), (fwd_keys, "fprop")):
        est = _estimate(op, args, direction)
        assert est is not None and est.flops > 0
        sel = df.iloc[[row[k[x]] for x in keys]]
        assert set(sel["dir"]) == {direction} and set(sel["op"]) == {op} and sel["opid"].nunique() == 1
        assert sel["flops"].sum() == pytest.approx(est.flops, rel=1e-12)
        assert sel["bytes"].sum() == pytest.approx(est.bytes, rel=1e-12)


def test_cli_parse_then_prof(tmp_path, capsys):
    """End to end through the CLI: ``pyprof parse x.sqlite -o x.dict``, then ``pyprof prof --json``:
    linear's three backward kernels are one instance (one opid, sub 0..2) whose FLOPs add up to one
    bprop estimate."""
    path, k = _capture(tmp_path)
    out = tmp_path / "x.dict"
    code, _, err = run_main(capsys, ["parse", path, "-o", out])
    assert code == 0, err
    assert "6 kernels" in err and "100.0% attributed" in err and "nsys 2024.6.2.225" in err
    lines = read_record_file(out)
    assert len(lines) == 6
    code, text, err = run_main(capsys, ["prof", "--json", "-c", "idx,opid,dir,sub,op,layer,flops", out])
    assert code == 0, err
    rows = [json.loads(x) for x in text.splitlines()]
    by_corr = {rec["correlationId"]: row for rec, row in zip(lines, rows, strict=True)}
    fwd = by_corr[k["linear"]]
    bwd = [by_corr[k[n]] for n in ("b_dgrad", "b_wgrad", "b_t")]
    assert {(r["opid"], r["dir"], r["op"]) for r in bwd} == {(fwd["opid"], "bprop", "linear")}
    assert [r["sub"] for r in bwd] == [0, 1, 2]
    assert sum(r["flops"] for r in bwd) == pytest.approx(_estimate("linear", LINEAR_ARGS, "bprop").flops, rel=1e-12)
    assert {r["opid"] for r in rows if r["op"] == "linear" and r["dir"] == "bprop"} == {fwd["opid"]}


# -- emit_nvtx text ---------------------------------------------------------------------------------------
def test_emit_nvtx_node_links_into_the_forward_op_instance(tmp_path):
    """PyTorch >= 1.x emit_nvtx, F.linear: ``aten::linear, seq = 5`` around ``aten::t, seq = 5`` (TBackward0,
    no kernel) and ``aten::addmm, seq = 6`` (the GEMM). The op instance of an aten-only source is the
    outermost aten range. AddmmBackward0's kernels (``AddmmBackward0, seq = 6`` inside
    ``autograd::engine::evaluate_function: AddmmBackward0``; inner ops carry the backward thread's
    ``seq = 0``) take the forward GEMM's opId, op "linear", subSeqId 0..2."""
    ex = Export()
    main, grad = ex.track(), ex.track(tid=ex.pid + 7, name="pt_autograd_0")
    with main.range("aten::linear, seq = 5"):
        with main.range("aten::t, seq = 5"):
            with main.range("aten::transpose, seq = 5"):
                pass
        with main.range("aten::addmm, seq = 6"):
            fwd = main.launch("ampere_sgemm_32x128_tn").correlation
    bwd = []
    with grad.range("autograd::engine::evaluate_function: AddmmBackward0"):
        with grad.range("AddmmBackward0, seq = 6"):
            for aten, kernel in (("aten::mm, seq = 0", "ampere_sgemm_32x64_nn"),
                                 ("aten::mm, seq = 0", "ampere_sgemm_128x64_tn"),
                                 ("aten::sum, seq = 0", "reduce_kernel")):
                with grad.range(aten):
                    bwd.append(grad.launch(kernel).correlation)
    with grad.range("autograd::engine::evaluate_function: TBackward0"):
        with grad.range("TBackward0, seq = 5"):
            pass
    recs = _records(ex.write(tmp_path / "e.sqlite"))
    f = recs[fwd]
    assert (f["mod"], f["op"], f["dir"], f["seqId"]) == ("aten", "linear", "fprop", [5, 6])
    b = [recs[c] for c in bwd]
    assert {(r["opId"], r["dir"], r["op"], r["bwdNode"]) for r in b} == {(f["opId"], "bprop", "linear", "AddmmBackward0")}
    assert [r["subSeqId"] for r in b] == [0, 1, 2]
    assert all(r["altSeqId"] == [6] for r in b)


def _cross_entropy_emit_nvtx(main: Track, grad: Track) -> dict[str, int]:
    """F.cross_entropy under emit_nvtx (PyTorch 2.x text): every kernel runs in aten ranges nested inside
    ``aten::cross_entropy_loss, seq = 10``, which launches none itself; LogSoftmaxBackward0 is node 10,
    NllLossBackward0 node 11."""
    k = {}
    with main.range("aten::cross_entropy_loss, seq = 10"):
        with main.range("aten::log_softmax, seq = 10"):
            with main.range("aten::_log_softmax, seq = 10"):
                k["f_softmax"] = main.launch("cunn_SoftMaxForward").correlation
        with main.range("aten::nll_loss_nd, seq = 11"):
            with main.range("aten::nll_loss, seq = 11"):
                with main.range("aten::nll_loss_forward, seq = 11"):
                    k["f_nll"] = main.launch("nll_loss_forward_reduce_cuda_kernel_2d").correlation
    for node, seq, aten, kernel in (("NllLossBackward0", 11, "aten::nll_loss_backward", "nll_loss_backward_reduce_cuda_kernel_2d"),
                                    ("LogSoftmaxBackward0", 10, "aten::_log_softmax_backward_data", "cunn_SoftMaxBackward")):
        with grad.range(f"autograd::engine::evaluate_function: {node}"):
            with grad.range(f"{node}, seq = {seq}"):
                with grad.range(f"{aten}, seq = 0"):
                    k[node] = grad.launch(kernel).correlation
    return k


def test_emit_nvtx_two_nodes_of_one_op_share_one_opid(tmp_path):
    """emit_nvtx text only: the kernels of both nodes of one cross_entropy call share one opId, the
    forward kernels' (the outermost aten range, aten::cross_entropy_loss)."""
    ex = Export()
    k = _cross_entropy_emit_nvtx(ex.track(), ex.track(tid=ex.pid + 7, name="pt_autograd_0"))
    recs = _records(ex.write(tmp_path / "ce.sqlite"))
    f1, f2 = recs[k["f_softmax"]], recs[k["f_nll"]]
    assert f1["opId"] == f2["opId"] and (f1["op"], f1["subSeqId"], f2["subSeqId"]) == ("cross_entropy_loss", 0, 1)
    b = [recs[k["NllLossBackward0"]], recs[k["LogSoftmaxBackward0"]]]
    assert all((r["dir"], r["op"]) == ("bprop", "cross_entropy_loss") for r in b)  # linked: holds today
    assert [r["opId"] for r in b] == [f1["opId"]] * 2
    assert [r["subSeqId"] for r in b] == [0, 1]


def test_pyprof_markers_under_emit_nvtx_price_the_backward_once(tmp_path):
    """pyprof.init() inside torch.autograd.profiler.emit_nvtx(): the op range (seq [10], id 7) encloses
    the aten ranges that launch the kernels; each node runs inside the engine's evaluate_function range,
    pyprof's bwd range, then the node's own emit_nvtx range. Both nodes' kernels are one bprop instance
    (the op range's opId) and prof charges one bprop estimate."""
    from pyprof.prof import build

    ex = Export()
    main, grad = ex.track(), ex.track(tid=ex.pid + 7, name="pt_autograd_0")
    k = {}
    with main.range(op_marker("cross_entropy", CE_ARGS, 10, 7, line=20), "pyprof"):
        with main.range("aten::cross_entropy_loss, seq = 10"):
            with main.range("aten::log_softmax, seq = 10"):
                with main.range("aten::_log_softmax, seq = 10"):
                    k["fwd"] = main.launch("cunn_SoftMaxForward").correlation
            with main.range("aten::nll_loss_nd, seq = 11"):
                with main.range("aten::nll_loss_forward, seq = 11"):
                    main.launch("nll_loss_forward_reduce_cuda_kernel_2d")
    for node, nseq, kernel in (("NllLossBackward0", 11, "nll_loss_backward_reduce_cuda_kernel_2d"),
                               ("LogSoftmaxBackward0", 10, "cunn_SoftMaxBackward")):
        with grad.range(f"autograd::engine::evaluate_function: {node}"):
            with grad.range(bwd_marker(node, 10, 7, nseq), "pyprof"):
                with grad.range(f"{node}, seq = {nseq}"):
                    with grad.range("aten::some_backward_op, seq = 0"):
                        k[node] = grad.launch(kernel).correlation
    recs = list(open_source(ex.write(tmp_path / "both.sqlite")).records())
    by = {r["correlationId"]: r for r in recs}
    b = [by[k["NllLossBackward0"]], by[k["LogSoftmaxBackward0"]]]
    assert all((r["dir"], r["op"], r["args"]) == ("bprop", "cross_entropy", CE_ARGS) for r in b)  # holds today
    df = build(recs)
    bflops = df.loc[df["dir"] == "bprop", "flops"].sum()
    assert bflops == pytest.approx(_estimate("cross_entropy", CE_ARGS, "bprop").flops, rel=1e-12)
    assert [r["opId"] for r in b] == [by[k["fwd"]]["opId"]] * 2


def test_torch_1_0_stashed_seq_links_the_backward(tmp_path):
    """PyTorch 1.0/1.1 emit_nvtx wrote forward ops as ``addmm, seq=5`` and each backward node as
    ``AddmmBackward, stashed seq=5`` (profiler.cpp ``RecordFunction(Function*)``; the emit_nvtx docs still
    describe ``stashed seq`` on backward Functions, and the README lists the form). The node's kernels
    link to the forward op: its opId, op "addmm", altSeqId [5]."""
    ex = Export()
    main, grad = ex.track(), ex.track(tid=ex.pid + 7, name="python3")
    with main.range("addmm, seq=5"):
        fwd = main.launch("sgemm_128x64_nn").correlation
    bwd = []
    with grad.range("AddmmBackward, stashed seq=5"):
        for kernel in ("sgemm_128x64_nt", "sgemm_128x64_tn"):
            with grad.range("mm, seq=0"):
                bwd.append(grad.launch(kernel).correlation)
    recs = _records(ex.write(tmp_path / "t10.sqlite"))
    f = recs[fwd]
    assert (f["op"], f["dir"]) == ("addmm", "fprop")
    b = [recs[c] for c in bwd]
    assert all(r["dir"] == "bprop" and r["bwdNode"] == "AddmmBackward" for r in b)  # holds today
    assert [(r["opId"], r["op"], r["altSeqId"]) for r in b] == [(f["opId"], "addmm", [5])] * 2
    assert [r["subSeqId"] for r in b] == [0, 1]


# -- the builder and the texts are faithful --------------------------------------------------------------
def test_registered_strings_and_default_domain_read_the_same(tmp_path):
    """The same capture with pyprof's ranges as registered strings (textId, the Python nvtx package's
    path) in the default domain gives the same instances: the message form does not matter."""
    ex = Export()
    main, grad = ex.track(), ex.track(tid=ex.pid + 7, name="pt_autograd_0")
    with main.range(mod_marker("fc", "Linear", "Linear()"), registered=True):
        with main.range(op_marker("linear", LINEAR_ARGS, *LINEAR, line=10), registered=True):
            fwd = main.launch("ampere_sgemm_32x128_tn").correlation
    bwd = []
    for node, nseq in (("AddmmBackward0", 18), ("TBackward0", 17)):
        with grad.range(bwd_marker(node, *LINEAR, nseq=nseq), registered=True):
            bwd.append(grad.launch("ampere_sgemm_32x64_nn").correlation)
    recs = _records(ex.write(tmp_path / "reg.sqlite"))
    assert recs[fwd]["ranges"][-1] == {"text": op_marker("linear", LINEAR_ARGS, *LINEAR, line=10), "domain": None}
    assert [(recs[c]["opId"], recs[c]["layer"], recs[c]["subSeqId"]) for c in bwd] == [
        (recs[fwd]["opId"], ["fc"], 0), (recs[fwd]["opId"], ["fc"], 1)]


def test_builder_checks_what_a_capture_guarantees(tmp_path):
    """Popped ranges of one thread nest (they may end in the same tick); a kernel starts after its launch."""
    ex = Export()
    t = ex.thread()
    ex.range(t, "a", 10, 20)
    ex.range(t, "b", 15, 25)
    with pytest.raises(ValueError, match="does not nest"):
        ex.write(tmp_path / "bad1.sqlite")
    ex = Export()
    t = ex.thread()
    ex.range(t, "a", 10, 20)
    ex.range(t, "b", 12, 20)
    ex.never_popped(t, "c", 15)  # (ends at the capture's end: it need not nest)
    ex.write(tmp_path / "same_tick.sqlite")
    with pytest.raises(ValueError, match="kernel"):
        ex.kernel(t, "k", 100, 110, 90, 120)


@pytest.mark.torch
def test_marker_texts_are_the_instrumentations():
    """The texts these tests build equal what pyprof.init() writes: the op payload of
    ops.build_payload (call site aside; tensors on CPU here) and the bwd template of annotate.backward."""
    torch = pytest.importorskip("torch")
    from pyprof.annotate import backward, ops

    x = torch.zeros(32, 64, requires_grad=True)
    w = torch.zeros(128, 64, requires_grad=True)
    b = torch.zeros(128, requires_grad=True)
    real = ops.build_payload(ops.OpMeta(F, "linear", torch.nn.functional.linear), (x, w, b), {}, LINEAR[1],
                             LINEAR[0])
    ours = op_marker("linear", LINEAR_ARGS, *LINEAR, line=10)
    real_d, ours_d = json.loads(real), json.loads(ours)
    assert list(real_d) == list(ours_d)  # same keys, same order
    real_d["trace"] = ours_d["trace"]
    for a in real_d["args"]:
        a["device"] = "cuda:0"
    assert markers.encode(real_d) == ours
    assert backward._BWD % (markers.VERSION, "AddmmBackward0", *LINEAR, 18) == bwd_marker("AddmmBackward0", *LINEAR,
                                                                                        nseq=18)


@pytest.mark.corpus
def test_builder_layout_matches_a_real_export(tmp_path):
    """Every table the builder writes exists in a real nsys 2024.6.2 export with the same columns, in the
    same order, with the same declared types (skipped where the shared corpus is absent)."""
    import sqlite3

    from tests.conftest import corpus_file

    real = corpus_file("zx3xyy__assignment2-systems__result_2_7B_nvtx")
    ours = Export().write(tmp_path / "empty.sqlite")

    def layout(path, table):
        c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return [(r[1], r[2]) for r in c.execute(f'PRAGMA table_info("{table}")')]
        finally:
            c.close()

    from tests.nsys_synth import SCHEMA

    for table in SCHEMA:
        assert layout(ours, table) == layout(real, table), table
