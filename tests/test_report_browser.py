"""The report in a real browser: Debian's Chromium, headless, driven directly (no downloaded browser).

For each page: Chromium loads it offline (every request goes to a closed local proxy port), runs its
scripts under a virtual-time budget and dumps the DOM, with its console on stderr. The page must log
nothing (no error, no warning), and each chart must hold rendered SVG marks, counted in the dumped DOM
(scatter points, icicle sectors, bars, roof lines) and by the page itself (``data-marks``). A
screenshot is taken under the test's tmp folder. Skipped where no ``chromium`` is installed (``.ci/run``
installs it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

try:
    from conftest import REPO, run_main
except ImportError:  # tests/ collected as a package
    from tests.conftest import REPO, run_main

from test_report_data import gpu_records

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
CHARTS = ("fig-roofline", "fig-layers", "fig-timeline", "fig-breakdown")


def _chromium(tmp_path: Path, url: str, *args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.glob('chromium-profile-*')))}"
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           "--disable-background-networking", "--disable-component-update", f"--user-data-dir={profile}",
           "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",  # offline: nothing is fetched
           "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000", "--window-size=1400,4000",
           "--hide-scrollbars", *args, url]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _console(stderr: str) -> list[str]:
    """The page's console messages (Chromium logs each, whatever its level, as ``CONSOLE``)."""
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _chart_blocks(dom: str) -> dict[str, str]:
    """The dumped DOM of each chart: from its div to the next chart's (charts are not nested)."""
    starts = sorted((m.start(), m.group(1)) for m in re.finditer(r'<div class="chart[^"]*" id="(fig-[\w-]+)"', dom))
    return {fid: dom[pos: starts[i + 1][0] if i + 1 < len(starts) else len(dom)]
            for i, (pos, fid) in enumerate(starts)}


def _marks(block: str) -> int:
    return len(re.findall(r'class="(?:point|slice|js-line|surface)[" ]', block))


def check_page(tmp_path: Path, page: Path, charts=CHARTS) -> dict[str, int]:
    """Load ``page`` in Chromium: no console message, every chart rendered; a screenshot. Returns the
    marks counted per chart."""
    url = page.resolve().as_uri()
    run = _chromium(tmp_path, url, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    assert _console(run.stderr) == []
    dom = run.stdout
    blocks = _chart_blocks(dom)
    counted = {}
    for fid in charts:
        assert fid in blocks, f"{fid} not in the page"
        m = re.search(r'data-marks="(\d+)"', blocks[fid])
        assert m and int(m.group(1)) > 0, f"{fid} drew nothing"  # counted by the page after Plotly drew it
        counted[fid] = _marks(blocks[fid])
        assert counted[fid] > 0, f"{fid}: no SVG marks in the DOM"
    shot = tmp_path / f"{page.stem}.png"
    run = _chromium(tmp_path, url, f"--screenshot={shot}")
    assert run.returncode == 0 and shot.is_file() and shot.stat().st_size > 10_000, run.stderr[-2000:]
    return counted


def test_gpu_page_renders_offline_with_every_chart(tmp_path):
    pytest.importorskip("plotly")
    from pyprof.report import page, profile, roofline, timeline

    p = profile.from_records(gpu_records(), name="gpu.dict", calibration={})
    base = profile.from_records(gpu_records(slow=0.5), name="base.dict", calibration={})
    out = tmp_path / "gpu.html"
    page.write(p, out, baseline=base)
    counted = check_page(tmp_path, out, CHARTS + ("fig-delta-op",))
    # as many point marks as roofline points (the roof lines are js-line marks besides)
    n_points = len(roofline.points(p))
    assert counted["fig-roofline"] >= n_points + len(roofline.roofs(p))
    assert counted["fig-timeline"] >= len(timeline.one_step(p).bars)
    # the tables work: sorting and filtering scripts are in, every row rendered
    dom = _chromium(tmp_path, out.resolve().as_uri(), "--dump-dom").stdout
    assert dom.count('<table class="sortable"') >= 7


def test_page_script_errors_are_caught(tmp_path):
    """The check itself: a page whose script fails is reported (so a clean run means something)."""
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    run = _chromium(tmp_path, bad.resolve().as_uri(), "--dump-dom")
    assert any("undefinedFunction" in line for line in _console(run.stderr))


@pytest.mark.torch
def test_lenet_report_renders(tmp_path, capsys, monkeypatch):
    """`pyprof run examples/lenet.py --report` (CPU): the page Chromium renders has every chart."""
    pytest.importorskip("torch")
    pytest.importorskip("plotly")
    monkeypatch.setenv("PYPROF_CALIBRATION", str(tmp_path / "cal.json"))
    (tmp_path / "cal.json").write_bytes(orjson.dumps({"version": 1, "devices": {
        "cpu": {"flops": {"float32": 1e11}, "bw": 2e10}}}))  # known peaks, so the roofs are drawn
    out = tmp_path / "out"
    code, _, stderr = run_main(capsys, ["run", "-o", out, REPO / "examples" / "lenet.py", "--steps", "4",
                                        "--report"])
    assert code == 0, stderr
    counted = check_page(tmp_path, out / "report.html")
    assert all(counted[c] > 0 for c in CHARTS)
