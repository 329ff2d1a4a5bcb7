"""``pyprof.wrap`` on a custom autograd Function (forward and backward) and a custom module::

    nsys profile --trace=cuda,nvtx --export=sqlite -o custom python examples/custom_func_module/custom.py
    pyprof parse custom.sqlite -o custom.dict && pyprof prof custom.dict

The wrapped callables get op ranges in namespace ``wrap`` (``Scale.forward``, ``Scale.backward``,
``Gate.forward``); the torch ops they call keep their own ranges nested inside, so the cost models
still price them. A C-extension function is wrapped the same way: ``pyprof.wrap(ext_module, "fn")``.
Forward and backward run ``STEPS`` times, each iteration ended by ``pyprof.step()``, so ``pyprof run``
records iterations after the first (allocation, initialisation). Picks CUDA when available.
"""

import torch
from torch import nn

import pyprof

STEPS = 8  # pyprof run's default schedule: 1 skipped, 1 warm-up, 5 recorded, and one more

class Scale(torch.autograd.Function):
    """y = x * s, with a hand-written backward."""

    @staticmethod
    def forward(ctx, x, s: float):
        ctx.s = s
        return x * s

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.s, None


class Gate(nn.Module):
    """A custom module: sigmoid gate over a linear projection, scaled by the custom Function."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.proj = nn.Linear(n, 2 * n)

    def forward(self, x):
        a, b = self.proj(x).chunk(2, dim=-1)
        return Scale.apply(a * torch.sigmoid(b), 0.5)


def main() -> None:
    pyprof.init()
    pyprof.wrap(Scale, "forward")
    pyprof.wrap(Scale, "backward")
    pyprof.wrap(Gate, "forward")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = nn.Sequential(Gate(64), Gate(64)).to(device)
    x = torch.randn(16, 64, device=device, requires_grad=True)
    for _ in range(STEPS):
        x.grad = None
        model.zero_grad()
        model(x).sum().backward()
        pyprof.step()  # one iteration ends
    print(f"custom_func_module: grad norm {x.grad.norm().cpu().item():.4f} on {device}")


if __name__ == "__main__":
    main()
