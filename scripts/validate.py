"""Check pyprof's FLOPs end to end against torch's count, model by model; print one table.

    python scripts/validate.py                    # every model of the zoo (5-10 minutes on 2 cores)
    python scripts/validate.py gpt lstm --steps 3
    python scripts/validate.py --device cuda --tf32  # on a GPU: its kernels, float32 GEMMs as TF32
    python scripts/validate.py --opinfo           # torch's OpInfo catalogue (op_db), CPU float32
    python scripts/validate.py --opinfo --ops mm einsum --dtypes float32 bfloat16 --modes init plain
    python scripts/validate.py --advise --write   # pyprof advise --try on the zoo: docs/advise.md's table
    python scripts/validate.py --advise try_train optim --budget 120

Each model trains for a few steps through the path a user runs (``pyprof run`` -> records -> ``prof``);
its GEMM, convolution and attention FLOPs per direction (fprop, bprop, and recomp where a checkpointed
forward is re-run by backward) and per module are compared with
FlopCounterMode's formulas applied by a dispatch mode (causal attention halved: see docs/prof.md), and
the forward bytes of every nn.Linear / nn.Conv* layer with a hand count from the shapes torch saw.
For the compiled models (``*_compiled``) a last table gives the share of their kernel time whose module
and op came from Inductor's record of the compiled graph, the share with a module and an op from any
source, and the compiled regions' own time (the wrapper's Python; no op) as a share of the model's time
(``harness.attributed_share``).
Exit status 1 when any total is off by more than 1% or a model fails. See scripts/validation/.

``--opinfo`` runs every sample input of every op of torch's OpInfo catalogue instead, under ``init()``
and under plain torch.profiler, through parse + prof, against FlopCounterMode and a dispatch-level byte
count, and prints the coverage table by family, then one line per op that differs, fails or lacks a
model (scripts/validation/opinfo.py; it needs the ``expecttest`` package that torch's test suite imports).
Exit status 1 when pyprof raised on any op or FLOPs differ.

``--catalogue`` runs cases nobody here wrote: the double backward (gradgrad) and the ``vmap`` of every sample of
torch's OpInfo catalogue, per-sample gradients and a gradient penalty of every module of its ``module_db``,
through ``init()`` + torch.profiler, parse and prof, against FlopCounterMode per direction, and prints the
coverage (scripts/validation/catalogue.py). Exit status 1 when a case differs without a convention or pyprof raised.

``--advise`` runs ``pyprof advise --try --json`` on the validation zoo's models and the advice cases
(MODEL: cases of scripts/validation/advice.py) and prints the estimated vs measured savings, one row per
advice; ``--write`` puts the table into docs/advise.md. Exit status 1 when a case failed or a change
altered the results beyond its tolerance.
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: scripts.validation
from scripts.validation import harness, zoo  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", default=[], metavar="MODEL",
                    help=f"models to run (default: all of {', '.join(zoo.CASES)})")
    ap.add_argument("--steps", type=int, default=2, help="training steps recorded per model (default 2)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where the zoo trains (cuda: the GPU's kernels are recorded and priced)")
    ap.add_argument("--tf32", action="store_true", help="--device cuda: float32 GEMMs and convolutions as TF32")
    ap.add_argument("--keep", metavar="DIR", default=None,
                    help="keep each model's trace and records under DIR/MODEL (else a temporary folder)")
    ap.add_argument("--opinfo", action="store_true", help="run torch's OpInfo catalogue instead of the zoo")
    ap.add_argument("--ops", nargs="*", default=[], help="--opinfo: only these ops (op or op.variant)")
    ap.add_argument("--dtypes", nargs="*", default=["float32"], choices=["float32", "bfloat16"],
                    help="--opinfo: dtypes (default float32)")
    ap.add_argument("--modes", nargs="*", default=["init", "plain"], choices=["init", "plain"],
                    help="--opinfo: init() + torch.profiler, plain torch.profiler (default both)")
    ap.add_argument("--limit", type=int, default=None, help="--opinfo: at most this many samples per op")
    ap.add_argument("--catalogue", nargs="*", default=None, metavar="KIND",
                    help="higher-order gradients and torch.func transforms of torch's op and module catalogues "
                         "(kinds: gradgrad vmap per_sample_grad module_gradgrad; default all; --ops to pick, "
                         "--limit samples each, default 2)")
    ap.add_argument("--advise", action="store_true", help="pyprof advise --try on the zoo (MODEL: advice cases)")
    ap.add_argument("--budget", type=float, default=240, help="--advise: --try-budget per case (default 240 s)")
    ap.add_argument("--write", action="store_true", help="--advise: write the table into docs/advise.md")
    args = ap.parse_args()
    if args.opinfo:
        return opinfo_main(args)
    if args.catalogue is not None:
        from scripts.validation import catalogue

        cases = [c for kind in args.catalogue or catalogue.KINDS
                 for c in catalogue.run(kind, args.ops or None, args.limit or 2)]
        sys.stdout.write(catalogue.table(cases))
        return 1 if any(c.status == "differ" or c.status.startswith("error") for c in cases) else 0
    if args.advise:
        return advise_main(args)
    unknown = [m for m in args.models if m not in zoo.CASES]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(zoo.CASES)}")
    outcomes = []
    for name in args.models or list(zoo.CASES):
        t0 = time.perf_counter()
        keep = None if args.keep is None else f"{args.keep}/{name}"
        o = harness.validate(name, steps=args.steps, workdir=keep, device=args.device, tf32=args.tf32)
        outcomes.append(o)
        status = "ok" if o.ok else ("FAILED" if o.error else f"{len(o.mismatches())} totals off by > 1%")
        print(f"{name}: {status} ({time.perf_counter() - t0:.1f} s; "
              f"{o.uncovered:.1%} of kernel time in ops without a FLOP model)", file=sys.stderr)
    sys.stdout.write(harness.table(outcomes))
    return 0 if all(o.ok for o in outcomes) else 1


def opinfo_main(args) -> int:
    from scripts.validation import opinfo

    results = []
    ops = opinfo.select(args.ops)
    for n, op in enumerate(ops, 1):
        for dtype in args.dtypes:
            for mode in args.modes:
                t0 = time.perf_counter()
                r = opinfo.run_op(op, dtype, mode, limit=args.limit)
                results.append(r)
                print(f"[{n}/{len(ops)}] {r.name} {dtype} {mode}: "
                      f"{r.error or f'{len(r.samples)} samples, FLOPs {r.flops_status}, bytes {r.bytes_status}'}"
                      f" ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    for mode in args.modes:
        sys.stdout.write(f"\nmode {mode}:\n" + opinfo.table([r for r in results if r.mode == mode]))
    sys.stdout.write("\n" + opinfo.details(results))
    bad = any(r.error and not r.skipped for r in results) or any(r.flops_status == "differ" for r in results)
    return 1 if bad else 0


def advise_main(args) -> int:
    import datetime
    import os
    import tempfile

    from scripts.validation import advice

    unknown = [k for k in args.models if k not in advice.CASES]
    if unknown:
        print(f"validate.py: unknown case(s) {', '.join(unknown)}: choose from {', '.join(advice.CASES)}",
              file=sys.stderr)
        return 2
    began, load0 = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="pyprof-advise-") as tmp:
        results = advice.run(args.models or list(advice.CASES), args.budget, Path(args.keep or tmp),
                             log=lambda line: print(line, file=sys.stderr, flush=True))
    text = advice.section(results, "PYTHONPATH=$PWD python scripts/validate.py --advise --write"
                          + (" " + " ".join(args.models) if args.models else "") + f" --budget {args.budget:g}",
                          began, (load0, os.getloadavg()[0]))
    sys.stdout.write(text)
    if args.write:
        advice.write_doc(text)
    bad = [c for c, got in results.items() if isinstance(got, str) or any(a.get("results_equal") is False for a in got)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
