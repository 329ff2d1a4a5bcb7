"""The models of the validation harness (:mod:`pyprof.validate.harness`), and one training loop.

* :func:`resnet50`: torchvision's ResNet-50 (Bottleneck blocks [3, 4, 6, 3], stride on the 3x3 conv,
  1x1 downsample + BatchNorm, 1000 classes), same module names (``layer1.0.conv1``, ``fc``).
* :func:`vit_b_16`: torchvision's ViT-B/16 (patch 16, hidden 768, 12 layers, 12 heads, MLP 3072, class
  token, learned position embedding, ``nn.MultiheadAttention(batch_first=True)`` called with
  ``need_weights=False``), same module names (``conv_proj``, ``encoder.layers.encoder_layer_0.self_attention``,
  ``heads.head``).
* :func:`gpt`: a GPT-style decoder (pre-LayerNorm blocks, fused QKV linear, causal
  ``F.scaled_dot_product_attention``, GELU MLP, untied LM head).
* :func:`lstm`: a two-layer ``nn.LSTM`` with a linear head.
* :func:`convnet`: a small conv net (conv, BatchNorm, ReLU, pooling, linear), trained under bf16 autocast.
* :func:`mlp`: a three-layer MLP (the ``torch.compile`` case).
* :func:`custom_linear`: a linear layer written as a custom ``torch.autograd.Function`` whose forward and
  backward are instrumented with :func:`pyprof.wrap`.

torchvision is not needed: the two torchvision models are written out here with its module names.
:data:`CASES` names each model with its input, precision and the op families it must exercise;
:func:`train` runs a few training steps of a case (what ``pyprof run`` profiles).
"""

from __future__ import annotations

from collections import OrderedDict

import torch
import torch.nn as nn
import torch.nn.functional as F


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


# ----------------------------------------------------------------------------- the cases
class Case:
    """One model of the harness: how to build it and its input, the autocast dtype (None: fp32),
    whether it runs under ``torch.compile``, and the op families its steps must exercise."""

    def __init__(self, make, make_input, families, autocast=None, compiled=False, wrap=()):
        self.make, self.make_input, self.families = make, make_input, frozenset(families)
        self.autocast, self.compiled, self.wrap = autocast, compiled, wrap


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
}


def build(name: str, seed: int = 0):
    """(model, input) of case ``name``, seeded: the harness and its reference build the same ones."""
    case = CASES[name]
    torch.manual_seed(seed)
    return case.make(), case.make_input()


def step(case: Case, model, x) -> torch.Tensor:
    """One forward and backward; returns the loss."""
    if case.autocast is not None:
        with torch.autocast("cpu", dtype=case.autocast):
            out = model(x)
    else:
        out = model(x)
    loss = out.float().sum()
    loss.backward()
    return loss


def train(name: str, steps: int) -> None:
    """``steps`` training steps of case ``name`` (SGD), each ended by ``pyprof.step()``: the script
    the harness runs under ``pyprof run``."""
    import pyprof

    case = CASES[name]
    for obj, attr in case.wrap:
        pyprof.wrap(obj, attr)
    model, x = build(name)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    run = torch.compile(model) if case.compiled else model
    for _ in range(steps):
        opt.zero_grad()
        step(case, run, x)
        opt.step()
        pyprof.step()
