"""Every nn op on edge shapes: an empty batch, no positions (T = 0), one feature. The output
has the right shape, the backward gives each input a gradient of its own shape, and nothing
is NaN; where PyTorch defines the result, it matches (empty batches give empty outputs)."""

import numpy as np
from hypothesis import given

import nn
import nn.functional as F
import tensorlab as tl
from tests.strategies import edge_btd


def leaf(shape, seed=0):
    data = np.random.default_rng(seed).standard_normal(shape)
    return tl.tensor(data, dtype="float64", requires_grad=True)


def backward_ok(y, *inputs):
    y.sum().backward() if y.size else (y * 1.0).sum().backward()
    for x in inputs:
        assert x.grad is not None and x.grad.shape == x.shape
        assert np.isfinite(x.grad.numpy()).all()


@given(edge_btd)
def test_linear_and_norms(btd):
    B, T, d = btd
    x = leaf((B, T, d))
    lin = nn.Linear(d, 3, dtype="float64")
    y = lin(x)
    assert y.shape == (B, T, 3)
    backward_ok(y, x, lin.W)
    for norm in (nn.LayerNorm(d, dtype="float64"), nn.RMSNorm(d, dtype="float64")):
        x = leaf((B, T, d))
        y = norm(x)
        assert y.shape == (B, T, d) and np.isfinite(y.numpy()).all()
        backward_ok(y, x)


@given(edge_btd)
def test_activations_and_dropout(btd):
    for f in (F.gelu, F.silu, F.relu, lambda x: F.gelu(x, "tanh")):
        x = leaf(btd)
        y = f(x)
        assert y.shape == btd
        backward_ok(y, x)
    x = leaf(btd)
    y = F.dropout(x, 0.5, training=True)
    assert y.shape == btd
    backward_ok(y, x)


@given(edge_btd)
def test_causal_attention(btd):
    B, T, d = btd
    q, k, v = (leaf((B, 2, T, d), seed) for seed in range(3))  # PyTorch's (B, H, T, d)
    y = F.scaled_dot_product_attention(q, k, v, causal=True)
    assert y.shape == (B, 2, T, d) and np.isfinite(y.numpy()).all()
    backward_ok(y, q, k, v)


@given(edge_btd)
def test_cross_entropy_and_embedding(btd):
    B, T, C = btd
    logits = leaf((B * T, C + 1))
    targets = np.arange(B * T) % (C + 1)
    loss = F.cross_entropy(logits, targets)
    assert np.isfinite(loss.item())  # an empty batch gives 0 (PyTorch: NaN; docs say why)
    backward_ok(loss, logits)
    W = leaf((5, C))
    y = F.embedding(np.arange(B * T).reshape(B, T) % 5, W)
    assert y.shape == (B, T, C)
    backward_ok(y, W)
