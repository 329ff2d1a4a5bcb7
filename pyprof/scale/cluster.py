"""Many exports, one task per file: on a Dask cluster (``pyprof parse --cluster``) or local processes.

The task is the per-file function of a local run: :func:`pyprof.parse.run.parse_file` (through
``run._worker``, which turns bad input into a result naming the file) for JSON lines, or
:func:`pyprof.scale.parquet.parse_to_parquet` for Parquet. So a file's output is the same bytes
whichever machine parsed it. Each worker reads its input and writes its output itself: on a cluster,
both paths must be on a file system every worker sees (they are made absolute here, since a worker's
working directory is its own).

A file that fails (bad input; a worker lost with it, or any other exception) becomes a result with its
``error`` set, naming the file; the other tasks go on. Results come back as they finish; the caller
decides what a failure means (``pyprof parse`` exits 2 at the end, naming them, the good outputs kept).

``local:N`` starts a Dask LocalCluster of N single-threaded worker processes on this machine, closed
at the end; any other address (``tcp://host:8786``) is an existing scheduler's.
"""

from __future__ import annotations

import os
import re
import resource
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyprof.errors import PyprofError, UsageError
from pyprof.scale.extra import require

FORMATS = ("jsonl", "parquet")


@dataclass
class Done:
    """A finished task: its result, and the peak resident memory of the process that ran it (bytes;
    the process's peak so far, so the largest over a worker's tasks is the worker's peak)."""

    result: object
    peak_rss: int = 0
    worker: str = ""


def task(path: str, out: str, index: int, fmt: str, label: str | None = None) -> Done:
    """Parse ``path`` (the ``index``-th input) to ``out`` in ``fmt``; never raises for bad input.
    ``label``: the dataset's ``file`` column, where not the input's base name (:func:`labels`)."""
    from pyprof.parse.run import Result, _worker

    if fmt == "parquet":
        from pyprof.scale.parquet import parse_to_parquet

        try:
            res = parse_to_parquet(path, out, index, threads=1, label=label)  # a worker per core: DuckDB on one
        except PyprofError as exc:
            res = Result(path=path, out=out, error=str(exc))
    else:
        res = _worker(path, out)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB
    return Done(res, peak_rss, _worker_name())


def _worker_name() -> str:
    try:
        from distributed import get_worker

        return get_worker().address
    except (ImportError, ValueError):
        return f"pid {os.getpid()}"


def output_names(paths: list[str], out_dir: str, fmt: str) -> list[str]:
    """Where each input's output goes (:func:`pyprof.parse.run.output_names`: inputs of the same name,
    such as several ``pyprof run`` outputs' ``trace.json``, named by their folders too)."""
    from pyprof.parse.run import output_names as names

    return names(paths, out_dir, ".parquet" if fmt == "parquet" else ".dict")


def labels(paths: list[str], outs: list[str]) -> list[str | None]:
    """The ``file`` column of each input's Parquet: None (its base name) where that is unique among the
    inputs, else its output's name with the input's extension (``run1-trace.json``), so that several
    ``pyprof run`` outputs' ``trace.json`` stay apart in the per-rank summary."""
    from pyprof.parse.run import _stem

    bases = [os.path.basename(p) for p in paths]
    return [None if bases.count(base) == 1
            else os.path.splitext(os.path.basename(o))[0] + base[len(_stem(base)):]
            for base, o in zip(bases, outs, strict=True)]


def _failed(path: str, out: str, exc: BaseException):
    from pyprof.parse.run import Result

    what = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
    if type(exc).__name__ == "KilledWorker":
        what = "the worker parsing it died (out of memory?)"
    return Result(path=path, out=out, error=f"{path}: {what}")


def parse_cluster(paths: list[str], out_dir: str, address: str, fmt: str = "jsonl", progress: bool | None = None,
                  processes: bool = True, on_done: Callable[[Done], None] | None = None) -> Iterator:
    """Parse each path to ``out_dir`` on the Dask cluster at ``address`` (``local:N``: a LocalCluster of
    N workers, ``processes=False`` making them threads of this process, for tests); yields
    :class:`~pyprof.parse.run.Result` objects as they finish, failures with ``error`` set.
    ``on_done`` sees every finished task's :class:`Done` (the benchmark's memory figures)."""
    require("dask", "distributed")
    from distributed import as_completed

    outs = output_names(paths, out_dir, fmt)
    os.makedirs(out_dir, exist_ok=True)
    names = labels(paths, outs)
    with _client(address, processes) as client:
        futures = {}
        for i, (p, o) in enumerate(zip(paths, outs, strict=True)):
            fut = client.submit(task, os.path.abspath(p), os.path.abspath(o), i, fmt, names[i], pure=False,
                                key=f"pyprof-parse-{i}-{os.path.basename(p)}")
            futures[fut] = (p, o)
        yield from _collect(as_completed(futures), futures, progress, on_done)


def parse_local(paths: list[str], out_dir: str, fmt: str = "parquet", jobs: int | None = None,
                progress: bool | None = None, on_done: Callable[[Done], None] | None = None) -> Iterator:
    """:func:`parse_cluster` on this machine's processes (``jobs``, default the CPUs), the way
    :func:`pyprof.parse.run.parse_many` runs them: forked where pyprof owns the process, else spawned."""
    from concurrent.futures import as_completed

    from pyprof import process

    outs = output_names(paths, out_dir, fmt)
    names = labels(paths, outs)
    os.makedirs(out_dir, exist_ok=True)
    jobs = process.workers(jobs, len(paths))
    pool = process.pool(jobs, spawn=True) if jobs > 1 else None
    if pool is None:
        bar = _bar(len(paths), progress)
        try:
            for i, (p, o) in enumerate(zip(paths, outs, strict=True)):
                done = task(p, o, i, fmt, names[i])
                if on_done is not None:
                    on_done(done)
                if bar is not None:
                    bar.update(1)
                yield done.result
        finally:
            if bar is not None:
                bar.close()
        return
    with pool:
        futures = {pool.submit(task, p, o, i, fmt, names[i]): (p, o)
                   for i, (p, o) in enumerate(zip(paths, outs, strict=True))}
        yield from _collect(as_completed(futures), futures, progress, on_done)


def _bar(total: int, progress: bool | None):
    from pyprof.parse.run import _progress_bar

    if progress is None:
        progress = sys.stderr.isatty()
    return _progress_bar(total) if progress else None


def _collect(finished, futures: dict, progress: bool | None, on_done) -> Iterator:
    bar = _bar(len(futures), progress)
    try:
        for fut in finished:
            path, out = futures[fut]
            try:
                done = fut.result()
            except Exception as exc:  # noqa: BLE001 - a bug or a lost worker: that file fails, not the run
                res = _failed(path, out, exc)
            else:
                if on_done is not None:
                    on_done(done)
                res = done.result
                if res.error and res.path != path:  # the caller's spelling, not the worker's absolute path
                    res.error = res.error.replace(res.path, path)
                res.path, res.out = path, out
            if bar is not None:
                bar.update(1)
            yield res
    finally:
        if bar is not None:
            bar.close()


#: a scheduler's address: [tcp|tls|ws|wss://]HOST:PORT (HOST a name, an IPv4 or a bracketed IPv6 address)
_ADDRESS = re.compile(r"^(?:(?:tcp|tls|ws|wss)://)?(?:[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.]+\]):\d{1,5}$")


def max_local_workers() -> int:
    """The most workers ``local:N`` starts: four per CPU (a worker is a process holding one parse)."""
    return 4 * (os.cpu_count() or 1)


@contextmanager
def _client(address: str, processes: bool = True):
    """A Dask client of the scheduler at ``address``, or of a LocalCluster for ``local:N``."""
    import logging

    from distributed import Client, LocalCluster

    if address.startswith("local:") or address == "local":
        n = address.partition(":")[2] or str(os.cpu_count() or 1)
        if not n.isdigit() or int(n) < 1:
            raise UsageError(f"--cluster {address}: N of local:N must be a whole number of workers",
                             "e.g. --cluster local:4")
        most = max_local_workers()
        if int(n) > most:
            raise UsageError(f"--cluster {address}: {int(n):,} local workers on {os.cpu_count() or 1} CPUs",
                             f"use at most local:{most} (each worker is a process parsing one file)")
        # no dashboard (it would serve the run's file names, unauthenticated), nothing listening beyond
        # this machine
        where = {"host": "127.0.0.1"} if processes else {}  # (threads: in-process transport, no socket)
        with LocalCluster(n_workers=int(n), threads_per_worker=1, processes=processes, dashboard_address=None,
                          silence_logs=logging.ERROR, **where) as cluster, Client(cluster) as client:
            yield client
        return
    if not _ADDRESS.match(address):
        raise UsageError(f"--cluster {address}: not a scheduler address",
                         "give tcp://HOST:8786 (a running dask scheduler) or local:N")
    try:
        client = Client(address, timeout="20s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"--cluster {address}: no Dask scheduler answered ({exc})",
                         "start one (`dask scheduler`, then `dask worker ADDRESS` on each machine) or use local:N") from None
    with client:
        yield client
