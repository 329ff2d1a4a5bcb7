"""The private interfaces init() relies on (pyprof/probes.py): present on this torch, and a missing one
stops init() with one line that names it, before anything is patched."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import pyprof  # noqa: E402
from pyprof import probes  # noqa: E402
from pyprof.errors import UsageError  # noqa: E402

pytestmark = pytest.mark.torch


def test_every_probe_passes_on_this_torch():
    assert probes.failures() == []
    assert len(probes.PROBES) >= 9


def test_every_name_read_with_a_fallback_exists_on_this_torch():
    version = tuple(int(x) for x in torch.__version__.split(".")[:2])
    missing = [name for name, since in probes.OPTIONAL.items() if version >= since and probes.attr_or_none(name) is None]
    assert missing == []


# (object, attribute) whose loss init() must notice
REMOVABLE = [
    ("torch.autograd.profiler", "_is_profiler_enabled"),
    ("torch._C._autograd", "_get_sequence_nr"),
    ("torch._C._autograd", "_profiler_type"),
    ("torch._C._autograd", "_profiler_enabled"),
    ("torch._C", "_jit_get_schemas_for_operator"),
]


@pytest.mark.parametrize("owner, attr", REMOVABLE)
def test_a_missing_interface_stops_init_before_anything_is_patched(monkeypatch, owner, attr):
    import importlib

    original_add = torch.add
    monkeypatch.delattr(importlib.import_module(owner), attr)
    with pytest.raises(UsageError) as err:
        pyprof.init()
    text = str(err.value)
    assert f"{owner}.{attr}" in text and torch.__version__ in text and "\n" not in text
    assert not pyprof.is_initialized() and torch.add is original_add


def test_a_profiler_flag_of_another_type_is_refused(monkeypatch):
    monkeypatch.setattr(torch.autograd.profiler, "_is_profiler_enabled", 0)
    with pytest.raises(UsageError, match="_is_profiler_enabled is a int, not a bool"):
        pyprof.init()


def test_nvtx_internals_matter_only_with_an_nvtx_tool_attached(monkeypatch):
    lib = pytest.importorskip("nvtx._lib.lib")
    monkeypatch.delattr(lib, "RegisteredString")
    monkeypatch.delenv("NVTX_INJECTION64_PATH", raising=False)
    assert probes.failures() == []
    monkeypatch.setenv("NVTX_INJECTION64_PATH", "/nonexistent/libToolsInjection64.so")
    assert [p.name for p, _ in probes.failures()] == ["nvtx._lib.lib"]


def test_a_probe_that_raises_is_a_failure_not_a_crash(monkeypatch):
    def broken() -> str:
        raise RuntimeError("interface changed")

    monkeypatch.setattr(probes, "PROBES", (probes.Probe("torch.x", "testing", broken),))
    with pytest.raises(UsageError, match="torch.x raised RuntimeError: interface changed"):
        probes.require()


def test_the_first_import_of_the_instrumentation_checks_too():
    # a fresh interpreter: pyprof.annotate's module-level lookups must not raise AttributeError first
    code = ("import torch; del torch._C._autograd._profiler_type; import pyprof\n"
            "try:\n    pyprof.init()\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.startswith("UsageError pyprof.init() cannot instrument torch"), out.stdout + out.stderr
    assert "_profiler_type" in out.stdout
