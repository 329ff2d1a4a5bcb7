"""The ``pyprof`` command line: a click group, one module per subcommand (``*_cmd.py``)."""
