"""Linear, Embedding, Dropout, LayerNorm, RMSNorm and the activation modules: shapes,
parameters, gradients of inputs and parameters (float64 gradcheck), modes, seeding."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from strategies import away_from, values

import nn
import tensorlab as tl

lead_shapes = hnp.array_shapes(min_dims=1, max_dims=2, max_side=3)


def t64(a):
    return tl.tensor(np.asarray(a, dtype=np.float64), dtype=np.float64, requires_grad=True)


def randomize(module, seed=0):
    """Give every parameter random values (gains and biases start at 1 and 0)."""
    rng = np.random.default_rng(seed)
    for p in module.parameters():
        p.data[...] = rng.standard_normal(p.shape)
    return module


def check_module(module, x):
    """gradcheck with respect to the input and every parameter."""
    params = list(module.parameters())
    tl.gradcheck(lambda x, *ps: module(x), [x, *params])


@given(lead_shapes, st.integers(1, 4), st.integers(1, 4), st.booleans(), st.data())
def test_linear(lead, d_in, d_out, bias, data):
    layer = randomize(nn.Linear(d_in, d_out, bias=bias, dtype=np.float64))
    assert layer.W.shape == (d_in, d_out)
    assert (layer.b is None) == (not bias)
    x = t64(data.draw(values(lead + (d_in,))))
    y = layer(x)
    expect = x.data @ layer.W.data + (layer.b.data if bias else 0)
    np.testing.assert_allclose(y.data, expect, atol=1e-12)
    check_module(layer, x)


def test_linear_defaults():
    tl.manual_seed(0)
    layer = nn.Linear(64, 8)
    assert layer.W.dtype == np.float32 and np.abs(layer.W.data).max() <= 1 / 8
    assert (layer.b.data == 0).all()
    assert [n for n, _ in layer.named_parameters()] == ["W", "b"]
    tl.manual_seed(0)
    np.testing.assert_array_equal(nn.Linear(64, 8).W.data, layer.W.data)


def test_embedding():
    emb = nn.Embedding(10, 4, dtype=np.float64)
    idx = np.array([[1, 2, 1], [9, 0, 1]])
    y = emb(idx)
    assert y.shape == (2, 3, 4)
    np.testing.assert_array_equal(y.data, emb.W.data[idx])
    y.backward(tl.ones(2, 3, 4, dtype=np.float64))
    counts = np.bincount(idx.ravel(), minlength=10)
    np.testing.assert_array_equal(emb.W.grad.data, np.repeat(counts[:, None], 4, axis=1))
    tl.gradcheck(lambda W: emb(tl.tensor(idx)), [emb.W])


def test_embedding_scatter_matches_add_at_for_large_tables():
    from nn.fused.embedding import scatter_add_rows

    rng = np.random.default_rng(0)
    for V in (5, 65, 5000):
        idx = rng.integers(0, V, size=(12, 64))
        g = rng.standard_normal((12, 64, 8)).astype(np.float32)
        expect = np.zeros((V, 8), np.float32)
        np.add.at(expect, idx.ravel(), g.reshape(-1, 8))
        np.testing.assert_allclose(scatter_add_rows(idx, g, V), expect, atol=1e-5)


def test_dropout_module():
    drop = nn.Dropout(0.25)
    x = tl.ones(200, 500)
    tl.manual_seed(7)
    y1 = drop(x).data
    tl.manual_seed(7)
    y2 = drop(x).data
    np.testing.assert_array_equal(y1, y2)  # reproducible with manual_seed
    assert abs(y1.mean() - 1.0) < 0.01  # inverted scaling keeps the mean
    assert abs((y1 == 0).mean() - 0.25) < 0.01
    drop.eval()
    assert drop(x) is x
    with pytest.raises(ValueError):
        nn.Dropout(1.0)


@given(lead_shapes, st.integers(2, 5), st.booleans(), st.data())
def test_layer_norm_module(lead, d, bias, data):
    ln = randomize(nn.LayerNorm(d, bias=bias, dtype=np.float64))
    assert ln.w.shape == (d,) and (ln.b is None) == (not bias)
    x = t64(data.draw(values(lead + (d,))))
    check_module(ln, x)


@given(lead_shapes, st.integers(1, 5), st.data())
def test_rms_norm_module(lead, d, data):
    rms = randomize(nn.RMSNorm(d, dtype=np.float64))
    x = t64(data.draw(values(lead + (d,))))
    check_module(rms, x)
    xd = x.data
    expect = xd / np.sqrt((xd**2).mean(-1, keepdims=True) + 1e-6) * rms.w.data
    np.testing.assert_allclose(rms(x).data, expect, atol=1e-12)


def test_norm_defaults_start_as_identity_affine():
    ln, rms = nn.LayerNorm(8), nn.RMSNorm(8)
    assert (ln.w.data == 1).all() and (ln.b.data == 0).all() and (rms.w.data == 1).all()
    assert [n for n, _ in ln.named_parameters()] == ["w", "b"]


MODULES = {
    "ReLU": nn.ReLU(),
    "GELU": nn.GELU(),
    "GELU_tanh": nn.GELU("tanh"),
    "SiLU": nn.SiLU(),
    "ELU": nn.ELU(0.7),
    "Sigmoid": nn.Sigmoid(),
    "Tanh": nn.Tanh(),
}


@pytest.mark.parametrize("name", sorted(MODULES))
@given(x=hnp.array_shapes(min_dims=1, max_dims=3, max_side=4).flatmap(lambda s: values(s, -3, 3)))
def test_activation_modules(name, x):
    module = MODULES[name]
    x = t64(away_from(x, [0.0]))
    tl.gradcheck(module, [x])
    assert module(x).shape == x.shape


def test_activation_fn_names():
    assert nn.Swish is nn.SiLU
    with pytest.raises(ValueError):
        nn.activation_fn("softplus")
    with pytest.raises(ValueError):
        nn.GELU("erf")
