"""LeNet-5 training for a few steps on random data, instrumented by pyprof (the README's main job).

Each iteration calls ``pyprof.step()``, which ``pyprof run`` uses to drive torch.profiler's schedule::

    pyprof run examples/lenet.py                       # torch.profiler; no Nsight needed
    nsys profile --trace=cuda,nvtx --export=sqlite -o lenet python examples/lenet.py
    pyprof parse lenet.sqlite -o lenet.dict && pyprof prof lenet.dict

Forward ops are tied to module paths (``conv1``, ``fc2``...), backward kernels to their forward op
through the ``bwd`` ranges, and the optimizer step gets an ``optim`` range. Picks CUDA when
available; a few seconds on CPU.
"""

import argparse

import torch
from torch import nn
from torch.nn import functional as F

import pyprof


class LeNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="LeNet training steps under pyprof")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=32)
    args = ap.parse_args(argv)

    pyprof.init()  # a no-op under `pyprof run`, which has already initialised pyprof
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = LeNet().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(args.batch, 1, 32, 32, device=device)
    y = torch.randint(0, 10, (args.batch,), device=device)
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        pyprof.step()
    print(f"lenet: {args.steps} steps on {device}, final loss {loss.detach().cpu().item():.4f}")


if __name__ == "__main__":
    main()
