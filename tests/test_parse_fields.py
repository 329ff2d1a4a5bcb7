"""The record contract: parse writes no field absent from FIELDS, docs/records.md is the generated text,
and pyprof.parse never imports torch."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pyprof.parse.source import open_source
from pyprof.records import FIELD_NAMES
from scripts.gen_docs import records_md
from tests.conftest import REPO, corpus_file


@pytest.mark.corpus
@pytest.mark.parametrize("name", ["MohanadOdema__DLProf", "josiahdavis__profiling-lm", "jsun-012__assignment2",
                                  "hpcgroup__pipit", "PolPuigPuy__OpenACC_Project_PolPuig__report2.sqlite"])
def test_parse_writes_only_documented_fields(name):
    src = open_source(corpus_file(name))
    lines = b"".join(src.prepared().lines()).splitlines()
    recs = [json.loads(x) for x in lines]
    assert recs
    for r in recs:
        assert set(r) == set(FIELD_NAMES), set(r) ^ set(FIELD_NAMES)
    # the dict path and the JSON-lines path give the same records
    assert list(open_source(corpus_file(name)).records()) == recs


def test_docs_records_md_is_generated():
    assert (REPO / "docs" / "records.md").read_text() == records_md(), "run: python scripts/gen_docs.py"


def test_parse_does_not_import_torch():
    code = ("import sys, pyprof.parse, pyprof.parse.nsys, pyprof.parse.nvprof, pyprof.parse.decode, "
            "pyprof.parse.run, pyprof.cli.parse_cmd; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)
