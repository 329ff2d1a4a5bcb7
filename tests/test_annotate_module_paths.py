"""Module ranges stay right when the model changes between calls: a child replaced or added,
or called under another root, and modules freed and new ones made (often at the same address).
modules.py caches paths and texts keyed by id(); these tests hold it to the model as it is at each call."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pyprof.annotate.recorder import Recorder  # noqa: E402


def _mods(fn, *args):
    with Recorder() as rec:
        fn(*args)
    assert not rec.open_ranges()
    return [(p["path"], p["cls"]) for p in rec.payloads("mod")]


def test_paths_follow_replaced_added_and_re_rooted_children(initialized):
    x = torch.randn(2, 3)
    root = nn.Sequential()
    root.add_module("a", nn.ReLU())
    assert _mods(root, x) == [("", "Sequential"), ("a", "ReLU")]
    assert _mods(root, x) == [("", "Sequential"), ("a", "ReLU")]  # cached
    root.a = nn.Tanh()  # replaced by a new module
    assert _mods(root, x) == [("", "Sequential"), ("a", "Tanh")]
    root.add_module("b", nn.Sigmoid())  # added after the first call
    assert _mods(root, x) == [("", "Sequential"), ("a", "Tanh"), ("b", "Sigmoid")]
    child = root.a
    assert _mods(child, x) == [("", "Tanh")]  # called on its own: a root
    other = nn.Sequential(nn.Identity(), child)  # the same module under another root
    assert _mods(other, x) == [("", "Sequential"), ("0", "Identity"), ("1", "Tanh")]
    assert _mods(root, x) == [("", "Sequential"), ("a", "Tanh"), ("b", "Sigmoid")]
    moved = root.a
    root.a = nn.ReLU()  # a new module at "a" (not in the map: rebuilt) and the old one moved to "c"
    root.add_module("c", moved)
    assert _mods(root, x) == [("", "Sequential"), ("a", "ReLU"), ("b", "Sigmoid"), ("c", "Tanh")]


def test_new_modules_at_reused_addresses_get_their_own_text(initialized):
    x = torch.randn(2, 3)
    kinds = (nn.ReLU, nn.Tanh, nn.Sigmoid)
    for i in range(60):  # freed modules' memory is soon reused for new ones
        kind = kinds[i % 3]
        model = nn.Sequential(kind(), nn.Sequential(kinds[(i + 1) % 3]()))
        assert _mods(model, x) == [("", "Sequential"), ("0", kind.__name__), ("1", "Sequential"),
                                   ("1.0", kinds[(i + 1) % 3].__name__)]
        del model
    root = nn.Sequential()
    for i in range(60):  # the same root, its child replaced (the old one freed) before each call
        kind = kinds[i % 3]
        root.a = kind()
        assert _mods(root, x) == [("", "Sequential"), ("a", kind.__name__)]


class _ManyArgs(nn.Module):
    def forward(self, *xs, scale=1.0, **extra):
        return [x * scale for x in xs], sorted(extra)


def test_module_calls_pass_every_argument_through(initialized):
    """The C path calls the original ``__call__`` from a stack of the module and the arguments (a
    fixed array up to 7 arguments, allocated beyond): the call must see them all, in order."""
    mod = _ManyArgs()
    for n in (0, 1, 7, 8, 9, 30):
        xs = [torch.full((1,), float(i)) for i in range(n)]
        with Recorder() as rec:
            out, extra = mod(*xs, scale=2.0, b=1, a=2)
            plain, _ = mod(*xs)
        assert [float(t) for t in out] == [2.0 * i for i in range(n)] and extra == ["a", "b"]
        assert [float(t) for t in plain] == [float(i) for i in range(n)]
        assert [p["cls"] for p in rec.payloads("mod")] == ["_ManyArgs", "_ManyArgs"]
