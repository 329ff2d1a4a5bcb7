"""The training loops ``scripts/validate.py --advise`` profiles and times: one per advice kind, each in a
``before`` variant (the problem the advice names) and an ``after`` variant (the advised change).

Run as a script, so that ``pyprof run`` can profile it and a plain process can time it::

    python scripts/validation/advice_models.py CASE before|after|both [--steps N]

``both`` builds the two variants in one process and runs their steps in pairs (which goes first
alternates), then prints each step's wall time per variant (seconds, JSON): the machine's load then
drifts alike for both. A step is one batch fetched, forward, backward and optimizer step. Each loop
calls ``optimizer.step()`` once per step, which is how ``pyprof run`` counts steps.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

CASES = ("optim", "layout", "fuse", "dataloader", "threads")


class Chain(nn.Module):
    """A chain of memory-bound pointwise ops between two small linear layers (a hand-written
    activation: what torch.compile fuses into one kernel)."""

    def __init__(self, dim: int = 256):
        super().__init__()
        self.a = nn.Linear(dim, dim)
        self.b = nn.Linear(dim, dim)

    def forward(self, x):
        h = self.a(x)
        h = h * 0.5
        h = h + 1.0
        h = h * h
        h = h - 0.25
        h = h * 2.0
        return self.b(h)


class SlowData(torch.utils.data.Dataset):
    """Samples that take ``wait`` seconds each to load (I/O-like: the process sleeps; no torch op per
    sample, so that the profiler's own cost per op does not weigh on the loading)."""

    def __init__(self, n: int = 100_000, dim: int = 64, wait: float = 0.005):
        self.n, self.wait = n, wait
        self.sample = torch.ones(dim)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.wait)
        return self.sample


def build(case: str, variant: str):
    """The step function of a case's variant. Every case but ``threads`` runs one intra-op thread (the
    machine is shared: OpenMP barriers over busy cores make wall times erratic)."""
    after = variant == "after"
    torch.manual_seed(0)
    if case != "threads":
        torch.set_num_threads(1)
    if case == "optim":  # a for-loop AdamW vs the fused one
        model = nn.Sequential(*[nn.Linear(256, 256) for _ in range(12)])
        opt = torch.optim.AdamW(model.parameters(), fused=True) if after else \
            torch.optim.AdamW(model.parameters(), foreach=False)
        x = torch.randn(8, 256)
        return _trainer(model, opt, lambda: (x,))
    if case == "layout":  # a CNN in NCHW vs channels_last (model and input)
        model = nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                              nn.Conv2d(32, 16, 3, padding=1))
        x = torch.randn(8, 16, 56, 56)
        if after:
            model = model.to(memory_format=torch.channels_last)
            x = x.contiguous(memory_format=torch.channels_last)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        return _trainer(model, opt, lambda: (x,))
    if case == "fuse":  # the pointwise chain eager vs torch.compile
        model = Chain(256)
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(2048, 256)
        run = torch.compile(model) if after else model
        return _trainer(run, opt, lambda: (x,))
    if case == "dataloader":  # a slow dataset loaded on the training thread vs in workers
        # 8 x 5 ms of loading against a step of some 15 ms: 4 workers keep up (W >= D / C)
        model = nn.Sequential(nn.Linear(64, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 8))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        loader = torch.utils.data.DataLoader(SlowData(wait=0.005), batch_size=8, num_workers=4 if after else 0,
                                             persistent_workers=after)
        it = iter(loader)

        def batch():
            return (next(it),)

        return _trainer(model, opt, batch)
    if case == "threads":  # 4 intra-op threads per core vs one per core
        import os

        cores = len(os.sched_getaffinity(0))
        n = cores if after else 4 * cores
        model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(64, 512)
        train = _trainer(model, opt, lambda: (x,))

        def step():
            torch.set_num_threads(n)
            train()
        return step
    raise SystemExit(f"unknown case {case!r}: one of {', '.join(CASES)}")


def _trainer(model, opt, batch):
    def step():
        args = batch()
        opt.zero_grad(set_to_none=True)
        model(*args).float().pow(2).mean().backward()
        opt.step()
    return step


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("case", choices=CASES)
    ap.add_argument("variant", choices=("before", "after", "both"))
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args(argv)
    variants = ("before", "after") if args.variant == "both" else (args.variant,)
    steps = {v: build(args.case, v) for v in variants}
    times: dict[str, list[float]] = {v: [] for v in variants}
    for i in range(args.steps):
        for v in (variants if i % 2 == 0 else variants[::-1]):  # pairs, alternating which goes first
            t0 = time.perf_counter()
            steps[v]()
            times[v].append(time.perf_counter() - t0)
    if args.variant == "both":
        print(json.dumps(times))


if __name__ == "__main__":
    main()
