"""The ``pyprof`` click group, and the one place where errors become exit codes.

Subcommands live in their own modules and are registered in :data:`SUBCOMMANDS` as
``"module:attribute"`` strings with their one-line help, imported only when named, so that ``pyprof
--help`` imports none of them and a subcommand's heavy imports (pandas, torch) are paid only when it runs
(``tests/test_cli_startup.py``). Within one command, each warning line is said once
(:func:`pyprof.cli.stderr_say`).
"""

from __future__ import annotations

import importlib
import sys

import click

from pyprof.atomic import Interrupted
from pyprof.errors import PyprofError
from pyprof.terminal import shown
from pyprof.version import __version__

#: name -> ("module:attribute", the line ``pyprof --help`` shows for it)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "parse": ("pyprof.cli.parse_cmd:parse", "Attribute each kernel of an export or trace to layer, op, line."),
    "prof": ("pyprof.cli.prof_cmd:prof", "One row per kernel (FLOPs, bytes, gap), or a summary per step."),
    "run": ("pyprof.cli.run_cmd:run", "Run a script under torch.profiler and pyprof.init(); summarise."),
    "calibrate": ("pyprof.cli.calibrate_cmd:calibrate", "Measure this machine's peak FLOP/s and bandwidth."),
    "advise": ("pyprof.cli.advise_cmd:advise", "The changes that would save the most time per step."),
    "report": ("pyprof.cli.report_cmd:report", "One self-contained HTML page about a profile."),
    "diff": ("pyprof.cli.diff_cmd:diff", "Compare two profiles per op, layer and kernel, step by step."),
    "export": ("pyprof.cli.export_cmd:export", "A Perfetto / chrome://tracing trace with pyprof's columns."),
}


class _ClosedPipe(Exception):
    """stdout's reader went away (``pyprof prof x.dict | head -1``): carried past click, which would
    turn the BrokenPipeError into exit 1, to :func:`main`, which exits 0."""


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise _ClosedPipe() from None
        except KeyboardInterrupt:  # (past click, which would print an empty line first)
            import signal

            raise Interrupted(signal.SIGINT) from None

    def list_commands(self, ctx):
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx, name):
        if name not in SUBCOMMANDS:
            return None
        module, attr = SUBCOMMANDS[name][0].split(":")
        return getattr(importlib.import_module(module), attr)

    def format_commands(self, ctx, formatter):
        """The command list from :data:`SUBCOMMANDS`, importing no subcommand."""
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][1]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="pyprof")
def cli():
    """pyprof: which layer, op and line of Python launched every kernel, and how far it is from the roofline.

    \b
    The workflow:
      1. in your script:  import pyprof; pyprof.init()
      2. profile:         nsys profile --trace=cuda,nvtx --export=sqlite -o net python train.py
      3. attribute:       pyprof parse net.sqlite -o net.dict
      4. report:          pyprof prof net.dict            (or --csv, --summary op)
                          pyprof report net.dict -o report.html   (one HTML page, offline)
    Without a GPU or Nsight:  pyprof run examples/lenet.py --report   (torch.profiler, CPU)
    Compare two runs:         pyprof diff old.dict new.dict  (--fail-above 5 for CI)
    What to change first:     pyprof advise net.dict         (estimated time saved per step)
    On a timeline:            pyprof export --perfetto net.json net.dict   (ui.perfetto.dev)
    From Python, a notebook:  with pyprof.profile() as p: ...; p.summary()  (docs/api.md)
    """


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the group, turning :class:`PyprofError` into one line and its exit code."""
    try:
        cli.main(args=argv, prog_name="pyprof", standalone_mode=False)
        sys.stdout.flush()  # here, not at exit: a closed pipe or a full disk is met while it can be handled
    except PyprofError as exc:
        click.echo(shown(f"pyprof: error: {exc}"), err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("pyprof: aborted", err=True)
        sys.exit(130)
    except (Interrupted, KeyboardInterrupt) as exc:  # SIGTERM, SIGHUP (pyprof.atomic) and Ctrl-C
        import signal

        num = exc.args[0] if isinstance(exc, Interrupted) else signal.SIGINT
        click.echo(f"pyprof: interrupted ({signal.Signals(num).name}); no partial output file is left", err=True)
        sys.exit(128 + num)
    except click.ClickException as exc:
        exc.message = shown(exc.message)  # (a bad option's value is the user's text)
        exc.show()
        sys.exit(exc.exit_code)
    except (BrokenPipeError, _ClosedPipe):
        # `pyprof prof net.dict | head`: quiet on a closed pipe, exit 0. What is still buffered for
        # stdout goes to /dev/null, so the flush at interpreter exit fails no more.
        _quiet_stdout()
        sys.exit(0)
    except OSError as exc:
        # an OS failure no reader turned into its own message (stdout on a full disk, say): one line
        broken = _is_stdout_error()
        where = f" {exc.filename}" if exc.filename else " the output"
        click.echo(shown(f"pyprof: error: cannot read or write{where}: {exc.strerror or exc}"), err=True)
        if broken:
            _quiet_stdout()
        sys.exit(2)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that nothing more fails writing it (at exit either)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        sys.stdout = None  # type: ignore[assignment]


def _is_stdout_error() -> bool:
    """Whether stdout can no longer be written (the OSError met was writing it)."""
    try:
        sys.stdout.flush()
        return False
    except (OSError, ValueError, AttributeError):
        return True


if __name__ == "__main__":
    main()
