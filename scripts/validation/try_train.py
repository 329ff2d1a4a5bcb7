"""A training script with the two problems issue 41's first check names: an AdamW that loops over its
parameters (torch's default on the CPU), fed by a DataLoader whose samples each take milliseconds to
load (``SLEEP`` seconds: I/O-like) in the main process. ``pyprof advise --try`` profiles and tries it;
``scripts/ab_try_train.py`` times the same two changes independently, by building the variants here.

    python scripts/validation/try_train.py [--steps N]
"""

import argparse
import time

import torch
from torch import nn

SLEEP = 0.003  # seconds to load one sample
BATCH = 8


class SlowData(torch.utils.data.Dataset):
    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        time.sleep(SLEEP)
        g = torch.Generator().manual_seed(i)
        return torch.randn(64, generator=g), torch.randn(8, generator=g)


def build(optimizer_kw: dict | None = None, loader_kw: dict | None = None):
    """(model, optimizer, batches) as the script makes them, the optimizer and DataLoader with extra
    keyword arguments (what the A/B script varies)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 256), *[m for _ in range(10) for m in (nn.Linear(256, 256), nn.ReLU())],
                          nn.Linear(256, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **(optimizer_kw or {}))
    loader = torch.utils.data.DataLoader(SlowData(), batch_size=BATCH, **(loader_kw or {}))
    return model, opt, iter(loader)


def train_step(model, opt, batches) -> torch.Tensor:
    x, y = next(batches)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)  # one intra-op thread: the machines this runs on are shared
    model, opt, batches = build()
    for step in range(args.steps):
        loss = train_step(model, opt, batches)
        if step % 10 == 0:
            print(f"step {step}: loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
