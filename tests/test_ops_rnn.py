"""The recurrent family's model (pyprof/prof/ops/rnn.py), by hand on aten's argument layout."""

from __future__ import annotations

from pyprof.prof.ops import OpCall, estimate, family, scalar_arg, tensor_arg, tensorlist_arg


def _lstm_args(bidir: bool = False, layers: int = 2, i: int = 64, h: int = 128, b: int = 4, t: int = 16,
               h0_grad: bool | None = None):
    d = 2 if bidir else 1
    params = []
    for layer in range(layers):
        for _ in range(d):
            inp = i if layer == 0 else h * d
            params += [tensor_arg([4 * h, inp]), tensor_arg([4 * h, h]), tensor_arg([4 * h]), tensor_arg([4 * h])]
    hx = tensorlist_arg([tensor_arg([layers * d, b, h], grad=h0_grad), tensor_arg([layers * d, b, h], grad=h0_grad)])
    return [tensor_arg([b, t, i], grad=True), hx, tensorlist_arg(params), scalar_arg(True), scalar_arg(layers),
            scalar_arg(0.0), scalar_arg(True), scalar_arg(bidir), scalar_arg(True)]


def test_lstm_forward_and_backward_by_hand():
    n = 4 * 16
    w_ih1, w_hh, w_ih2 = 512 * 64, 512 * 128, 512 * 128
    fwd = estimate(OpCall("lstm", _lstm_args(), "fprop", None, "aten"))
    assert fwd.flops == 2 * n * (w_ih1 + w_hh + w_ih2 + w_hh)
    # output [4, 16, 128] written; input, parameters (with biases) and the two states read, float32
    params = w_ih1 + w_hh + w_ih2 + w_hh + 4 * 512
    assert fwd.bytes == 4 * (n * 64 + params + 2 * 2 * 4 * 128 + n * 128)
    bwd = estimate(OpCall("lstm", _lstm_args(), "bprop", None, "aten"))
    # weight gradients + input gradients through w_ih + recurrent gradients for every step but the first
    assert bwd.flops == fwd.flops + 2 * n * (w_ih1 + w_ih2) + 2 * (n - 4) * (2 * w_hh)
    with_h0 = estimate(OpCall("lstm", _lstm_args(h0_grad=True), "bprop", None, "aten"))
    assert with_h0.flops == bwd.flops + 2 * 4 * (2 * w_hh)
    assert family("lstm", "aten") == "rnn" and fwd.tensor_op


def test_bidirectional_lstm_doubles_the_weights_and_the_output():
    one = estimate(OpCall("lstm", _lstm_args(layers=1), "fprop", None, "aten"))
    two = estimate(OpCall("lstm", _lstm_args(layers=1, bidir=True), "fprop", None, "aten"))
    assert two.flops == 2 * one.flops


def test_without_the_parameter_list_there_is_no_model():
    args = _lstm_args()
    del args[2]
    assert estimate(OpCall("lstm", args, "fprop", None, "aten")) is None


def _packed_gru_args(batch_sizes=None, steps: int = 5, rows: int = 14, b: int = 4, i: int = 8, h: int = 16,
                     named: bool = False):
    """aten::gru.data: data [N, i], batch_sizes [T], hx [2, b, h], params of a one-layer bidirectional GRU."""
    params = tensorlist_arg([tensor_arg([3 * h, i]), tensor_arg([3 * h, h]), tensor_arg([3 * h]), tensor_arg([3 * h])] * 2)
    sizes = tensor_arg([steps], "int64")
    if batch_sizes is not None:
        sizes["value"] = batch_sizes
    args = [tensor_arg([rows, i]), sizes, tensor_arg([2, b, h]), params, scalar_arg(True), scalar_arg(1),
            scalar_arg(0.0), scalar_arg(True), scalar_arg(True)]
    if named:
        for a, name in zip(args, ("data", "batch_sizes", "hx", "params", "has_biases", "num_layers", "dropout",
                                  "train", "bidirectional"), strict=True):
            a["name"] = name
    return args


def test_packed_gru_prices_the_data_rows_not_the_data_as_a_weight():
    """batch_sizes [4, 3, 3, 2, 2]: N = 14 rows. Forward, every weight once per row; backward, the weight
    gradients, dX through w_ih at every row, and dH through w_hh at every row but the first step of each
    direction: 4 rows forward (batch_sizes[0]), 2 reverse (batch_sizes[-1])."""
    w_ih, w_hh = 48 * 8, 48 * 16
    for args in (_packed_gru_args([4, 3, 3, 2, 2]), _packed_gru_args([4, 3, 3, 2, 2], named=True)):
        fwd = estimate(OpCall("gru", args, "fprop", None, "aten"))
        assert fwd.flops == 2 * 14 * 2 * (w_ih + w_hh)
        bwd = estimate(OpCall("gru", args, "bprop", None, "aten"))
        assert bwd.flops == fwd.flops + 2 * 2 * 14 * w_ih + 2 * (14 - 4) * w_hh + 2 * (14 - 2) * w_hh
        assert bwd.note == ""


def test_packed_gru_without_batch_size_values_infers_the_last_step():
    """A trace has batch_sizes' shape only: the last step's rows are the fewest the shapes allow
    (14 rows over 5 steps of at most 4: at least 14 - 4·4 -> 1), and the note says so; equal lengths
    (20 rows = 5·4) are exact."""
    w_ih, w_hh = 48 * 8, 48 * 16
    bwd = estimate(OpCall("gru", _packed_gru_args(), "bprop", None, "aten"))
    fwd_flops = 2 * 14 * 2 * (w_ih + w_hh)
    assert bwd.flops == fwd_flops + 2 * 2 * 14 * w_ih + 2 * (14 - 4) * w_hh + 2 * (14 - 1) * w_hh
    assert "inferred" in bwd.note
    full = estimate(OpCall("gru", _packed_gru_args(rows=20), "bprop", None, "aten"))
    assert full.flops == 2 * 20 * 2 * (w_ih + w_hh) + 2 * 2 * 20 * w_ih + 2 * 2 * (20 - 4) * w_hh
    assert full.note == ""
