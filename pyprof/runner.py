"""``pyprof run``'s engine: run a Python script in-process under torch.profiler, with pyprof markers.

The script runs with :func:`runpy.run_path` as ``__main__`` with ``sys.argv = [script, *args]`` and
its folder first on ``sys.path``, exactly as ``python script.py args`` would, under
``pyprof.init()`` and a ``torch.profiler.profile`` whose schedule (``wait``/``warmup``/``active``
steps) advances at every iteration boundary:

* ``pyprof.step()`` calls in the script (through :func:`pyprof.annotate.add_step_callback`),
* the ``step()`` of the script's own torch profiler (:class:`_OwnProfilers`),
* ``optimizer.step()`` (``torch.optim.optimizer.register_optimizer_step_post_hook``), or
* ``torch.autograd.backward`` returning (``Tensor.backward`` calls it; wrapped for the run).

``step_on="auto"`` counts the first of these the script has used so far: a higher one seen stops the
lower ones counting, and does not end again the iteration a lower one just ended. So a loop of
forward, backward and ``optimizer.step()`` counts its optimizer steps, and backward calls count
only before any optimizer step (the optimizer's pre-hook stops them before a closure's backward;
under gradient accumulation the micro-batches before the first optimizer step count one each).
Every boundary is taken outside any range: ``pyprof.step()`` at once; an optimizer step when its
``step()`` returns (the optimizer class's ``step`` is wrapped for the run at its first call: the
first one at the next module call); a backward call at the next module call, or as it returns in a
script that has called no module. ``step_on="all"`` profiles the whole script, for scripts with no
iteration.

Under ``"auto"`` a script that marks no iteration at all is profiled whole too (``RunResult.whole``), so
any script runs with no option: the profiler records from the start (step 0 is recorded where the
schedule would skip or warm it up); when the first iteration boundary comes, that window is dropped
unexported and the schedule goes on as asked, and when none comes, it is the trace.

A failing script: its traceback is printed on stderr as Python would print it (pyprof's and
runpy's frames dropped) and :class:`ScriptFailed` is raised (exit status 1, no trace is parsed);
``sys.exit(0)`` is a success, ``sys.exit(n)`` a failure. torch is imported here only, lazily. What
may run in the process afterwards: :mod:`pyprof.cli.run_cmd`.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as _dt
import functools
import os
import runpy
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from pyprof.atomic import output_error
from pyprof.errors import PyprofError, UsageError
from pyprof.machine import LoadProbe
from pyprof.probes import dynamo_imported

STEP_MODES = ("auto", "pyprof", "optimizer", "all")


class ScriptFailed(PyprofError):
    """The profiled script raised or exited with a non-zero status (its traceback is already printed)."""

    exit_code = 1


@dataclass
class RunOptions:
    wait: int = 1
    warmup: int = 1
    active: int = 5
    step_on: str = "auto"
    init: bool = True
    record_shapes: bool = True
    with_stack: bool = False
    cuda: bool | None = None  # None: trace CUDA when torch.cuda.is_available()


@dataclass
class RunResult:
    trace: Path
    steps: int
    step_source: str
    env: dict[str, Any] = field(default_factory=dict)
    #: wall seconds: ``script`` (the whole script, under the profiler), ``profiled`` (its recorded
    #: steps, from the first active step's start to the last one's end) and ``export`` (writing the trace)
    times: dict[str, float] = field(default_factory=dict)
    #: the whole script was profiled because, under ``step_on="auto"``, it marked no iteration
    whole: bool = False
    #: what the run did that the user should know, one line each (``pyprof run`` prints them on stderr)
    notes: list[str] = field(default_factory=list)
    #: what the profiled steps ran under (:meth:`_Conditions.result`)
    conditions: dict[str, Any] = field(default_factory=dict)


class _Conditions:
    """What the profiled steps ran under (the whole script's run where no schedule applies), from the
    first recorded step's start to the last one's end: see :meth:`result`."""

    def __init__(self, first: int | None, active: int):
        import torch

        self.first = first  # profiler steps taken before recording starts (None: from the start, to the end)
        self.stop = None if first is None else first + active
        self.torch = torch
        self.begin()

    def begin(self) -> None:
        self.probe, self.t0 = LoadProbe(), time.perf_counter()
        self.load: dict[str, Any] | None = None
        self.t1: float | None = None
        self.when = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        self.batches: list[int | None] = []
        self.want = True  # the next module call is a recorded step's first

    def at_step(self, steps: int) -> None:
        """Before profiler step number ``steps`` begins."""
        if steps == self.first:
            self.begin()
        elif self.first is not None and self.stop is not None and self.first < steps < self.stop:
            self.want = True
        elif steps == self.stop:
            self.end()

    def end(self) -> tuple[dict[str, Any], float]:
        if self.load is None or self.t1 is None:
            self.t1, self.load = time.perf_counter(), self.probe.result()
        return self.load, self.t1

    def on_module_call(self, args: tuple) -> None:
        if self.want:  # (a step's first module call is an outermost one)
            self.want = False
            try:
                first = next(a for a in args if isinstance(a, self.torch.Tensor))
                self.batches.append(int(first.shape[0]) if first.dim() else None)
            except Exception:  # no tensor argument, or one without a plain first dimension
                self.batches.append(None)

    def result(self, device: str) -> dict[str, Any]:
        """``busy_others`` (share of the usable CPUs' time other processes took, 0-1; None where
        unreadable), ``loadavg`` (1/5/15 min at the start), ``cpus`` (usable), ``threads`` (torch's
        intra-op), ``torch`` (version), ``when`` (ISO UTC start), ``device`` ("cpu" or the GPU's name),
        ``profiled_s`` (wall seconds), ``batch`` (the first dimension of the first tensor argument of
        each step's first module call, the most common over the steps; None where none is known)."""
        load, t1 = self.end()
        counts = collections.Counter(b for b in self.batches if b is not None)
        return {**load, "threads": self.torch.get_num_threads(), "torch": self.torch.__version__,
                "when": self.when, "device": device, "profiled_s": round(t1 - self.t0, 6),
                "batch": counts.most_common(1)[0][0] if counts else None}


#: iteration boundaries by precedence: a source counts only while no later one has been seen
SOURCES = ("backward", "optimizer", "profiler", "pyprof")
SOURCE_NAMES = {"backward": "backward()", "optimizer": "optimizer.step()", "profiler": "the script's profiler.step()",
                "pyprof": "pyprof.step()"}


class _Stepper:
    """Advances the profiler schedule at iteration boundaries (see the module docstring)."""

    def __init__(self, prof, mode: str, conditions: _Conditions):
        self.prof = prof
        self.mode = mode
        self.conditions = conditions
        self.steps = 0
        self.seen = -1  # index in SOURCES of the highest source seen (a boundary of a lower one is not)
        self.last: str | None = None  # the source of the last step taken
        self.pending: str | None = None  # a boundary passed, to be taken outside every range
        self.wrapped: dict[Any, tuple[str, Any]] = {}  # owner -> (attribute, original)
        self.in_backward = 0
        self.modules_seen = False  # a module was called: a backward boundary can wait for the next call
        self.ended = False  # the first optimizer step comes right after a backward boundary was taken

    def _counts(self, source: str) -> bool:
        """Whether a boundary of ``source`` counts: the run's step mode takes it, and no source it
        gives way to has been seen (seeing it now makes it the one that counts)."""
        if self.mode == "all" or self.mode not in ("auto", source):
            return False
        rank = SOURCES.index(source)
        if rank < self.seen:
            return False
        self.seen = rank
        return True

    def _step(self, source: str) -> None:
        self.steps += 1
        self.last = source
        self.conditions.at_step(self.steps)
        self.add_compiled()
        with warnings.catch_warnings():  # the step-0 window (see _schedule) was a cycle torch warns of
            warnings.filterwarnings("ignore", message="Warning: Profiler clears events at the end of each cycle")
            with quiet_kineto():
                self.prof.step()

    def add_compiled(self) -> None:
        """Put the compiled graphs' kernel origins recorded so far (:mod:`pyprof.annotate.inductor`)
        into the profiler's trace metadata; the window that ends next exports them."""
        from pyprof.annotate import inductor

        if inductor.GRAPHS:
            self.prof.add_metadata_json(inductor.TRACE_KEY, inductor.metadata())

    def on_pyprof_step(self, source: str = "pyprof") -> None:
        """``pyprof.step()``, or the script's own profiler's ``step()`` (:class:`_OwnProfilers`)."""
        first = self.seen < SOURCES.index(source)
        if not self._counts(source):
            return
        if first and (self.pending or self.last in SOURCES[:SOURCES.index(source)]):
            # this iteration already ended at a boundary of a lower source
            self.flush()
            self.last = source
            return
        self._step(source)

    def on_optimizer_pre_step(self, *_args: Any) -> None:
        # an optimizer is stepped: backward calls, inside its step (a closure) or after, no longer count
        rank = SOURCES.index("optimizer")
        if self.mode == "auto" and self.seen < rank:
            self.seen = rank
            self.ended = self.last == "backward" and not self.pending

    def on_optimizer_step(self, opt: Any = None, *_args: Any) -> None:
        # The post hook runs inside the optimizer's own record_function range (Optimizer.step#...);
        # stepping the profiler there would leave that range open across the next ProfilerStep, so
        # the step is pending until step() returns (see the module docstring).
        if not self._counts("optimizer"):
            return
        if opt is not None:
            self._wrap(type(opt), "step")
        if self.ended:  # this iteration already ended at its backward call
            self.ended = False
            return
        self.pending = "optimizer"

    def _wrap(self, owner: Any, name: str) -> None:
        """Replace ``owner.name`` for the run by the original between pending steps (undone by unwrap)."""
        if owner in self.wrapped:
            return
        orig = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if orig is None or not callable(orig):
            return
        stepper = self

        @functools.wraps(orig)  # keeps torch's `hooked` flag, so torch does not wrap it again
        def step(*args: Any, **kwargs: Any) -> Any:
            stepper.flush()  # not inside it, where an optimizer's closure calls modules
            try:
                return orig(*args, **kwargs)
            finally:
                stepper.flush()

        self.wrapped[owner] = (name, orig)
        setattr(owner, name, step)

    def wrap_backward(self) -> None:
        """Count iterations at ``torch.autograd.backward`` (``Tensor.backward`` calls it) returning,
        for a script that calls neither pyprof.step() nor optimizer.step() (undone by unwrap)."""
        import torch.autograd

        if self.mode != "auto":
            return
        orig = torch.autograd.backward
        stepper = self

        @functools.wraps(orig)
        def backward(*args: Any, **kwargs: Any) -> Any:
            if stepper.in_backward or _compiling():
                return orig(*args, **kwargs)
            stepper.flush()  # a boundary not yet taken: no module call came since (a script without modules)
            stepper.in_backward += 1
            try:
                out = orig(*args, **kwargs)
            finally:
                stepper.in_backward -= 1
            if stepper._counts("backward"):
                stepper.pending = "backward"
                if not stepper.modules_seen:  # no module call will come to take it
                    stepper.flush()
            return out

        self.wrapped[torch.autograd] = ("backward", orig)
        torch.autograd.backward = backward

    def unwrap(self) -> None:
        for owner, (name, orig) in self.wrapped.items():
            setattr(owner, name, orig)
        self.wrapped.clear()

    def on_module_call(self, _module: Any = None, args: tuple = ()) -> None:
        # before a module's range opens (how: Session.start), never traced by TorchDynamo; not while a
        # compile runs the module for real: a pending step waits for the next eager module call
        self.modules_seen = True
        if self.pending and not _compiling():
            self.flush()
        self.conditions.on_module_call(args)

    def flush(self) -> None:
        """Take a pending step (outside every range): at a module call, after an optimizer step,
        at the end of the script."""
        if self.pending:
            source, self.pending = self.pending, None
            self._step(source)

    @property
    def source(self) -> str:
        if self.mode == "all":
            return "none (whole script)"
        return SOURCE_NAMES[SOURCES[self.seen]] if self.steps else "none"


class _OwnProfilers:
    """The script's own profilers while pyprof's runs. Two Kineto sessions in one process crash it
    (SIGSEGV) or garble both traces, so ``torch.profiler.profile``, ``torch.autograd.profiler.profile``,
    ``emit_nvtx`` and ``emit_itt`` opened by the script run inside pyprof's session instead: entering,
    starting and stopping them does nothing (what they would record is in pyprof's trace, their
    ``record_function`` ranges too); ``step()`` marks an iteration; ``key_averages()``, ``events()``,
    ``table()`` are empty, ``export_chrome_trace`` writes an empty trace (``[]``), ``export_stacks`` an
    empty file, so a script that reads them runs on. pyprof's session (and the autograd profile inside
    it) keeps every original; :meth:`restore` undoes the patches."""

    def __init__(self, session, on_step) -> None:
        import torch.autograd.profiler as legacy
        import torch.profiler
        from torch.autograd.profiler_util import EventList

        self.used: set[str] = set()
        self.saved: list[tuple[type, str, Any]] = []

        def empty(*_a: Any, **_k: Any) -> Any:
            return EventList()

        def write(what: str):
            return lambda _this, path, *_a, **_k: Path(path).write_text(what)

        shims = {"key_averages": empty, "events": empty, "function_events": empty, "table": lambda *_a, **_k: "",
                 "export_chrome_trace": write("[]"), "export_stacks": write(""), "step": lambda _t: on_step("profiler"),
                 "total_average": lambda _t: EventList().total_average(), "self_cpu_time_total": lambda _t: 0.0}
        for cls, owned, names in (
                (torch.profiler.profile, lambda this: this is session, "start stop step key_averages events "
                 "export_chrome_trace export_stacks export_memory_timeline"),
                (legacy.profile, lambda this: this is session.profiler, "key_averages function_events table "
                 "total_average self_cpu_time_total export_chrome_trace export_stacks"),
                (legacy.emit_nvtx, None, ""), (legacy.emit_itt, None, "")):
            label = f"{cls.__module__.replace('.profiler.profiler', '.profiler')}.{cls.__name__}"
            for name in ("__enter__", "__exit__", *names.split()):
                opened = name in ("__enter__", "start")
                self._patch(cls, name, owned, functools.partial(self._opened, label)
                            if opened else shims.get(name, lambda *_a, **_k: None))

    def _opened(self, label: str, this: Any, *_a: Any, **_k: Any) -> Any:
        self.used.add(label)
        return this

    def _patch(self, cls: type, name: str, owned, shim) -> None:
        import inspect

        try:
            orig = inspect.getattr_static(cls, name)
        except AttributeError:  # an instance attribute in this torch (function_events before 2.5)
            self._patch_instance_attribute(cls, name, owned, shim)
            return
        self.saved.append((cls, name, cls.__dict__.get(name)))
        fn: Any = orig.fget if isinstance(orig, property) else orig

        @functools.wraps(fn)
        def method(this, *args: Any, **kwargs: Any) -> Any:
            return (fn if owned is not None and owned(this) else shim)(this, *args, **kwargs)

        setattr(cls, name, property(method) if isinstance(orig, property) else method)

    def _patch_instance_attribute(self, cls: type, name: str, owned, shim) -> None:
        """``name``, an attribute each instance sets, read through a property: the instance's own value
        for pyprof's session, the shim's for the script's; the value stays in the instance's ``__dict__``,
        where it is read again once :meth:`restore` removes the property."""
        def get(this: Any) -> Any:
            return this.__dict__.get(name) if owned is not None and owned(this) else shim(this)

        def put(this: Any, value: Any) -> None:
            this.__dict__[name] = value

        self.saved.append((cls, name, None))
        setattr(cls, name, property(get, put))

    def restore(self) -> None:
        for cls, name, orig in reversed(self.saved):
            if orig is None:
                delattr(cls, name)
            else:
                setattr(cls, name, orig)
        self.saved.clear()

    def note(self, trace: Path) -> list[str]:
        """The run's line on what it did with them (none where the script opened none)."""
        return [f"the script's own {', '.join(sorted(self.used))} ran inside pyprof's profiler session, not as a "
                "second one (two in one process crash it): its step() marks iterations, its key_averages() and "
                f"events() are empty, its exports empty traces; the profile is {trace}"] if self.used else []


@contextlib.contextmanager
def quiet_kineto():
    """Around pyprof's own profiler calls: Kineto's log level at 6 unless the user set one
    (``KINETO_LOG_LEVEL``), so that its ``USDT: ... profiler_start`` / ``profiler_stop`` lines are not
    printed at every start and stop. They are level 5, above Kineto's errors (4), so those go too:
    ``KINETO_LOG_LEVEL=4`` shows both. Kineto reads the variable once, when a profiler first starts
    in the process; the script sees its environment as it was."""
    if "KINETO_LOG_LEVEL" in os.environ:
        yield
        return
    os.environ["KINETO_LOG_LEVEL"] = "6"
    try:
        yield
    finally:
        os.environ.pop("KINETO_LOG_LEVEL", None)


def _modules():
    """:mod:`pyprof.annotate.modules` (imports torch)."""
    from pyprof.annotate import modules

    return modules


class _GlobalModuleHook:
    """``fn`` as a global module forward pre-hook (``register_module_forward_pre_hook``), registered as
    it is until TorchDynamo is imported (nothing compiles before; importing it for the wrapper would
    cost seconds of every run), then, at the first module call after, as
    :func:`pyprof.annotate.modules.unseen_by_dynamo` makes it: the outermost module's hooks run
    eagerly before any compiled region of it runs."""

    def __init__(self, fn):
        import torch

        self.fn = fn
        self.handle = None
        self.compiling = torch.compiler.is_compiling  # (looked up once: it is asked at every module call)
        if dynamo_imported():
            self._register(_modules().unseen_by_dynamo(fn))
        else:
            self._register(self._until_dynamo)

    def _register(self, hook) -> None:
        from torch.nn.modules.module import register_module_forward_pre_hook

        if self.handle is not None:
            self.handle.remove()
        self.handle = register_module_forward_pre_hook(hook)

    def _until_dynamo(self, *args: Any) -> None:
        if self.compiling():  # traced in a compiled region before any eager module call: do nothing
            return
        if dynamo_imported():
            self._register(_modules().unseen_by_dynamo(self.fn))
        self.fn(*args)

    def remove(self) -> None:
        self.handle.remove()


def _compiling() -> bool:
    """Whether TorchDynamo is tracing the caller (``torch.compiler.is_compiling``)."""
    import torch

    return torch.compiler.is_compiling()


def _schedule(opts: RunOptions):
    """torch.profiler's schedule for ``opts`` (None: no schedule, the whole script); under ``"auto"`` step
    0 is recorded (see the module docstring), so a script without iterations still yields a trace."""
    from torch.profiler import ProfilerAction, schedule

    if opts.step_on == "all":
        return None
    base = schedule(wait=opts.wait, warmup=opts.warmup, active=opts.active, repeat=1)
    recorded = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
    if opts.step_on != "auto" or base(0) in recorded:  # already recording from the start
        return base

    def whole_until_first_step(step: int):
        return ProfilerAction.RECORD_AND_SAVE if step == 0 else base(step)

    return whole_until_first_step


def _check(opts: RunOptions) -> None:
    if opts.step_on not in STEP_MODES:
        raise UsageError(f"unknown step source {opts.step_on!r}", f"use one of {', '.join(STEP_MODES)}")
    for name in ("wait", "warmup", "active"):
        value = getattr(opts, name)
        if not isinstance(value, int) or value < 0:
            raise UsageError(f"--{name} must be a whole number >= 0, not {value!r}", "e.g. --wait 1 --warmup 1 --active 3")
    if opts.active < 1:
        raise UsageError("--active must be at least 1", "profile at least one step")


def run_env() -> dict[str, Any]:
    """``env.json``: this machine's CPUs and thread variables, and this process's torch's thread settings,
    for the CPU findings."""
    import torch

    from pyprof.cpu_findings import machine_env

    return {
        **machine_env(),
        "intra_op_threads": torch.get_num_threads(),
        "inter_op_threads": torch.get_num_interop_threads(),
        "torch": torch.__version__,
        "mkldnn": bool(torch.backends.mkldnn.is_available()),
        "cuda": bool(torch.cuda.is_available()),
    }


WHOLE_SCRIPT = ("no iteration marked (no pyprof.step(), optimizer.step() or backward() call): profiled the whole "
                "script, so first-call costs (allocation, library initialisation, warm-up) are included in what "
                "is shown; call pyprof.step() at the end of each iteration of a loop to profile steady steps")

#: what ``pyprof run`` writes in its folder (the report at its default path)
RUN_OUTPUTS = ("trace.json", "records.dict", "env.json", "report.html")


def _end_forked_child(exit_code: Any, failure: BaseException | None) -> None:
    """A process the script forked has returned from the script (it did not ``os._exit``): it ends here,
    as the script would have ended it, without pyprof's epilogue (stopping the parent's profiler,
    exporting its trace, parsing it: all the parent's to do, and a deadlock in a child)."""
    if failure is not None and not isinstance(failure, SystemExit):
        traceback.print_exception(failure)
    code = exit_code if isinstance(exit_code, int) else (0 if exit_code is None and failure is None else 1)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            stream.flush()
    os._exit(code)


DEFAULT_OUT = "pyprof-out"


def new_run_folder(base: str = DEFAULT_OUT) -> Path:
    """Where a run without ``-o`` writes: ``base`` (in the working directory) while it holds no run's
    outputs, else the first of ``base-2``, ``base-3``... holding none; a new one is claimed by making
    it (two runs started at once get two). So no run overwrites another."""
    n = 1
    while True:
        out = Path(base if n == 1 else f"{base}-{n}")
        try:
            out.mkdir()
            return out
        except FileExistsError:
            if out.is_dir() and not any((out / name).exists() for name in RUN_OUTPUTS):
                return out
        except OSError:
            return out  # (the run says in one line why it cannot be made)
        n += 1


def _check_writable(out: Path) -> None:
    """One line, before the script runs, where files cannot be made in ``out`` (a read-only folder): by
    making one, not by asking ``os.access``, whose answer depends on who asks (root passes it, and
    it knows nothing of read-only mounts, ACLs or quotas), and the run would otherwise fail only at
    the trace's export, after the whole script."""
    import tempfile

    try:
        fd, probe = tempfile.mkstemp(prefix=".pyprof-", suffix=".probe", dir=out)
    except OSError as exc:
        raise output_error(str(out / "trace.json"), exc) from None
    os.close(fd)
    os.unlink(probe)


def _fresh_output(out_dir: str | os.PathLike) -> Path:
    """``out_dir``, made absolute (the script may change the working directory), created, checked
    writable, and cleared of an earlier run's outputs: a run that fails must not leave an older run's
    records or report beside it, to be read as this one's."""
    out = Path(out_dir).resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create output folder {out} ({exc.strerror})", "choose another -o DIR") from None
    _check_writable(out)
    for name in RUN_OUTPUTS:
        stale = out / name
        if stale.is_file() or stale.is_symlink():
            try:
                stale.unlink()
            except OSError as exc:
                raise output_error(str(stale), exc) from None
    return out


def _script_failed(script: Path, failure: BaseException, exit_code: Any) -> NoReturn:
    """The user's script raised, or exited with a failing status: say so, with its traceback."""
    if isinstance(failure, SystemExit):
        raise ScriptFailed(f"{script.name} exited with status {exit_code!r}", "no trace was parsed")
    _print_script_traceback(failure)
    raise ScriptFailed(f"{script.name} failed: {type(failure).__name__}: {failure}".splitlines()[0],
                       "its traceback is printed above; no trace was parsed")


def _nothing_recorded(script: Path, opts: RunOptions, stepper: _Stepper) -> NoReturn:
    """The script ended before the profiler schedule reached its active steps: why, and what to change."""
    if stepper.steps == 0:
        what = {"pyprof": "no pyprof.step() call", "optimizer": "no optimizer.step() call"}.get(
            opts.step_on, "no pyprof.step(), optimizer.step() or backward() call")
        raise UsageError(
            f"{script.name} marked no iteration ({what}), "
            "so the profiler schedule never reached its active steps",
            "call pyprof.step() once per iteration, or rerun with --steps-from all to profile the whole script")
    raise UsageError(
        f"{script.name} ran {stepper.steps} steps (counted at {stepper.source}), fewer than "
        f"wait + warmup + 1 = {opts.wait + opts.warmup + 1}, so nothing was recorded",
        "lower --wait/--warmup or run more iterations")


class Session:
    """pyprof's torch.profiler session: the profiler (its schedule, trace written to ``trace_path`` when
    the active steps end), ``init()``, and the step sources and hooks that advance it (the module
    docstring), started by :meth:`start` and all undone by :meth:`stop`. ``pyprof run`` runs a script
    inside one, ``pyprof.profile()`` a block of the user's own code."""

    def __init__(self, opts: RunOptions, trace_path: Path):
        import torch
        from torch.profiler import ProfilerActivity, profile

        self.opts, self.trace_path = opts, trace_path
        cuda = torch.cuda.is_available() if opts.cuda is None else opts.cuda
        self.device = torch.cuda.get_device_name() if cuda and torch.cuda.is_available() else "cpu"
        self.written: list[Path] = []
        self.times = {"export": 0.0}
        sched = _schedule(opts)
        # under "auto", the step-0 window recorded in case no iteration is ever marked: dropped at the
        # first boundary, kept (the whole script) when the script ends before one
        self._whole_window = opts.step_on == "auto" and sched is not None and opts.wait + opts.warmup > 0
        self.prof = profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else []),
                            on_trace_ready=self._on_ready, record_shapes=opts.record_shapes,
                            with_stack=opts.with_stack, **({} if sched is None else {"schedule": sched}))
        self.stepper = _Stepper(self.prof, opts.step_on,
                                _Conditions(None if sched is None else opts.wait + opts.warmup, opts.active))

    def _on_ready(self, p) -> None:
        if self._whole_window:
            self._whole_window = False
            if self.stepper.steps:  # an iteration was marked: this window is not the trace
                return
        t = time.perf_counter()
        tmp = self.trace_path.with_suffix(".json.part")
        p.export_chrome_trace(str(tmp))
        os.replace(tmp, self.trace_path)
        self.written.append(self.trace_path)
        self.times["export"] += time.perf_counter() - t

    def start(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        from pyprof import annotate

        stepper, opts = self.stepper, self.opts
        self._was_initialized = annotate.is_initialized()
        if opts.init:
            annotate.init()
        # a deferred step is taken at the next module call, before pyprof opens the module's range: through
        # pyprof's own module instrumentation (a global forward hook would put it into hooks mode, see
        # pyprof.annotate.modules); without it, through torch's global hook, kept out of TorchDynamo's frames
        self._module_hook = None
        if not (opts.init and _modules().add_before_call(stepper.on_module_call)):
            self._module_hook = _GlobalModuleHook(stepper.on_module_call)
        annotate.add_step_callback(stepper.on_pyprof_step)
        self._hooks = [register_optimizer_step_pre_hook(stepper.on_optimizer_pre_step),
                       register_optimizer_step_post_hook(stepper.on_optimizer_step)]
        stepper.wrap_backward()
        self.own = _OwnProfilers(self.prof, stepper.on_pyprof_step)
        with quiet_kineto():  # (Kineto's start-up, about a second of CPU time at its first start, is no step's)
            self.prof.start()
        stepper.conditions.begin()

    def stop(self, flush: bool = True) -> None:
        """End the session (``flush``: take a pending optimizer step first) and undo all of :meth:`start`."""
        from pyprof import annotate

        stepper = self.stepper
        try:
            if flush:
                stepper.flush()
            stepper.conditions.end()
            stepper.add_compiled()
            with quiet_kineto():
                self.prof.stop()
        finally:
            for hook in self._hooks:
                hook.remove()
            if self._module_hook is not None:
                self._module_hook.remove()
            else:
                _modules().remove_before_call(stepper.on_module_call)
            stepper.unwrap()
            self.own.restore()
            annotate.remove_step_callback(stepper.on_pyprof_step)
            if self.opts.init and not self._was_initialized:
                annotate.deinit()


def run_script(script: str | os.PathLike, args: list[str], out_dir: str | os.PathLike,
               opts: RunOptions | None = None) -> RunResult:
    """Run ``script`` under torch.profiler; write ``out_dir/trace.json``; return where and what ran."""
    opts = opts or RunOptions()
    _check(opts)
    script = Path(script)
    if not script.is_file():
        raise UsageError(f"{script}: no such script", "give the path of a Python file to run")
    trace_path = _fresh_output(out_dir) / "trace.json"
    session = Session(opts, trace_path)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.resolve().parent))
    failure: BaseException | None = None
    exit_code: Any = None
    t_start = time.perf_counter()
    parent = os.getpid()
    session.start()
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        exit_code = exc.code
        if exit_code not in (None, 0):
            failure = exc
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the user's script failed: report it as Python would
        failure = exc
    finally:
        if os.getpid() != parent:
            _end_forked_child(exit_code, failure)
        try:
            session.stop(flush=failure is None)
        finally:
            sys.argv, sys.path[:] = saved_argv, saved_path
    stepper, times = session.stepper, session.times
    times["script"] = time.perf_counter() - t_start
    env = run_env()
    if failure is not None:
        _script_failed(script, failure, exit_code)
    if not session.written:
        _nothing_recorded(script, opts, stepper)
    whole = opts.step_on == "auto" and stepper.steps == 0
    conditions = stepper.conditions.result(session.device)
    times["profiled"] = conditions["profiled_s"]
    return RunResult(trace=trace_path, steps=stepper.steps, step_source=stepper.source, env=env, times=times,
                     whole=whole, notes=([WHOLE_SCRIPT] if whole else []) + session.own.note(trace_path),
                     conditions=conditions)


def _print_script_traceback(exc: BaseException) -> None:
    """The script's traceback without the frames of pyprof's runner and runpy."""
    tb = exc.__traceback__
    internal = {os.path.abspath(__file__), os.path.abspath(runpy.__file__), "<frozen runpy>"}
    while tb is not None and (tb.tb_frame.f_code.co_filename in internal
                              or os.path.abspath(tb.tb_frame.f_code.co_filename) in internal):
        tb = tb.tb_next
    sys.stderr.write("".join(traceback.format_exception(type(exc), exc, tb)))
    sys.stderr.flush()
