"""Benchmark: the time pyprof.init() adds per op on the host, in each state a user can be in.

Workloads: a stream of small tensor ops with no module around them (the per-op cost alone), and a
tiny MLP (small ops inside modules) without and with autograd recording (which adds the backward
hooks). States, each judged against A:

  A  no init()                                                baseline
  B  init(), no consumer (lazy mode)                          target <= 1.2x A
  C  init(lazy=False): payloads built, nobody to hand them to target <= 5 us added per op
  E  init() as under an NVTX tool (the nvtx package's no-op stubs stand in for the tool)
  D  init() inside a Recorder (payloads built and kept in Python)

A round runs every state once, in a random order; each state is set up, run 20 times untimed and 40
times timed (the collector paused), as a training script that calls init() once sees it. Time is the
thread's CPU time (torch on one thread), which other processes on a shared machine disturb far less
than wall time. The time added per op is the median over rounds of (state - A) of the same round,
over the op ranges a Recorder counts. ``--hot``: the cost per op and per module range in a tight
loop, everything in cache. To compare two checkouts, run this script alternately with
``PYTHONPATH=<other checkout>`` and without, in one sitting.
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

import pyprof
from pyprof.annotate.recorder import Recorder


def tiny_mlp(device: str = "cpu"):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
    x = torch.randn(4, 16, device=device)

    def run(iters=200):
        for _ in range(iters):
            y = model(x)
            y = y * 0.5 + 1.0
            y.softmax(-1).sum()
    return run


def op_stream(device: str = "cpu"):
    """Small tensor ops with no module around them: the per-op cost alone."""
    a, b = torch.randn(4, 16, device=device), torch.randn(4, 16, device=device)

    def run(iters=500):
        for _ in range(iters):
            c = torch.add(a, b)
            c = c.mul(2.0)
            torch.relu(c)
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


class _Identity(nn.Module):
    def forward(self, x):
        return x


def hot_costs() -> None:
    """``--hot``: pyprof's cost per op and per module range with everything in cache: ``torch.neg`` of
    a 4-element tensor and a 50-deep Sequential of identity modules, called in a tight loop, without
    init() and with payloads built (best of 7 runs of 20,000 calls each; thread CPU time)."""
    x = torch.ones(4)
    chain = nn.Sequential(*[_Identity() for _ in range(50)])

    def ops(n):
        neg = torch.neg
        for _ in range(n):
            neg(x)

    def modules(n):
        for _ in range(n // 50):
            chain(x)

    def best(f, n=20000):
        times = []
        for _ in range(7):
            t0 = time.thread_time_ns()
            f(n)
            times.append((time.thread_time_ns() - t0) / n)
        return min(times)

    plain = best(ops), best(modules)
    pyprof.init(lazy=False)
    try:
        built = best(ops), best(modules)
    finally:
        pyprof.deinit()
    print("hot loop (everything in cache), payloads built vs no init:")
    print(f"  op     {plain[0]:7.0f} ns -> {built[0]:7.0f} ns per call  (+{(built[0] - plain[0]) / 1e3:.2f} us)")
    print(f"  module {plain[1]:7.0f} ns -> {built[1]:7.0f} ns per call  (+{(built[1] - plain[1]) / 1e3:.2f} us)")


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


LABELS = {"A": "no init               ", "B": "init, no consumer     ", "C": "init, payloads built  ",
          "E": "init, NVTX tool path  ", "D": "init, Recorder        "}
SETTLE, TIMED = 20, 40


def _measure(run) -> float:
    """The median thread CPU time (s) of ``TIMED`` runs after ``SETTLE`` untimed ones."""
    gc.collect()
    for _ in range(SETTLE):
        run()
    times = []
    gc.disable()
    try:
        for _ in range(TIMED):
            t0 = time.thread_time()
            run()
            times.append(time.thread_time() - t0)
    finally:
        gc.enable()
    return statistics.median(times)


def bench(name: str, fn, rounds: int, grad: bool) -> dict:
    """Time the states in rounds and print each one's median, ratio to A and time added per op."""
    tags = "ABCED"
    cpu: dict = {t: [] for t in tags}
    order = random.Random(0)
    with (torch.enable_grad if grad else torch.no_grad)():
        n_ops, n_mods = count_ranges(fn)
        for rnd in range(rounds + 1):  # round 0 warms up
            for tag in order.sample(tags, len(tags)):
                setup, run, teardown = _state(tag, fn)
                setup()
                try:
                    t = _measure(run)
                finally:
                    teardown()
                if rnd:
                    cpu[tag].append(t)
    a = statistics.median(cpu["A"])
    print(f"{name} ({'grad' if grad else 'no_grad'}, {n_ops} ops/run, plus {n_mods} module ranges; {rounds} rounds)")
    print("    state                   CPU median  ratio  added/op [IQR over rounds]")
    out = {}
    for tag in tags:
        med = statistics.median(cpu[tag])
        added = sorted((x - y) / n_ops * 1e6 for x, y in zip(cpu[tag], cpu["A"], strict=True))
        q1, q2, q3 = statistics.quantiles(added, n=4) if len(added) > 1 else added * 3
        out[tag] = (med / a, q2)
        spread = "" if tag == "A" else f"  [{q1:6.2f}, {q3:6.2f}]"
        print(f"  {tag} {LABELS[tag]} {med * 1e3:8.2f} ms  {med / a:5.2f}x  {q2:6.2f} us{spread}")
    return out


def gpu_bound(width: int) -> None:
    """``--device cuda``: does init() (payloads built) make a training step of an MLP of ``width`` slower
    in wall time? A GPU-bound step hides the host time pyprof adds; a host-bound one shows it. Prints
    the step's wall time and its GPU time (CUDA events) without and with init()."""
    torch.manual_seed(0)
    model = nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(width, width), nn.ReLU())]).cuda()
    x = torch.randn(256, width, device="cuda")

    def steps(n=50):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for _ in range(5):
            model(x).sum().backward()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        start.record()
        for _ in range(n):
            model(x).sum().backward()
        end.record()
        torch.cuda.synchronize()
        return (time.perf_counter() - t0) / n * 1e3, start.elapsed_time(end) / n

    res = {}
    for tag in ("A", "C", "A", "C"):  # twice each, alternating; the second pair is kept
        if tag == "C":
            pyprof.init(lazy=False)
        try:
            res[tag] = steps()
        finally:
            if tag == "C":
                pyprof.deinit()
    (wa, ga), (wc, gc_) = res["A"], res["C"]
    print(f"MLP 4x{width} fwd+bwd, batch 256: no init {wa:.3f} ms wall / {ga:.3f} ms GPU; "
          f"init, payloads built {wc:.3f} ms wall / {gc_:.3f} ms GPU ({wc / wa:.2f}x wall)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="Targets: B <= 1.2x A; C <= 5 us added per op (op stream).")
    ap.add_argument("--quick", action="store_true", help="5 rounds instead of 15")
    ap.add_argument("--hot", action="store_true",
                    help="only the cost per op and per module range in a tight loop (everything in cache)")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                    help="where the workloads' tensors live (cuda: the host time added per op with kernels "
                         "launched, then wall and GPU time of a host-bound and a GPU-bound MLP step)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.hot:
        hot_costs()
        return
    rounds = 5 if args.quick else 15
    from pyprof.annotate import ops
    accel = "on" if ops._fast_call is not None else "off (not built, or PYPROF_PURE_PYTHON=1)"
    where = os.path.dirname(os.path.dirname(os.path.abspath(pyprof.__file__)))
    dev = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"torch {torch.__version__}, {dev}, 1 thread, thread CPU time; pyprof from {where}, C accelerator {accel}")
    bench("op stream x500 (add, mul, relu)", op_stream(args.device), rounds, grad=False)
    bench("tiny MLP x200", tiny_mlp(args.device), rounds, grad=False)
    bench("tiny MLP x200", tiny_mlp(args.device), rounds, grad=True)
    if args.device == "cuda":
        for width in (64, 4096):
            gpu_bound(width)


if __name__ == "__main__":
    main()
