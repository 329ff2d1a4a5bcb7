"""Op spellings and arguments from the real corpus exports map to cost models.

Reads NVTX texts straight from the SQLite exports (nsys ``NVTX_EVENTS.text`` / ``StringIds``, nvprof
``CUPTI_ACTIVITY_KIND_MARKER`` -> ``StringTable``); skips where the corpus is absent.
"""

from __future__ import annotations

import re
import sqlite3

import pytest

try:
    from conftest import corpus_file, corpus_files
except ImportError:  # tests/ imported as a package
    from tests.conftest import corpus_file, corpus_files

from pyprof.markers import decode_legacy_pyprof, is_legacy_pyprof
from pyprof.prof.ops import OpCall, canonical, covered_ops, estimate

pytestmark = pytest.mark.corpus


def _texts(path) -> list[str]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        if "NVTX_EVENTS" in tables:
            cols = {r[1] for r in con.execute("pragma table_info(NVTX_EVENTS)")}
            q = ("select coalesce(n.text, s.value) from NVTX_EVENTS n left join StringIds s on n.textId = s.id"
                 if "textId" in cols else "select text from NVTX_EVENTS")
            return [t for (t,) in con.execute(q) if t]
        if "CUPTI_ACTIVITY_KIND_MARKER" in tables:
            return [t for (t,) in con.execute(
                "select s.value from CUPTI_ACTIVITY_KIND_MARKER m join StringTable s on m.name = s._id_") if t]
        return []
    finally:
        con.close()


@pytest.fixture(scope="module")
def corpus_texts():
    files = corpus_files()
    if not files:
        pytest.skip("corpus not found")
    return [t for f in files for t in _texts(f)]


# aten names seen in emit_nvtx ranges of the corpus (``aten::addmm, seq = 12``)
ATEN = ["aten::addmm", "aten::conv2d", "aten::convolution", "aten::_convolution", "aten::cudnn_convolution",
        "aten::linear", "aten::relu", "aten::add_", "aten::clamp_min", "aten::max_pool2d",
        "aten::max_pool2d_with_indices"]
# (mod, op) of old PyProf dict markers in the corpus
LEGACY = [("Tensor", "__add__"), ("Tensor", "__iadd__"), ("Tensor", "__mul__"), ("Tensor", "__truediv__"),
          ("Tensor", "add_"), ("Tensor", "mul_"), ("Tensor", "fill_"), ("Tensor", "log_softmax"),
          ("Tensor", "softmax"), ("Tensor", "matmul"), ("Tensor", "norm"), ("Tensor", "sum"),
          ("Tensor", "contiguous"), ("torch", "bmm"), ("torch", "cat"), ("torch", "stack"),
          ("torch", "embedding"), ("torch", "layer_norm"), ("torch", "max_pool2d"), ("torch", "norm"),
          ("torch", "relu"), ("torch", "zeros_like"), ("torch.nn.functional", "avg_pool3d"),
          ("torch.nn.functional", "conv2d"), ("torch.nn.functional", "cross_entropy"),
          ("torch.nn.functional", "dropout"), ("torch.nn.functional", "embedding"),
          ("torch.nn.functional", "layer_norm"), ("torch.nn.functional", "linear"),
          ("torch.nn.functional", "log_softmax"), ("torch.nn.functional", "max_pool2d"),
          ("torch.nn.functional", "nll_loss"), ("torch.nn.functional", "relu"),
          ("torch.nn.functional", "softmax"), ("torch.nn.functional", "interpolate"), ("Tensor", "uniform_"),
          ("Tensor", "cuda"), ("Tensor", "type_as"), ("Tensor", "chunk"), ("Tensor", "new_empty"),
          ("Tensor", "t"), ("Tensor", "transpose"), ("Tensor", "view"), ("Tensor", "unsqueeze")]


def test_emit_nvtx_aten_names_map_to_models(corpus_texts):
    seen = {m.group(1) for t in corpus_texts if (m := re.match(r"(aten::\w+)", t))}
    for name in ATEN:
        assert name in seen, f"{name} no longer in the corpus: update this list"
        assert canonical(name) in covered_ops(), name


def test_legacy_pyprof_markers_are_priced(corpus_texts):
    """Every old PyProf marker of a modelled op, with its real arguments, gets FLOPs (and bytes)."""
    markers = [decode_legacy_pyprof(t) for t in corpus_texts if is_legacy_pyprof(t) and t.startswith("{'mod'")]
    seen = {(m["mod"], m["op"]) for m in markers}
    for key in LEGACY:
        assert key in seen, f"{key} no longer in the corpus: update this list"
    priced = 0
    for m in markers:
        if (m["mod"], m["op"]) not in LEGACY:
            continue
        c = estimate(OpCall(m["op"], m["args"], "fprop", None, m["mod"]))
        name = canonical(m["op"], m["mod"])
        if name in ("max_pool2d", "contiguous") and len(m["args"]) == 1:
            # PyProf kept only the tensor here: no kernel_size / no contiguity flag -> unknown, not 0
            assert c is None, m
            continue
        assert c is not None and c.flops is not None and c.bytes is not None, m
        if name not in ("fill", "zeros_like", "contiguous", "cat", "stack", "dropout", "embedding", "uniform",
                        "cuda", "type_as", "chunk", "new_empty", "t", "transpose", "view", "unsqueeze"):
            assert c.flops > 0, m
        priced += 1
    assert priced > 100


def test_legacy_bmm_marker_by_hand():
    texts = _texts(corpus_file("josiahdavis__profiling-lm"))
    bmm = [decode_legacy_pyprof(t) for t in texts if t.startswith("{'mod': 'torch', 'op': 'bmm'")]
    assert bmm
    m = bmm[0]
    assert [a["shape"] for a in m["args"]] == [[20, 35, 200], [20, 200, 35]]
    c = estimate(OpCall(m["op"], m["args"], "fprop", None, m["mod"]))
    # [20,35,200] @ [20,200,35]: 2 * 20 * 35 * 35 * 200 = 9_800_000 FLOPs
    assert c.flops == 9_800_000
    # fp32: (20*35*200 + 20*200*35 + 20*35*35) * 4 = (140000 + 140000 + 24500) * 4 = 1_218_000 bytes
    assert c.bytes == 1_218_000
    # backward, both operands require grad (no flag in old markers: assumed): 2 * 9.8M
    assert estimate(OpCall(m["op"], m["args"], "bprop", None, m["mod"])).flops == 19_600_000


def test_legacy_embedding_marker_by_hand():
    texts = _texts(corpus_file("josiahdavis__profiling-lm"))
    emb = [decode_legacy_pyprof(t) for t in texts if t.startswith("{'mod': 'torch', 'op': 'embedding'")]
    m = emb[0]
    # torch.embedding(weight[33278, 200] fp32, indices[35, 20] int64): a gather, 0 FLOPs;
    # bytes = indices 700*8 + rows read 700*200*4 + output 700*200*4 = 5600 + 560000 + 560000
    c = estimate(OpCall(m["op"], m["args"], "fprop", None, m["mod"]))
    assert c.flops == 0 and c.bytes == 1_125_600
