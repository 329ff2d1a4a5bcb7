"""The smallest pyprof example: a few torch ops and one module, instrumented by pyprof.init().

Profile on a GPU with Nsight Systems, then turn the export into a per-kernel table::

    nsys profile --trace=cuda,nvtx --export=sqlite -o simple python examples/simple.py
    pyprof parse simple.sqlite -o simple.dict
    pyprof prof simple.dict

The same ops run ``STEPS`` times, each iteration ended by ``pyprof.step()``: the first one pays
for allocation and library initialisation, so ``pyprof run examples/simple.py`` (which calls
pyprof.init() first: the call below is then a no-op) skips and warms up on the first ones and
records the steady state after. Runs on CPU too (no kernels then, but the markers are emitted the
same way).
"""

import torch

import pyprof

STEPS = 8  # pyprof run's default schedule: 1 skipped, 1 warm-up, 5 recorded, and one more


def main() -> None:
    pyprof.init()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(256, 512, device=device)
    b = torch.randn(512, 128, device=device)
    lin = torch.nn.Linear(128, 64).to(device)
    for _ in range(STEPS):
        c = torch.matmul(a, b)            # torch function
        d = (c + 1.0).relu_()             # Tensor dunder and in-place method
        e = torch.nn.functional.softmax(d, dim=1)
        out = lin(e)                      # module range "" (Linear) around F.linear
        pyprof.step()                     # one iteration ends
    print(f"simple: output {tuple(out.shape)} on {device}")


if __name__ == "__main__":
    main()
