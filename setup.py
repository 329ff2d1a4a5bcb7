"""Build hook for the optional C accelerator of the op payload (pyprof/annotate/_fastpayload.c).

Everything else is declared in pyproject.toml. ``optional=True``: where no C compiler is present
the install still succeeds and pyprof runs its pure-Python path (same output, slower init()).
"""

import sys

from setuptools import Extension, setup

# csrc/nvtx3: NVIDIA's header-only NVTX v3 (Apache-2.0 WITH LLVM-exception, see its LICENSE.txt),
# so that the extension pushes pyprof's NVTX ranges itself; dlopen (for an NVTX tool) is in libdl
# on glibc < 2.34.
setup(ext_modules=[Extension("pyprof.annotate._fastpayload", ["pyprof/annotate/_fastpayload.c"],
                             include_dirs=["csrc"], libraries=["dl"] if sys.platform.startswith("linux") else [],
                             depends=["csrc/nvtx3/nvToolsExt.h"], optional=True)])
