"""FLOP and byte models, one module per operator family, registered with :func:`registry.register`.

Importing this package imports every family module, which fills the registry. Use
:func:`pyprof.prof.ops.registry.estimate` to cost an op call; :func:`family` names an op's family
(the module its model lives in); :func:`from_sizes` builds arguments from an aten op's input sizes
(emit_nvtx ``sizes = [...]``, kineto ``Input Dims``) when no pyprof marker describes the op.
No torch import anywhere here: the models are pure functions of shapes, dtypes and scalar arguments.
"""

from pyprof.prof.ops import (  # noqa: F401  (importing a family registers its models)
    attention,
    comm,
    concat,
    conv,
    copy,
    distance,
    dropout,
    embedding,
    engine,
    fft,
    fill,
    gemm,
    index,
    layout,
    linalg,
    loss,
    norm,
    optim,
    pointwise,
    pooling,
    reduction,
    registry,  # noqa: F401  (the families import it)
    resample,
    rng,
    rnn,
    softmax,
    sorting,
    viewcopy,
    views,
)

# isort: split
from pyprof.prof.ops import tagged  # noqa: F401  (last: registers what no family did)

# isort: split
from pyprof.prof.ops._args import from_sizes, scalar_arg, tensor_arg, tensorlist_arg  # noqa: F401
from pyprof.prof.ops.registry import Cost, OpCall, canonical, covered_ops, estimate, family  # noqa: F401
