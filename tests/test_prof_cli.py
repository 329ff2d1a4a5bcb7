"""``pyprof prof`` and ``python prof/prof.py``: output styles, columns, stdin, bad input, broken pipe, help."""

from __future__ import annotations

import csv
import io
import subprocess
import sys

import orjson
import pytest

try:
    from conftest import BLOCK_TORCH, REPO, run_main
except ImportError:  # tests/ collected as a package
    from tests.conftest import BLOCK_TORCH, REPO, run_main

from pyprof.prof.columns import COLUMNS, DEFAULT
from pyprof.prof.ops import registry
from pyprof.prof.ops.registry import Cost


def rec(i, op="ptestgemm", dur=1000, opid=None, kernel="ampere_sgemm_128x64_tn", **kw):
    r = {"kind": "kernel", "kShortName": kernel, "kLongName": f"void {kernel}<float>(Params)", "kDuration": dur,
         "start": i * 10_000, "tid": 1, "device": 0, "gpu": "NVIDIA A100-SXM4-40GB", "stream": 7,
         "grid": [4, 1, 1], "block": [128, 1, 1], "layer": ["net", "net.fc"], "trace": ["train.py:3:forward"],
         "mod": "torch.nn.functional", "op": op,
         "args": [{"name": "input", "type": "tensor", "shape": [64, 512], "dtype": "float32"},
                  {"name": "weight", "type": "tensor", "shape": [256, 512], "dtype": "float32"}],
         "opId": i if opid is None else opid, "seqId": [i], "altSeqId": [], "dir": "fprop", "subSeqId": 0}
    r.update(kw)
    return r


@pytest.fixture
def dictfile(tmp_path):
    path = tmp_path / "net.dict"
    recs = [rec(0), rec(1, op="ptestnomodel", kernel="vectorized_elementwise_kernel", dur=500),
            rec(2, dur=3000), rec(3, op=None, kernel="my kernel", dur=100, opId=None)]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return path


@pytest.fixture(autouse=True)
def model(monkeypatch):
    def fn(call):
        return Cost(1e6, 1e5, "float32", tensor_op=True)

    monkeypatch.setitem(registry._MODELS, "ptestgemm", fn)


def run(args, capsys):
    return run_main(capsys, ["prof", *args])


def test_default_space_separated(dictfile, capsys):
    code, out, err = run([str(dictfile)], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == [next(c.header for c in COLUMNS if c.name == n) for n in DEFAULT]
    assert len(lines) == 5
    assert all(len(line.split(" ")) == len(DEFAULT) for line in lines)  # one field per column
    assert "my_kernel" in lines[4]  # spaces in values become _
    row = dict(zip(DEFAULT, lines[1].split(), strict=True))
    assert row["op"] == "ptestgemm" and row["flops"] == "1000000" and row["tc"] == "0"
    nomodel = dict(zip(DEFAULT, lines[2].split(), strict=True))
    assert nomodel["flops"] == "n/a" and nomodel["bytes"] == "n/a" and nomodel["gap"] == "n/a"
    assert err.count("no FLOP/byte model") == 1 and "ptestnomodel" in err


def test_columns_choose_and_order(dictfile, capsys):
    code, out, _ = run(["-c", "sil,kernel,idx", str(dictfile)], capsys)
    assert code == 0
    assert out.splitlines()[0] == "Sil(ns) Kernel Idx"
    assert out.splitlines()[1] == "1000 ampere_sgemm_128x64_tn 1"


def test_csv(dictfile, capsys):
    code, out, _ = run(["--csv", "-c", "all", str(dictfile)], capsys)
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == [c.header for c in COLUMNS]
    assert len(rows) == 5
    assert rows[1][[c.name for c in COLUMNS].index("params")] == "input=(64,512),float32;weight=(256,512),float32"


def test_aligned_width(dictfile, capsys):
    code, out, _ = run(["-w", "70", "-c", "idx,op,kernel,params,sil,flops", str(dictfile)], capsys)
    lines = out.splitlines()
    assert all(len(line) <= 70 for line in lines)
    assert len({len(line) for line in lines}) == 1  # last column (FLOPs) right-aligned: one right edge
    assert "~" in lines[1]  # the widest text column (params) was truncated to fit
    edge = lines[0].index("Sil") + len("Sil")
    assert lines[1][:edge].endswith("1.00 \u00b5s")  # human units, right-aligned under their header
    assert lines[1].endswith("1.00 MFLOP")
    code, wide, _ = run(["-w", "400", "-c", "idx,op,kernel,params,sil,flops", str(dictfile)], capsys)
    assert "input=(64,512),float32;weight=(256,512),float32" in wide  # nothing cut when it fits


@pytest.mark.parametrize("width", [20, 40, 60, 80, 100, 200])
def test_every_width_is_honoured(dictfile, capsys, width):
    """Whatever -w says, no line is longer: text is cut, then columns are left out (and named)."""
    for args in (["-c", "all"], [], ["--summary", "op"], ["--summary", "kernel", "--top", "2"]):
        code, out, _ = run(["-w", str(width), *args, str(dictfile)], capsys)
        assert code == 0
        assert out and all(len(line) <= width for line in out.splitlines()), (args, out)
    code, out, _ = run(["-w", "40", "-c", "all", str(dictfile)], capsys)
    assert out.splitlines()[-1].startswith("(left out to fit -w 40: ")


def _table(out: str) -> list[str]:
    """The lines of a summary's first table (after its title, up to the first blank line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Summary by")) + 1
    while lines[start].startswith("  "):  # the title's wrapped lines
        start += 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def test_summary_leaves_out_the_least_needed_columns_first(dictfile, capsys):
    code, out, _ = run(["-w", "60", "--summary", "op", str(dictfile)], capsys)
    head = _table(out)[0].split()
    assert head[:2] == ["Op", "Time/step"] and head[-1] == "Gap"  # key, time and gap stay
    assert "Ideal" not in head and "Bytes" not in head  # ideal (= time - excess) and bytes go first
    assert any("Ideal" in line and "left out" in line for line in out.splitlines())
def test_json_lines(dictfile, capsys):
    code, out, _ = run(["--json", "-c", "idx,flops,gap,tc", str(dictfile)], capsys)
    objs = [orjson.loads(line) for line in out.splitlines()]
    assert objs[0]["flops"] == 1e6 and objs[1]["flops"] is None and objs[1]["tc"] == "-"


def test_summary_and_fix_first(dictfile, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")  # read by a person in an 80-column terminal: human units, 80 wide
    code, out, _ = run(["--summary", "op", str(dictfile)], capsys)
    assert code == 0
    lines = out.splitlines()
    assert lines[1].startswith("Summary by op (top 3 of 3): time per step, the median of the whole file")
    table = _table(out)
    assert table[0].split()[:5] == ["Op", "Time/step", "Spread", "Share", "Calls"]
    assert table[1].split()[:6] == ["ptestgemm", "4.00", "\u00b5s", "n/a", "87.0%", "2"]  # one step: no spread
    assert all(len(line) <= 80 for line in lines), [ln for ln in lines if len(ln) > 80]
    # its kernels' roofline times (tens of ns) are under the 1 us floor: latency-bound, no fix
    assert not any("fix this first" in line for line in lines)
    assert any("at the latency floor" in line for line in lines)
    code, out, _ = run(["--summary", "op", "-w", "0", str(dictfile)], capsys)  # -w 0: raw, space-separated
    lines = _table(out)
    assert lines[0].split()[:5] == ["Op", "Time/step", "Spread(%)", "Share(%)", "Calls"]
    assert lines[1].split()[:5] == ["ptestgemm", "4000", "n/a", "86.96", "2"]
    code, out, _ = run(["--summary", "kernel", "--csv", "--top", "1", str(dictfile)], capsys)
    rows = list(csv.reader(io.StringIO(out)))
    assert len(rows) == 2 and rows[1][0] == "ampere_sgemm_128x64_tn"


@pytest.mark.parametrize("content,what", [
    (b"", "empty"),
    (b"hello world\n", "not a record"),
    (b'{"kShortName": "k", "kDuration": 1}\n{"broken": \n', "line 2"),
    (b'{"a": 1}\n', "kShortName"),
    (b"[1, 2]\n", "not a record"),
    (b"SQLite format 3\x00\x10\x00\x01\x01", "SQLite database"),  # parsed first: the parser's error
    (b"{'kShortName': 'k', 'kDuration': (}\n", "PyProf"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, content, what):
    path = tmp_path / "bad.dict"
    path.write_bytes(content)
    code, out, err = run([str(path)], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("pyprof: error: ") and what in err
    assert "Traceback" not in err


def test_missing_file_and_bad_options(tmp_path, capsys, dictfile):
    code, _, err = run([str(tmp_path / "nope.dict")], capsys)
    assert code == 2 and "no such file" in err
    code, _, err = run(["-c", "idx,bogus", str(dictfile)], capsys)
    assert code == 2 and "bogus" in err
    code, _, err = run(["--top", "3", str(dictfile)], capsys)
    assert code == 2 and "--summary" in err
    code, _, err = run(["--gpu", "Voodoo 5", str(dictfile)], capsys)
    assert code == 2 and "peak table" in err


def test_output_file_is_atomic(tmp_path, dictfile, capsys):
    out = tmp_path / "out.csv"
    code, stdout, _ = run(["--csv", "-o", str(out), str(dictfile)], capsys)
    assert code == 0 and stdout == "" and out.read_text().startswith("Idx,")
    bad = tmp_path / "empty.dict"
    bad.write_bytes(b"")
    out2 = tmp_path / "out2.csv"
    code, _, _ = run(["-o", str(out2), str(bad)], capsys)
    assert code == 2 and not out2.exists()


def test_help_is_generated_from_the_column_table(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    for c in COLUMNS:
        assert f"{c.name}  " in out or f"{c.name} " in out, c.name
        assert c.meaning.split()[0] in out
    assert "in proportion" in out and "opId" in out  # the split rule
    assert "gpus.csv" in out and "--peak-flops" in out and "calibration" in out
    assert "Examples" in out


def test_stdin_broken_pipe_and_script(dictfile):
    data = dictfile.read_bytes() * 3000
    # reads stdin; `| head -1` closes the pipe early: no traceback, exit 0
    p = subprocess.run(f"{sys.executable} -m pyprof.cli.main prof -q - | head -1", shell=True, input=data,
                       capture_output=True, cwd=REPO)
    assert p.returncode == 0
    assert p.stdout.decode().startswith("Idx ")
    assert p.stderr == b""
    p = subprocess.run([sys.executable, "prof/prof.py", "--csv", "-q", str(dictfile)], capture_output=True, cwd=REPO)
    assert p.returncode == 0 and p.stdout.decode().startswith("Idx,Direction")


def test_prof_runs_without_torch(dictfile):
    code = BLOCK_TORCH + (
        "from pyprof.cli.main import main\n"
        f"main(['prof', '-q', '--summary', 'op', {str(dictfile)!r}])\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    assert _table(p.stdout)[0].startswith("Op ")


def test_docs_prof_md_is_generated_from_the_code():
    from scripts.gen_docs import prof_md

    assert (REPO / "docs" / "prof.md").read_text() == prof_md(), "run: python scripts/gen_docs.py"


def test_output_to_a_device_is_written_in_place(dictfile, capsys, tmp_path):
    import os
    import stat

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    import threading

    got = []
    reader = threading.Thread(target=lambda: got.append(open(fifo).read()))
    reader.start()
    code, _, err = run(["--csv", "-o", str(fifo), str(dictfile)], capsys)
    reader.join(10)
    assert code == 0, err
    assert got and got[0].startswith("Idx,")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO, not replaced by a regular file
