"""Without the `scale` extra: one line naming `pip install 'pyprof-torch[scale]'` (exit 2, or an
ImportError from the API), and `import pyprof` / `pyprof.load` stay light. Runs where the extra is
absent too (CI's Python 3.10 leg), with the extra hidden from a child interpreter here."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import BLOCK_TORCH, REPO
from tests.scale_exports import rank_export

BLOCK_SCALE = (
    "import sys, importlib.abc\n"
    "class BlockScale(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('pyarrow', 'duckdb', 'dask', 'distributed'):\n"
    "            raise ImportError('blocked in this test')\n"
    "sys.meta_path.insert(0, BlockScale())\n"
)
INSTALL = "pip install 'pyprof-torch[scale]'"


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_cli_without_the_extra(tmp_path):
    src = rank_export(tmp_path / "net.sqlite", rank=0)
    (tmp_path / "x.parquet").mkdir()
    for args, need in ((["parse", str(src), "-o", str(tmp_path / "net.parquet")], "Parquet needs pyarrow"),
                       (["parse", "--cluster", "local:2", str(src), "-o", str(tmp_path / "out")],
                        "--cluster needs dask[distributed]"),
                       (["prof", str(tmp_path / "x.parquet")], "a dataset query needs duckdb")):
        p = _child(BLOCK_SCALE + f"from pyprof.cli.main import main\nmain({args!r})\n")
        assert p.returncode == 2, p.stderr
        assert p.stderr.splitlines() == [f"pyprof: error: {need}, which is not installed; {INSTALL}"]
    assert not (tmp_path / "net.parquet").exists() and not (tmp_path / "out").exists()


def test_api_without_the_extra(tmp_path):
    src = rank_export(tmp_path / "net.sqlite", rank=0)
    p = _child(BLOCK_SCALE + f"""
import pyprof
from pyprof.parse.run import parse_file
parse_file({str(src)!r}, {str(tmp_path / 'net.dict')!r})
df = pyprof.load({str(tmp_path / 'net.dict')!r})  # JSON lines: pandas alone
assert len(df) == 25 and str(df['kDuration'].dtype) == 'Int64', df.dtypes
for call in (lambda: pyprof.dataset({str(tmp_path)!r}), lambda: pyprof.load({str(tmp_path)!r})):
    try:
        call()
    except ImportError as exc:
        assert {INSTALL!r} in str(exc), exc
    else:
        raise AssertionError('no ImportError')
print('ok')
""")
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_import_pyprof_stays_light_and_load_needs_no_torch(tmp_path):
    src = rank_export(tmp_path / "net.sqlite", rank=0)
    p = _child(BLOCK_TORCH + f"""
import sys
import pyprof
heavy = [m for m in ('pandas', 'pyarrow', 'duckdb', 'dask', 'distributed', 'torch') if m in sys.modules]
assert not heavy, heavy
from pyprof.parse.run import parse_file
parse_file({str(src)!r}, {str(tmp_path / 'net.dict')!r})
assert len(pyprof.load({str(tmp_path / 'net.dict')!r})) == 25
print('ok')
""")
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr
