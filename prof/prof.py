#!/usr/bin/env python3
"""``python prof/prof.py --csv net.dict``: NVIDIA PyProf's prof script, as a thin wrapper.

Equivalent to ``pyprof prof --csv net.dict``; see ``pyprof prof --help``.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pyprof.cli.main import main  # noqa: E402

if __name__ == "__main__":
    main(["prof", *sys.argv[1:]])
