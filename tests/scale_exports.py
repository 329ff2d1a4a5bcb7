"""Small synthetic multi-rank Nsight exports for the scale tests (tests/nsys_synth.py's layout), and the
checks that a Parquet file holds the same records as the JSON lines of the same export."""

from __future__ import annotations

import collections
import sqlite3
from pathlib import Path

from tests.conftest import read_record_file
from tests.nsys_synth import Export

LINEAR = ('{"pyprof":1,"k":"op","op":"linear","mod":"torch.nn.functional","args":[{"name":"input","type":"tensor",'
          '"shape":[8,%d],"dtype":"float32"},{"name":"alpha","type":"float","value":%s}]}')
RELU = '{"pyprof":1,"k":"op","op":"relu","mod":"torch"}'


def rank_export(path: Path, rank: int | None, slow: int = 1, host: str | None = None, steps: int = 12) -> Path:
    """An export of one rank: ``steps`` linear (an sgemm kernel, ``slow`` times longer on odd steps) and
    relu ops, and one kernel launched outside any range. ``rank``/``host``: written into the capture's
    environment (``META_DATA_CAPTURE``, as nsys 2023.3+ does) as SLURM_PROCID and HOSTNAME; None: not."""
    ex = Export()
    t = ex.track()
    for i in range(steps):
        with t.range(LINEAR % (16 + i % 3, "1e+16" if i == 0 else "0.5"), domain="pyprof"):
            t.launch("ampere_sgemm_32x128_tn", duration=5000 * (slow if i % 2 else 1))
        with t.range(RELU, domain="pyprof"):
            t.launch("vectorized_elementwise_kernel", duration=1000)
    t.launch("bare_kernel", duration=700)
    ex.write(path)
    env = []
    if rank is not None:
        env.append(f'SLURM_PROCID="{rank}"')
    if host is not None:
        env.append(f'HOSTNAME="{host}"')
    if env:
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE META_DATA_CAPTURE (name TEXT, value TEXT)")
        conn.executemany("INSERT INTO META_DATA_CAPTURE VALUES ('PROCESS_0:ENVIRONMENT_VARIABLE', ?)",
                         [(e,) for e in env])
        conn.commit()
        conn.close()
    return path


def job(tmp_path: Path, ranks: int = 4, straggler: int = 2) -> list[Path]:
    """``ranks`` exports ``job_<r>.sqlite`` whose environments give their rank and host (two ranks a
    host); rank ``straggler`` runs its sgemm three times slower on odd steps."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    return [rank_export(tmp_path / f"job_{r}.sqlite", r, 3 if r == straggler else 1, f"node{r // 2}")
            for r in range(ranks)]


def jsonl_totals(path: Path) -> tuple[int, int, dict]:
    """Records, total kDuration and records per op of a JSON-lines record file."""
    recs = read_record_file(path)
    return len(recs), sum(r["kDuration"] for r in recs), dict(collections.Counter(r["op"] for r in recs))


def parquet_totals(path: Path) -> tuple[int, int, dict]:
    """The same figures of a Parquet file or dataset folder, by DuckDB."""
    import duckdb

    src = f"'{path}/**/*.parquet'" if path.is_dir() else f"'{path}'"
    con = duckdb.connect()
    n, total = con.execute(f"SELECT count(*), sum(kDuration)::BIGINT FROM read_parquet({src})").fetchall()[0]
    per_op = dict(con.execute(f"SELECT op, count(*) FROM read_parquet({src}) GROUP BY op").fetchall())
    con.close()
    return n, total or 0, per_op
