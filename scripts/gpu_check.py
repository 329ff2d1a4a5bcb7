"""The checks of docs/gpu-validation.md on a machine with an NVIDIA GPU, one part per subcommand.

    python scripts/gpu_check.py examples OUT     # `pyprof run` on each example: kernels, links, tc
    python scripts/gpu_check.py zoo OUT [--tf32] # the validation zoo on CUDA against FlopCounterMode
    python scripts/gpu_check.py compiled OUT     # torch.compile, CUDA graphs: which kernels keep op/layer
    python scripts/gpu_check.py roofline OUT     # a large bf16 GEMM and a large copy against the peaks

Each part prints what it saw and writes ``OUT/kernels_PART.tsv``: one row per distinct GPU kernel name
with its op, direction, dtype and tensor-core flag, summed time and count (the Hopper/Ampere kernel
names later tests classify). The figures are about the run, never asserted here: a person reads them,
and the closing note of the session that lent the GPU quotes them. Needs torch with CUDA.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ["examples/simple.py", "examples/lenet.py", "examples/custom_func_module/custom.py",
            "examples/user_annotation/resnet.py"]


def pyprof_run(out: Path, script: str, *args: str, timeout: int = 300) -> bool:
    """``pyprof run`` SCRIPT into ``out`` as a user runs it; prints the summary's tail. True on success."""
    cmd = [sys.executable, "-m", "pyprof", "run", "--no-calibrate", "-w", "120", "-o", str(out), script, *args]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        print(f"  {script}: timed out after {timeout} s")
        return False
    lines = [x for x in (r.stdout + r.stderr).splitlines() if "USDT" not in x]
    print("\n".join("  | " + x for x in lines[-30:]))
    return r.returncode == 0 and (out / "records.dict").exists()


def facts(records: Path, label: str, rows: list) -> None:
    """What the records of one run say about its GPU kernels: links, layers, directions, launch
    geometry, streams, tensor cores; appends (label, kernel, op, dir, dtype, tc, note, ns) to ``rows``."""
    from pyprof.prof import build_file
    from pyprof.prof.load import iter_records

    recs = [r for r in iter_records(records) if r.get("device") is not None]
    df = build_file(records, workers=1)
    gpu = df[df["device"].notna()]
    kern = gpu[gpu["kind"] == "kernel"]
    total = float(kern["sil"].sum()) or 1.0

    def share(mask) -> str:
        return f"{float(kern.loc[mask, 'sil'].sum()) / total:6.1%}"

    has_layer = kern["layer"].map(lambda v: bool(v))
    bwd = kern["dir"] == "bprop"
    bwd_total = float(kern.loc[bwd, "sil"].sum()) or 1.0
    deep = kern["layer"].map(lambda v: bool(v) and len(v) > 1)
    print(f"{label}: {len(kern)} GPU kernels ({total / 1e6:.2f} ms), {len(gpu) - len(kern)} copies/sets; "
          f"streams {sorted(set(kern['stream'].dropna().astype(int)))[:8]}")
    print(f"  kernel time with an op {share(kern['op'].notna())}, a layer {share(has_layer)}, a direction "
          f"{share(kern['dir'].notna())}; grid+block recorded {share(kern['grid'].notna() & kern['block'].notna())}")
    print(f"  bprop kernels: {bwd.sum()}, {float(kern.loc[bwd & deep, 'sil'].sum()) / bwd_total:.1%} of their time "
          f"under a submodule of the root (their forward op's layer)")
    print("  directions by time: " + ", ".join(f"{k}={v / total:.1%}" for k, v in
                                                kern.groupby(kern['dir'].fillna('none'))['sil'].sum().items()))
    print("  link cases by count: " + ", ".join(f"{k}={v}" for k, v in
                                                Counter(str(r.get('link')) for r in recs if r['kind'] == 'kernel').items()))
    print("  tc by time: " + ", ".join(f"{k}={v / total:.1%}" for k, v in kern.groupby('tc')['sil'].sum().items()))
    top = kern.groupby(["longkernel", "op", "dir", "dtype", "tc"], dropna=False).agg(
        ns=("sil", "sum"), n=("sil", "size"), tflops=("tflops", "mean"), gap=("gap", "min")).reset_index()
    top = top.sort_values("ns", ascending=False)
    for _, t in top.head(12).iterrows():
        print(f"    {t['ns'] / 1e3:9.1f} us x{t['n']:<4} {str(t['op']):<22} {str(t['dir']):<6} {str(t['dtype']):<9} "
              f"tc={t['tc']} {t['tflops']:7.2f} TF/s gap {t['gap']:6.2f}  {str(t['longkernel'])[:80]}")
    for _, t in top.iterrows():
        rows.append((label, str(t["longkernel"]), str(t["op"]), str(t["dir"]), str(t["dtype"]), str(t["tc"]),
                     int(t["n"]), int(t["ns"])))
    unlinked = kern[kern["op"].isna()]
    if len(unlinked):
        names = unlinked.groupby("longkernel")["sil"].sum().sort_values(ascending=False).head(5)
        print("  kernels without an op: " + "; ".join(f"{k[:60]} {v / 1e3:.0f} us" for k, v in names.items()))


def write_rows(out: Path, part: str, rows: list) -> None:
    with open(out / f"kernels_{part}.tsv", "w") as fh:
        fh.write("run\tkernel\top\tdir\tdtype\ttc\tcount\tns\n")
        for r in rows:
            fh.write("\t".join(str(x).replace("\t", " ") for x in r) + "\n")


def part_examples(out: Path, args) -> None:
    rows: list = []
    for ex in EXAMPLES:
        name = Path(ex).stem
        if args.models and name not in args.models:
            continue
        d = out / "examples" / name
        print(f"== pyprof run {ex}")
        if pyprof_run(d, ex):
            facts(d / "records.dict", name, rows)
    write_rows(out, "examples", rows)


def part_zoo(out: Path, args) -> None:
    sys.path.insert(0, str(ROOT))  # (the checkout's root: scripts.validation)
    from scripts.validation import harness, zoo

    rows: list = []
    names = args.models or list(zoo.CASES)
    tag = "zoo" + ("_tf32" if args.tf32 else "") + (f"_{names[0]}" if args.models else "")
    outcomes = []
    for name in names:
        keep = out / ("zoo_tf32" if args.tf32 else "zoo") / name
        o = harness.validate(name, steps=2, workdir=keep, device="cuda", tf32=args.tf32)
        outcomes.append(o)
        status = "ok" if o.ok else ("FAILED: " + o.error if o.error else f"{len(o.mismatches())} totals off")
        print(f"== {name} ({'tf32' if args.tf32 else 'fp32'}): {status}; "
              f"{o.uncovered:.1%} of kernel time in ops without a FLOP model")
        if (keep / "records.dict").exists():
            facts(keep / "records.dict", name, rows)
        for m in o.mismatches()[:6]:
            print(f"  off: {m}")
    print(harness.table(outcomes))
    write_rows(out, tag, rows)


COMPILED = '''
import sys, torch
from torch import nn
import pyprof
mode = sys.argv[1]
torch.manual_seed(0)
class Block(nn.Module):
    def __init__(self, d=512, h=8):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.h = h
    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(nn.functional.gelu(self.fc1(self.ln2(x))))
model = nn.Sequential(Block(), Block()).cuda()
x = torch.randn(8, 256, 512, device="cuda")
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
if mode == "graph":  # a hand-captured CUDA graph of forward + backward
    static_x = x.clone()
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(static_x).sum().backward()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        loss = model(static_x).sum(); loss.backward()
    for _ in range(8):
        g.replay(); opt.step(); pyprof.step()
else:
    run = torch.compile(model, mode=None if mode == "default" else mode)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        for _ in range(8):
            opt.zero_grad(set_to_none=True)
            run(x).float().sum().backward()
            opt.step()
            pyprof.step()
torch.cuda.synchronize()
print("compiled", mode, "done")
'''


def part_compiled(out: Path, args) -> None:
    rows: list = []
    script = out / "compiled_lm.py"
    script.write_text(COMPILED)
    for mode in args.models or ("default", "reduce-overhead", "graph"):
        d = out / "compiled" / mode
        print(f"== compiled LM, mode {mode}")
        if pyprof_run(d, str(script), mode, timeout=400):
            facts(d / "records.dict", f"compiled-{mode}", rows)
    write_rows(out, "compiled", rows)


ROOFLINE = '''
import torch
import pyprof
n = 8192
a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
src = torch.empty(1 << 28, device="cuda")  # 1 GiB of float32
dst = torch.empty_like(src)
for _ in range(8):
    c = a @ b
    dst.copy_(src)
    pyprof.step()
torch.cuda.synchronize()
'''


def part_roofline(out: Path, args) -> None:
    rows: list = []
    script = out / "roofline.py"
    script.write_text(ROOFLINE)
    d = out / "roofline"
    print("== bf16 GEMM 8192^3 and a 1 GiB copy under pyprof run")
    if pyprof_run(d, str(script)):
        facts(d / "records.dict", "roofline", rows)
        r = subprocess.run([sys.executable, "-m", "pyprof", "prof", "--summary", "op", str(d / "records.dict")],
                           capture_output=True, text=True, cwd=ROOT)
        print("\n".join("  | " + x for x in (r.stdout + r.stderr).splitlines()[-12:]))
    print("== pyprof calibrate --device cuda --no-save")
    r = subprocess.run([sys.executable, "-m", "pyprof", "calibrate", "--device", "cuda", "--no-save", "--budget", "0.5"],
                       capture_output=True, text=True, cwd=ROOT, timeout=300)
    print("\n".join("  | " + x for x in (r.stdout + r.stderr).splitlines()[-20:]))
    write_rows(out, "roofline", rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", choices=["examples", "zoo", "compiled", "roofline"])
    ap.add_argument("out", type=Path)
    ap.add_argument("models", nargs="*", default=[], help="zoo: only these models; examples: only these (stem); compiled: only these modes")
    ap.add_argument("--tf32", action="store_true", help="zoo: float32 GEMMs and convolutions as TF32")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device; run it on a machine with an NVIDIA GPU", file=sys.stderr)
        return 2
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, pyprof from {ROOT}")
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    globals()[f"part_{args.part}"](args.out, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
