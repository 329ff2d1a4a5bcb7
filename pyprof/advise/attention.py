"""``attention``: attention written out by hand (``q @ k.T``, then scaling, masking, softmax, dropout,
then ``@ v``) in one module, which ``torch.nn.functional.scaled_dot_product_attention`` runs as one
op without writing the ``[..., t, s]`` scores (a flash or memory-efficient kernel, GPU or CPU).

Found by shapes, per module call (the forward op instances of one layer, thread and step in order): a
matmul of ``[..., t, d] @ [..., d, s]``, then a softmax of a tensor of its result's shape, then a
matmul whose first operand has that shape. The ops between the two matmuls work on the scores.
"""

from __future__ import annotations

from pyprof.advise.common import Advice, Context, num, site, tensors

MATMULS = frozenset({"matmul", "__matmul__", "bmm"})

KINDS = {
    "attention": ("Replace the hand-written attention named in the evidence (matmul, softmax, matmul) by "
                  "`torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=..., dropout_p=..., "
                  "is_causal=...)`.",
                  "saved = the time (forward and backward) of the ops between the two matmuls, which work on the "
                  "[..., t, s] scores (scale, mask, softmax, dropout); the matmuls are assumed to keep their time"),
}


def _shapes(rec: dict) -> list[list]:
    return [a["shape"] for a in tensors(rec)]


def _scores(rec: dict) -> list | None:
    """The shape of a matmul's result (broadcast batch dims, then ``t x s``), None where not a batched
    matrix product."""
    s = _shapes(rec)
    if len(s) < 2 or len(s[0]) < 2 or len(s[1]) < 2 or s[0][-1] != s[1][-2]:
        return None
    a, b = s[0][:-2], s[1][:-2]
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + a, [1] * (n - len(b)) + b
    return [max(x, y) for x, y in zip(a, b, strict=True)] + [s[0][-2], s[1][-1]]


def _chains(calls: list[tuple[int, str, dict]]) -> list[list[tuple[int, str, dict]]]:
    """The (matmul, ..., softmax, ..., matmul) runs of one module call's op instances."""
    out, i = [], 0
    while i < len(calls):
        scores = _scores(calls[i][2]) if calls[i][1] in MATMULS else None
        soft = next((j for j in range(i + 1, len(calls)) if calls[j][1] in MATMULS or calls[j][1] == "softmax"),
                    None) if scores else None
        if soft is not None and calls[soft][1] == "softmax" and next(iter(_shapes(calls[soft][2])), None) == scores:
            end = next((k for k in range(soft + 1, len(calls)) if calls[k][1] in MATMULS), None)
            if end is not None and next(iter(_shapes(calls[end][2])), None) == scores:
                out.append(calls[i:end + 1])
                i = end + 1
                continue
        i += 1
    return out


def attention(ctx: Context) -> Advice | None:
    from pyprof.report.timeline import step_of

    df = ctx.df
    calls: dict[tuple, list] = {}  # (layer, thread or device, step) -> forward op instances in order
    time: dict = {}  # op instance -> [its time, its kernels], every direction
    for rec, d, op, sil, opid, layer in zip(ctx.records, df["dir"], df["op"], df["sil"], df["opid"], df["layer"],
                                            strict=True):
        if opid is None or opid != opid:
            continue
        t = time.setdefault(opid, [0.0, 0])
        t[0] += num(sil)
        t[1] += 1
        if d == "fprop" and isinstance(layer, (list, tuple)) and layer:
            key = (tuple(layer), rec.get("device") if rec.get("device") is not None else rec.get("tid"), step_of(rec))
            seq = calls.setdefault(key, [])
            if not seq or seq[-1][0] != opid:
                seq.append((opid, op, rec))
    rows, total, now, n = [], 0.0, 0.0, 0
    for seq in calls.values():
        for chain in _chains(seq):
            between = sum(time[c[0]][0] for c in chain[1:-1])
            ops = [c[1] for c in chain]
            label = " -> ".join(ops if len(ops) <= 5 else [*ops[:2], "...", *ops[-2:]])
            first = chain[0][2]
            rows.append((f"{label}, scores {_scores(first)}, in {site(first.get('layer'), first.get('trace'))}",
                         between))
            total += between
            now += sum(time[c[0]][0] for c in chain)
            n += sum(time[c[0]][1] for c in chain)
    if not n:
        return None
    return ctx.make("attention", *KINDS["attention"], total, rows, n, now)
