"""Keep numpy from asking for transparent huge pages in the command-line tools.

numpy ``madvise``s every large array for transparent huge pages. Where the kernel's THP ``defrag``
setting is ``madvise`` (a common default), each huge-page fault may compact memory synchronously: on
this project's 2-core test machine that made ``pyprof parse`` of a 1M-kernel export spend 2.5 s of
system time building its arrays instead of 0.9 s with ordinary pages (``scripts/bench_parse.py``).
``parse`` and ``prof`` allocate many short-lived arrays once, so ordinary pages are the better trade.
Only the CLI calls this: it changes a numpy setting of the whole process, which a library must not do
to its caller.
"""

from __future__ import annotations

import importlib


def no_hugepage_madvise() -> bool:
    """Turn numpy's huge-page madvise off for this process (and children forked later); False when this
    numpy has no such switch (the setting is then left alone)."""
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
