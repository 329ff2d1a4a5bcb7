"""``python -m pyprof.advise > docs/advise.md``."""

import sys

from pyprof.advise import markdown

sys.stdout.write(markdown())
