"""Process memory settings for the short-lived ``parse`` and ``prof`` commands, which build and free
many arrays of megabytes once. Two defaults cost them system time:

* Transparent huge pages: numpy ``madvise``s every large array for them, and where the kernel's THP
  ``defrag`` setting is ``madvise`` (a common default), each huge-page fault may compact memory
  synchronously: ``pyprof parse`` of a 1M-kernel export spent 2.5 s of system time building its arrays
  instead of 0.9 s with ordinary pages on a 2-core machine (``scripts/bench_parse.py``).
* glibc hands each freed block of over 128 KiB (up to 32 MiB, adaptively) back to the kernel, so the
  next array is page-faulted in afresh: about half a second of system time for ``prof`` at a million
  kernels. :func:`keep_freed_memory` keeps such blocks for reuse.

They change settings of the whole process, which a library must not do to its caller (nor ``pyprof
run``, whose process has just run the user's script): each does nothing unless the process is owned
(:func:`pyprof.process.owned`, which only ``pyprof parse`` and ``pyprof prof`` declare).
"""

from __future__ import annotations

import importlib


def no_hugepage_madvise() -> bool:
    """Turn numpy's huge-page madvise off for this process (and children forked later); False when this
    numpy has no such switch or the process is not owned (the setting is then left alone)."""
    from pyprof import process

    if not process.owned():
        return False
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        switch = getattr(module, "_set_madvise_hugepage", None)
        if switch is not None:
            switch(False)
            return True
    return False


def keep_freed_memory() -> None:
    """Ask glibc to keep freed memory for reuse (blocks up to 32 MiB, its largest allowed setting, come
    from the heap, and the heap is not trimmed below 1 GiB of free space). No glibc (macOS), or a process
    not owned: nothing."""
    import ctypes

    from pyprof import process

    if not process.owned():
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library the interpreter runs on
    except (OSError, AttributeError):
        return
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 32 << 20)
    mallopt(m_trim_threshold, 1 << 30)


def tune_for_batch() -> None:
    """Both settings, for a command that builds big tables once and exits."""
    no_hugepage_madvise()
    keep_freed_memory()
