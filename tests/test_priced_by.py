"""Every row says which pricing stage set its FLOPs and bytes (``pyprof prof -c priced_by``), and what the
row holds agrees with that stage; ``PYPROF_STRICT=1`` turns a model's exception into a traceback.

The inputs are real: the H200 and CPU fixtures, the corpus's torch.profiler traces, its Nsight and nvprof
exports with NVTX ranges, and a ``pyprof run`` of an example. What each stage must hold is read from the
row itself (its kind, op, module, direction, figures and instance), never listed per row."""

from __future__ import annotations

import pandas as pd
import pytest

from pyprof.parse.run import parse_file
from pyprof.prof import build_file
from pyprof.prof.columns import PRICED_BY
from pyprof.prof.ops import canonical, conv, registry
from pyprof.prof.ops.fused import is_fused
from pyprof.records import BACKWARD_DIRS
from tests.conftest import CORPUS, REPO, corpus_file, corpus_params, run_main

FIXTURES = REPO / "tests" / "fixtures"
TRACES = sorted((CORPUS / "kineto").glob("*.json.gz")) if (CORPUS / "kineto").is_dir() else []
LENET = FIXTURES / "gpu" / "h200_lenet.trace.json.gz"


def _marked_exports() -> list:
    """The corpus's Nsight and nvprof exports with kernels and NVTX ranges (MANIFEST.tsv), up to 4 MB."""
    if not (CORPUS / "MANIFEST.tsv").is_file():
        return []
    rows = [ln.split("\t") for ln in (CORPUS / "MANIFEST.tsv").read_text().splitlines()[1:]]
    return sorted(CORPUS / r[1] / r[0] for r in rows if len(r) > 9 and r[1] in ("nsys", "nvprof")
                  and r[7] not in ("", "0") and r[9] not in ("", "0") and int(r[6]) < 4_000_000)


INPUTS = [*sorted((FIXTURES / "gpu").glob("*.json.gz")), *sorted((FIXTURES / "kineto").glob("*.json*")), *TRACES,
          *_marked_exports()]
PRICING = ("model", "inductor", "inferred", "what-ran")  # the stages that compute FLOPs


def table(path, tmp_path):
    out = tmp_path / "records.dict"
    parse_file(str(path), str(out))
    return build_file(out, peak_flops=1e12, peak_bw=1e11, workers=1)


def check_stages(df: pd.DataFrame) -> None:
    """Every row names a stage, and holds what that stage gives."""
    by, kernel = df["priced_by"], df["kind"] == "kernel"
    flops, nbytes = df["flops"].astype(float), df["bytes"].astype(float)
    assert by.isin(list(PRICED_BY)).all(), set(by) - set(PRICED_BY)
    assert ((by == "record") == ~kernel).all() and flops[~kernel].isna().all()  # a copy: its bytes, no FLOPs
    inst = df["opid"].astype(str) + df["dir"].astype(str)  # (an instance named by its first record: a PyProf
    assert by[kernel & df["op"].isna()].eq("no-op").all()  # backward's, whose first kernel has no op)
    assert inst[by == "no-op"].isin(inst[kernel & df["op"].isna()]).all()
    unknown = by.isin(["no-op", "model-error", "unpriced", "no-model"])
    assert flops[unknown].isna().all() and nbytes[unknown].isna().all()
    zero = by.isin(["raised", "no-share", "no-work"])
    assert flops[zero].fillna(0).eq(0).all() and nbytes[zero].fillna(0).eq(0).all()
    assert not flops[~by.isin(PRICING)].gt(0).any()  # FLOPs only from a stage that computes them
    rows = df[kernel & df["op"].notna()]
    model = pd.Series([registry.lookup(o, m) is not None for o, m in zip(rows["op"], rows["mod"], strict=True)],
                      index=rows.index)
    assert model[by.isin(["model", "model-error", "unpriced"])].all() and not model[by == "no-model"].any()
    fused = pd.Series([is_fused(o, m) for o, m in zip(rows["op"], rows["mod"], strict=True)], index=rows.index)
    assert fused[by == "inductor"].all() and by[fused[fused].index].isin(["inductor", "what-ran", "no-share"]).all()
    assert all(canonical(o, m) in conv.SIGNATURES for o, m in df.loc[by == "inferred", ["op", "mod"]].values)
    ran = df[by == "what-ran"]
    assert ran["dir"].isin([*BACKWARD_DIRS, "fprop"]).all() and ran["priced"].notna().all()
    # a row with no share sits in an op instance whose other rows a stage priced; no row of a no-work one is
    assert inst[by == "no-share"].isin(inst[by.isin(PRICING)]).all()
    assert not inst[by == "no-work"].isin(inst[by.isin(PRICING)]).any()


@pytest.mark.parametrize("path", corpus_params(INPUTS), ids=lambda p: p.name[:60] if p else "none")
def test_every_row_of_real_traces_names_its_stage(path, tmp_path):
    df = table(path, tmp_path)
    assert len(df)
    check_stages(df)


def test_every_row_of_a_pyprof_run_names_its_stage(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    from pyprof.cli.main import main
    from pyprof.peaks import CPU_DEVICE
    from pyprof.peaks import save as save_calibration

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYPROF_CALIBRATION", str(tmp_path / "cal.json"))
    save_calibration(CPU_DEVICE, {"float32": 1e11}, 1e10, tmp_path / "cal.json")
    with pytest.raises(SystemExit) as info:
        main(["run", str(REPO / "examples" / "lenet.py"), "--batch", "4"])
        raise SystemExit(0)
    assert info.value.code == 0, capsys.readouterr().err
    df = build_file(tmp_path / "pyprof-out" / "records.dict", workers=1)
    check_stages(df)
    assert {"model", "what-ran"} <= set(df["priced_by"])


def test_the_corpus_exercises_every_stage_but_the_two_of_failures(tmp_path):
    """Not vacuous: between them, a compiled CPU run, a ResNet-50 training trace and an nvprof export of
    NVIDIA PyProf's markers take every stage; an op that raised and a model that raised have tests below."""
    paths = [FIXTURES / "kineto" / "cpu_compiled_mlp.trace.json.gz",
             CORPUS / "kineto" / "pytorch__kineto__resnet50_num_workers_0.pt.trace.json.gz",
             CORPUS / "nvprof" / "josiahdavis__profiling-lm__net.sql.sqlite"]
    if not all(p.is_file() for p in paths):
        pytest.skip("the corpus is absent")
    seen = set().union(*(set(table(p, tmp_path)["priced_by"]) for p in paths))
    assert seen == set(PRICED_BY) - {"raised", "model-error"}


def test_priced_by_is_a_prof_column(tmp_path, capsys):
    out = tmp_path / "r.dict"
    parse_file(str(LENET), str(out))
    code, text, err = run_main(capsys, ["prof", "-c", "op,priced_by", "--csv", str(out)])
    assert code == 0, err
    lines = text.splitlines()
    assert lines[0] == "Op,PricedBy" and {ln.rsplit(",", 1)[1] for ln in lines[1:]} <= set(PRICED_BY)
    code, text, err = run_main(capsys, ["prof", "--help"])
    assert all(k in text for k in PRICED_BY)


def _broken(monkeypatch, op: str, mod: str | None) -> str:
    """Replace the model of ``op`` with one that raises; the message it raises."""
    def broken(call):
        raise ValueError("a broken model")

    monkeypatch.setitem(registry._MODELS, canonical(op, mod), broken)
    return "a broken model"


@pytest.mark.parametrize("name", ["lenet", "josiahdavis__profiling-lm"])
def test_a_model_that_raises_says_so_and_strict_mode_raises(name, tmp_path, monkeypatch):
    """The op the most rows of a real trace were priced by: with its model broken, those rows say
    ``model-error`` (n/a) or, where the trace names the aten ops that ran (a torch.profiler trace, not
    NVIDIA PyProf's markers), are priced on those; strict mode raises the model's exception."""
    out = tmp_path / "records.dict"
    parse_file(str(LENET if name == "lenet" else corpus_file(name)), str(out))
    before = build_file(out, workers=1)
    modelled = before[before["priced_by"] == "model"]
    op, mod = modelled.groupby(["op", "mod"]).size().idxmax()
    mine = modelled.index[(modelled["op"] == op) & (modelled["mod"] == mod)]
    message = _broken(monkeypatch, op, mod)
    monkeypatch.delenv("PYPROF_STRICT", raising=False)
    after = build_file(out, workers=1)
    check_stages(after)
    got = after.loc[mine, "priced_by"]
    assert got.isin(["model-error", "what-ran"]).all() and (got == "what-ran").eq(after.loc[mine, "priced"].notna()).all()
    assert name == "lenet" or (got == "model-error").all()  # (NVIDIA PyProf's markers name no aten op that ran)
    monkeypatch.setenv("PYPROF_STRICT", "1")
    with pytest.raises(ValueError, match=message):
        build_file(out, workers=1)


def test_strict_mode_raises_where_a_backward_is_priced_on_what_ran(tmp_path, monkeypatch):
    """The aten op that priced the most rows on what ran: broken, it leaves the instance to its forward
    op's formula (no crash); in strict mode the exception comes through."""
    out = tmp_path / "records.dict"
    parse_file(str(LENET), str(out))
    before = build_file(out, workers=1)
    ran = before[before["priced_by"] == "what-ran"]
    message = _broken(monkeypatch, ran["priced"].value_counts().idxmax(), "aten")
    monkeypatch.delenv("PYPROF_STRICT", raising=False)
    check_stages(build_file(out, workers=1))
    monkeypatch.setenv("PYPROF_STRICT", "1")
    with pytest.raises(ValueError, match=message):
        build_file(out, workers=1)
