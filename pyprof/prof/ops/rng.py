"""Random family: in-place random fills (uniform_, normal_, bernoulli_, random_, exponential_, ...) and
random factories (rand, randn, randint, their ``_like`` forms), ``normal(mean, std, size)`` of two
numbers, and ``multinomial(p, num_samples)``.

Random-number generation is integer work (Philox counters); turning the bits into the distribution is a
few operations per element that are not counted: FLOPs are 0 by this stated convention. Bytes: the
result written once (``bernoulli(p)`` also reads ``p`` when it is a tensor). No gradient flows through
a random draw: backward is 0 and 0. Factories without a ``dtype`` argument are float32
(``randint``: int64). ``multinomial`` reads the probabilities once and writes ``num_samples`` int64
indices per row (FLOPs 0 by the same convention: drawing is a search of the cumulative sums).
"""

from __future__ import annotations

from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Bound, Cost, OpCall, binds, out_of_place, register


def _result(call: OpCall, n: int | None, dt: str | None, extra: float | None = 0) -> Cost | None:
    if n is None:
        return None
    return Cost(0.0, 0 if call.direction == "bprop" else A.total(A.sized(n, dt), extra), dt)


@register("uniform", "normal", "bernoulli", "random", "exponential", "geometric", "log_normal", "cauchy",
          "rand_like", "randn_like", "randint_like")
def _fill_random(call: OpCall) -> Cost | None:
    ts = A.tensors(call.args)
    if not ts and call.op == "normal":  # normal(mean, std, size) of two numbers: a factory
        return _factory(call)
    if not ts:
        return None
    x = ts[0]
    extra = A.nbytes(ts[1]) if call.op == "bernoulli" and len(ts) > 1 else 0
    # normal(mean, std) of tensors: they are read (x.normal_(...), the only Tensor method of the name, is in place)
    if call.op == "normal" and call.mod != "torch.Tensor" and out_of_place(call):
        out = A.broadcast(*[A.shape(t) for t in ts])
        return _result(call, A.numel(out), A.dtype(x), A.total(*[A.nbytes(t) for t in ts]))
    return _result(call, A.numel(A.shape(x)), A.dtype_kwarg(call.args, A.dtype(x)), extra)


def _varargs(ints: list[dict]) -> list:
    """``rand(2, 3)`` or ``rand([2, 3])``: the sizes (a list replaces the numbers before it)."""
    dims = []
    for a in ints:
        v = A.value(a)
        if isinstance(v, list):
            return v
        dims.append(v)
    return dims


@register("rand", "randn", "randint")
def _factory(call: OpCall) -> Cost | None:
    ints = [a for a in call.args if a.get("name") in ("", "size") and a.get("type") in ("int", "list", "tuple")]
    if call.op in ("randint", "normal"):  # randint(low?, high, size), normal(mean, std, size): the list
        lists = [a for a in ints if a.get("type") in ("list", "tuple")]
        dims = A.value(lists[0]) if lists else None
    else:
        dims = _varargs(ints) or None
    if not isinstance(dims, list) or not all(type(d) is int and d >= 0 for d in dims):
        return None
    return _result(call, prod(dims), A.dtype_kwarg(call.args, "int64" if call.op == "randint" else "float32"))


@register("multinomial")
@binds("self")
def _multinomial(call: OpCall, b: Bound, p: A.Arg, sp: list[int], _: str | None) -> Cost | None:
    k = A.value(b["num_samples"])
    if not 1 <= len(sp) <= 2 or not isinstance(k, int) or k < 0:
        return None
    rows = sp[0] if len(sp) == 2 else 1
    return _result(call, rows * k, "int64", A.nbytes(p))
