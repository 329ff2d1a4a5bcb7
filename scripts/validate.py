"""Check pyprof's FLOPs end to end against torch's count, model by model; print one table.

    python scripts/validate.py                    # every model of the zoo (5-10 minutes on 2 cores)
    python scripts/validate.py gpt lstm --steps 3

Each model trains for a few steps through the path a user runs (``pyprof run`` -> records -> ``prof``);
its GEMM, convolution and attention FLOPs per direction (fprop, bprop, and recomp where a checkpointed
forward is re-run by backward) and per module are compared with
FlopCounterMode's formulas applied by a dispatch mode (causal attention halved: see docs/prof.md), and
the forward bytes of every nn.Linear / nn.Conv* layer with a hand count from the shapes torch saw.
Exit status 1 when any total is off by more than 1% or a model fails. See pyprof/validate/.
"""

import argparse
import sys
import time

from pyprof.validate import harness, zoo


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", choices=[[], *zoo.CASES], default=[], metavar="MODEL",
                    help=f"models to run (default: all of {', '.join(zoo.CASES)})")
    ap.add_argument("--steps", type=int, default=2, help="training steps recorded per model (default 2)")
    args = ap.parse_args()
    outcomes = []
    for name in args.models or list(zoo.CASES):
        t0 = time.perf_counter()
        o = harness.validate(name, steps=args.steps)
        outcomes.append(o)
        status = "ok" if o.ok else ("FAILED" if o.error else f"{len(o.mismatches())} totals off by > 1%")
        print(f"{name}: {status} ({time.perf_counter() - t0:.1f} s; "
              f"{o.uncovered:.1%} of kernel time in ops without a FLOP model)", file=sys.stderr)
    sys.stdout.write(harness.table(outcomes))
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
