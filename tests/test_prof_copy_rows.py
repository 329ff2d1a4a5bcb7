"""memcpy/memset records never price an op: FLOPs n/a (never 0), no ideal or gap, never a fix to rank.

On a trace without shapes (the ResNet-50 torch.profiler traces of PyTorch 1.8: no input types, so
convolution backward has no model) an op's only priced records can be the memsets cuDNN launched
beside its kernels; before, their bytes gave the op "0 FLOP" and a roofline gap and ranked it under
"fix this first".
"""

from __future__ import annotations

import math

import numpy as np
import pytest

try:
    from conftest import CORPUS
except ImportError:  # tests/ collected as a package
    from tests.conftest import CORPUS

from pyprof.prof import summary, table


def _trace(name: str):
    path = CORPUS / "kineto" / name
    if not path.is_file():
        pytest.skip(f"corpus trace {name} not found")
    return path


@pytest.fixture(scope="module")
def resnet():
    from pyprof.parse.kineto import KinetoSource

    path = _trace("pytorch__kineto__resnet50_num_workers_0.pt.trace.json.gz")
    # the trace names no GPU: the peaks of the V100 it ran on (kernel names say volta)
    return table.build(KinetoSource(path).records(), gpu="Tesla V100 SXM2")


def test_copy_records_have_no_flops_or_gap(resnet):
    copies = resnet[resnet["kind"] != "kernel"]
    assert len(copies) > 100 and copies["bytes"].notna().all()  # their own bytes are kept
    assert copies["flops"].isna().all()
    assert copies["ideal"].isna().all() and copies["gap"].isna().all()


def test_rows_priced_only_from_copies_show_no_flops_or_gap_and_are_not_ranked(resnet):
    s = summary.summarize(resnet, "op")
    kernels = resnet["kind"] == "kernel"
    priced = resnet["flops"].notna() | resnet["ideal"].notna()
    # ops whose kernels have no model (n/a) but whose memsets have bytes: before, 0 FLOP and a gap
    only_copies = {op for op, g in resnet.assign(k=kernels, p=priced & kernels).groupby("op")
                   if not g["p"].any() and (~g["k"]).any()}
    assert "to" in only_copies  # a cast whose kernels no model prices, beside its memcpys
    rows = s[s["key"].isin(only_copies)]
    assert len(rows) == len(only_copies)
    for col in ("flops", "tflops", "ideal", "excess", "gap"):
        assert rows[col].isna().all(), (col, rows[["key", col]])
    ranked = set(summary.fix_first(s, n=len(s))["key"])
    assert not ranked & only_copies
    # an op with kernels priced is still ranked: the rule did not blank the whole table
    assert ranked and all(math.isfinite(g) for g in summary.fix_first(s)["gap"])


def test_device_copies_alone_are_no_fix():
    """The HTA trace's copy_ ops ran only device-to-device memcpys: bytes and GB/s shown, no gap."""
    from pyprof.parse.kineto import KinetoSource

    path = _trace("facebookresearch__HolisticTraceAnalysis__negative_queue_length_values_check__rank0.json.gz")
    df = table.build(KinetoSource(path).records())
    s = summary.summarize(df, "op").set_index("key")
    copy_ = s.loc["copy_"]
    assert copy_["bytes"] > 0 and copy_["gbps"] > 0
    assert np.isnan(copy_["flops"]) and np.isnan(copy_["gap"]) and np.isnan(copy_["excess"])
    assert "copy_" not in set(summary.fix_first(s.reset_index(), n=len(s))["key"])
