"""Library calls leave the caller's process alone; ``pyprof parse``/``prof`` own theirs, ``pyprof run`` not.

:mod:`pyprof.process` holds the rule: a library function forks workers or pauses the cyclic collector
only in a process pyprof owns. These tests force every parallel path of parse and prof onto a small
input (thresholds at zero), make ``os.fork`` record its callers and refuse, and check that nothing forks
and the collector stays on while the work runs; then, as a control, that the same calls do fork and
pause it under :func:`pyprof.process.owning`, so the first half would have seen them.
"""

from __future__ import annotations

import gc
import io
import os
import threading

import pytest

from pyprof import process
from pyprof.parse import fetch
from pyprof.parse.run import parse_file, parse_many
from pyprof.prof import columns, render, table
from tests.test_parse_fallback import small_export

needs_two_cpus = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="the parallel paths need two CPUs")


class Watch:
    """``os.fork`` calls (refused, or let through with ``allow``) and the collector's state inside the
    work (``gc.isenabled()`` where table, render and the readers run)."""

    def __init__(self, monkeypatch, allow: bool = False):
        self.forks = 0
        self.gc_inside: dict[str, list[bool]] = {}
        real_fork = os.fork
        me = os.getpid()

        def fork():
            if os.getpid() == me:
                self.forks += 1
            if not allow:
                raise OSError("os.fork called in a process pyprof does not own")
            return real_fork()

        monkeypatch.setattr(os, "fork", fork)
        for owner, name in ((table, "_build"), (render, "_write"), (fetch, "run_task")):
            self._spy(monkeypatch, owner, name)

    def _spy(self, monkeypatch, owner, name):
        real = getattr(owner, name)

        def spy(*args, **kwargs):
            self.gc_inside.setdefault(name, []).append(gc.isenabled())
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, spy)


def _force_parallel(monkeypatch):
    monkeypatch.setattr(fetch, "PARALLEL_MIN_ROWS", 0)
    monkeypatch.setattr(table, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(render, "PARALLEL_MIN_ROWS", 10)
    monkeypatch.setattr(render, "CHUNK", 4)


def _parse_and_prof(tmp_path, jobs: int = 2) -> str:
    """parse (one file, then two in parallel processes) and prof (decode and format on ``jobs``)."""
    tmp_path.mkdir(exist_ok=True)
    src = small_export(tmp_path / "net.sqlite")
    out = tmp_path / "net.dict"
    parse_file(src, str(out))
    many = list(parse_many([src, small_export(tmp_path / "rank1.sqlite")], str(tmp_path / "many"), jobs=jobs))
    assert [r.error for r in many] == [None, None]
    df = table.build_file(out, workers=jobs)
    text = io.StringIO()
    render.write(df, list(columns.DEFAULT), text, "csv", workers=jobs)
    return text.getvalue()


@needs_two_cpus
def test_library_calls_neither_fork_nor_touch_the_collector(tmp_path, monkeypatch):
    assert not process.owned()
    _force_parallel(monkeypatch)
    enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    watch = Watch(monkeypatch)
    text = _parse_and_prof(tmp_path)
    assert watch.forks == 0
    assert watch.gc_inside.keys() == {"_build", "_write", "run_task"}  # (the readers ran here: no workers)
    assert all(all(v) for v in watch.gc_inside.values())
    assert (gc.isenabled(), gc.get_freeze_count()) == (enabled, frozen)
    assert text.count("\n") == 1 + 17


@needs_two_cpus
def test_an_owned_process_takes_the_forked_paths(tmp_path, monkeypatch):
    """The control: the same calls fork and pause the collector where pyprof owns the process, with the
    same output; ownership and the collector are given back afterwards."""
    _force_parallel(monkeypatch)
    plain = _parse_and_prof(tmp_path / "plain", jobs=1)
    enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    watch = Watch(monkeypatch, allow=True)
    with process.owning():
        text = _parse_and_prof(tmp_path / "owned")
    assert watch.forks > 0
    assert not any(watch.gc_inside["_build"] + watch.gc_inside["_write"])
    assert text == plain
    assert not process.owned() and (gc.isenabled(), gc.get_freeze_count()) == (enabled, frozen)


def test_the_cli_owns_its_process_only_while_a_command_runs(tmp_path, capsys):
    from tests.conftest import run_main

    seen = []
    real = table.build_file

    def spy(*args, **kwargs):
        seen.append(process.owned())
        return real(*args, **kwargs)

    src = small_export(tmp_path / "net.sqlite")
    code, _, err = run_main(capsys, ["parse", src, "-o", tmp_path / "net.dict"])
    assert code == 0, err
    assert not process.owned()
    table.build_file = spy
    try:
        code, _, err = run_main(capsys, ["prof", "--csv", tmp_path / "net.dict"])
    finally:
        table.build_file = real
    assert code == 0, err
    assert seen == [True] and not process.owned()


# -- pyprof run: the user's script ran in this process, threads and all ---------------------------------

SCRIPT = """
import os, sys, threading, time
import torch
import pyprof
from torch import nn

flag = sys.argv[1]
lock = threading.Lock()


def hold():  # a thread of the script's, holding a lock while pyprof parses: a forked child would inherit it locked
    with lock:
        while not os.path.exists(flag):
            time.sleep(0.01)


threading.Thread(target=hold, name="script-holder", daemon=True).start()
net = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
x = torch.randn(8, 16)
for _ in range(5):
    opt.zero_grad()
    net(x).pow(2).mean().backward()
    opt.step()
"""


def _pyprof_run(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from tests.conftest import run_main

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    flag = tmp_path / "stop"
    watch = Watch(monkeypatch)
    held = []
    real = table.build

    def spy(*args, **kwargs):
        held.append((process.owned(), any(t.name == "script-holder" for t in threading.enumerate())))
        return real(*args, **kwargs)

    monkeypatch.setattr(table, "build", spy)
    enabled, frozen = gc.isenabled(), gc.get_freeze_count()
    try:
        code, out, err = run_main(capsys, ["run", "-o", tmp_path / "out", "--no-calibrate", script, flag])
    finally:
        flag.touch()
        for t in threading.enumerate():
            if t.name == "script-holder":
                t.join(10)
    assert code == 0, err
    assert held == [(False, True)]  # parsed and built while the script's thread still held its lock
    assert watch.forks == 0
    assert watch.gc_inside["_build"] and all(all(v) for v in watch.gc_inside.values())
    assert (gc.isenabled(), gc.get_freeze_count()) == (enabled, frozen)
    assert "Summary by op" in out


@pytest.mark.torch
def test_pyprof_run_does_not_fork_after_the_script(tmp_path, capsys, monkeypatch):
    _force_parallel(monkeypatch)
    _pyprof_run(tmp_path, capsys, monkeypatch)


@pytest.mark.torch
@needs_two_cpus
def test_pyprof_run_leaves_the_collector_on_while_kineto_plans(tmp_path, capsys, monkeypatch):
    """``pyprof parse`` pauses the collector while a trace's records are planned; ``pyprof run`` does not."""
    from pyprof.parse.kineto import load, source

    _force_parallel(monkeypatch)
    plan = source.KinetoSource._plan

    def planned(self, *args, **kwargs):  # the collector stays on while the trace's records are planned
        assert gc.isenabled()
        return plan(self, *args, **kwargs)

    monkeypatch.setattr(source.KinetoSource, "_plan", planned)
    monkeypatch.setattr(load, "CHUNK_BYTES", 4096)
    _pyprof_run(tmp_path, capsys, monkeypatch)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_fork_and_reap_statuses():
    """process.fork's child exits 0 when its function returns, 1 when it raises; reap waits for it,
    terminates one that outlives its timeout, and says None for a child reaped already."""
    import time

    def boom():
        raise RuntimeError("in the child")

    ok, bad = process.fork(lambda: None), process.fork(boom)
    assert (process.reap(ok), process.reap(bad)) == (0, 1)
    assert process.reap(ok) is None
    stuck = process.fork(lambda: time.sleep(60))
    assert process.reap(stuck, timeout=0.2) == -15  # (terminated by SIGTERM: it would have returned 0)
