"""Which rank and host an export comes from, for the ``rank``, ``host`` and ``file`` columns of a dataset.

The export is asked first, where it says:

* Nsight Systems (2023.3 on) keeps the profiled process's environment in ``META_DATA_CAPTURE``
  (``PROCESS_0:ENVIRONMENT_VARIABLE`` rows, ``NAME="value"``): the first of :data:`RANK_VARIABLES` found
  gives the rank, ``HOSTNAME`` the host, else ``TARGET_INFO_SYSTEM_ENV`` ``Hostname`` (nsys-schema.md §3.4).
* torch.profiler traces written by a distributed job carry ``"distributedInfo": {"rank": N, ...}``
  near their start; the first MiB of the trace is searched for it.
* nvprof databases hold neither (``nvprof -o prof.%q{OMPI_COMM_WORLD_RANK}.sql`` puts it in the name).

Else the file name (``rank3``, ``rank-3``, ``rank_03``: :data:`NAME_RANK`), else the file's index among
the inputs. :func:`identify` returns the value and where it came from; the writer keeps both.
"""

from __future__ import annotations

import gzip
import os
import re
import sqlite3
from dataclasses import dataclass

#: environment variables holding a process's global rank, in the order they are believed: torchrun's,
#: Open MPI's, MPICH/PMI's, PMIx's, MVAPICH's, Slurm's
RANK_VARIABLES = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
                  "SLURM_PROCID")
#: a rank in a file name: ``rank3``, ``rank-3``, ``rank_03``, ``Rank.3`` (not ``ranks``, not ``frank3``)
NAME_RANK = re.compile(r"(?<![a-z])rank[-_.]?(\d+)", re.IGNORECASE)
_ENV = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)="?(.*?)"?$', re.DOTALL)
_KINETO_RANK = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')
_KINETO_HEAD = 1 << 20


@dataclass(frozen=True)
class Identity:
    """Rank and host of one input file, and where each was read (``rank_from``: ``env RANK``,
    ``distributedInfo``, ``file name`` or ``index``; ``host_from``: ``env HOSTNAME``,
    ``TARGET_INFO_SYSTEM_ENV`` or empty when unknown)."""

    rank: int
    rank_from: str
    host: str | None
    host_from: str
    file: str


def _sqlite_facts(path: str) -> tuple[dict[str, str], str | None]:
    """The capture environment (name -> value) and TARGET_INFO_SYSTEM_ENV's Hostname of an nsys export;
    empty where the tables are absent (older exports, nvprof) or the file cannot be read."""
    env: dict[str, str] = {}
    host = None
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error:
        return env, host
    conn.text_factory = lambda b: b.decode("utf-8", "replace")
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "META_DATA_CAPTURE" in tables:
            rows = conn.execute("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE '%:ENVIRONMENT_VARIABLE'")
            for (value,) in rows:
                m = _ENV.match(value or "")
                if m and m.group(1) not in env:  # PROCESS_0 first: nsys writes it first
                    env[m.group(1)] = m.group(2)
        if "TARGET_INFO_SYSTEM_ENV" in tables:
            row = conn.execute("SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'Hostname' "
                               "AND value IS NOT NULL AND value != '' LIMIT 1").fetchone()
            host = row[0] if row else None
    except sqlite3.Error:
        pass
    finally:
        conn.close()
    return env, host


def _kineto_rank(path: str) -> int | None:
    """``distributedInfo.rank`` of a torch.profiler trace, from its first MiB; None where absent."""
    try:
        with open(path, "rb") as fh:
            magic = fh.read(2)
        opener = gzip.open if magic == b"\x1f\x8b" else open
        with opener(path, "rb") as fh:
            head = fh.read(_KINETO_HEAD)
    except (OSError, EOFError):
        return None
    m = _KINETO_RANK.search(head)
    return int(m.group(1)) if m else None


def identify(path: str, index: int) -> Identity:
    """Rank and host of the input ``path``, the ``index``-th of the inputs (see the module's text)."""
    name = os.path.basename(path)
    rank, rank_from = None, ""
    host, host_from = None, ""
    from pyprof.parse.db import is_sqlite

    if is_sqlite(path):
        env, sys_host = _sqlite_facts(path)
        for var in RANK_VARIABLES:
            if env.get(var, "").strip().isdigit():
                rank, rank_from = int(env[var]), f"env {var}"
                break
        if env.get("HOSTNAME"):
            host, host_from = env["HOSTNAME"], "env HOSTNAME"
        elif sys_host:
            host, host_from = sys_host, "TARGET_INFO_SYSTEM_ENV"
    elif os.path.isfile(path):
        value = _kineto_rank(path)
        if value is not None:
            rank, rank_from = value, "distributedInfo"
    if rank is None:
        m = NAME_RANK.search(name)
        if m:
            rank, rank_from = int(m.group(1)), "file name"
        else:
            rank, rank_from = index, "index"
    return Identity(rank=rank, rank_from=rank_from, host=host, host_from=host_from, file=name)
