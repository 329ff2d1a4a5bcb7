"""The OpInfo samples of ops modelled by family rule (view copies, scatters, splits, FFTs, tensors from
Python values, linear algebra, sorting) through the user's path: every record priced, every sample
bound to its aten schema, and bytes equal to torch's dispatch-level count where the op runs one aten
kernel. The references are torch's, computed in the test from the same samples; the formulas are
checked by hand in tests/test_ops_movement.py. One sample per op keeps the file fast.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch

# op -> whether its bytes must equal the dispatch count (one aten kernel reading and writing each
# tensor once); False where the op is a composite (fft.fft's first sample pads its input first), and
# for item, which reads one element where the dispatch count takes _local_scalar_dense as no work, and
# unsafe_chunk, whose outputs are views its schema does not mark (the dispatch count takes it as a copy),
# and narrow_copy, which reads the narrowed part (the dispatch count counts the whole input)
OPS = {
    "t_copy": True, "expand_copy": True, "narrow_copy": False, "slice_scatter": True, "select_scatter": True,
    "split": True, "unsafe_chunk": False, "atleast_2d": True, "scalar_tensor": True, "item": False,
    "var.unbiased": True, "sum_to_size": True, "fft.fft": False, "fft.rfft2": False, "fft.fftshift": True,
    "sort": True, "topk": True, "argsort": True, "searchsorted": True,
    "diag_embed": True, "nn.functional.pixel_shuffle": True, "cross": True, "index_select": True,
}


@pytest.fixture(scope="module")
def results():
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")  # torch's test suite, which holds op_db, imports it
    from scripts.validation import opinfo

    ops = [o for o in opinfo.select(list(OPS)) if opinfo.op_id(o) in OPS]
    # older torch's op_db lacks a few newer OpInfos (torch 2.4: t_copy, expand_copy); the rest must be there
    missing = set(OPS) - {opinfo.op_id(o) for o in ops}
    assert len(missing) <= len(OPS) // 10, missing
    return [opinfo.run_op(o, "float32", "init", limit=1) for o in ops]


def test_every_record_is_priced_and_bound(results):
    for r in results:
        assert not r.error, (r.name, r.error)
        assert r.samples and r.has_model, (r.name, [s.unpriced for s in r.samples])
        assert all(s.bound for s in r.samples), (r.name, r.samples[0].problem)


def test_bytes_equal_the_dispatch_count(results):
    for r in results:
        if OPS[r.name]:
            for s in r.samples:
                assert s.bytes_agree, (r.name, s.index, s.py_bytes, s.ref_bytes)
