"""OpInfo samples of the ops that had no FLOP or byte model (issue 26: distances, margin and triplet
losses, unpooling, histograms, grid sampling, rng factories, ...) through the user's path: every record
of the sample priced, and forward bytes equal to torch's dispatch-level count where the op runs one
aten kernel; and ``linear_cross_entropy``'s three variants against FlopCounterMode. The references are
torch's, computed in the test from the same samples (scripts/validation/opinfo.py); nothing is
hard-coded. One sample per op keeps the file fast.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch

# op -> whether its forward bytes must equal the dispatch count (one aten kernel, each tensor once);
# False for composites, whose dispatch count adds their intermediates (docs/prof.md)
OPS = {
    "complex": True, "polar": True, "randint": True, "multinomial": True, "normal.number_mean": True,
    "empty_permuted": True, "resize_as_": True, "put": True, "index_reduce.mean": True, "cdist": True,
    "dist": True, "nn.functional.pdist": True, "nn.functional.multi_margin_loss": True,
    "nn.functional.max_unpool2d": True, "nn.functional.fractional_max_pool2d": True, "histc": True,
    "histogram": True, "nonzero_static": True, "masked_scatter": True, "_softmax_backward_data": True,
    "_chunk_cat": True, "inner": True, "renorm": True, "hash_tensor": True,
    "nn.functional.grid_sample": True, "grid_sampler_3d": True, "_upsample_bilinear2d_aa": True,
    "nn.functional.normalize": False, "nn.functional.cosine_similarity": False,
    "nn.functional.margin_ranking_loss": False, "nn.functional.triplet_margin_loss": False,
    "nn.functional.gaussian_nll_loss": False, "nn.functional.cosine_embedding_loss": False,
    "combinations": False, "cartesian_prod": False, "gradient": False, "trapezoid": False,
    "nn.functional.local_response_norm": False, "nn.functional.bilinear": False,
    "_batch_norm_with_update": False, "max_pool2d_with_indices_backward": False, "histogramdd": False,
    "special.ndtr": False, "stft": False,
}
LCE = ["nn.functional.linear_cross_entropy", "nn.functional.linear_cross_entropy.chunked",
       "nn.functional.linear_cross_entropy.chunked_none"]


@pytest.fixture(scope="module")
def opinfo():
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")  # torch's test suite, which holds op_db, imports it
    from scripts.validation import opinfo

    return opinfo


@pytest.fixture(scope="module")
def results(opinfo):
    ops = [o for o in opinfo.select(list(OPS)) if opinfo.op_id(o) in OPS]
    # older torch's op_db lacks a few newer OpInfos (torch 2.4: hash_tensor, _chunk_cat, ...)
    missing = set(OPS) - {opinfo.op_id(o) for o in ops}
    assert len(missing) <= len(OPS) // 4, missing
    return [opinfo.run_op(o, "float32", "init", limit=1) for o in ops]


def test_every_record_is_priced(results):
    for r in results:
        assert not r.error or r.skipped, (r.name, r.error)
        if not r.skipped:
            assert r.samples and r.has_model, (r.name, [s.unpriced for s in r.samples])


def test_bytes_equal_the_dispatch_count(results):
    for r in results:
        if OPS[r.name] and not r.skipped:
            for s in r.samples:
                assert s.bytes_agree, (r.name, s.index, s.py_bytes, s.ref_bytes)


def _lce(opinfo, mode: str):
    ops = [o for o in opinfo.select(LCE) if opinfo.op_id(o) in LCE]
    if len(ops) != len(LCE):
        pytest.skip("this torch has no linear_cross_entropy OpInfos")
    return {opinfo.op_id(o): opinfo.run_op(o, "float32", mode, limit=2) for o in ops}


def test_linear_cross_entropy_equals_flopcountermode(opinfo):
    """Forward and backward on the first two samples (the chunked path where ``options`` is given),
    FlopCounterMode counting the chunked custom op's GEMMs and ``addmm_`` (opinfo._conventions)."""
    init, plain = _lce(opinfo, "init"), _lce(opinfo, "plain")
    for name, r in [*init.items(), *plain.items()]:
        assert not r.error and r.has_model, (name, r.mode, r.error, [s.unpriced for s in r.samples])
        counted = [s for s in r.samples if s.flops_counted]
        assert counted, (name, r.mode)
        for s in counted:
            assert s.py_f == pytest.approx(s.fc_f, rel=0.01), (name, r.mode, s.index)
            if name.endswith("chunked_none") and r.mode == "init":
                # the Python backward's own dot calls: counted by pyprof, not by FlopCounterMode (prof.md)
                assert s.fc_b <= s.py_b <= 1.07 * s.fc_b, (name, s.index, s.py_b, s.fc_b)
            else:
                assert s.py_b == pytest.approx(s.fc_b, rel=0.01, abs=1e-9), (name, r.mode, s.index)
