"""FeedForward: plain and gated (GLU, ReGLU, GeGLU, SwiGLU) variants, sizes and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import nn
import nn.functional as F
import tensorlab as tl


def randomize(module, seed=0):
    rng = np.random.default_rng(seed)
    for p in module.parameters():
        p.data[...] = rng.standard_normal(p.shape) * 0.5
    return module


def test_default_widths_and_parameter_names():
    plain = nn.FeedForward(48)
    assert plain.d_ff == 192 and not plain.gated
    assert [n for n, _ in plain.named_parameters()] == ["W_in", "b_in", "W_out", "b_out"]
    gated = nn.FeedForward(48, activation="swiglu")
    assert gated.gated and gated.activation == "silu"
    assert gated.d_ff == 128 and gated.d_ff % 8 == 0  # 8/3 * 48 = 128
    names = [n for n, _ in gated.named_parameters()]
    assert names == ["W_in", "b_in", "W_gate", "b_gate", "W_out", "b_out"]
    assert nn.FeedForward(128, gated=True).d_ff == 344  # 341.3 rounded up to a multiple of 8
    no_bias = nn.FeedForward(8, activation="geglu", bias=False)
    assert [n for n, _ in no_bias.named_parameters()] == ["W_in", "W_gate", "W_out"]


@pytest.mark.parametrize(
    "activation,gated",
    [("relu", False), ("gelu", False), ("gelu_tanh", False), ("silu", False)]
    + [("glu", True), ("reglu", True), ("geglu", True), ("swiglu", True)],
)
def test_forward_formula_and_gradcheck(activation, gated):
    ffn = randomize(nn.FeedForward(4, d_ff=5, activation=activation, dtype=np.float64))
    assert ffn.gated == gated
    rng = np.random.default_rng(1)
    x = tl.tensor(rng.standard_normal((2, 3, 4)), dtype=np.float64, requires_grad=True)
    f = nn.activation_fn(ffn.activation)
    h = F.linear(x, ffn.W_in, ffn.b_in)
    if gated:
        h = f(F.linear(x, ffn.W_gate, ffn.b_gate)) * h
    else:
        h = f(h)
    expect = F.linear(h, ffn.W_out, ffn.b_out)
    np.testing.assert_allclose(ffn(x).data, expect.data, atol=1e-12)
    tl.gradcheck(lambda x, *ps: ffn(x), [x, *ffn.parameters()])


def test_dropout_only_in_training():
    ffn = nn.FeedForward(8, dropout=0.5)
    x = tl.randn(4, 8)
    ffn.eval()
    np.testing.assert_array_equal(ffn(x).data, ffn(x).data)
    ffn.train()
    tl.manual_seed(0)
    a = ffn(x).data
    tl.manual_seed(0)
    np.testing.assert_array_equal(a, ffn(x).data)
    assert (a == 0).mean() > 0.3
