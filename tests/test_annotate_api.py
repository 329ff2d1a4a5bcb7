"""pyprof.wrap, pyprof.range, pyprof.step, optimizer ranges and autocast compute dtypes."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")

import pyprof  # noqa: E402
from pyprof.annotate import add_step_callback, autocast, remove_step_callback  # noqa: E402
from pyprof.annotate.recorder import Recorder  # noqa: E402
from pyprof.errors import UsageError  # noqa: E402


class Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.mul(x, x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * 2 * x


def test_wrap_custom_autograd_function_forward_and_backward(initialized):
    pyprof.wrap(Square, "forward")
    pyprof.wrap(Square, "backward")
    pyprof.wrap(Square, "forward")  # twice: a no-op
    x = torch.arange(3.0, requires_grad=True)
    with Recorder() as rec:
        y = Square.apply(x)
        y.sum().backward()
    assert torch.equal(x.grad, 2 * torch.arange(3.0))
    wrapped = [p for p in rec.payloads("op") if p["ns"] == "wrap"]
    assert [p["op"] for p in wrapped] == ["Square.forward", "Square.backward"]
    fwd = wrapped[0]
    assert fwd["args"][1]["shape"] == [3] and fwd["args"][1]["grad"] is True
    # the torch op inside the wrapped forward gets its own range nested in it (composite)
    mul = [p for p in rec.payloads("op") if p["op"] == "mul"]
    assert mul and mul[0]["_parents"][-1]["op"] == "Square.forward"
    assert not rec.open_ranges()


def test_wrap_is_undone_by_deinit():
    orig_fwd = Square.__dict__["forward"]
    pyprof.init()
    pyprof.wrap(Square, "forward")
    assert Square.__dict__["forward"] is not orig_fwd
    pyprof.deinit()
    assert Square.__dict__["forward"] is orig_fwd


def test_wrap_c_function_and_custom_module(initialized):
    ext = types.ModuleType("my_ext")
    ext.gelu = torch._C._nn.gelu  # a C function
    pyprof.wrap(ext, "gelu")

    class Block(torch.nn.Module):
        def forward(self, x):
            return ext.gelu(x) + 1

    pyprof.wrap(Block, "forward")
    x = torch.randn(4)
    with Recorder() as rec:
        out = Block()(x)
    assert torch.equal(out, torch._C._nn.gelu(x) + 1)
    ops = [p["op"] for p in rec.payloads("op") if p["ns"] == "wrap"]
    assert ops == ["Block.forward", "my_ext.gelu"]
    gelu = [p for p in rec.payloads("op") if p["op"] == "my_ext.gelu"][0]
    assert gelu["args"][0]["shape"] == [4]
    assert [q["k"] for q in gelu["_parents"]] == ["mod", "op"]


def test_wrap_rejects_missing_or_non_callable():
    with pytest.raises(UsageError, match="has no attribute"):
        pyprof.wrap(Square, "nope")
    with pytest.raises(UsageError, match="not callable"):
        pyprof.wrap(types.SimpleNamespace(v=1), "v")


def test_user_range_context_manager_and_decorator(initialized):
    @pyprof.range("decorated")
    def f(x):
        return torch.relu(x)

    with Recorder() as rec:
        with pyprof.range("block"):
            torch.sin(torch.ones(2))
        f(torch.ones(2))
    relu = [p for p in rec.payloads("op") if p["op"] == "relu"][0]
    assert relu["_parents"] == [{"pyprof": 1, "k": "range", "name": "decorated"}]
    sin = [p for p in rec.payloads("op") if p["op"] == "sin"][0]
    assert sin["_parents"][0]["name"] == "block"
    with pytest.raises(UsageError):
        pyprof.range("")


def test_step_callbacks():
    seen = []

    def cb():
        seen.append(len(seen))

    add_step_callback(cb)
    try:
        pyprof.step()
        pyprof.step()
    finally:
        remove_step_callback(cb)
    pyprof.step()
    remove_step_callback(cb)  # removing twice is harmless
    assert seen == [0, 1]


def test_optimizer_step_range(initialized):
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, foreach=False)
    with Recorder() as rec:
        model(torch.ones(1, 3)).sum().backward()
        opt.step()
    optim = rec.payloads("optim")
    assert optim == [{"pyprof": 1, "k": "optim", "cls": "AdamW", "_parents": []}]
    inside = [p for p in rec.payloads("op") if any(q["k"] == "optim" for q in p["_parents"])]
    assert inside, "the optimizer's tensor ops should nest in its range"
    assert not rec.open_ranges()


def test_cpu_autocast_records_bf16_compute_dtype(initialized):
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(2, 8)
    with Recorder() as rec, torch.autocast("cpu", dtype=torch.bfloat16):
        y = lin(x)
        z = torch.relu(x)
        m = x @ x.t()
    assert y.dtype == torch.bfloat16 and z.dtype == torch.float32 and m.dtype == torch.bfloat16
    ops = {p["op"]: p for p in rec.payloads("op")}
    assert ops["linear"]["cdtype"] == "bfloat16"
    assert ops["linear"]["args"][0]["dtype"] == "float32"  # args keep the dtype they were called with
    assert ops["__matmul__"]["cdtype"] == "bfloat16"
    assert "cdtype" not in ops["relu"]
    assert autocast.compute_dtype("linear", "meta") is None  # a device type autocast does not know
    with Recorder() as rec:
        lin(x)
    assert "cdtype" not in rec.payloads("op")[0]


def test_stack_depth_keeps_more_frames():
    pyprof.init(stack_depth=3)
    try:
        def inner():
            return torch.relu(torch.ones(1))

        def outer():
            return inner()

        with Recorder() as rec:
            outer()
    finally:
        pyprof.deinit()
    relu = [p for p in rec.payloads("op") if p["op"] == "relu"][0]
    assert [t.rsplit(":", 1)[1] for t in relu["trace"]] == ["inner", "outer", "test_stack_depth_keeps_more_frames"]


def test_profiler_names_round_trip_odd_characters():
    from pyprof import markers

    text = markers.encode(markers.make("op", op="x", trace=['C:\\a %22b\\"c.py:1:f', "100%"]))
    name = markers.to_profiler_name(text)
    assert '"' not in name and "\\" not in name and name.startswith(markers.PROFILER_PREFIX)
    assert markers.from_profiler_name(name) == text
    assert markers.from_profiler_name("aten::mm") == "aten::mm"


def test_operator_dunders_and_extra_namespaces_emit_op_ranges(initialized):
    a, b = torch.ones(2, 2), torch.eye(2)
    with Recorder() as rec:
        _ = a @ b, a == b, -a, a ** 2, 1 - a, a[0]
        torch.linalg.norm(a)
        torch.fft.fft(a)
        torch.special.expit(a)
    got = {(p["ns"], p["op"]) for p in rec.payloads("op")}
    expected = {("torch.Tensor", n) for n in ("__matmul__", "__eq__", "__neg__", "__pow__", "__rsub__", "__getitem__")}
    expected |= {("torch.linalg", "norm"), ("torch.fft", "fft"), ("torch.special", "expit")}
    assert expected <= got
    rsub = next(p for p in rec.payloads("op") if p["op"] == "__rsub__")
    assert rsub["args"][0]["type"] == "tensor" and rsub["args"][1] == {"name": "other", "type": "int", "value": 1}


def test_init_refuses_torch_below_the_floor(monkeypatch):
    """One clear error and nothing patched where torch is older than the floor CI tests."""
    from pyprof.annotate import TORCH_FLOOR, check_torch

    floor = ".".join(map(str, TORCH_FLOOR))
    older = f"{TORCH_FLOOR[0]}.{TORCH_FLOOR[1] - 1}.1"
    monkeypatch.setattr(torch, "__version__", older)
    with pytest.raises(UsageError, match=f"needs torch {floor} or newer, and this is torch {older}"):
        pyprof.init()
    assert not pyprof.is_initialized()
    assert isinstance(torch.relu, types.BuiltinFunctionType)
    for ok in (f"{floor}.0", f"{floor}.1+cu121", "2.14.1+cu130", "3.0.0a0"):
        check_torch(ok)
    for bad in ("1.13.1", "2.3.1+cpu", "nightly"):
        with pytest.raises(UsageError):
            check_torch(bad)
