"""A sample of scripts/validation/catalogue.py: higher-order gradients and torch.func transforms of ops and
modules from torch's own catalogues (OpInfo ``op_db``, ``module_db``), cases nobody here wrote, through
``init()`` + torch.profiler, parse and prof, against FlopCounterMode per direction (the whole catalogue:
``python scripts/validate.py --catalogue``)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.torch

SAMPLE = {
    "gradgrad": ["mm", "nn.functional.conv2d", "nn.functional.conv_transpose2d", "baddbmm", "nn.functional.linear"],
    "vmap": ["nn.functional.conv2d", "addmm", "bmm"],
    "per_sample_grad": ["nn.Conv2d", "nn.Bilinear", "nn.TransformerEncoderLayer", "nn.TransformerDecoderLayer"],
    "module_gradgrad": ["nn.Conv1d", "nn.TransformerEncoderLayer", "nn.LayerNorm"],
}


@pytest.mark.parametrize("kind", list(SAMPLE))
def test_catalogue_sample_equals_flopcountermode(kind):
    pytest.importorskip("torch")
    pytest.importorskip("expecttest")  # torch's test suite, which holds the catalogues, imports it
    from scripts.validation import catalogue

    cases = catalogue.run(kind, SAMPLE[kind], limit=1)
    assert {c.name for c in cases} == set(SAMPLE[kind]), catalogue.table(cases)
    counted = [c for c in cases if c.status not in ("n/c",) and not c.status.startswith("skipped")]
    assert counted and all(c.status == "agree" for c in counted), catalogue.table(cases)
    assert all(c.torch["fprop"] > 0 for c in counted)
    if kind != "vmap":
        assert all(c.torch["bprop"] > 0 for c in counted)
