"""User annotations: PyProf-style ``layer:NAME`` NVTX ranges and ``pyprof.range`` around parts of a
small ResNet, so the per-kernel table can be grouped by the user's own layer names::

    nsys profile --trace=cuda,nvtx --export=sqlite -o resnet python examples/user_annotation/resnet.py
    pyprof parse resnet.sqlite -o resnet.dict && pyprof prof resnet.dict

``layer:NAME`` ranges are plain NVTX text (opened here with the ``nvtx`` package; ``torch.cuda.nvtx``
works too); they also go into a torch.profiler trace through ``record_function`` so that
``pyprof run`` sees them. ``pyprof.range(name)`` does both by itself. The training step runs
``STEPS`` times, each ended by ``pyprof.step()`` outside every range, so ``pyprof run`` records
iterations after the first (allocation, initialisation). Picks CUDA when available.
"""

import contextlib

import nvtx
import torch
from torch import nn
from torch.nn import functional as F

import pyprof

STEPS = 8  # pyprof run's default schedule: 1 skipped, 1 warm-up, 5 recorded, and one more

@contextlib.contextmanager
def layer(name: str):
    """A PyProf-style user layer: ``layer:NAME`` in NVTX (nsys) and in torch.profiler traces."""
    with nvtx.annotate(f"layer:{name}"), torch.autograd.profiler.record_function(f"layer:{name}"):
        yield


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.short = nn.Conv2d(cin, cout, 1, stride, bias=False) if stride != 1 or cin != cout else None

    def forward(self, x):
        with layer("residual"):
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
        with pyprof.range("shortcut"):
            idn = x if self.short is None else self.short(x)
        return F.relu(out + idn)


class SmallResNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(Block(16, 16, 1), Block(16, 32, 2), Block(32, 64, 2))
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        with layer("stem"):
            x = self.stem(x)
        x = self.blocks(x)
        with pyprof.range("head"):
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def main() -> None:
    pyprof.init()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = SmallResNet().to(device)
    x = torch.randn(8, 3, 32, 32, device=device)
    for _ in range(STEPS):
        model.zero_grad()
        with layer("train_step"):
            out = model(x)
            out.sum().backward()
        pyprof.step()  # one iteration ends, outside the train_step range
    print(f"user_annotation/resnet: output {tuple(out.shape)} on {device}")


if __name__ == "__main__":
    main()
