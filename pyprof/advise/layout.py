"""``layout``: layout transforms (cuDNN's NCHW<->NHWC kernels, oneDNN reorders) under convolutions,
which channels_last activations avoid. On a CPU, oneDNN mostly reorders NCHW activations inside its
convolution kernels, where no record shows it: 2-D convolutions on contiguous (NCHW) 4-D inputs are
shown then, without an estimate (``pyprof advise --try`` measures channels_last)."""

from __future__ import annotations

from pyprof.advise.common import Advice, Context, num, site

LAYOUT_KERNELS = ("nchwtonhwc", "nhwctonchw", "nchw_to_nhwc", "nhwc_to_nchw")
#: CPU ops under a convolution that only change the layout (oneDNN reorders). Not the copy_ a convolution
#: makes of its input: the slow (non-oneDNN) path copies to contiguous whatever the layout, so that copy
#: is no layout mismatch (scripts/validate.py --advise: 62 ms of such copies per step, 7 ms saved by
#: channels_last inputs)
REORDER_ATEN = ("aten::to_mkldnn", "aten::to_dense", "aten::mkldnn_reorder_conv2d_weight",
                "aten::mkldnn_reorder_conv3d_weight", "aten::contiguous")

KINDS = {
    "layout": ("Keep convolution activations in the layout the kernels use: "
               "`model.to(memory_format=torch.channels_last)` and channels_last inputs (CPU: the oneDNN reorders "
               "go away the same way, or run the model under `torch.jit.freeze` / `torch.compile`).",
               "saved = the time of the layout-transform kernels (nchwToNhwc, nhwcToNchw, oneDNN reorders) "
               "under convolution ops; CPU convolutions of NCHW inputs without such kernels: not estimated"),
}


def layout(ctx: Context) -> Advice | None:
    df = ctx.df
    rows = []
    for rec, op, sil, layer, trace, name in zip(ctx.records, df["op"], df["sil"], df["layer"], df["trace"],
                                                df["longkernel"], strict=True):
        low = str(name or "").lower()
        gpu_layout = any(k in low for k in LAYOUT_KERNELS)
        cpu_reorder = rec.get("device") is None and rec.get("aten") in REORDER_ATEN
        if (gpu_layout or cpu_reorder) and str(op or "").startswith("conv"):
            rows.append((f"{op} in {site(layer, trace)}", num(sil)))
    return ctx.covering("layout", *KINDS["layout"], rows) or _nchw(ctx)


def _nchw(ctx: Context) -> Advice | None:
    """CPU 2-D convolutions whose input is NCHW (4-D and contiguous), their time."""
    rows = []
    for rec, op, sil, layer, trace in zip(ctx.records, ctx.df["op"], ctx.df["sil"], ctx.df["layer"], ctx.df["trace"],
                                          strict=True):
        x = next((a for a in rec.get("args") or () if isinstance(a, dict) and a.get("type") == "tensor"), None)
        if (rec.get("device") is None and op == "conv2d" and x and len(x.get("shape") or ()) == 4
                and x.get("contig") is True):
            rows.append((f"{op} in {site(layer, trace)}", num(sil)))
    return ctx.covering("layout", *KINDS["layout"], rows, "oneDNN reorders NCHW activations inside its "
                        "convolution kernels on the CPU, where the records do not show what channels_last "
                        "would save")
