"""pyprof.init() safety: restoration, idempotence, balance under exceptions, threads, no_grad,
TorchScript, torch.compile, DataLoader workers, lazy mode, nesting, torch.profiler traces."""

from __future__ import annotations

import importlib
import json
import threading

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

import pyprof  # noqa: E402
from pyprof import markers  # noqa: E402
from pyprof.annotate import ops as ann_ops  # noqa: E402
from pyprof.annotate.recorder import Recorder  # noqa: E402


def _snapshot():
    owners = [torch, torch.Tensor, F, torch.linalg, torch.fft, torch.special]
    return {(id(o), k): v for o in owners for k, v in list(vars(o).items())}


def test_deinit_restores_every_original_exactly():
    import torch.nn.modules.module as mm

    before = _snapshot()
    hooks_before = (dict(mm._global_forward_pre_hooks), dict(mm._global_forward_hooks))
    engine_before = torch.autograd._engine_run_backward
    call_before = vars(torch.nn.Module)["__call__"]
    pyprof.init()
    assert pyprof.is_initialized()
    assert torch.add is not before[(id(torch), "add")]
    assert "__add__" in vars(torch.Tensor) or torch.Tensor.__add__ is not before.get((id(torch.Tensor), "__add__"))
    pyprof.deinit()
    after = _snapshot()
    assert after.keys() == before.keys()
    changed = [k for k in before if after[k] is not before[k]]
    assert not changed
    assert (dict(mm._global_forward_pre_hooks), dict(mm._global_forward_hooks)) == hooks_before
    assert torch.autograd._engine_run_backward is engine_before
    assert vars(torch.nn.Module)["__call__"] is call_before
    assert not pyprof.is_initialized()


def test_second_init_is_a_noop(initialized):
    add = torch.add
    pyprof.init(nested=True)
    assert torch.add is add
    from pyprof.annotate.state import S

    assert S.nested is False


def test_bad_option_is_a_usage_error():
    from pyprof.errors import UsageError

    with pytest.raises(UsageError, match="unknown pyprof.init"):
        pyprof.init(colour=True)
    with pytest.raises(UsageError, match="stack_depth"):
        pyprof.init(stack_depth=0)
    assert not pyprof.is_initialized()


def test_exception_inside_op_and_module_keeps_ranges_balanced(initialized):
    class Boom(torch.nn.Module):
        def forward(self, x):
            return torch.mm(x, x)  # shape error

    outer = torch.nn.Sequential(Boom())
    with Recorder() as rec:
        with pytest.raises(RuntimeError):
            torch.mm(torch.ones(2, 3), torch.ones(2, 3))
        with pytest.raises(RuntimeError):
            outer(torch.ones(2, 3))
        torch.relu(torch.ones(2))  # a later op is at depth 0 again
    assert not rec.open_ranges()
    last = rec.payloads("op")[-1]
    assert last["op"] == "relu" and last["_parents"] == []


def test_a_call_that_raised_is_followed_by_a_raised_range(initialized):
    """The op's range closes, then an empty ``raised`` range opens and closes at the same depth (the
    parser's sign that the op did no work); the user's exception is the one that propagates, and a call
    that returns leaves no such range."""
    a, b, c = torch.ones(2), torch.ones(2, 3), torch.ones(2, 3)
    with Recorder() as rec:
        torch.relu(a)
        with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
            torch.mm(b, c)
        torch.relu(a)
    assert not rec.open_ranges()
    got = [(p["k"], p.get("op"), p["_parents"]) for p in rec.payloads()]
    assert got == [("op", "relu", []), ("op", "mm", []), ("raised", None, []), ("op", "relu", [])], got


def test_exception_in_backward_keeps_ranges_balanced(initialized):
    class Fail(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise ValueError("boom")

    x = torch.ones(3, requires_grad=True)
    with Recorder() as rec:
        y = torch.sin(Fail.apply(torch.cos(x)))
        with pytest.raises(ValueError):
            y.sum().backward()
        torch.relu(torch.ones(2))
    assert not rec.open_ranges()
    assert rec.payloads("op")[-1]["_parents"] == []


def test_threads_record_their_own_ranges(initialized):
    model = torch.nn.Linear(4, 4)
    errors = []
    barrier = threading.Barrier(4)

    def work():
        try:
            barrier.wait()
            for _ in range(20):
                model(torch.ones(2, 4)).sum().backward()
            barrier.wait()  # all four alive at once: four distinct thread ids
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    with Recorder() as rec:
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    assert not rec.open_ranges()
    mods = [r for r in rec.ranges if '"k":"mod"' in r.text]
    assert len({r.tid for r in mods}) == 4 and len(mods) == 80
    for r in rec.ranges:  # each op nests only in ranges of its own thread
        if '"k":"op"' in r.text and '"op":"linear"' in r.text:
            assert any('"k":"mod"' in p for p in r.parents)
    ids = [p["id"] for p in rec.payloads("op")]
    assert len(ids) == len(set(ids))


def test_no_grad_and_views_and_inplace(initialized):
    x = torch.arange(12.0).reshape(3, 4)
    with Recorder() as rec, torch.no_grad():
        v = x[1:, ::2]
        v.add_(1)
        x += 1
        y = x.t().contiguous()
    assert torch.equal(y, (torch.arange(12.0).reshape(3, 4) + torch.tensor([[0, 0, 0, 0], [1, 0, 1, 0], [1, 0, 1, 0]]) + 1).t())
    names = [p["op"] for p in rec.payloads("op")]
    assert {"__getitem__", "add_", "__iadd__", "t", "contiguous"} <= set(names)
    assert all("seq" not in p for p in rec.payloads("op"))


def test_nested_calls_are_suppressed_except_in_composites(initialized):
    # F.softmax -> Tensor.softmax internally: one range, not two
    with Recorder() as rec:
        F.softmax(torch.ones(2, 3), dim=1)
    assert [p["op"] for p in rec.payloads("op")] == ["ones", "softmax"]
    # multi_head_attention_forward: inner linear/sdpa ops emit ranges nested in it
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    q = torch.randn(1, 3, 8)
    with Recorder() as rec:
        mha(q, q, q, need_weights=False)
    inner = [p for p in rec.payloads("op")
             if any(a.get("op") == "multi_head_attention_forward" for a in p["_parents"])]
    assert {"linear", "scaled_dot_product_attention"} <= {p["op"] for p in inner}
    # ... but ops inside those inner ops stay silent
    assert all(sum(a["k"] == "op" for a in p["_parents"]) == 1 for p in inner)


def test_nested_option_emits_all_levels():
    pyprof.init(nested=True)
    try:
        with Recorder() as rec:
            F.softmax(torch.ones(2, 3), dim=1)
    finally:
        pyprof.deinit()
    ops = rec.payloads("op")
    sm = [p for p in ops if p["op"] == "softmax"]
    assert len(sm) == 2 and sm[1]["_parents"][-1]["op"] == "softmax"
    assert sm[0]["ns"] == "torch.nn.functional" and sm[1]["ns"] == "torch.Tensor"


def _count_payload_builds(monkeypatch) -> list:
    """Count payload builds, by the Python builder and by the C accelerator where it was built."""
    calls: list = []
    for attr in ("build_payload", "_fast_call"):
        real = getattr(ann_ops, attr)
        if real is not None:
            monkeypatch.setattr(ann_ops, attr, lambda *a, _real=real, **k: calls.append(1) or _real(*a, **k))
    return calls


def test_lazy_mode_builds_no_payload_without_a_consumer(initialized, monkeypatch):
    calls = _count_payload_builds(monkeypatch)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    model(torch.ones(2, 4)).sum().backward()
    assert calls == []
    assert not pyprof.annotate.consumer_active()
    with Recorder():
        model(torch.ones(2, 4))
    assert len(calls) >= 3  # ones, linear, relu


def test_lazy_false_builds_payloads_without_consumer(monkeypatch):
    pyprof.init(lazy=False)
    try:
        calls = _count_payload_builds(monkeypatch)
        torch.relu(torch.ones(2))
        assert len(calls) == 2
    finally:
        pyprof.deinit()


def test_torch_profiler_trace_holds_the_markers(initialized, tmp_path):
    lin = torch.nn.Linear(4, 2)
    with Recorder():  # ranges before the session: the C path has read "no profiler" (and keeps it
        lin(torch.ones(3, 4)).sum()  # until torch.autograd.profiler's module dict changes)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        lin(torch.ones(3, 4)).sum()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]  # must still be valid JSON
    found = [markers.decode(markers.from_profiler_name(e["name"])) for e in events
             if e.get("name", "").startswith(markers.PROFILER_PREFIX)]
    assert {"ones", "linear", "sum"} <= {p["op"] for p in found if p["k"] == "op"}
    mod = [p for p in found if p["k"] == "mod"]
    assert mod and mod[0]["cls"] == "Linear"
    lin_op = next(p for p in found if p.get("op") == "linear")
    assert lin_op["args"][0]["shape"] == [3, 4]


def test_jit_script_and_trace_work(initialized):
    @torch.jit.script
    def f(x):
        return torch.relu(torch.add(x, 1)) + F.relu(x) + F.max_pool1d(x.unsqueeze(0), 1).squeeze(0)

    x = torch.randn(3, 4)
    expected = torch.relu(x + 1) + torch.relu(x) + x
    assert torch.allclose(f(x), expected)
    traced = torch.jit.trace(lambda t: torch.relu(t) * 2, torch.randn(3))
    with Recorder():
        assert torch.equal(traced(x), torch.relu(x) * 2)
    graph = str(traced.graph)
    assert "aten::relu" in graph and "aten::mul" in graph


def test_torch_compile_runs_correctly():
    lin = torch.nn.Linear(5, 5)  # a module too: its range (Python or C path) must not break the graph

    def fn(x):
        return lin(torch.sin(x) * 2 + x.cos())

    x = torch.randn(5)
    try:  # can this machine compile at all (without pyprof)?
        torch.compile(lambda t: t + 1, backend="eager")(x)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"torch.compile unavailable here: {type(exc).__name__}: {str(exc)[:100]}")
    pyprof.init()
    try:
        # fullgraph=True: a graph break caused by pyprof's wrappers would raise here
        compiled = torch.compile(fn, backend="eager", fullgraph=True)
        with Recorder():
            got = compiled(x)
        plain = torch.compile(fn, backend="eager", fullgraph=True)
        got2 = plain(x)  # compiled with no consumer
    finally:
        pyprof.deinit()
    assert torch.equal(got, fn(x)) and torch.equal(got2, fn(x))


def test_no_markers_while_a_compile_session_runs_ops_for_real(initialized, monkeypatch):
    # torch.compile / torch.export may run torch.* and modules for real while they compile (on fake
    # tensors): ``torch.compiler._is_compiling_flag`` is True then, and the wrappers emit nothing
    if not hasattr(torch.compiler, "_is_compiling_flag"):
        pytest.skip("this torch has no compile-session flag")
    lin = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3)

    def run():
        return lin(torch.relu(x))

    with Recorder() as plain:
        run()
    with Recorder() as rec:
        monkeypatch.setattr(torch.compiler, "_is_compiling_flag", True)
        run()
        monkeypatch.setattr(torch.compiler, "_is_compiling_flag", False)
        run()
    def names(r):
        return [(p["k"], p.get("op", p.get("path"))) for p in r.payloads()]

    assert names(plain) == [("op", "relu"), ("mod", ""), ("op", "linear")]
    assert names(rec) == names(plain)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_neither_recompiles_nor_marks_the_compile(backend):
    # the wrappers must not make Dynamo guard on a value that differs between compile time and run
    # time (one graph for all calls), and the ops torch runs for real during the compile session
    # (fake-tensor propagation, AOTAutograd) must emit no markers: the first call, which compiles,
    # records exactly what each later call records
    lin = torch.nn.Linear(5, 5)

    def fn(x):
        return lin(torch.sin(x) * 2 + x.cos())

    x = torch.randn(5)
    expected = fn(x)
    try:
        dynamo = importlib.import_module("torch._dynamo")
        counters = importlib.import_module("torch._dynamo.utils").counters
        torch.compile(lambda t: t + 1, backend=backend)(x)
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"torch.compile unavailable here: {type(exc).__name__}: {str(exc)[:100]}")
    pyprof.init()
    try:
        dynamo.reset()
        counters.clear()
        compiled = torch.compile(fn, backend=backend, fullgraph=True)
        with Recorder() as first:
            outs = [compiled(x)]
        with Recorder() as later:
            outs += [compiled(x) for _ in range(3)]
    finally:
        pyprof.deinit()
        dynamo.reset()
    assert all(torch.equal(o, expected) for o in outs)
    assert counters["stats"]["unique_graphs"] == 1
    assert [len(later.payloads(k)) for k in ("op", "mod")] == [3 * len(first.payloads(k)) for k in ("op", "mod")]
    assert not first.open_ranges() and not later.open_ranges()


class _Squares(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.full((2,), float(i)) * 2


def test_dataloader_with_workers(initialized):
    loader = torch.utils.data.DataLoader(_Squares(), batch_size=4, num_workers=2)
    with Recorder() as rec:
        batches = [b for b in loader]
    assert torch.equal(torch.cat(batches), torch.arange(8.0).repeat_interleave(2).reshape(8, 2) * 2)
    assert not rec.open_ranges()


def _pyprof_module_instrumentation():
    """pyprof's global module hooks (none expected: they put every module call on PyTorch's slow
    path) and whether ``nn.Module.__call__`` is pyprof's."""
    import torch.nn.modules.module as mm

    hooks = list(mm._global_forward_pre_hooks.values()) + list(mm._global_forward_hooks.values())
    call = vars(torch.nn.Module)["__call__"]
    return [h for h in hooks if h.__module__.startswith("pyprof")], call.__module__.startswith("pyprof")


def test_module_instrumentation_only_while_a_consumer_is_present(initialized):
    # nothing per module call in lazy idle mode; the Module.__call__ patch only while a consumer is there
    assert _pyprof_module_instrumentation() == ([], False)
    with Recorder():
        assert _pyprof_module_instrumentation() == ([], True)
    assert _pyprof_module_instrumentation() == ([], False)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
        assert _pyprof_module_instrumentation() == ([], True)
    assert _pyprof_module_instrumentation() == ([], False)


def test_global_hook_registered_first_runs_before_the_module_range_opens(initialized):
    # pyprof run takes deferred profiler steps in such a hook: the module's range must open after it
    import torch.nn.modules.module as mm

    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    depth_seen = []
    rec = Recorder()

    def first(module, inputs):
        depth_seen.append(len(rec._stacks.get(threading.get_native_id(), [])))

    handle = mm.register_module_forward_pre_hook(first)
    try:
        with rec:
            assert _pyprof_module_instrumentation()[1] is False  # global hooks after the user's, no patch
            model(torch.ones(1, 2))
    finally:
        handle.remove()
    assert depth_seen == [0, 1]  # Sequential: no range open yet; Linear: only Sequential's
    assert [p["path"] for p in rec.payloads("mod")] == ["", "0"] and not rec.open_ranges()
    # hooks mode stays while init() is on (a hook set changing at profiler start would recompile
    # compiled regions), passing through while idle
    assert _pyprof_module_instrumentation()[1] is False
    with Recorder() as rec2:  # no foreign global hook now: the patch again
        assert _pyprof_module_instrumentation() == ([], True)
        model(torch.ones(1, 2))
    assert [p["path"] for p in rec2.payloads("mod")] == ["", "0"]


def test_deinit_with_payloads_on_restores_module_call():
    call_before = vars(torch.nn.Module)["__call__"]
    pyprof.init(lazy=False)
    try:
        assert _pyprof_module_instrumentation() == ([], True)
    finally:
        pyprof.deinit()
    assert vars(torch.nn.Module)["__call__"] is call_before


def test_module_call_wrapped_by_someone_else_keeps_working():
    model, x = torch.nn.Sequential(torch.nn.Linear(2, 2)), torch.ones(1, 2)
    original = vars(torch.nn.Module)["__call__"]
    pyprof.init()
    try:
        with Recorder() as r1:
            ours = vars(torch.nn.Module)["__call__"]
            calls = []

            def foreign(self, *args, **kwargs):  # another tool wraps Module.__call__ over pyprof's
                calls.append(1)
                return ours(self, *args, **kwargs)

            torch.nn.Module.__call__ = foreign
            model(x)
        model(x)  # no consumer: pyprof's wrapper, still inside the foreign one, passes through
        with Recorder() as r2:
            model(x)
        torch.nn.Module.__call__ = original  # the other tool goes
        with Recorder() as r3:
            model(x)
    finally:
        pyprof.deinit()
        torch.nn.Module.__call__ = original
    assert len(calls) == 6
    for rec in (r1, r2, r3):
        assert [p["path"] for p in rec.payloads("mod")] == ["", "0"] and not rec.open_ranges()
    assert vars(torch.nn.Module)["__call__"] is original


def test_user_module_hooks_run_inside_the_module_range(initialized):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    seen = []
    def pre(m, inputs):
        seen.append("pre")
        torch.relu(inputs[0])  # an op in a user hook: inside the module's range

    h1 = model[0].register_forward_pre_hook(pre)
    h2 = model[0].register_forward_hook(lambda m, i, o: seen.append("post"))
    try:
        with Recorder() as rec:
            model(torch.ones(1, 2))
    finally:
        h1.remove()
        h2.remove()
    assert seen == ["pre", "post"]
    relu = [p for p in rec.payloads("op") if p["op"] == "relu"][0]
    assert [q["path"] for q in relu["_parents"]] == ["", "0"]
    assert not rec.open_ranges()


def test_nvtx_tool_path_pushes_and_pops_balanced(monkeypatch):
    """With an NVTX tool attached (simulated: a real nvtx.Domain object, whose C calls are no-ops
    without an injection library), every op/module range is pushed and popped in the pyprof domain
    through the nvtx package: the path without the C extension (which pushes natively; a real NVTX
    tool records both paths in tests/test_annotate_nvtx_tool.py)."""
    nvtx = pytest.importorskip("nvtx")
    from nvtx._lib.lib import Domain, DomainHandle

    from pyprof.annotate import fastpath

    monkeypatch.setattr(fastpath, "extension", lambda: None)

    calls = []

    class CountingDomain(Domain):
        def push_range(self, attributes=None, **kw):
            calls.append(("push", attributes.message.string))
            return super().push_range(attributes, **kw)

        def pop_range(self):
            calls.append(("pop", None))
            return super().pop_range()

    dom = object.__new__(CountingDomain)
    dom.handle = DomainHandle(markers.DOMAIN)
    dom.__init__(markers.DOMAIN)
    monkeypatch.setattr(nvtx, "get_domain", lambda name=None: dom)
    pyprof.init()
    try:
        torch.nn.Linear(2, 2)(torch.ones(1, 2))
    finally:
        pyprof.deinit()
    pushes = [t for k, t in calls if k == "push"]
    assert len(pushes) == sum(k == "pop" for k, _ in calls) >= 4
    kinds = [markers.decode(t)["k"] for t in pushes]
    assert kinds.count("mod") == 1 and "op" in kinds
