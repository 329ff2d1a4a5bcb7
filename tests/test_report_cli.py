"""``pyprof report``, ``pyprof diff`` and ``pyprof run --report`` through the CLI entry point."""

from __future__ import annotations

import csv
import io
import sys

import orjson
import pytest

try:
    from conftest import REPO, run_main
except ImportError:  # tests/ collected as a package
    from tests.conftest import REPO, run_main

from test_report_data import gpu_records


def _write(path, records):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


@pytest.fixture
def pair(tmp_path):
    """A baseline and a run whose linear forward takes twice as long and that runs a softmax too, 6 steps
    each (enough for a one-sided rank test to show a change)."""
    a = _write(tmp_path / "a.dict", gpu_records(steps=6))
    b = _write(tmp_path / "b.dict", gpu_records(steps=6, slow=2.0, extra_op=True))
    return a, b


def test_report_writes_the_page(tmp_path, capsys, pair):
    pytest.importorskip("plotly")
    a, b = pair
    out = tmp_path / "r.html"
    code, stdout, stderr = run_main(capsys, ["report", b, "-o", out, "--baseline", a])
    assert code == 0, stderr
    assert stdout == "" and f"wrote {out}" in stderr
    text = out.read_text()
    assert '<section id="baseline">' in text and "linear" in text


def test_report_without_plotly_says_how_to_install(tmp_path, capsys, pair, monkeypatch):
    monkeypatch.setitem(sys.modules, "plotly", None)  # import plotly -> ImportError
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    out = tmp_path / "r.html"
    code, stdout, stderr = run_main(capsys, ["report", pair[0], "-o", out])
    assert code == 2 and not out.exists() and stdout == ""
    assert stderr.count("\n") == 1 and "pip install 'pyprof-torch[report]'" in stderr


def test_report_bad_input_is_one_line(tmp_path, capsys):
    pytest.importorskip("plotly")
    code, _, stderr = run_main(capsys, ["report", tmp_path / "nope.dict", "-o", tmp_path / "r.html"])
    assert code == 2 and stderr.startswith("pyprof: error: ") and stderr.count("\n") == 1


def test_diff_names_the_ops_that_changed(capsys, pair):
    a, b = pair
    code, out, _ = run_main(capsys, ["diff", a, b, "-w", "120"])
    assert code == 0  # (no --fail-above: a report, not a gate)
    lines = out.splitlines()
    assert lines[2].startswith("total time per step: 470 \u00b5s -> 620 \u00b5s (+31.9%, p=")
    by_op = lines.index(next(x for x in lines if x.startswith("By op")))
    assert lines[by_op + 1].split()[:6] == ["Op", "A/step", "B/step", "B", "-", "A"]
    row = lines[by_op + 2].split()
    assert row[0] == "linear" and row[1:8] == ["260", "\u00b5s", "360", "\u00b5s", "+100", "\u00b5s", "+38.5%"]
    assert "slower" in row
    assert lines[by_op + 3].startswith("softmax ") and " new" in lines[by_op + 3]
    assert any(x.startswith("By layer") for x in lines) and any(x.startswith("By kernel") for x in lines)
    assert lines[-1].startswith("verdict: regression beyond 10%")


@pytest.mark.parametrize("width", [30, 50, 80, 120])
def test_diff_honours_any_width(capsys, pair, width):
    code, out, _ = run_main(capsys, ["diff", *pair, "-w", str(width)])
    assert code == 0 and all(len(line) <= width for line in out.splitlines()[3:-1]), out


def test_diff_fail_above(capsys, pair):
    a, b = pair
    code, _, err = run_main(capsys, ["diff", a, b, "--fail-above", "5", "--by", "op"])
    assert code == 1
    assert "regression beyond 5%: total time per step +31.9%" in err and "op linear: time per step +38.5%" in err
    assert "op softmax: new" in err
    code, _, err = run_main(capsys, ["diff", a, b, "--fail-above", "50", "--by", "op"])
    assert code == 1 and err.count("\n") == 1 and "softmax: new" in err
    code, _, err = run_main(capsys, ["diff", b, a, "--fail-above", "0"])  # faster everywhere
    assert code == 0 and err == ""
    code, _, err = run_main(capsys, ["diff", a, a, "--fail-above", "0"])
    assert code == 0 and err == ""


def test_diff_of_a_side_under_load_is_inconclusive(tmp_path, capsys, pair):
    """A side whose steps ran while other processes held most of the CPUs: exit 3 naming the load, however
    large the change; --ignore-load judges anyway."""
    a, b = pair
    from pyprof.records import end_line, header_line

    loaded = tmp_path / "loaded.dict"
    lines = b.read_bytes().splitlines(keepends=True)  # B's records under a header that names the load
    loaded.write_bytes(header_line("kineto", {"conditions": {"busy_others": 0.9, "cpus": 2}}) + b"".join(lines)
                       + end_line(len(lines)))
    code, _, err = run_main(capsys, ["diff", a, loaded, "--fail-above", "10"])
    assert code == 3 and "inconclusive: B ran under load (other processes used 90% of the 2 CPUs" in err
    assert "timings may not hold" in err  # and that side says so itself
    code, _, _ = run_main(capsys, ["diff", a, loaded, "--fail-above", "10", "--ignore-load"])
    assert code == 1


def test_diff_csv_and_json_are_raw(capsys, pair):
    a, b = pair
    code, out, _ = run_main(capsys, ["diff", a, b, "--csv", "--by", "op"])
    rows = list(csv.DictReader(io.StringIO(out)))
    lin = next(r for r in rows if r["key"] == "linear")
    assert lin["by"] == "op" and float(lin["time_a"]) == 260_000 and float(lin["time_b"]) == 360_000
    assert float(lin["p"]) < 0.01 and lin["verdict"] == "slower"
    soft = next(r for r in rows if r["key"] == "softmax")
    assert soft["time_a"] == "" and soft["verdict"] == "new"
    code, out, _ = run_main(capsys, ["diff", a, b, "--json"])
    objs = [orjson.loads(x) for x in out.splitlines()]
    assert {o["by"] for o in objs} == {"op", "layer", "kernel"}
    assert next(o for o in objs if o["key"] == "softmax")["time_a"] is None


def test_diff_bad_options(capsys, pair):
    code, _, err = run_main(capsys, ["diff", *pair, "--by", "bogus"])
    assert code == 2 and "bogus" in err
    code, _, err = run_main(capsys, ["diff", *pair, "--csv", "--json"])
    assert code == 2


@pytest.mark.parametrize("argv,expect", [
    (("train.py", ("--report",), None), ("train.py", (), "")),
    (("train.py", ("--epochs", "1", "--report"), None), ("train.py", ("--epochs", "1"), "")),
    (("train.py", ("--report=out/r.html",), None), ("train.py", (), "out/r.html")),
    (("train.py", ("--report", "r.html"), None), ("train.py", (), "r.html")),
    (("train.py", ("--report", "data.txt"), None), ("train.py", ("--report", "data.txt"), None)),
    (("train.py", ("--report", "x", "1"), None), ("train.py", ("--report", "x", "1"), None)),
    ((None, (), "train.py"), ("train.py", (), "")),  # `pyprof run --report train.py`: click took the script
    (("--epochs", ("1",), "train.py"), ("train.py", ("--epochs", "1"), "")),
    (("train.py", (), "r.html"), ("train.py", (), "r.html")),
    (("train.py", (), None), ("train.py", (), None)),
])
def test_run_reads_report_before_the_script_or_last(argv, expect):
    from pyprof.cli.run_cmd import _report_option

    assert _report_option(*argv) == expect


def test_run_without_a_script_is_one_line(capsys):
    code, _, err = run_main(capsys, ["run"])
    assert code == 2 and "no SCRIPT given" in err


@pytest.mark.torch
def test_run_lenet_with_report(tmp_path, capsys, monkeypatch):
    """The issue's command: `pyprof run examples/lenet.py --report` writes a page with every chart."""
    pytest.importorskip("torch")
    pytest.importorskip("plotly")
    monkeypatch.setenv("PYPROF_CALIBRATION", str(tmp_path / "cal.json"))
    out = tmp_path / "out"
    code, stdout, stderr = run_main(capsys, ["run", "-o", out, "--no-calibrate", "-w", "80",
                                             REPO / "examples" / "lenet.py", "--steps", "4", "--report"])
    assert code == 0, stderr
    summary = stdout.split("\nSummary by op", 1)[1].split("CPU findings")[0]
    assert all(len(line) <= 80 for line in summary.splitlines())  # -w 80: the summary fits
    page = out / "report.html"
    assert f"wrote {page}" in stderr
    text = page.read_text()
    for fid in ("fig-roofline", "fig-layers", "fig-timeline", "fig-breakdown"):
        assert f'id="{fid}"' in text
    assert "conv2d" in text and "CPU findings" in text


def test_report_reads_stdin(tmp_path, capsys, monkeypatch, pair):
    pytest.importorskip("plotly")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(pair[0].read_bytes())))
    code, _, stderr = run_main(capsys, ["report", "-", "-o", tmp_path / "r.html"])
    assert code == 0, stderr
    assert "&lt;stdin&gt;" in (tmp_path / "r.html").read_text()
