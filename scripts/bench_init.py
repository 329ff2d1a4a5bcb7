"""Benchmark: time pyprof.init() adds per op on CPU.

Workloads: a stream of small tensor ops with no module, a tiny MLP (small ops inside modules; many
iterations, without and with autograd recording, which adds the backward-node hooks), and a
ResNet-18-like forward at batch 1 (defined below, no torchvision). States, each timed as the median over repeats:

  A  no init()                                   (baseline)
  B  init(), no NVTX consumer (lazy mode)        target <= 1.2x A
  C  init(lazy=False): payloads built and pushed to a null consumer (what nsys would cost
     pyprof, without nsys' own cost)              target <= 5 us added per op
  D  init() inside a Recorder (payloads built and stored in Python)

Ops per iteration are counted with a Recorder (op ranges). Run: ``python scripts/bench_init.py``
(``--quick`` for fewer repeats). Prints ratios to A and microseconds added per op, from the
medians of wall time and of the thread's CPU time (``time.thread_time``; torch runs on one
thread here), the latter being far less disturbed by other processes on a shared machine.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import torch
from torch import nn
from torch.nn import functional as F

import pyprof
from pyprof.annotate.recorder import Recorder


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else None)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.pool = nn.MaxPool2d(3, 2, 1)
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(nn.Sequential(Block(cin, cout, stride), Block(cout, cout, 1)))
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, 1000)

    def forward(self, x):
        x = self.pool(F.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def tiny_mlp():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(4, 16)

    def run(iters=200):
        for _ in range(iters):
            y = model(x)
            y = y * 0.5 + 1.0
            y.softmax(-1).sum()
    return run


def op_stream():
    """Small tensor ops with no module around them: the per-op cost alone."""
    a, b = torch.randn(4, 16), torch.randn(4, 16)

    def run(iters=500):
        for _ in range(iters):
            c = torch.add(a, b)
            c = c.mul(2.0)
            torch.relu(c)
    return run


def resnet18():
    torch.manual_seed(0)
    model = ResNet18().eval()
    x = torch.randn(1, 3, 64, 64)

    def run(iters=3):
        for _ in range(iters):
            model(x)
    return run


def count_ranges(fn) -> tuple[int, int]:
    """(op ranges, module ranges) one run of ``fn`` opens."""
    pyprof.init()
    try:
        with Recorder() as rec:
            fn()
        return len(rec.payloads("op")), len(rec.payloads("mod"))
    finally:
        pyprof.deinit()


def _state(tag: str, fn):
    """(set up, timed callable, tear down) for one state."""
    if tag == "A":
        return (lambda: None), fn, (lambda: None)
    if tag == "B":
        return (lambda: pyprof.init()), fn, pyprof.deinit
    if tag == "C":
        return (lambda: pyprof.init(lazy=False)), fn, pyprof.deinit

    def with_recorder():
        with Recorder():
            fn()
    return (lambda: pyprof.init()), with_recorder, pyprof.deinit


def bench(name: str, fn, repeats: int, grad: bool) -> dict:
    """Time the four states interleaved (A B C D A B C D ...) so machine load hits all alike."""
    ctx = torch.enable_grad if grad else torch.no_grad
    tags = "ABCD"
    times: dict = {t: [] for t in tags}
    cpu: dict = {t: [] for t in tags}
    with ctx():
        n_ops, n_mods = count_ranges(fn)
        for rep in range(repeats + 1):  # round 0 warms up
            for tag in tags:
                setup, run, teardown = _state(tag, fn)
                setup()
                try:
                    run()  # warm: per-process caches (call sites, argument names, module texts)
                    gc.collect()
                    c0 = time.thread_time()
                    t0 = time.perf_counter()
                    run()
                    dt = time.perf_counter() - t0
                    dc = time.thread_time() - c0
                finally:
                    teardown()
                if rep:  # the first round warms up
                    times[tag].append(dt)
                    cpu[tag].append(dc)
    med = {t: statistics.median(v) for t, v in times.items()}
    cmed = {t: statistics.median(v) for t, v in cpu.items()}
    a, ca = med["A"], cmed["A"]
    # added/op: all that init() adds (module ranges and backward hooks included) over the op count
    print(f"{name} ({'grad' if grad else 'no_grad'}, {n_ops} ops/run, plus {n_mods} module ranges)")
    labels = {"A": "no init                 ", "B": "init, no consumer       ",
              "C": "init, payloads (null)   ", "D": "init, Recorder          "}
    print("    state                     wall median  ratio  added/op  | CPU median  ratio  added/op")
    for tag in tags:
        t, c = med[tag], cmed[tag]
        print(f"  {tag} {labels[tag]} {t * 1e3:8.2f} ms  {t / a:5.2f}x {(t - a) / n_ops * 1e6:6.2f} us"
              f"  | {c * 1e3:7.2f} ms  {c / ca:5.2f}x {(c - ca) / n_ops * 1e6:6.2f} us")
    return med


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    args = ap.parse_args()
    torch.set_num_threads(1)
    reps = 5 if args.quick else 15
    from pyprof.annotate import ops
    accel = "on" if ops._fast_call is not None else "off (not built, or PYPROF_PURE_PYTHON=1)"
    print(f"torch {torch.__version__}, CPU, 1 thread, median of {reps} repeats; C accelerator {accel}")
    bench("op stream x500 (add, mul, relu)", op_stream(), reps, grad=False)
    bench("tiny MLP x200", tiny_mlp(), reps, grad=False)
    bench("tiny MLP x200", tiny_mlp(), reps, grad=True)
    # three times the repeats: its per-op figure is a small difference of two large times (1 us/op is
    # 0.8% of a run), and from run to run the plain forward alone moves by more than that
    bench("ResNet-18-like b1 64x64 x3", resnet18(), 3 * reps, grad=False)


if __name__ == "__main__":
    main()
