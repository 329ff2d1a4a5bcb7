"""FLOP and byte models, one module per operator family, registered with :func:`registry.register`.

Importing this package imports every family module, which fills the registry. Use
:func:`pyprof.prof.ops.registry.estimate` to cost an op call.
"""

from pyprof.prof.ops import registry  # noqa: F401  (the families import it)
from pyprof.prof.ops.registry import Cost, OpCall, canonical, covered_ops, estimate  # noqa: F401
