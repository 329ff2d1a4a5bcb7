#!/usr/bin/env python3
"""``python parse/parse.py net.sqlite > net.dict``: NVIDIA PyProf's parse script, as a thin wrapper.

Equivalent to ``pyprof parse net.sqlite``; see ``pyprof parse --help``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyprof.cli.main import main  # noqa: E402

if __name__ == "__main__":
    main(["parse", *sys.argv[1:]])
