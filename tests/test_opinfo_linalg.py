"""Linear algebra from torch's OpInfo catalogue through the user's path, against FlopCounterMode.

FlopCounterMode counts the GEMMs these ops run: in forward for the GEMM chains (``multi_dot``, ``cov``),
in backward for the decompositions, whose backward formulas are GEMMs, triangular solves and
elementwise ops. pyprof prices the backward on the aten ops that ran (pyprof/prof/backward.py) and the
forward by LAWN 41 (pyprof/prof/ops/linalg.py); its GEMM FLOPs must equal FlopCounterMode's, forward
and backward, on every sample. The expected figures are torch's, computed in the test from the same
samples. One sample per op keeps the file fast.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch

# ops whose samples FlopCounterMode counts (forward or backward GEMMs)
OPS = ["linalg.inv", "linalg.cholesky", "linalg.qr", "linalg.solve_triangular", "linalg.multi_dot", "cov",
       "linalg.lstsq", "ormqr"]
PLAIN = ["linalg.inv", "linalg.qr"]  # also under plain torch.profiler
LIMIT = 1


@pytest.fixture(scope="module")
def results():
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")  # torch's test suite, which holds op_db, imports it
    from scripts.validation import opinfo

    ops = [o for o in opinfo.select(OPS) if opinfo.op_id(o) in OPS]
    assert {opinfo.op_id(o) for o in ops} == set(OPS)
    return [opinfo.run_op(o, "float32", mode, limit=LIMIT)
            for o in ops for mode in (("init", "plain") if opinfo.op_id(o) in PLAIN else ("init",))]


def test_gemm_flops_equal_flopcountermode_forward_and_backward(results):
    for r in results:
        assert not r.error, (r.name, r.mode, r.error)
        counted = [s for s in r.samples if s.flops_counted]
        assert counted, (r.name, r.mode)  # torch counts GEMMs on these samples: the check is not empty
        for s in counted:
            assert s.flops_agree, (r.name, r.mode, s.index, s.py_f, s.fc_f, s.py_b, s.fc_b)


def test_the_ops_have_a_model_of_their_own(results):
    """Each op has a model of the linear-algebra family (the GEMM chains of the GEMM family), and its
    records are priced by it, not left without a figure."""
    from pyprof.prof.ops import canonical, family

    for r in results:
        assert family(r.name) in ("linalg", "gemm"), r.name
        unpriced = {o for s in r.samples for o in s.unpriced}
        # the op as a marker names it (``inv``) and as aten does (``linalg_inv``)
        assert not unpriced & {r.name.rsplit(".", 1)[-1], canonical(r.name)}, (r.name, r.mode, unpriced)


def test_an_op_without_a_model_is_never_priced_by_its_views():
    """A forward op without a model is priced on what it ran only where the ops it called do its work:
    ``nonzero`` does its work in its own record and calls only an ``as_strided_`` view, so it stays
    n/a (no model), never 0 FLOPs and 0 bytes summed from the view."""
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")
    from scripts.validation import opinfo

    (op,) = [o for o in opinfo.select(["nonzero"]) if opinfo.op_id(o) == "nonzero"]
    r = opinfo.run_op(op, "float32", "init", limit=LIMIT)
    assert not r.error, r.error
    assert r.samples and all("nonzero" in s.unpriced for s in r.samples), [s.unpriced for s in r.samples]


def test_a_composite_without_a_model_is_priced_on_what_it_ran():
    """``svd_lowrank`` is a Python function of torch: under ``init()`` one op instance, with no model of
    its own, around the GEMMs and the QR/SVD it calls (and a ``randn`` of an unrecorded size, n/a). Its
    GEMM FLOPs equal FlopCounterMode's, forward and backward, on every sample."""
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")
    from scripts.validation import opinfo

    (op,) = [o for o in opinfo.select(["svd_lowrank"]) if opinfo.op_id(o) == "svd_lowrank"]
    r = opinfo.run_op(op, "float32", "init", limit=LIMIT)
    assert not r.error, r.error
    for s in r.samples:
        assert s.flops_agree, (s.index, s.py_f, s.fc_f, s.py_b, s.fc_b)
    if not any(s.flops_counted and s.fc_f > 0 for s in r.samples):
        import torch

        pytest.skip(f"FlopCounterMode counts no forward GEMM in this torch's sample ({torch.__version__})")
