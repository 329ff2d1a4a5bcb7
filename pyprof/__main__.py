"""``python -m pyprof`` is the ``pyprof`` command."""

from pyprof.cli.main import main

if __name__ == "__main__":
    main()
