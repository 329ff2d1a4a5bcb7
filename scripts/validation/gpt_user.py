"""A GPT-style training script as a user writes one, not written for pyprof: causal self-attention
by hand (``q @ k.T``, scale, mask, softmax, ``@ v``), GELU MLPs, AdamW with torch's defaults (a
for-loop over the parameters on the CPU), and a 7-layer MLP trained beside it on the same loss.
The case of issue 40's advice ranking; ``pyprof advise --try`` tries its advice.

    python scripts/validation/gpt_user.py [--steps N] [--threads N]
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
        att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
        return self.proj((att @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.ln1, self.attn, self.ln2 = nn.LayerNorm(dim), Attention(dim, heads), nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab=512, dim=128, heads=4, layers=2, block=64):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(block, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(layers)])
        self.ln, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        return self.head(self.ln(self.blocks(x)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    gpt = GPT()
    mlp = nn.Sequential(*[m for _ in range(7) for m in (nn.Linear(256, 256), nn.ReLU())])
    opt = torch.optim.AdamW([*gpt.parameters(), *mlp.parameters()], lr=1e-3)
    for step in range(args.steps):
        idx, target = torch.randint(0, 512, (8, 64)), torch.randint(0, 512, (8, 64))
        loss = F.cross_entropy(gpt(idx).view(-1, 512), target.view(-1)) + mlp(torch.randn(64, 256)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
