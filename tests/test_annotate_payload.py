"""The op payload text is written directly (not via a dict and orjson): it must stay byte-identical
to ``markers.encode`` of the payload dict built from :func:`pyprof.annotate.describe.args`."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from pyprof import markers  # noqa: E402
from pyprof.annotate import callsite, describe  # noqa: E402
from pyprof.annotate.ops import OpMeta, build_payload  # noqa: E402

ARGS = [
    (torch.ones(2, 3), torch.zeros(3, dtype=torch.int64)),
    (torch.ones(2, 3).t(), 2.5, -0.0, 1e-5, 1e300, math.inf, math.nan),
    (torch.ones(1, requires_grad=True), 3, -(1 << 63), (1 << 64) - 1, True, False, None),
    (torch.ones(()), "a\"b\\c\u00e9\n", 1 + 2j, torch.float16, torch.device("cpu"), torch.strided),
    (torch.ones(2), [1, 2.0, [3, None]], (4, 5), torch.Size([2, 3]), [torch.ones(1), torch.ones(2)]),
    (torch.ones(2), object(), torch.contiguous_format, torch.nn.Parameter(torch.ones(2, 2))),
    (torch.ones(4).as_strided((2,), (2,)), torch.empty(0, 5)),
    (torch.ones(1), (1, 1), [0, -1], (), [], (True, 1), (1, 2.0), (-(1 << 63), (1 << 64) - 1)),
    (torch.ones(1), (1, (2, 3)), [None], ("a", 1), torch.Size([]), [torch.Size([1, 2])]),
    (torch.ones(1), (slice(1, None), slice(None, None, 2)), slice(0, 1), (1, slice(None)), (Ellipsis, None)),
]
KWARGS = [{}, {"dim": -1, "keepdim": True, "out": None, "alpha": 0.5, "weird\"key": torch.ones(1)}]


def _expected(meta, args, kwargs, op_id, s0, trace):
    p = {"pyprof": markers.VERSION, "k": "op", "ns": meta.ns, "op": meta.name,
         "args": describe.args(args, kwargs, meta.arg_names())}
    if s0 is not None:
        p["seq"] = [s0]
    p["id"] = op_id
    p["trace"] = trace
    return markers.encode(p)


@pytest.mark.parametrize("args", ARGS)
@pytest.mark.parametrize("kwargs", KWARGS)
@pytest.mark.parametrize("ns,name,fn", [("torch", "add", torch.add), ("wrap", "my \"op\"", lambda *a, **k: None),
                                        ("torch.nn.functional", "linear", torch.nn.functional.linear)])
def test_payload_text_is_byte_identical_to_the_dict_encoding(args, kwargs, ns, name, fn):
    meta = OpMeta(ns, name, fn)
    text = build_payload(meta, args, kwargs, 7, 41 if args[0].requires_grad else None)
    got = markers.decode(text)
    assert text == _expected(meta, args, kwargs, 7, got.get("seq", [None])[0], got["trace"])
    assert markers.is_pyprof(text)


def test_big_int_still_rejected_like_orjson():
    meta = OpMeta("torch", "add", torch.add)
    for big in (1 << 64, [1, 1 << 64], (-(1 << 63) - 1,)):
        with pytest.raises(TypeError):
            build_payload(meta, (torch.ones(1), big), {}, 1, None)


def test_call_site_json_matches_call_site():
    def inner(depth):
        return callsite.call_site(1, depth), callsite.call_site_json(1, depth)

    for depth in (1, 3):
        for _ in range(2):  # second round: from the caches
            sites, text = inner(depth)
            assert markers.encode({"t": list(sites)})[5:-1] == text
            assert sites and sites[0].endswith(":inner")
