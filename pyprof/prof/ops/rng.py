"""Random family: in-place random fills (uniform_, normal_, bernoulli_, random_, exponential_, ...) and
random factories (rand, randn, randint, their ``_like`` forms, bernoulli, multinomial excluded).

Random-number generation is integer work (Philox counters); turning the bits into the distribution is a
few operations per element that are not counted: FLOPs are 0 by this stated convention. Bytes: the
result written once (``bernoulli(p)`` also reads ``p`` when it is a tensor). No gradient flows through
a random draw: backward is 0 and 0. Factories without a ``dtype`` argument are float32
(``randint``: int64).
"""

from __future__ import annotations

from math import prod

from pyprof.prof.ops import _args as A
from pyprof.prof.ops.registry import Cost, OpCall, register


def _result(call: OpCall, n: int | None, dt: str | None, extra: int | None = 0) -> Cost | None:
    if n is None:
        return None
    if call.direction == "bprop":
        return Cost(0.0, 0, dt)
    return Cost(0.0, A.total(A.sized(n, dt), extra), dt)


def _dtype_kw(call: OpCall, default: str | None) -> str | None:
    for a in call.args:
        if a.get("name") == "dtype" or a.get("type") == "dtype":
            return A.norm_dtype(A.value(a)) or default
    return default


@register("uniform", "normal", "bernoulli", "random", "exponential", "geometric", "log_normal", "cauchy",
          "rand_like", "randn_like", "randint_like")
def _fill_random(call: OpCall) -> Cost | None:
    ts = A.tensors(call.args)
    if not ts:
        return None
    x = ts[0]
    extra = A.nbytes(ts[1]) if call.op == "bernoulli" and len(ts) > 1 else 0
    return _result(call, A.numel(A.shape(x)), _dtype_kw(call, A.dtype(x)), extra)


@register("rand", "randn", "randint")
def _factory(call: OpCall) -> Cost | None:
    ints = [a for a in call.args if a.get("name") in ("", "size") and a.get("type") in ("int", "list", "tuple")]
    if call.op == "randint":  # randint(low?, high, size): the size is the list argument
        lists = [a for a in ints if a.get("type") in ("list", "tuple")]
        dims = A.value(lists[0]) if lists else None
    else:
        dims = []
        for a in ints:
            v = A.value(a)
            if isinstance(v, list):
                dims = v
                break
            dims.append(v)
    if not dims or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
        return None
    return _result(call, prod(dims), _dtype_kw(call, "int64" if call.op == "randint" else "float32"))
