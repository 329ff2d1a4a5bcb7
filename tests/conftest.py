"""Shared test fixtures: where the real corpus lies, and skipping cleanly where it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("PYPROF_CORPUS", REPO.parent / "shared" / "corpus"))


def corpus_files(kind: str | None = None) -> list[Path]:
    """All corpus SQLite files (``kind`` = "nsys" or "nvprof"), or [] where the corpus is absent."""
    if not CORPUS.is_dir():
        return []
    kinds = [kind] if kind else ["nsys", "nvprof"]
    return sorted(p for k in kinds for p in (CORPUS / k).glob("*.sqlite"))


def corpus_file(name: str) -> Path:
    """One corpus file by (a unique part of) its name; skips the test where the corpus is absent."""
    matches = [p for p in corpus_files() if name in p.name]
    if not matches:
        pytest.skip(f"corpus file {name!r} not found under {CORPUS}")
    assert len(matches) == 1, f"{name!r} matches several corpus files: {matches}"
    return matches[0]


@pytest.fixture
def corpus():
    if not CORPUS.is_dir():
        pytest.skip(f"corpus not found at {CORPUS}")
    return CORPUS
