"""Project-level promises: parse/prof import without torch; the README's test command is what CI runs."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import BLOCK_TORCH, REPO


def test_parse_and_prof_import_without_torch():
    code = BLOCK_TORCH + (
        "import pyprof, pyprof.markers, pyprof.records, pyprof.cli.main\n"
        "import pyprof.parse, pyprof.prof, pyprof.prof.ops\n"
        "assert 'torch' not in sys.modules\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_readme_test_command_is_what_ci_runs():
    readme = (REPO / "README.md").read_text()
    first_screen = readme.split("## ", 1)[0]
    commands = re.findall(r"^(python3 -m pip .+)$", first_screen, flags=re.M)
    assert len(commands) == 2, commands  # exactly two set-up commands on the first screen
    test_command = commands[1]
    assert "pytest" in test_command
    ci = (REPO / ".ci" / "run").read_text()
    assert test_command in ci.splitlines()


def test_required_layout_exists():
    for path in ["pyproject.toml", "pyprof", "parse/parse.py", "prof/prof.py", "examples", "tests", "scripts"]:
        assert (REPO / path).exists(), path
