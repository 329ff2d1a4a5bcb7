"""The harness's higher-order-gradient and torch.func cases (issue 42): training steps that are not one
forward and one ``loss.backward()``, each a ``step(model, x)`` the harness runs under ``pyprof run`` and
its reference runs under FlopCounterMode's formulas (:mod:`scripts.validation.reference`).

* :func:`gradient_penalty_step`: a WGAN-GP critic step: the critic on an interpolate,
  ``torch.autograd.grad(create_graph=True)`` of its output with respect to the interpolate, the penalty on
  that gradient's norm, then ``loss.backward()`` through it (the double backward of every layer: its
  backward's backward). The critic also runs on real and fake batches.
* :func:`per_sample_grad_step`: ``vmap(grad(loss))`` of a model through ``functional_call``: every op
  runs batched over the samples while it sees one sample (the batched physical shapes are the work).
* :func:`jacrev_step`: ``torch.func.jacrev`` of the model's output with respect to its input (a vmap over
  the backward: the backward ops run batched over the output's elements); :func:`jacfwd_step` its
  forward-mode twin (``vmap`` over ``jvp``); :func:`hvp_step`: a Hessian-vector product, ``jvp`` of
  ``grad`` (forward-over-reverse); each on an MLP, and on the conv net (and LayerNorm block) held out.
* :func:`ensemble_step`: ``vmap(functional_call)`` over stacked parameters of several copies of a model
  (the weights are batched too).

The models: :class:`Critic` (conv, LeakyReLU, linear: the WGAN-GP critic), :class:`MLPCritic`,
:class:`SmallConvNet`, :class:`LNBlock` (LayerNorm + linear + GELU: a norm's double backward) and
:class:`CheckpointedEncoder` (``nn.TransformerEncoderLayer`` blocks under reentrant checkpoint).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F


class Critic(nn.Module):
    """A DCGAN-style critic: two strided convolutions with LeakyReLU, then a linear score."""

    def __init__(self, c: int = 3, w: int = 16):
        super().__init__()
        self.conv1 = nn.Conv2d(c, w, 3, padding=1)
        self.conv2 = nn.Conv2d(w, 2 * w, 3, stride=2, padding=1)
        self.act = nn.LeakyReLU(0.2)
        self.fc = nn.Linear(2 * w * 8 * 8, 1)

    def forward(self, x):
        x = self.act(self.conv2(self.act(self.conv1(x))))
        return self.fc(x.flatten(1))


class MLPCritic(nn.Sequential):
    def __init__(self, n: int = 64, h: int = 128):
        super().__init__(nn.Linear(n, h), nn.Tanh(), nn.Linear(h, h), nn.Softplus(), nn.Linear(h, 1))


class LNBlock(nn.Module):
    """LayerNorm, linear, GELU, linear, residual: the double backward of a norm and of GELU."""

    def __init__(self, d: int = 32):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.up = nn.Linear(d, 2 * d)
        self.down = nn.Linear(2 * d, d)
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        x = x + self.down(F.gelu(self.up(self.norm(x))))
        return self.head(x).sum(1)


class SmallConvNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, groups=2)
        self.fc = nn.Linear(8 * 8 * 8, classes)

    def forward(self, x):
        x = F.relu(self.conv2(F.relu(self.conv(x))))
        return self.fc(x.flatten(1))


class CheckpointedEncoder(nn.Module):
    """An input projection, then two ``nn.TransformerEncoderLayer`` blocks (batch first), each under
    reentrant checkpoint (whose input must need a gradient: the projection's output does)."""

    def __init__(self, d: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.proj = nn.Linear(d, d)
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True)
                                    for _ in range(layers))
        self.head = nn.Linear(d, 1)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        x = self.proj(x)
        for blk in self.layers:
            x = checkpoint(blk, x, use_reentrant=True)
        return self.head(x)


def gradient_penalty_step(model, x, weight: float = 10.0):
    """One critic step of WGAN-GP on ``x`` (real) and a fixed "fake" batch; returns the loss."""
    g = torch.Generator(device="cpu").manual_seed(1)
    fake = torch.randn(x.shape, generator=g).to(x.device)
    eps = torch.rand((x.shape[0],) + (1,) * (x.dim() - 1), generator=g).to(x.device)
    mix = (eps * x + (1 - eps) * fake).requires_grad_(True)
    score = model(mix)
    grad, = torch.autograd.grad(score.sum(), mix, create_graph=True)
    penalty = ((grad.flatten(1).norm(2, dim=1) - 1) ** 2).mean()
    loss = model(fake).mean() - model(x).mean() + weight * penalty
    loss.backward()
    return loss


def _params(model):
    return {k: v.detach() for k, v in model.named_parameters()}


def per_sample_grad_step(model, x):
    """Per-sample gradients of a classifier's loss (``vmap(grad(...))``), summed into ``.grad`` (so the
    optimizer has something to step on); returns the summed gradient norm."""
    from torch.func import functional_call, grad, vmap

    y = torch.arange(x.shape[0], device=x.device) % 10

    def loss(p, xb, yb):
        return F.cross_entropy(functional_call(model, p, (xb.unsqueeze(0),)), yb.unsqueeze(0))

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(_params(model), x, y)
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.grad = grads[k].sum(0)
    return sum(g.norm() for g in grads.values())


def jacrev_step(model, x):
    """``jacrev`` of the model's output with respect to its input, per sample (``vmap(jacrev)``)."""
    from torch.func import functional_call, jacrev, vmap

    p = _params(model)
    jac = vmap(jacrev(lambda xb: functional_call(model, p, (xb.unsqueeze(0),)).squeeze(0)))(x)
    return jac.norm()


def jacfwd_step(model, x):
    """``jacfwd`` of the model's output with respect to its input (forward mode: ``vmap`` over ``jvp``)."""
    from torch.func import functional_call, jacfwd

    p = _params(model)
    return jacfwd(lambda xb: functional_call(model, p, (xb,)))(x).norm()


def hvp_step(model, x):
    """A Hessian-vector product of the loss with respect to the parameters (``jvp`` of ``grad``)."""
    from torch.func import functional_call, grad, jvp

    p = _params(model)
    v = {k: torch.ones_like(t) for k, t in p.items()}

    def loss(q):
        return functional_call(model, q, (x,)).square().mean()

    _, hv = jvp(grad(loss), (p,), (v,))
    return sum(t.norm() for t in hv.values())


def ensemble_step(model, x, copies: int = 3):
    """The forward of ``copies`` models at once: ``vmap`` over their stacked parameters (weights batched)."""
    import copy

    from torch.func import functional_call, stack_module_state, vmap

    models = [copy.deepcopy(model) for _ in range(copies)]
    params, buffers = stack_module_state(models)
    out = vmap(lambda p, b: functional_call(model, (p, b), (x,)), in_dims=(0, 0))(params, buffers)
    return out.sum()


def cases(Case) -> dict:
    """The cases (``zoo.Case`` passed in: this module does not import the zoo)."""
    return {
        "wgan_gp": Case(Critic, lambda: torch.randn(8, 3, 16, 16), {"conv", "gemm"}, step=gradient_penalty_step),
        "mlp_gp": Case(MLPCritic, lambda: torch.randn(16, 64), {"gemm"}, step=gradient_penalty_step),
        "ln_gp": Case(LNBlock, lambda: torch.randn(4, 8, 32), {"gemm"}, step=gradient_penalty_step),
        "per_sample_grad": Case(SmallConvNet, lambda: torch.randn(16, 1, 10, 10), {"conv", "gemm"},
                                step=per_sample_grad_step),
        "jacrev_conv": Case(SmallConvNet, lambda: torch.randn(4, 1, 10, 10), {"conv", "gemm"}, step=jacrev_step),
        "jacfwd_mlp": Case(lambda: MLPCritic(16, 32), lambda: torch.randn(4, 16), {"gemm"}, step=jacfwd_step),
        "hvp_mlp": Case(lambda: MLPCritic(16, 32), lambda: torch.randn(8, 16), {"gemm"}, step=hvp_step),
        "ensemble_mlp": Case(lambda: MLPCritic(16, 32), lambda: torch.randn(8, 16), {"gemm"}, step=ensemble_step),
        "jacfwd_conv": Case(SmallConvNet, lambda: torch.randn(2, 1, 10, 10), {"conv", "gemm"}, step=jacfwd_step),
        "hvp_conv": Case(SmallConvNet, lambda: torch.randn(4, 1, 10, 10), {"conv", "gemm"}, step=hvp_step),
        "hvp_ln": Case(LNBlock, lambda: torch.randn(4, 8, 32), {"gemm"}, step=hvp_step),
        "ckpt_encoder": Case(CheckpointedEncoder, lambda: torch.randn(2, 16, 32), {"gemm", "attention"}),
    }
