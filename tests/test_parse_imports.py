"""Parsing an Nsight export imports neither pandas nor SQLAlchemy (issue #31: together they were 0.9-1.0 s
of every parse's start, on the critical path of a big one); nvprof's reader still loads pandas."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.test_parse_fallback import small_export

REPO = Path(__file__).resolve().parent.parent

_RUN = """
import sys
from pyprof.cli.main import main
try:
    main(["parse", sys.argv[1], "-o", sys.argv[2], "-q"])
except SystemExit as exc:
    assert not exc.code, exc.code
print(sorted(m for m in ("pandas", "sqlalchemy") if m in sys.modules))
"""


def test_nsys_parse_imports_no_pandas_or_sqlalchemy(tmp_path):
    src = small_export(tmp_path / "net.sqlite")
    out = tmp_path / "net.dict"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", _RUN, src, str(out)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
    assert out.stat().st_size > 0
