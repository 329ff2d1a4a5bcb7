"""Tensor-core use of a kernel, from its name, with the patterns kept as data (``pyprof/data/tensor_cores.json``).

The ``tc`` column is ``1`` (a tensor-core kernel), ``0`` (a GEMM/conv/attention-like kernel, or a kernel of a
tensor-core eligible op, that did not use them) or ``-`` (not applicable: not such a kernel, or a GPU
without tensor cores). :func:`eligibility_note` says why an eligible kernel may have missed them.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

import orjson

NA = "-"

GEMM_OPS = frozenset({"mm", "matmul", "__matmul__", "__rmatmul__", "bmm", "addmm", "addbmm", "baddbmm",
                      "linear", "addmv", "mv", "einsum", "bilinear", "tensordot", "scaled_dot_product_attention"})
CONV_PREFIX = ("conv", "_convolution", "cudnn_convolution")


@functools.lru_cache(maxsize=1)
def patterns() -> dict:
    """The pattern data, compiled: ``tensor`` (all architectures), ``not_tensor``, ``gemm_like``, ``helpers``."""
    data = orjson.loads(resources.files("pyprof").joinpath("data/tensor_cores.json").read_bytes())

    def rx(pats):
        return re.compile("|".join(f"(?:{p})" for p in pats), re.IGNORECASE) if pats else None

    tensor = [p for arch in data["architectures"].values() for p in arch["tensor"]]
    return {
        "tensor": rx(tensor),
        "not_tensor": rx(data["not_tensor"]),
        "gemm_like": rx(data["gemm_like"]),
        "helpers": rx(data["helpers"]),
        "no_tc_arch": {a for a, v in data["architectures"].items() if not v["tensor_cores"]},
        "architectures": data["architectures"],
    }


@functools.lru_cache(maxsize=65536)
def kernel_class(name: str) -> tuple[bool, bool, bool]:
    """``(uses_tensor_cores, gemm_like, helper)`` from a kernel name (short and/or demangled)."""
    p = patterns()
    excluded = bool(p["not_tensor"].search(name))
    tc = bool(p["tensor"].search(name)) and not excluded
    helper = bool(p["helpers"].search(name))
    gemm = tc or (bool(p["gemm_like"].search(name)) and not helper)
    return tc, gemm, helper


def tc_flag(name: str, op_tensor_eligible: bool, arch: str | None) -> str:
    """``"1"``, ``"0"`` or ``"-"`` for one kernel (see the module docstring)."""
    if arch is not None and (arch == "cpu" or arch in patterns()["no_tc_arch"]):
        return NA
    tc, gemm, helper = kernel_class(name)
    if tc:
        return "1"
    if gemm or (op_tensor_eligible and not helper):
        return "0"
    return NA


def is_gemm_op(op: str | None) -> bool:
    """Whether ``op`` is a matrix product or a convolution: tensor-core eligible whatever its kernels."""
    return op is not None and (op in GEMM_OPS or op.startswith(CONV_PREFIX))


def _dims(args, op: str) -> list[int]:
    """The GEMM/conv dimensions that tensor cores want aligned: last two dims of matrices, channels of convs."""
    out: list[int] = []
    tensors = [a for a in args or () if isinstance(a, dict) and a.get("type") == "tensor" and a.get("shape")]
    if "attention" in op:  # the head dimension: the sequence length need not be aligned
        return [t["shape"][-1] for t in tensors[:3]]
    if op.startswith(CONV_PREFIX):
        for t in tensors[:2]:
            if len(t["shape"]) >= 3:
                out += t["shape"][:2] if t is tensors[1] else [t["shape"][1]]
        return out
    for t in tensors:
        if len(t["shape"]) >= 2:
            out += t["shape"][-2:]
    return out


def eligibility_note(tc: str, dtype: str | None, op: str | None, args, arch: str | None) -> str:
    """Why a TC=0 kernel did not use tensor cores, where the cause can be told; else ``""``."""
    if tc != "0":
        return ""
    d = (dtype or "").removeprefix("torch.")
    if d == "float32":
        if arch in ("ampere", "ada", "hopper", "blackwell"):
            return "fp32 without TF32: set torch.backends.cuda.matmul.allow_tf32 / cudnn.allow_tf32 or use autocast"
        if arch in ("volta", "turing"):
            return "fp32: tensor cores here need fp16 (use autocast)"
        return "fp32: tensor cores need TF32 (Ampere+) or fp16/bf16 (autocast)"
    if d in ("float16", "bfloat16"):
        bad = sorted({x for x in _dims(args, op or "") if isinstance(x, int) and x % 8})
        if bad:
            return "dims not multiple of 8: " + ",".join(map(str, bad[:4]))
        return f"{d} eligible but no tensor-core kernel"
    return ""
