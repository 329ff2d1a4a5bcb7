"""End-to-end validation of pyprof's figures against torch's own counts (needs torch).

``python scripts/validate.py`` (or :func:`scripts.validation.harness.validate`) trains each model of
:mod:`scripts.validation.zoo` through ``pyprof run`` -> records -> ``prof`` and compares the GEMM,
convolution and attention FLOPs per direction and module with FlopCounterMode's formulas
(:mod:`scripts.validation.reference`).
"""
