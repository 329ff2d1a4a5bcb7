"""Parse one file to one output (all-or-nothing), and many files in parallel processes.

Kept apart from the click command so that tests, benchmarks and other code call the same path.
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import as_completed
from dataclasses import dataclass, field

from pyprof import process
from pyprof.atomic import atomic_output
from pyprof.errors import PyprofError
from pyprof.parse.db import damaged, integrity_problem
from pyprof.parse.limits import LimitError
from pyprof.parse.source import Prepared, Source, open_source
from pyprof.records import end_line, header_line, nulled_text, source_facts


@dataclass
class Result:
    """What one parse did, for the summary line."""

    path: str
    out: str | None
    kind: str = ""
    version: str = ""
    kernels: int = 0
    copies: int = 0
    attributed: int = 0
    written: int = 0
    warnings: list[str] = field(default_factory=list)
    error: str | None = None

    def summary(self) -> str:
        pct = f"{100.0 * self.attributed / self.kernels:.1f}%" if self.kernels else "n/a"
        extra = f" (+{self.copies} memcpy/memset)" if self.copies else ""
        return (f"{os.path.basename(self.path)}: {self.kernels} kernels{extra}, {pct} attributed to NVTX "
                f"ranges; {self.kind} {self.version}")


def parse_file(path: str, out: str | None) -> Result:
    """Read ``path``, write its records to ``out`` (None or "-": stdout). Raises PyprofError on bad input;
    a file output is never left partial.

    The readers turn what SQLite reports into one-line errors, but a damaged record can also hold values
    no exporter writes and fail later, anywhere. So any other failure is checked against SQLite's own
    verdict on the file (:func:`~pyprof.parse.db.integrity_problem`): a damaged export is the one-line
    "truncated or corrupt" error; a sound one (or a JSON trace) re-raises the failure, a pyprof bug."""
    try:
        return _parse_file(path, out)
    except LimitError as exc:
        if exc.problem.startswith(path):
            raise
        raise LimitError(f"{path}: {exc.problem}", exc.hint) from None
    except (PyprofError, OSError):  # (OSError: the output, e.g. a closed pipe; SQLite raises its own errors)
        raise
    except Exception as exc:
        problem = integrity_problem(path)
        if problem is None:
            raise
        raise damaged(path, problem) from exc


def header_facts(source: Source) -> dict:
    """What a record file's header says beside its source: the source's facts (its steps) and the peaks
    it will be priced with (:func:`pyprof.peaks.pinned`: today's calibration; left out, so that prof uses
    the one of its day, where the calibration file cannot be read)."""
    from pyprof import peaks
    from pyprof.errors import InputError

    facts = dict(source_facts(source))
    with contextlib.suppress(InputError):
        facts["peaks"] = peaks.pinned()
    return facts


def _parse_file(path: str, out: str | None) -> Result:
    """:func:`parse_file`'s work."""
    source = open_source(path)
    res = Result(path=path, out=out, kind=source.kind, version=source.version)
    prep = source.prepared()  # every read happens here, before the first byte
    try:
        with atomic_output(out, "wb") as fh:
            fh.write(header_line(source.kind, header_facts(source)))
            write_lines(prep, fh)
            fh.write(end_line(prep.n, source.dropped, prep.nulled))
            fh.flush()
    finally:
        # a failed write (a full disk) ends the source's reading here, before the error line (only
        # the SQLite sources' Streamed holds a reader open)
        prep.close()
    res.written = prep.n
    stats = source.stats
    if stats is not None:  # (every source's is, once prepared)
        res.kernels, res.copies, res.attributed = stats.kernels, stats.copies, stats.attributed
    res.warnings = list(source.warnings)
    if prep.nulled:
        res.warnings.append(nulled_text(prep.nulled))
    return res


#: from this many records on, a thread writes while the main thread serialises
THREADED_MIN = 20_000


def write_lines(prep: Prepared, fh) -> None:
    """Stream ``prep``'s JSON lines to ``fh``; on big outputs a second thread does the writing.

    ``write`` releases the GIL, so the kernel's copying into the page cache (about 2 s of system time
    for the 1.7 GB of a 1M-kernel export) overlaps with serialising the next chunks. (Forked writers
    were slower: copy-on-write faults and the file system's per-file write lock ate the gain.)"""
    chunks = prep.lines()
    if prep.n < THREADED_MIN:
        for chunk in chunks:
            fh.write(chunk)
    else:
        _write_threaded(chunks, fh)


def _write_threaded(chunks, fh) -> None:
    pending: queue.Queue = queue.Queue(maxsize=8)
    failed: list[BaseException] = []

    def drain() -> None:
        try:
            while (chunk := pending.get()) is not None:
                fh.write(chunk)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread below
            failed.append(exc)
            while pending.get() is not None:  # let the producer finish without blocking
                pass

    writer = threading.Thread(target=drain, name="pyprof-writer", daemon=True)
    writer.start()
    try:
        for chunk in chunks:
            if failed:
                break
            pending.put(chunk)
    finally:
        pending.put(None)
        writer.join()
    if failed:
        raise failed[0]


def _worker(path: str, out: str) -> Result:
    """One file of :func:`parse_many`: its Result, or its failure as one line; whatever one file does
    (a pyprof bug included) never stops the others."""
    try:
        return parse_file(path, out)
    except PyprofError as exc:
        return Result(path=path, out=out, error=str(exc))
    except OSError as exc:
        return Result(path=path, out=out, error=f"{path}: {exc.strerror or exc}")
    except Exception as exc:  # noqa: BLE001 - a bug in pyprof: named, this file only
        return Result(path=path, out=out, error=f"{path}: pyprof failed on this file ({type(exc).__name__}: "
                      f"{str(exc).splitlines()[0][:200] if str(exc) else ''}); please report it")


EXPORT_SUFFIXES = (".sqlite", ".sql", ".nvvp", ".json.gz", ".json", ".db")


def _stem(path: str) -> str:
    base = os.path.basename(path)
    return next((base[:-len(ext)] for ext in EXPORT_SUFFIXES if base.endswith(ext)), base)


def output_names(paths: list[str], out_dir: str, suffix: str = ".dict") -> list[str]:
    """Where each input's output goes in ``out_dir``: its name less the export's extension, plus
    ``suffix``. Inputs that share a name (``run1/trace.json``, ``run2/trace.json``: ``pyprof run``
    outputs) are told apart by as many of the folders above them as it takes (``run1-trace``,
    ``run2-trace``). The same input twice is a :class:`~pyprof.errors.UsageError`."""
    from pyprof.errors import UsageError

    full = [os.path.normpath(os.path.abspath(p)) for p in paths]
    if len(set(full)) != len(full):
        dup = next(p for p, f in zip(paths, full, strict=True) if full.count(f) > 1)
        raise UsageError(f"{dup} is given twice", "give each input once")
    folders = [f.split(os.sep)[:-1] for f in full]
    depth = [0] * len(paths)

    def name(i: int) -> str:
        above = [d for d in folders[i][len(folders[i]) - depth[i]:] if d] if depth[i] else []
        return "-".join([*above, _stem(paths[i])])

    while True:
        names = [name(i) for i in range(len(paths))]
        uses = Counter(names)
        clashes = [i for i, n in enumerate(names) if uses[n] > 1]
        if not clashes:
            return [os.path.join(out_dir, n + suffix) for n in names]
        if all(depth[i] >= len(folders[i]) for i in clashes):
            raise UsageError("two inputs have the same file name, so their outputs would collide",
                             "parse them into different output folders")
        for i in clashes:
            depth[i] = min(depth[i] + 1, len(folders[i]))


class _Lines:
    """The progress of :func:`parse_many` where tqdm (the ``progress`` extra) is not installed: a line per
    finished file on stderr."""

    def __init__(self, total: int):
        self.total, self.done = total, 0

    def update(self, n: int) -> None:
        self.done += n
        sys.stderr.write(f"pyprof parse: {self.done}/{self.total} files\n")
        sys.stderr.flush()

    def close(self) -> None:
        pass


def _progress_bar(total: int):
    """tqdm's bar over ``total`` files on stderr, else :class:`_Lines`."""
    try:
        from tqdm import tqdm
    except ImportError:  # tqdm is optional (the ``progress`` extra)
        return _Lines(total)
    return tqdm(total=total, unit="file", file=sys.stderr, desc="pyprof parse")


def parse_many(paths: list[str], out_dir: str, jobs: int | None = None, progress: bool | None = None):
    """Parse each path to ``out_dir/<name>.dict`` (:func:`output_names`) in parallel processes; yields
    Results as they finish. The workers are pyprof's own processes (:func:`pyprof.process.pool`), so each
    owns itself. ``progress`` (default: when stderr is a terminal) shows tqdm's bar, or a line per file."""
    outs = output_names(paths, out_dir)
    os.makedirs(out_dir, exist_ok=True)
    jobs = process.workers(jobs, len(paths))
    if progress is None:
        progress = sys.stderr.isatty()
    bar = _progress_bar(len(paths)) if progress else None
    pool = process.pool(jobs, spawn=True) if jobs > 1 else None
    try:
        for r in _results(pool, paths, outs):
            if bar is not None:
                bar.update(1)
            yield r
    finally:
        if bar is not None:
            bar.close()


def _results(pool, paths: list[str], outs: list[str]) -> Iterator[Result]:
    """:func:`_worker`'s Results as they finish: in ``pool``'s processes, or one by one in this one."""
    if pool is None:
        yield from map(_worker, paths, outs)
        return
    with pool:
        futures = {pool.submit(_worker, p, o): (p, o) for p, o in zip(paths, outs, strict=True)}
        for fut in as_completed(futures):
            try:
                r = fut.result()
            except Exception as exc:  # noqa: BLE001 - the worker died (killed, out of memory)
                p, o = futures[fut]
                r = Result(path=p, out=o, error=f"{p}: the worker parsing it died ({type(exc).__name__})")
            yield r
