"""Build hook for the optional C accelerator of the op payload (pyprof/annotate/_fastpayload.c).

Everything else is declared in pyproject.toml. ``optional=True``: where no C compiler is present
the install still succeeds and pyprof runs its pure-Python path (same output, slower init()).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("pyprof.annotate._fastpayload", ["pyprof/annotate/_fastpayload.c"],
                             optional=True)])
