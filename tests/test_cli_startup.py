"""The command line as a terminal user meets it: help that starts at once (no pandas or numpy imported),
each warning said once per command, and piped output that keeps every column."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
from conftest import REPO, run_main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
HEAVY = ("pandas", "numpy", "torch", "pyarrow")


def _imported_by(argv: list[str]) -> tuple[list[str], str]:
    """The heavy modules a fresh interpreter holds after ``pyprof ARGV``, and what it printed."""
    code = ("import sys\nfrom pyprof.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120)
    return eval(done.stderr.strip().splitlines()[-1]), done.stdout  # noqa: S307 - our own list's repr


@pytest.mark.parametrize("argv", [["--help"], ["prof", "--help"], ["parse", "--help"], ["export", "--help"]])
def test_help_imports_neither_pandas_nor_numpy(argv):
    heavy, out = _imported_by(argv)
    assert heavy == [], f"pyprof {' '.join(argv)} imported {heavy}"
    assert out.startswith("Usage: pyprof")


def test_help_lists_every_command_and_each_loads():
    from pyprof.cli.main import SUBCOMMANDS, cli

    heavy, out = _imported_by(["--help"])
    listed = [line.split()[0] for line in out.split("Commands:\n", 1)[1].splitlines() if line.startswith("  ")
              and not line.startswith("   ")]
    assert listed == sorted(SUBCOMMANDS)
    ctx = click.Context(cli)
    for name in SUBCOMMANDS:
        cmd = cli.get_command(ctx, name)
        assert isinstance(cmd, click.Command) and cmd.name == name
    assert cli.get_command(ctx, "nope") is None


def test_a_warning_is_said_once_per_command(capsys):
    """diff of one export against itself parses it twice: its warnings (and the line saying it was parsed)
    come once each."""
    trace = FIXTURES / "kineto" / "gpu_synthetic.json"
    code, out, err = run_main(capsys, ["diff", trace, trace])
    assert code == 0, err
    lines = err.splitlines()
    assert any(line.startswith("pyprof: warning: ") for line in lines)
    assert sum("is an export, not a record file" in line for line in lines) == 1
    assert len(lines) == len(set(lines)), lines
    # a second command says them again: once per command, not once per process
    code, _, again = run_main(capsys, ["diff", trace, trace])
    assert again == err


def test_piped_summary_keeps_every_column(capsys, monkeypatch):
    """Not a terminal (the tests' stdout, a pipe, a file): no width limit, so FLOPs, bytes and their rates
    are there; -w still fits a width and names what it left out."""
    monkeypatch.delenv("COLUMNS", raising=False)
    trace = FIXTURES / "gpu" / "h200_lenet.trace.json.gz"
    code, out, err = run_main(capsys, ["prof", "--summary", "op", trace])
    assert code == 0, err
    head = next(line for line in out.splitlines() if line.startswith("Op "))
    for name in ("FLOPs", "Bytes", "FLOP/s", "B/s", "Ideal", "Excess", "Gap", "Bound"):
        assert name in head.split(), head
    assert "left out to fit" not in out and max(len(line) for line in out.splitlines()) > 80
    code, out, err = run_main(capsys, ["prof", "--summary", "op", "-w", "60", trace])
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 60
    assert "(left out to fit -w 60: " in out
    monkeypatch.setenv("COLUMNS", "70")  # a width the user set is kept
    code, out, err = run_main(capsys, ["prof", "--summary", "op", trace])
    assert code == 0 and max(len(line) for line in out.splitlines()) <= 70


def test_terminal_width(monkeypatch):
    from pyprof.cli import terminal_width

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr("shutil.get_terminal_size", lambda *a: os.terminal_size((132, 40)))
    assert terminal_width() == 132 and terminal_width("out.txt") == 0  # a file is no terminal
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert terminal_width() == 0


def test_the_suite_says_how_many_tests_the_corpus_skips(tmp_path):
    """The suite's line on tests skipped for want of the corpus counts exactly those (here: all of a file
    of corpus tests, with the corpus pointed elsewhere)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYPROF_CORPUS": str(tmp_path / "none")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:benchmark",
                           "-p", "no:xdist", str(REPO / "tests" / "test_parse_corpus.py")],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    lines = done.stdout.splitlines()
    skipped = int(lines[-1].split(" skipped")[0].split()[-1])
    assert skipped > 0 and f"pyprof: {skipped} test(s) skipped for want of corpus data" in done.stdout, done.stdout[-800:]
    assert lines[-1].startswith(f"{skipped} skipped")  # (pytest's own line stays the last)
