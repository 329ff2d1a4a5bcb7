"""Record a real 2-process ``torch.distributed`` (gloo, CPU) job under torch.profiler: one trace per rank.

``python scripts/record_gloo.py OUT [--world N] [--steps K]`` spawns N processes (default 2) that train a
tiny DistributedDataParallel model for K steps (default 3) on the CPU, rendezvous over a file in OUT, and
each writes ``OUT/rank{R}.json`` (``export_chrome_trace``): record_param_comms with the collective's
name, message sizes, dtype and group (torch 2.x's layout), gloo's all-reduces of DDP's gradient buckets,
and ``distributedInfo`` naming the rank. The tests of ``pyprof prof --summary comm`` record it into a
temporary folder; it takes a few seconds.
"""

from __future__ import annotations

import argparse
import os
import sys


def _worker(rank: int, world: int, out: str, steps: int) -> None:
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(out, 'rendezvous')}", rank=rank,
                            world_size=world)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 16))
        # a small bucket: the gradients go as more than one all-reduce
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.05)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        x = torch.randn(32, 64)
        y = torch.randn(32, 16)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for _ in range(steps):
                opt.zero_grad()
                torch.nn.functional.mse_loss(ddp(x), y).backward()
                opt.step()
            t = torch.full((1000,), float(rank))
            dist.all_reduce(t)  # one more of each kind, outside DDP
            gathered = torch.empty(1000 * world)
            dist.all_gather_into_tensor(gathered, t)
            dist.broadcast(t, src=0)
            dist.barrier()
        prof.export_chrome_trace(os.path.join(out, f"rank{rank}.json"))
    finally:
        dist.destroy_process_group()


def record(out: str, world: int = 2, steps: int = 3) -> list[str]:
    """Run the job; the per-rank trace paths, rank order."""
    import torch.multiprocessing as mp

    os.makedirs(out, exist_ok=True)
    # fork: the workers need not import torch again (a few seconds each); nothing ran in torch before it
    mp.start_processes(_worker, args=(world, out, steps), nprocs=world, start_method="fork")
    return [os.path.join(out, f"rank{r}.json") for r in range(world)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args(argv)
    for p in record(a.out, a.world, a.steps):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
