"""GEMM/convolution advice that moves kernels to a higher peak: TF32 and bf16 on tensor cores (bf16 also
on a CPU whose calibrated bf16 GEMM peak is :data:`CPU_BF16` times its fp32 one or more: native bf16
such as AVX512-BF16 or AMX), and fp16/bf16 dimensions padded to multiples of 8 (``tf32``, ``bf16``,
``align``)."""

from __future__ import annotations

from pyprof.advise.common import Advice, Context, faster, ideal, num, site, withdraw
from pyprof.prof.tensorcores import is_gemm_op

#: a CPU has native bf16 where calibration measured its bf16 GEMMs at least this many times its fp32 ones
#: (without, torch converts bf16 in software: a fraction of the fp32 rate)
CPU_BF16 = 1.5
#: why a CPU's bf16 advice gets no number (scripts/validate.py --advise, docs/advise.md)
CPU_WITHDRAWN = ("withdrawn on the CPU: autocast's casts and bf16 reorders cost every op, which the model does not "
                 "count; measured, bf16 saved what it predicted on large convolutions (1.04x) and was slower in 9 of "
                 "11 smaller models (docs/advise.md): `pyprof advise --try` measures it")

KINDS = {
    "tf32": ("Let float32 GEMMs and convolutions run on tensor cores as TF32: "
             "`torch.backends.cuda.matmul.allow_tf32 = True` (or `torch.set_float32_matmul_precision('high')`) "
             "and `torch.backends.cudnn.allow_tf32 = True`.",
             "for each fp32 GEMM/conv kernel without tensor cores (tc=0) on a GPU with TF32: "
             "saved = t - max(t x ideal_TF32 / ideal_now, 2 us), ideal = max(FLOPs / peak, bytes / bandwidth); a "
             "latency-bound kernel (t > 10 x ideal_now) saves ideal_now - ideal_TF32"),
    "bf16": ("Run float32 GEMMs and convolutions in bfloat16 under `torch.autocast(device_type, "
             "dtype=torch.bfloat16)` ('cuda' or 'cpu') around the forward and the loss.",
             "for each fp32 GEMM/conv/attention kernel on a GPU with bf16 tensor cores, or CPU op on a CPU with "
             f"native bf16 (calibrated bf16 peak >= {CPU_BF16:g} x fp32): saved = t - max(t x "
             "ideal_bf16 / ideal_now, 2 us), ideal_bf16 = max(FLOPs / bf16 peak, bytes / 2 / bandwidth); a "
             "latency-bound kernel (t > 10 x ideal_now) saves ideal_now - ideal_bf16; the casts autocast adds "
             "are not counted. CPU records: shown without a number (withdrawn after measurement: docs/advise.md)"),
    "align": ("Pad the GEMM/conv dimensions named in the evidence to multiples of 8 (vocabulary, hidden and "
              "head sizes, channels) so that fp16/bf16 kernels can use tensor cores.",
              "for each fp16/bf16 GEMM/conv kernel without tensor cores whose note names a dimension not a multiple "
              "of 8: saved = t - max(t x ideal_tensor / ideal_now, 2 us); a latency-bound kernel (t > 10 x ideal_now) "
              "saves ideal_now - ideal_tensor"),
}


def _peak_swap(ctx: Context, kind: str, select, to_dtype: str | None = None,
               byte_scale: float = 1.0) -> Advice | None:
    """An advice whose change moves the ``select``-ed kernels onto the device's tensor-core peak of
    ``to_dtype`` (None: their own dtype), their bytes times ``byte_scale``; kernels without that peak are
    left out."""
    df = ctx.df
    saved_rows, total, now, n = [], 0.0, 0.0, 0
    cols = ("sil", "flops", "bytes", "dtype", "tc", "note", "gpu", "layer", "trace", "op", "ideal")
    for sil, flops, nbytes, dtype, tc, note, gpu, layer, trace, op, ideal_now in zip(*(df[c] for c in cols),
                                                                                     strict=True):
        dev = ctx.devices.get(gpu)
        if dev is None or not select(dtype, tc, note or "", op, dev):
            continue
        t, fl, nb = num(sil), num(flops), num(nbytes)
        peak = dev.peak(to_dtype or dtype, True)
        if fl <= 0 or peak is None:
            continue
        new = faster(t, num(ideal_now) or None, ideal(fl, nb * byte_scale, peak, dev.bw))
        if new is None or new >= t:
            continue
        saved_rows.append((f"{op} in {site(layer, trace)}", t - new))
        total += t - new
        now += t
        n += 1
    if not n:
        return None
    return ctx.make(kind, *KINDS[kind], total, saved_rows, n, now)


def _bf16_pays(dtype, tc, note, op, dev) -> bool:
    """An fp32 GEMM/conv that bf16 would speed up: on a GPU with bf16 tensor cores, or a native-bf16 CPU."""
    if (dtype or "").removeprefix("torch.") != "float32" or not is_gemm_op(op):
        return False
    if dev.arch == "cpu":
        new = dev.peak("bfloat16", True)
        return bool(new and dev.peak("float32", False) and new >= CPU_BF16 * dev.peak("float32", False))
    return tc in ("0", "1")


def tf32(ctx: Context) -> Advice | None:
    return _peak_swap(ctx, "tf32", lambda d, tc, note, op, dev: tc == "0"
                      and note.startswith("fp32 without TF32"), "float32")


def bf16(ctx: Context) -> Advice | None:
    advice = _peak_swap(ctx, "bf16", _bf16_pays, "bfloat16", 0.5)
    cpu = all(label is None for label in ctx.devices)  # (the CPU's peaks are under None; no GPU)
    return withdraw(advice, CPU_WITHDRAWN) if cpu else advice


def align(ctx: Context) -> Advice | None:
    return _peak_swap(ctx, "align", lambda d, tc, note, op, dev: tc == "0"
                      and note.startswith("dims not multiple of 8"))
