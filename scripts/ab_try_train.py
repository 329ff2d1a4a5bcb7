"""An A/B timing of the two changes ``pyprof advise --try`` makes to scripts/validation/try_train.py, made
independently of pyprof: both variants built in one process (the script's own ``build`` with the
change as a keyword argument), run in alternating blocks of ``--block`` steps (A B, B A, ...) so that
the machine's load drifts alike for both, the first ``--warm`` steps of each block dropped (the other
variant's steps evict its weights and optimizer state from the caches). Prints, per change, the
median step of each variant, their difference, the median of the blocks' paired savings with a
distribution-free interval, and the load average.

    PYTHONPATH=$PWD python scripts/ab_try_train.py [--steps 60] [--warm 6] [--workers 2] [--reps 3]

Run it beside ``pyprof advise --try --json scripts/validation/try_train.py`` (same machine, same
hour): the first check of issue 41 compares the two savings.
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "validation"))
import torch  # noqa: E402
import try_train  # noqa: E402


def interval(d):
    n, d = len(d), sorted(d)
    k = max([j for j in range(1, n // 2 + 1) if 2 * sum(math.comb(n, i) for i in range(j)) / 2**n <= 0.05],
            default=1)
    return d[k - 1], d[n - k]


def ab(change: str, blocks: int, block: int, warm: int, workers: int) -> dict:
    if change == "optim":
        a, b = try_train.build(), try_train.build(optimizer_kw={"fused": True})
    else:
        a, b = try_train.build(), try_train.build(loader_kw={"num_workers": workers, "persistent_workers": True})
    times, pairs = {"a": [], "b": []}, []
    for i in range(blocks):
        med = {}
        for name, v in ((("a", a), ("b", b)) if i % 2 == 0 else (("b", b), ("a", a))):
            t = []
            for _ in range(block):
                t0 = time.perf_counter()
                try_train.train_step(*v)
                t.append(time.perf_counter() - t0)
            times[name] += t[warm:]
            med[name] = statistics.median(t[warm:])
        pairs.append(med["a"] - med["b"])
    lo, hi = interval(pairs[1:])  # the first block pair warms both up
    ta, tb = times["a"][block - warm:], times["b"][block - warm:]
    return {"change": change, "step_a_s": statistics.median(ta), "step_b_s": statistics.median(tb),
            "saved_s": statistics.median(ta) - statistics.median(tb), "paired_median_s": statistics.median(pairs[1:]),
            "interval_s": [lo, hi], "blocks": len(pairs) - 1}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=12, help="block pairs per repeat")
    ap.add_argument("--block", type=int, default=8, help="steps per block")
    ap.add_argument("--warm", type=int, default=2, help="steps dropped at the start of each block")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for change in ("optim", "dataloader"):
        for rep in range(args.reps):
            load = os.getloadavg()
            r = ab(change, args.blocks, args.block, args.warm, args.workers)
            r.update(rep=rep, loadavg=[round(x, 2) for x in load])
            print(json.dumps(r))
            print(f"{change} rep {rep}: step {r['step_a_s'] * 1e3:.1f} -> {r['step_b_s'] * 1e3:.1f} ms, saved "
                  f"{r['saved_s'] * 1e3:.1f} ms (paired {r['paired_median_s'] * 1e3:.1f}, interval "
                  f"{r['interval_s'][0] * 1e3:.1f} .. {r['interval_s'][1] * 1e3:.1f} ms); load {load[0]:.1f}",
                  file=sys.stderr)


if __name__ == "__main__":
    main()
