"""Damaged SQLite exports: `pyprof parse` exits 0, or 2 with one line on stderr naming the file and what to
do; never a traceback, never an output file left behind. Corpus files are copied to tmp_path first."""

from __future__ import annotations

import random
import sqlite3
import traceback

import pytest

from pyprof.parse import nsys
from tests.conftest import corpus_copy, corpus_file, corpus_files, run_main

pytestmark = pytest.mark.corpus

#: seeded mutations per run, over all the chosen exports together
MUTATIONS = 50
SEED = 20240611


def _family(path) -> str | None:
    """The layout family of a corpus export that holds kernels (None without kernels): nvprof, or nsys
    by its metadata and GPU tables (see pyprof/parse/gpus.py and nsys_version)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        kernel = next((t for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL")
                       if t in tables and c.execute(f"SELECT 1 FROM {t} LIMIT 1").fetchall()), None)
    if kernel is None:
        return None
    if "StringTable" in tables:
        return "nvprof"
    if "TARGET_INFO_CUDA_GPU" in tables:
        return "nsys <=2021.1"
    if "TARGET_INFO_CUDA_DEVICE" in tables:
        return "nsys 2025.1+"
    if "META_DATA_EXPORT" in tables:
        return "nsys 2023.3-2024"
    if "EXPORT_META_DATA" in tables:
        return "nsys 2022.1-2023.2"
    return "nsys 2021.2-2021.x"


def _one_per_family() -> list:
    """The smallest export of each layout family (small: the mutations stay fast)."""
    chosen: dict[str, object] = {}
    for path in sorted(corpus_files(), key=lambda p: p.stat().st_size):
        fam = _family(path)
        if fam is not None:
            chosen.setdefault(fam, path)
    return [chosen[f] for f in sorted(chosen)]


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """1-4 runs of random bytes; a third of them in the first 16 KiB, where the schema pages lie (the
    100-byte file header is left alone: without it the file is no SQLite database at all)."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        hi = min(len(b), 16384) if rng.random() < 0.35 else len(b)
        off = rng.randrange(100, hi)
        n = min(rng.choice([1, 2, 4, 16, 64, 512]), len(b) - off)
        b[off:off + n] = rng.randbytes(n)
    return bytes(b)


def _parse_checked(capsys, path, out) -> int:
    """`pyprof parse path -o out`; fails the test on a traceback, a stderr of more than one line on error,
    or an output (or its temporary file) left after an error."""
    try:
        code, _, err = run_main(capsys, ["parse", path, "-o", out])
    except Exception:  # noqa: BLE001 - what a user would see as a traceback
        pytest.fail(f"{path.name}: traceback\n{traceback.format_exc()}")
    assert code in (0, 2), (path.name, code, err)
    assert "Traceback" not in err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("pyprof: error: "), (path.name, err)
        assert path.name in lines[0] and ";" in lines[0], lines[0]  # names the file; says what to do
        assert not out.exists(), path.name
    else:
        assert out.exists()
    assert not list(out.parent.glob(".pyprof-*")), "temporary output left behind"
    return code


def test_seeded_mutations_of_each_layout(tmp_path, capsys):
    files = _one_per_family()
    if not files:
        pytest.skip("corpus not found")
    rng = random.Random(SEED)
    originals = {p: p.read_bytes() for p in files}
    codes = []
    for i in range(MUTATIONS):
        src = files[i % len(files)]
        f = tmp_path / f"m{i}_{src.name}"
        f.write_bytes(_mutate(originals[src], rng))
        out = tmp_path / f"m{i}.dict"
        codes.append(_parse_checked(capsys, f, out))
        f.unlink()
        out.unlink(missing_ok=True)
    assert 2 in codes  # the mutations do reach what SQLite refuses



NSYS = "MohanadOdema__DLProf"  # 2022.1: kernels, copies, NVTX text
NVPROF = "josiahdavis__profiling-lm"


@pytest.mark.parametrize("name", [NSYS, NVPROF])
def test_schema_entry_that_is_not_utf8(tmp_path, capsys, name):
    """SQLite's 'malformed database schema' message quotes the damaged entry's name; bytes that are no
    UTF-8 there made sqlite3 raise UnicodeDecodeError (a traceback) instead of an error."""
    f = corpus_copy(tmp_path, name)
    with sqlite3.connect(f) as c:
        c.execute("CREATE TABLE victim (a INTEGER)")
        c.execute("PRAGMA writable_schema=ON")
        c.execute("UPDATE sqlite_master SET name = CAST(X'9a41' AS TEXT), sql = 'CREATX TABLE' WHERE name = 'victim'")
    out = tmp_path / "o.dict"
    assert _parse_checked(capsys, f, out) == 2
    _, _, err = run_main(capsys, ["parse", f, "-o", out])
    assert "truncated or corrupt" in err and "re-export" in err


def test_text_in_an_integer_column(tmp_path, capsys):
    """A record whose integer field became text (was: ValueError from numpy)."""
    f = corpus_copy(tmp_path, NSYS)
    with sqlite3.connect(f) as c:
        c.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET gridX = 'x\u00ff' WHERE rowid IN "
                  "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1)")
    out = tmp_path / "o.dict"
    assert _parse_checked(capsys, f, out) == 2
    _, _, err = run_main(capsys, ["parse", f, "-o", out])
    assert "an integer column holds text or a blob" in err


def test_blobs_where_text_belongs(tmp_path, capsys):
    """Text fields that became blobs (NVTX messages, the string table) are read as text."""
    f = corpus_copy(tmp_path, NSYS)
    with sqlite3.connect(f) as c:
        assert c.execute("UPDATE NVTX_EVENTS SET text = CAST(text AS BLOB) WHERE text IS NOT NULL").rowcount
        c.execute("UPDATE StringIds SET value = CAST(value AS BLOB) WHERE rowid % 2 = 0")
    assert _parse_checked(capsys, f, tmp_path / "o.dict") == 0


def _damage_unread_table(path) -> None:
    """Overwrite the root page of a table no reader reads (PROFILER_OVERHEAD): SQLite's integrity check
    sees the damage, the parse does not meet it."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
        size = c.execute("PRAGMA page_size").fetchone()[0]
        root = c.execute("SELECT rootpage FROM sqlite_master WHERE name = 'PROFILER_OVERHEAD'").fetchone()
    if root is None:
        pytest.skip("the export has no PROFILER_OVERHEAD table")
    data = bytearray(path.read_bytes())
    data[(root[0] - 1) * size: root[0] * size] = b"\xa5" * size
    path.write_bytes(bytes(data))


def test_a_failure_after_the_reads_is_blamed_on_damage_only(tmp_path, capsys, monkeypatch):
    """A failure no reader foresaw: one line where SQLite finds the file damaged, else the exception
    itself (a pyprof bug must not pass for bad input)."""
    f = corpus_copy(tmp_path, NSYS)
    _damage_unread_table(f)
    out = tmp_path / "o.dict"
    assert _parse_checked(capsys, f, out) == 0  # the damage is in nothing the parse reads

    def broken(self, *args):
        raise ValueError("unforeseen")

    monkeypatch.setattr(nsys.NsysSource, "_ranges", broken)
    out.unlink()
    code, _, err = run_main(capsys, ["parse", f, "-o", out])
    assert code == 2 and err.count("\n") == 1 and "truncated or corrupt" in err and f.name in err, err
    assert not out.exists()
    with pytest.raises(ValueError, match="unforeseen"):
        run_main(capsys, ["parse", corpus_file(NSYS), "-o", out])
