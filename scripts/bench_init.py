"""Benchmark: time pyprof.init() adds per op on CPU.

Workloads: a stream of small tensor ops with no module, a tiny MLP (small ops inside modules; many
iterations, without and with autograd recording, which adds the backward-node hooks), and a
ResNet-18-like forward at batch 1 (defined below, no torchvision). States:

  A  no init()                                   (baseline)
  B  init(), no consumer (lazy mode)             target <= 1.2x A
  C  init(lazy=False): payloads built for every op and module, with nobody to hand them to
                                                 target <= 5 us added per op
  E  init() as under an NVTX tool: payloads built and pushed through the ``nvtx`` package into a
     real nvtx Domain, whose calls are NVTX's no-op stubs here (what nsys costs on pyprof's side,
     without nsys' own work)
  D  init() inside a Recorder (payloads built and stored in Python)

Each round runs every state once, in a random order; a state's time is the thread's CPU time
(``time.thread_time``; torch runs on one thread here), far less disturbed by other processes on a
shared machine than wall time. Printed per state: the median time, its ratio to A, and the time
added per op: the median over rounds of (state - A) of the same round, divided by the op count
(op ranges a Recorder counts; module ranges and backward hooks are in the time but not in the
count), with its interquartile range. Freed tensor buffers are kept in the process heap (glibc
``mallopt``, see :func:`_steady_heap`) so that single forwards do not move by page faults. The
ResNet runs 450 rounds of one forward each (a 1 us/op effect is 0.4% of a forward). Run:
``python scripts/bench_init.py`` (about 5 minutes on a 2-core machine; ``--quick``: a third of the
rounds; ``--resnet-only``: the ResNet alone, about 3 minutes, for before/after comparisons in one
sitting, since a sitting moves every state by up to 1-2 us/op).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
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


def resnet18(iters: int = 3):
    torch.manual_seed(0)
    model = ResNet18().eval()
    x = torch.randn(1, 3, 64, 64)

    def run(iters=iters):
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


def _nvtx_tool_init() -> None:
    """init() as under an NVTX tool: ``nvtx.get_domain`` hands pyprof a real ``nvtx`` Domain, whose
    C calls are NVTX's no-op stubs here (no tool library is loaded), so every range goes through the
    nvtx package as under nsys, minus what nsys itself does with it."""
    import nvtx
    from nvtx._lib.lib import Domain, DomainHandle

    from pyprof import markers

    dom = object.__new__(Domain)
    dom.handle = DomainHandle(markers.DOMAIN)
    dom.__init__(markers.DOMAIN)
    orig = nvtx.get_domain
    nvtx.get_domain = lambda name=None: dom
    try:
        pyprof.init()
    finally:
        nvtx.get_domain = orig


def _state(tag: str, fn):
    """(set up, timed callable, tear down) for one state."""
    if tag == "A":
        return (lambda: None), fn, (lambda: None)
    if tag == "B":
        return (lambda: pyprof.init()), fn, pyprof.deinit
    if tag == "C":
        return (lambda: pyprof.init(lazy=False)), fn, pyprof.deinit
    if tag == "E":
        return _nvtx_tool_init, fn, pyprof.deinit

    def with_recorder():
        with Recorder():
            fn()
    return (lambda: pyprof.init()), with_recorder, pyprof.deinit


LABELS = {"A": "no init                 ", "B": "init, no consumer       ",
          "C": "init, payloads built    ", "E": "init, NVTX tool path    ",
          "D": "init, Recorder          "}


def bench(name: str, fn, rounds: int, grad: bool) -> dict:
    """Time the states in rounds (each round runs every state once, in a new random order, so that
    machine load and what one state leaves behind, such as the heap after init/deinit, hit all states
    alike). The time added per op is the median over rounds of (state - A) in the same round, over the
    op count, so slow drifts of the machine cancel; its interquartile range is printed beside it."""
    ctx = torch.enable_grad if grad else torch.no_grad
    tags = "ABCED"
    cpu: dict = {t: [] for t in tags}
    order = random.Random(0)
    with ctx():
        n_ops, n_mods = count_ranges(fn)
        for rnd in range(rounds + 1):  # round 0 warms up
            for tag in order.sample(tags, len(tags)):
                setup, run, teardown = _state(tag, fn)
                setup()
                try:
                    run()  # warm: per-process caches (call sites, argument names, module texts)
                    gc.collect()
                    c0 = time.thread_time()
                    run()
                    dc = time.thread_time() - c0
                finally:
                    teardown()
                if rnd:
                    cpu[tag].append(dc)
    a = statistics.median(cpu["A"])
    print(f"{name} ({'grad' if grad else 'no_grad'}, {n_ops} ops/run, plus {n_mods} module ranges; "
          f"{rounds} rounds)")
    print("    state                     CPU median  ratio  added/op (median of paired rounds) [IQR]")
    out = {}
    for tag in tags:
        med = statistics.median(cpu[tag])
        added = sorted((x - y) / n_ops * 1e6 for x, y in zip(cpu[tag], cpu["A"], strict=True))
        q1, q2, q3 = statistics.quantiles(added, n=4) if len(added) > 1 else (added * 3)
        out[tag] = q2
        spread = "" if tag == "A" else f"  [{q1:6.2f}, {q3:6.2f}]"
        print(f"  {tag} {LABELS[tag]} {med * 1e3:8.2f} ms  {med / a:5.2f}x  {q2:6.2f} us{spread}")
    return out


def _steady_heap() -> str:
    """Keep freed tensor buffers in the process heap (glibc ``mallopt``): by default glibc hands big
    buffers back to the OS and the next forward faults them in again, which alone moved single
    ResNet forwards here by about 5% (interquartile range over 200 forwards; about 2.5% with this).
    Both sides of every comparison run with it."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3
        ok = libc.mallopt(m_mmap_threshold, 1 << 30) == 1 and libc.mallopt(m_trim_threshold, 1 << 30) == 1
    except (OSError, AttributeError):
        ok = False
    return "heap kept (mallopt)" if ok else "default heap (no glibc mallopt)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    ap.add_argument("--resnet-only", action="store_true",
                    help="the ResNet forward alone (to compare two checkouts in one sitting: run this script "
                         "alternately with PYTHONPATH=<other checkout> and without)")
    args = ap.parse_args()
    heap = _steady_heap()
    torch.set_num_threads(1)
    reps = 5 if args.quick else 15
    from pyprof.annotate import ops
    accel = "on" if ops._fast_call is not None else "off (not built, or PYPROF_PURE_PYTHON=1)"
    where = os.path.dirname(os.path.dirname(os.path.abspath(pyprof.__file__)))
    print(f"torch {torch.__version__}, CPU, 1 thread, thread CPU time, {heap}; pyprof from {where}, "
          f"C accelerator {accel}")
    if not args.resnet_only:
        bench("op stream x500 (add, mul, relu)", op_stream(), reps, grad=False)
        bench("tiny MLP x200", tiny_mlp(), reps, grad=False)
        bench("tiny MLP x200", tiny_mlp(), reps, grad=True)
    # many more rounds, one forward each: its per-op figure is a small difference of two large
    # times (1 us/op is 0.4% of a forward), and single forwards move by 2-3% (interquartile range)
    bench("ResNet-18-like b1 64x64", resnet18(1), 30 * reps, grad=False)


if __name__ == "__main__":
    main()
