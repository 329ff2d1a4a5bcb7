"""The version of pyprof: one place, read by ``pyprof.__version__``, the CLI and the report, none of which
then has to import the package's public API (``pyprof/__init__.py``) for it."""

__version__ = "0.1.0"
