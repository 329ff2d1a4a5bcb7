"""End-to-end validation of pyprof's figures against torch's own counts (needs torch).

``python scripts/validate.py`` (or :func:`pyprof.validate.harness.validate`) trains each model of
:mod:`pyprof.validate.zoo` through ``pyprof run`` -> records -> ``prof`` and compares the GEMM,
convolution and attention FLOPs per direction and module with FlopCounterMode's formulas
(:mod:`pyprof.validate.reference`).
"""
