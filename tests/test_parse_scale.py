"""scripts/scale_export.py: a tiled export is a valid, bigger export whose tiles parse like the original."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyprof.parse.source import open_source
from tests.conftest import REPO, corpus_file

pytestmark = pytest.mark.corpus


@pytest.mark.parametrize("name", ["MohanadOdema__DLProf", "josiahdavis__profiling-lm"])
def test_tiles_parse_like_the_original(tmp_path, name):
    src = corpus_file(name)
    out = tmp_path / "tiled.sqlite"
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "scale_export.py"), str(src), str(out), "--factor", "3"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    one = list(open_source(src).records())
    three = list(open_source(out).records())
    assert len(three) == 3 * len(one)
    n = len(one)
    keys = ("kind", "kShortName", "kDuration", "ranges", "op", "mod", "args", "layer", "dir", "seqId", "altSeqId",
            "subSeqId", "apiName")
    for k in range(3):
        tile = three[k * n:(k + 1) * n]
        assert [{x: r[x] for x in keys} for r in tile] == [{x: r[x] for x in keys} for r in one]
    assert len({r["correlationId"] for r in three}) == len({r["correlationId"] for r in one}) * 3
