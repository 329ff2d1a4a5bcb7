"""The models of the validation harness (:mod:`scripts.validation.harness`), and one training loop.

* :func:`resnet50`: torchvision's ResNet-50 (Bottleneck blocks [3, 4, 6, 3], stride on the 3x3 conv,
  1x1 downsample + BatchNorm, 1000 classes), same module names (``layer1.0.conv1``, ``fc``).
* :func:`vit_b_16`: torchvision's ViT-B/16 (patch 16, hidden 768, 12 layers, 12 heads, MLP 3072, class
  token, learned position embedding, ``nn.MultiheadAttention(batch_first=True)`` called with
  ``need_weights=False``), same module names (``conv_proj``, ``encoder.layers.encoder_layer_0.self_attention``,
  ``heads.head``).
* :func:`gpt`: a GPT-style decoder (pre-LayerNorm blocks, fused QKV linear, causal
  ``F.scaled_dot_product_attention``, GELU MLP, untied LM head).
* :func:`lstm`: a two-layer ``nn.LSTM`` with a linear head.
* :func:`convnet`: a small conv net (conv, BatchNorm, ReLU, pooling, linear), trained under bf16 autocast,
  and in float32 under ``torch.compile``.
* :func:`mlp`: a three-layer MLP (the ``torch.compile`` case).
* :func:`custom_linear`: a linear layer written as a custom ``torch.autograd.Function`` whose forward and
  backward are instrumented with :func:`pyprof.wrap`.

The second zoo: model classes that users train and pyprof once priced wrong (issue 26):

* :class:`MoE`: a top-k mixture of experts whose experts run as ``einsum``, ``bmm`` and ``baddbmm``;
* :class:`PackedRNN`: a bidirectional ``nn.GRU`` then a two-layer bidirectional ``nn.LSTM`` on a
  ``PackedSequence`` of distinct lengths (aten's ``gru.data``/``lstm.data``);
* :class:`CheckpointedLlama`: llama-style blocks (RMSNorm, causal SDPA, SwiGLU) under
  ``torch.utils.checkpoint(use_reentrant=False)``: a ``recomp`` direction and checkpoint's early stop
  (also under bf16 autocast, which the recompute restores);
* :class:`UNet`: ``ConvTranspose2d`` up-sampling; :class:`SepConvNet`: grouped and depthwise
  convolutions; :class:`TCN`: dilated ``Conv1d``;
* :class:`Broadcasting`: broadcasting matmuls with frozen weights (a LoRA layer with ``einsum``, a
  frozen 4-D @ 3-D projection, ``addmm`` with ``beta`` and ``alpha``);
* :class:`AttnBlock` under ``torch.compile`` (``F.scaled_dot_product_attention``: its backward kernel
  in the compiled backward graph); :class:`Bert` with a padding mask, in fp32 and under bf16 autocast.

torchvision is not needed: the two torchvision models are written out here with its module names.
:data:`CASES` names each model with its input, precision and the op families it must exercise;
:func:`train` runs a few training steps of a case (what ``pyprof run`` profiles).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import grads


# ----------------------------------------------------------------------------- ResNet-50
class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, layers=(3, 4, 6, 3), num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._make_layer(64, layers[0])
        self.layer2 = self._make_layer(128, layers[1], stride=2)
        self.layer3 = self._make_layer(256, layers[2], stride=2)
        self.layer4 = self._make_layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)

    def _make_layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * Bottleneck.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * Bottleneck.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * Bottleneck.expansion),
            )
        layers = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * Bottleneck.expansion
        layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet50() -> ResNet:
    return ResNet((3, 4, 6, 3))


# ----------------------------------------------------------------------------- ViT-B/16
class MLPBlock(nn.Sequential):
    def __init__(self, dim: int, mlp_dim: int, dropout: float):
        super().__init__(nn.Linear(dim, mlp_dim), nn.GELU(), nn.Dropout(dropout), nn.Linear(mlp_dim, dim),
                         nn.Dropout(dropout))


class EncoderBlock(nn.Module):
    def __init__(self, num_heads: int, hidden_dim: int, mlp_dim: int, dropout: float = 0.0,
                 attention_dropout: float = 0.0):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(hidden_dim, num_heads, dropout=attention_dropout,
                                                    batch_first=True)
        self.dropout = nn.Dropout(dropout)
        self.ln_2 = nn.LayerNorm(hidden_dim, eps=1e-6)
        self.mlp = MLPBlock(hidden_dim, mlp_dim, dropout)

    def forward(self, x):
        y = self.ln_1(x)
        y, _ = self.self_attention(y, y, y, need_weights=False)
        x = self.dropout(y) + x
        return x + self.mlp(self.ln_2(x))


class Encoder(nn.Module):
    def __init__(self, seq_length: int, num_layers: int, num_heads: int, hidden_dim: int, mlp_dim: int,
                 dropout: float = 0.0):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq_length, hidden_dim).normal_(std=0.02))
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.Sequential(OrderedDict(
            (f"encoder_layer_{i}", EncoderBlock(num_heads, hidden_dim, mlp_dim, dropout)) for i in range(num_layers)
        ))
        self.ln = nn.LayerNorm(hidden_dim, eps=1e-6)

    def forward(self, x):
        return self.ln(self.layers(self.dropout(x + self.pos_embedding)))


class VisionTransformer(nn.Module):
    def __init__(self, image_size: int = 224, patch_size: int = 16, num_layers: int = 12, num_heads: int = 12,
                 hidden_dim: int = 768, mlp_dim: int = 3072, num_classes: int = 1000):
        super().__init__()
        self.image_size, self.patch_size, self.hidden_dim = image_size, patch_size, hidden_dim
        self.conv_proj = nn.Conv2d(3, hidden_dim, kernel_size=patch_size, stride=patch_size)
        seq_length = (image_size // patch_size) ** 2 + 1
        self.class_token = nn.Parameter(torch.zeros(1, 1, hidden_dim))
        self.encoder = Encoder(seq_length, num_layers, num_heads, hidden_dim, mlp_dim)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(hidden_dim, num_classes)))

    def _process_input(self, x):
        n = x.shape[0]
        p = self.patch_size
        x = self.conv_proj(x)  # (n, hidden, h/p, w/p)
        x = x.reshape(n, self.hidden_dim, (self.image_size // p) ** 2)
        return x.permute(0, 2, 1)

    def forward(self, x):
        x = self._process_input(x)
        cls = self.class_token.expand(x.shape[0], -1, -1)
        x = torch.cat([cls, x], dim=1)
        x = self.encoder(x)
        return self.heads(x[:, 0])


def vit_b_16(image_size: int = 224) -> VisionTransformer:
    return VisionTransformer(image_size=image_size)


# ----------------------------------------------------------------------------- GPT-style decoder
class CausalSelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(OrderedDict(fc=nn.Linear(dim, 4 * dim), act=nn.GELU(), proj=nn.Linear(4 * dim, dim)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int = 1024, block: int = 128, layers: int = 6, dim: int = 256, heads: int = 8):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(block, dim)
        self.h = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for blk in self.h:
            x = blk(x)
        return self.lm_head(self.ln_f(x))


def gpt() -> GPT:
    return GPT()


# ----------------------------------------------------------------------------- small models
class LSTMModel(nn.Module):
    def __init__(self, vocab: int = 256, dim: int = 64, hidden: int = 128, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, hidden, num_layers=layers, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, idx):
        y, _ = self.rnn(self.embed(idx))
        return self.head(y)


def lstm() -> LSTMModel:
    return LSTMModel()


class ConvNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, stride=2)
        self.bn2 = nn.BatchNorm2d(64)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(torch.flatten(self.pool(x), 1))


def convnet() -> ConvNet:
    return ConvNet()


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


class LinearFunction(torch.autograd.Function):
    """``x @ w.T`` with a hand-written backward (two GEMMs)."""

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x.matmul(w.t())

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return grad.matmul(w), grad.t().matmul(x)


class CustomLinear(nn.Module):
    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) / n_in**0.5)

    def forward(self, x):
        return LinearFunction.apply(x, self.weight)


def custom_linear() -> nn.Sequential:
    return nn.Sequential(CustomLinear(64, 128), nn.ReLU(), CustomLinear(128, 32))


# ----------------------------------------------------------------------------- the second zoo: model classes
# that broke pyprof's pricing (issue 26): einsum, packed RNNs, checkpointing, transposed, grouped and dilated
# convolutions, broadcasting matmuls with frozen weights, compiled attention, masked attention
class MoE(nn.Module):
    """A top-k mixture of experts: the router is a linear layer, the experts' weights are stacked
    parameters applied with ``einsum`` (up), ``bmm`` (gate) and ``baddbmm`` (down, with a bias)."""

    def __init__(self, dim: int = 64, hidden: int = 128, experts: int = 4, k: int = 2):
        super().__init__()
        self.k = k
        self.router = nn.Linear(dim, experts, bias=False)
        self.w_up = nn.Parameter(torch.randn(experts, dim, hidden) / dim**0.5)
        self.w_gate = nn.Parameter(torch.randn(experts, dim, hidden) / dim**0.5)
        self.w_down = nn.Parameter(torch.randn(experts, hidden, dim) / hidden**0.5)
        self.b_down = nn.Parameter(torch.zeros(experts, 1, dim))
        self.head = nn.Linear(dim, 16)

    def forward(self, x):  # x: [tokens, dim]
        weights, chosen = torch.topk(self.router(x).softmax(-1), self.k, dim=-1)
        e = self.w_up.shape[0]
        dispatch = (F.one_hot(chosen, e).float() * weights.unsqueeze(-1)).sum(1)  # [tokens, experts]
        xe = x.unsqueeze(0).expand(e, -1, -1)  # every expert sees every token; the dispatch weights mask
        up = torch.einsum("etd,edh->eth", xe, self.w_up)
        gate = torch.bmm(xe, self.w_gate)
        y = torch.baddbmm(self.b_down, F.silu(gate) * up, self.w_down)  # [experts, tokens, dim]
        y = (y * dispatch.t().unsqueeze(-1)).sum(0)
        return self.head(y)


class PackedRNN(nn.Module):
    """A bidirectional GRU then a bidirectional LSTM over a PackedSequence of variable lengths."""

    def __init__(self, vocab: int = 128, dim: int = 32, hidden: int = 48):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.gru = nn.GRU(dim, hidden, batch_first=True, bidirectional=True)
        self.lstm = nn.LSTM(2 * hidden, hidden, num_layers=2, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, vocab)

    def forward(self, idx):
        from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

        lengths = torch.arange(idx.shape[1], idx.shape[1] - idx.shape[0], -1)  # distinct, descending
        packed = pack_padded_sequence(self.embed(idx), lengths, batch_first=True)
        y, _ = self.lstm(self.gru(packed)[0])
        y, _ = pad_packed_sequence(y, batch_first=True)
        return self.head(y)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaAttention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)
        self.v_proj, self.o_proj = nn.Linear(dim, dim, bias=False), nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, t, d))


class LlamaMLP(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.input_layernorm, self.post_attention_layernorm = RMSNorm(dim), RMSNorm(dim)
        self.self_attn, self.mlp = LlamaAttention(dim, heads), LlamaMLP(dim, hidden)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class CheckpointedLlama(nn.Module):
    """Llama-style blocks (RMSNorm, causal SDPA, SwiGLU MLP), each run under
    ``torch.utils.checkpoint.checkpoint(use_reentrant=False)``: backward recomputes each block's forward."""

    def __init__(self, vocab: int = 256, dim: int = 64, heads: int = 4, hidden: int = 176, layers: int = 2):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(LlamaBlock(dim, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx):
        from torch.utils.checkpoint import checkpoint

        x = self.embed_tokens(idx)
        for blk in self.layers:
            x = checkpoint(blk, x, use_reentrant=False)
        return self.lm_head(self.norm(x))


class UNet(nn.Module):
    """A two-level UNet: conv blocks, max-pool down, ``ConvTranspose2d`` up, skip concatenation."""

    def __init__(self, c: int = 8):
        super().__init__()

        def block(cin, cout):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.Conv2d(cout, cout, 3, padding=1),
                                 nn.ReLU())

        self.enc1, self.enc2, self.mid = block(3, c), block(c, 2 * c), block(2 * c, 4 * c)
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, 2, stride=2)
        self.dec2 = block(4 * c, 2 * c)
        self.up1 = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.dec1 = block(2 * c, c)
        self.out = nn.Conv2d(c, 2, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
        d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
        return self.out(d1)


class SepConvNet(nn.Module):
    """Grouped and depthwise-separable 2-D convolutions (MobileNet/ResNeXt style)."""

    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Conv2d(3, 32, 3, padding=1)
        self.grouped = nn.Conv2d(32, 64, 3, padding=1, groups=4)
        self.depthwise = nn.Conv2d(64, 64, 3, padding=1, stride=2, groups=64)
        self.pointwise = nn.Conv2d(64, 64, 1)
        self.fc = nn.Linear(64, classes)

    def forward(self, x):
        x = F.relu(self.stem(x))
        x = F.relu(self.grouped(x))
        x = F.relu(self.pointwise(F.relu(self.depthwise(x))))
        return self.fc(x.mean((2, 3)))


class TCN(nn.Module):
    """A temporal conv net: dilated ``Conv1d`` layers (dilation 1, 2, 4) with residuals."""

    def __init__(self, cin: int = 8, c: int = 32, classes: int = 10):
        super().__init__()
        self.inp = nn.Conv1d(cin, c, 1)
        self.convs = nn.ModuleList(nn.Conv1d(c, c, 3, padding=d, dilation=d) for d in (1, 2, 4))
        self.fc = nn.Linear(c, classes)

    def forward(self, x):
        x = self.inp(x)
        for conv in self.convs:
            x = x + F.relu(conv(x))
        return self.fc(x.mean(-1))


class LoRALinear(nn.Module):
    """A frozen weight plus a trainable low-rank update applied with ``einsum``."""

    def __init__(self, n_in: int, n_out: int, rank: int = 4):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) / n_in**0.5, requires_grad=False)
        self.lora_a = nn.Parameter(torch.randn(rank, n_in) / n_in**0.5)
        self.lora_b = nn.Parameter(torch.zeros(n_out, rank) + 0.01)

    def forward(self, x):  # x: [batch, seq, n_in]
        base = torch.matmul(x, self.weight.t())  # broadcasting 3-D @ 2-D
        return base + torch.einsum("bsr,or->bso", torch.einsum("bsi,ri->bsr", x, self.lora_a), self.lora_b)


class FrozenHeads(nn.Module):
    """A frozen per-head projection broadcast over the batch: ``[b, 1, s, d] @ [heads, d, d/heads]``."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.proj = nn.Parameter(torch.randn(heads, dim, dim // heads) / dim**0.5, requires_grad=False)

    def forward(self, x):
        return torch.matmul(x.unsqueeze(1), self.proj)


class ScaledAddmm(nn.Module):
    """``addmm(bias, x, w, beta=0.5, alpha=2.0)``."""

    def __init__(self, n_in: int, n_out: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n_in, n_out) / n_in**0.5)
        self.bias = nn.Parameter(torch.zeros(n_out))

    def forward(self, x):
        return torch.addmm(self.bias, x, self.w, beta=0.5, alpha=2.0)


class Broadcasting(nn.Module):
    """Broadcasting matmuls with frozen weights: a LoRA layer, a frozen 3-D projection broadcast over the
    batch (4-D @ 3-D), and ``addmm`` with ``beta`` and ``alpha``."""

    def __init__(self, dim: int = 48, heads: int = 4):
        super().__init__()
        self.lora = LoRALinear(dim, dim)
        self.heads = FrozenHeads(dim, heads)
        self.out = ScaledAddmm(dim // heads, 32)

    def forward(self, x):  # x: [batch, seq, dim]
        h = self.heads(self.lora(x))  # [b, heads, s, d/heads]
        return self.out(h.reshape(-1, h.shape[-1]))


class AttnBlock(nn.Module):
    """A pre-norm transformer block with ``F.scaled_dot_product_attention`` (the compiled-attention case)."""

    def __init__(self, dim: int = 64, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.ln = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.fc = nn.Linear(dim, 10)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return self.fc(x)


class BertLayer(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.attn_out = nn.Linear(dim, dim)
        self.attn_norm = nn.LayerNorm(dim)
        self.intermediate = nn.Linear(dim, hidden)
        self.output = nn.Linear(hidden, dim)
        self.out_norm = nn.LayerNorm(dim)

    def forward(self, x, mask):
        b, t, d = x.shape
        q, k, v = (p(x).view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for p in (self.query, self.key, self.value))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = self.attn_norm(x + self.attn_out(y.transpose(1, 2).reshape(b, t, d)))
        return self.out_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    """A BERT encoder on a padded batch: token, position and type embeddings, post-norm layers whose
    attention takes the padding mask (a boolean ``attn_mask``), a tanh pooler and a classifier."""

    def __init__(self, vocab: int = 512, dim: int = 64, heads: int = 4, hidden: int = 256, layers: int = 2,
                 max_len: int = 64):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_len, dim)
        self.token_type_embeddings = nn.Embedding(2, dim)
        self.emb_norm = nn.LayerNorm(dim)
        self.layers = nn.ModuleList(BertLayer(dim, heads, hidden) for _ in range(layers))
        self.pooler = nn.Linear(dim, dim)
        self.classifier = nn.Linear(dim, 2)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.word_embeddings(idx) + self.position_embeddings(torch.arange(t, device=idx.device))
        x = self.emb_norm(x + self.token_type_embeddings(torch.zeros_like(idx)))
        mask = (idx != 0)[:, None, None, :]  # padding: keys at token 0 are masked out
        for layer in self.layers:
            x = layer(x, mask)
        return self.classifier(torch.tanh(self.pooler(x[:, 0])))


def padded_tokens(batch: int = 4, t: int = 32, vocab: int = 512) -> torch.Tensor:
    """Token ids with trailing padding (id 0): row ``i`` keeps ``t - 5·i`` tokens."""
    idx = torch.randint(1, vocab, (batch, t))
    for i in range(batch):
        idx[i, t - 5 * i:] = 0
    return idx


# ----------------------------------------------------------------------------- the cases
class Case:
    """One model of the harness: how to build it and its input, the autocast dtype (None: fp32),
    whether it runs under ``torch.compile``, the op families its steps must exercise, and its training
    step where it is not one forward and ``loss.backward()`` (``step(model, x)``: :mod:`.grads`)."""

    def __init__(self, make, make_input, families, autocast=None, compiled=False, wrap=(), step=None):
        self.make, self.make_input, self.families = make, make_input, frozenset(families)
        self.autocast, self.compiled, self.wrap, self.step = autocast, compiled, wrap, step


CASES: dict[str, Case] = {
    "resnet50": Case(resnet50, lambda: torch.randn(2, 3, 64, 64), {"conv", "gemm"}),
    "vit_b_16": Case(lambda: vit_b_16(image_size=64), lambda: torch.randn(2, 3, 64, 64),
                     {"conv", "gemm", "attention"}),
    "gpt": Case(lambda: GPT(vocab=512, block=64, layers=2, dim=128, heads=4),
                lambda: torch.randint(0, 512, (2, 64)), {"gemm", "attention"}),
    "lstm": Case(lstm, lambda: torch.randint(0, 256, (4, 16)), {"gemm"}),
    "convnet_bf16": Case(convnet, lambda: torch.randn(8, 3, 32, 32), {"conv", "gemm"}, autocast=torch.bfloat16),
    "mlp_compiled": Case(mlp, lambda: torch.randn(32, 128), {"gemm"}, compiled=True),
    "custom_function": Case(custom_linear, lambda: torch.randn(16, 64), {"gemm"},
                            wrap=((LinearFunction, "forward"), (LinearFunction, "backward"))),
    "moe_einsum": Case(MoE, lambda: torch.randn(24, 64), {"gemm"}),
    "packed_rnn": Case(PackedRNN, lambda: torch.randint(1, 128, (3, 6)), {"gemm"}),
    "checkpoint_llama": Case(CheckpointedLlama, lambda: torch.randint(0, 256, (2, 32)), {"gemm", "attention"}),
    "ckpt_llama_bf16": Case(CheckpointedLlama, lambda: torch.randint(0, 256, (2, 32)), {"gemm", "attention"},
                            autocast=torch.bfloat16),
    "unet": Case(UNet, lambda: torch.randn(2, 3, 32, 32), {"conv"}),
    "sepconv": Case(SepConvNet, lambda: torch.randn(4, 3, 32, 32), {"conv", "gemm"}),
    "tcn": Case(TCN, lambda: torch.randn(4, 8, 64), {"conv", "gemm"}),
    "broadcast_lora": Case(Broadcasting, lambda: torch.randn(4, 16, 48), {"gemm"}),
    "attn_compiled": Case(AttnBlock, lambda: torch.randn(4, 32, 64), {"gemm", "attention"}, compiled=True),
    "cnn_compiled": Case(convnet, lambda: torch.randn(8, 3, 32, 32), {"conv", "gemm"}, compiled=True),
    "bert": Case(Bert, padded_tokens, {"gemm", "attention"}),
    "bert_bf16": Case(Bert, padded_tokens, {"gemm", "attention"}, autocast=torch.bfloat16),
    **grads.cases(Case),
}


def build(name: str, seed: int = 0, device: str = "cpu"):
    """(model, input) of case ``name`` on ``device``, seeded: the harness and its reference build the same
    ones (made on the CPU, then moved, so every device starts from the same weights)."""
    case = CASES[name]
    torch.manual_seed(seed)
    model, x = case.make(), case.make_input()
    return model.to(device), x.to(device)


def step(case: Case, model, x) -> torch.Tensor:
    """One forward and backward (or the case's own step); returns the loss."""
    if case.step is not None:
        return case.step(model, x)
    if case.autocast is not None:
        with torch.autocast(x.device.type, dtype=case.autocast):
            out = model(x)
    else:
        out = model(x)
    loss = out.float().sum()
    loss.backward()
    return loss


def set_tf32(on: bool) -> None:
    """Let CUDA run float32 GEMMs and convolutions on tensor cores as TF32 (``on``), or keep them IEEE."""
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on


def train(name: str, steps: int, device: str = "cpu", tf32: bool = False) -> None:
    """``steps`` training steps of case ``name`` (SGD) on ``device``, each ended by ``pyprof.step()``:
    the script the harness runs under ``pyprof run``. ``tf32``: float32 GEMMs and convolutions of a CUDA
    device may run as TF32 (else torch's matmul default, IEEE, for both)."""
    import pyprof

    case = CASES[name]
    for obj, attr in case.wrap:
        pyprof.wrap(obj, attr)
    if device.startswith("cuda"):
        set_tf32(tf32)
    model, x = build(name, device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    run = torch.compile(model) if case.compiled else model
    for _ in range(steps):
        opt.zero_grad()
        step(case, run, x)
        opt.step()
        pyprof.step()
