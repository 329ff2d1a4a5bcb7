"""An A/B timing of the `attention` advice on scripts/validation/gpt_user.py (the change --try cannot make:
it needs an edit): the script's GPT with its hand-written attention against the same weights with
``F.scaled_dot_product_attention(q, k, v, is_causal=True)``, one training step each (AdamW), in
alternating blocks of steps in one process (the first ``--warm`` of each block dropped), one intra-op
thread. Prints the median step of each, the median of the blocks' paired savings with a
distribution-free interval, and the load average; compare with `pyprof advise`'s `attention` estimate
on a `pyprof run` of ``gpt_user.py --threads 1``.

    PYTHONPATH=$PWD python scripts/ab_attention.py [--blocks 12] [--block 8] [--warm 2] [--reps 3]
"""

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "validation"))
import gpt_user  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class SDPA(gpt_user.Attention):
    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        return self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))


def build(sdpa: bool):
    torch.manual_seed(0)
    gpt = gpt_user.GPT()
    if sdpa:
        for block in gpt.blocks:
            block.attn.__class__ = SDPA
    opt = torch.optim.AdamW(gpt.parameters(), lr=1e-3)

    def step():
        idx, target = torch.randint(0, 512, (8, 64)), torch.randint(0, 512, (8, 64))
        loss = F.cross_entropy(gpt(idx).view(-1, 512), target.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for rep in range(args.reps):
        load = os.getloadavg()[0]
        steps = {"hand": build(False), "sdpa": build(True)}
        times, pairs = {"hand": [], "sdpa": []}, []
        for i in range(args.blocks):
            med = {}
            for name in (("hand", "sdpa") if i % 2 == 0 else ("sdpa", "hand")):
                t = []
                for _ in range(args.block):
                    t0 = time.perf_counter()
                    steps[name]()
                    t.append(time.perf_counter() - t0)
                times[name] += t[args.warm:] if i else []
                med[name] = statistics.median(t[args.warm:])
            if i:
                pairs.append(med["hand"] - med["sdpa"])
        n, d = len(pairs), sorted(pairs)
        k = max([j for j in range(1, n // 2 + 1) if 2 * sum(math.comb(n, i) for i in range(j)) / 2**n <= 0.05],
                default=1)
        a, b = statistics.median(times["hand"]), statistics.median(times["sdpa"])
        print(f"rep {rep}: step {a * 1e3:.2f} -> {b * 1e3:.2f} ms, saved {(a - b) * 1e3:.2f} ms (blocks: median "
              f"{statistics.median(pairs) * 1e3:.2f}, interval {d[k - 1] * 1e3:.2f} .. {d[n - k] * 1e3:.2f} ms); "
              f"load {load:.1f}")


if __name__ == "__main__":
    main()
