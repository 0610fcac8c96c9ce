"""nn.functional: every fused op against finite differences (float64 gradcheck), against its
composed form in tensorlab ops, at second order (gradgradcheck), and against PyTorch."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from strategies import away_from, values

import nn.functional as F
import tensorlab as tl
from nn.fused.activation import erf

rows_shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=2, max_side=4)


def t64(a, requires_grad=True):
    return tl.tensor(np.asarray(a, dtype=np.float64), dtype=np.float64, requires_grad=requires_grad)


def rand64(rng, *shape, requires_grad=True):
    return t64(rng.standard_normal(shape), requires_grad)


def grads(fn, inputs, g=None, create_graph=False):
    """Gradients of sum(fn(*inputs) * g) with respect to every input."""
    out = fn(*inputs)
    if g is None:
        g = np.random.default_rng(1).standard_normal(out.shape)
    return tl.grad(out, inputs, grad_outputs=t64(g, False), create_graph=create_graph)


def assert_same(fused, composed, inputs, atol=1e-10):
    """Same values and same gradients (first order, and through the create_graph branch)."""
    np.testing.assert_allclose(fused(*inputs).data, composed(*inputs).data, atol=atol, rtol=0)
    for create_graph in (False, True):
        for a, b in zip(grads(fused, inputs, create_graph=create_graph), grads(composed, inputs)):
            np.testing.assert_allclose(a.data, b.data, atol=atol, rtol=0)


# ---------------------------------------------------------------------- composed references
def layer_norm_ref(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) * (x - mu)).mean(axis=-1, keepdims=True)
    return (x - mu) / (var + eps).sqrt() * w + b


def rms_norm_ref(x, w, eps=1e-6):
    return x / ((x * x).mean(axis=-1, keepdims=True) + eps).sqrt() * w


def cross_entropy_ref(z, t, ignore_index=-100, eps=0.0, reduction="mean"):
    C = z.shape[-1]
    logp = z.reshape(-1, C).log_softmax(axis=-1)
    flat = t.reshape(-1)
    valid = flat != ignore_index
    q = np.zeros(logp.shape)
    q[np.arange(flat.size), np.where(valid, flat, 0)] = 1 - eps
    q += eps / C
    q *= valid[:, None]
    loss = -(logp * t64(q, False)).sum(axis=-1)
    if reduction == "none":
        return loss.reshape(t.shape)
    return loss.sum() / max(int(valid.sum()), 1) if reduction == "mean" else loss.sum()


def attention_ref(q, k, v, mask=None, causal=False, bias=None):
    s = (q @ k.mT) / math.sqrt(q.shape[-1])
    if bias is not None:
        s = s + bias
    Tq, Tk = q.shape[-2], k.shape[-2]
    keep = np.ones((Tq, Tk), bool)
    if causal:
        keep = np.tri(Tq, Tk, Tk - Tq, dtype=bool)
    if mask is not None:
        keep = keep & mask
    s = tl.where(keep, s, -np.inf)
    return s.softmax(axis=-1) @ v


# ---------------------------------------------------------------------- linear, embedding
@given(st.data())
def test_linear_gradcheck(data):
    lead = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    d_in, d_out = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    x = data.draw(values(lead + (d_in,))).astype(np.float64)
    rng = np.random.default_rng(0)
    x, W, b = t64(x), rand64(rng, d_in, d_out), rand64(rng, d_out)
    tl.gradcheck(lambda x, W, b: F.linear(x, W, b), [x, W, b])
    tl.gradcheck(lambda x, W: F.linear(x, W), [x, W])
    assert_same(lambda x, W, b: F.linear(x, W, b), lambda x, W, b: x @ W + b, [x, W, b])


def test_linear_gradgradcheck():
    rng = np.random.default_rng(0)
    x, W, b = rand64(rng, 2, 3, 4), rand64(rng, 4, 2), rand64(rng, 2)
    tl.gradgradcheck(lambda x, W, b: F.linear(x, W, b), [x, W, b])


@given(st.integers(1, 6), hnp.array_shapes(min_dims=1, max_dims=2, max_side=5), st.data())
def test_embedding_gradcheck(V, idx_shape, data):
    idx = data.draw(hnp.arrays(np.int64, idx_shape, elements=st.integers(0, V - 1)))
    W = rand64(np.random.default_rng(0), V, 3)
    tl.gradcheck(lambda W: F.embedding(idx, W), [W])
    tl.gradgradcheck(lambda W: F.embedding(idx, W), [W])
    g = np.random.default_rng(1).standard_normal(idx_shape + (3,))
    (dW,) = grads(lambda W: F.embedding(idx, W), [W], g)
    expect = np.zeros((V, 3))
    np.add.at(expect, idx.reshape(-1), g.reshape(-1, 3))
    np.testing.assert_allclose(dW.data, expect, atol=1e-12)


def test_embedding_rejects_float_indices():
    with pytest.raises(TypeError):
        F.embedding(np.array([0.5]), tl.randn(3, 2))


# ---------------------------------------------------------------------- norms
@given(rows_shapes.flatmap(lambda s: values(s)))
def test_layer_norm_gradcheck_and_composed(x):
    d = x.shape[-1]
    rng = np.random.default_rng(0)
    x, w, b = t64(x), rand64(rng, d), rand64(rng, d)
    tl.gradcheck(lambda x, w, b: F.layer_norm(x, w, b), [x, w, b])
    tl.gradcheck(lambda x: F.layer_norm(x), [x])
    assert_same(lambda x, w, b: F.layer_norm(x, w, b), layer_norm_ref, [x, w, b], atol=1e-8)


@given(rows_shapes.flatmap(lambda s: values(s)))
def test_rms_norm_gradcheck_and_composed(x):
    d = x.shape[-1]
    x, w = t64(x), rand64(np.random.default_rng(0), d)
    tl.gradcheck(lambda x, w: F.rms_norm(x, w), [x, w])
    tl.gradcheck(lambda x: F.rms_norm(x), [x])
    assert_same(lambda x, w: F.rms_norm(x, w), rms_norm_ref, [x, w], atol=1e-8)


def test_norms_gradgradcheck():
    rng = np.random.default_rng(0)
    x, w, b = rand64(rng, 2, 3, 4), rand64(rng, 4), rand64(rng, 4)
    tl.gradgradcheck(lambda x, w, b: F.layer_norm(x, w, b), [x, w, b])
    tl.gradgradcheck(lambda x, w: F.layer_norm(x, w), [x, w])
    tl.gradgradcheck(lambda x, w: F.rms_norm(x, w), [x, w])


def test_rms_norm_definition():
    x = np.array([[3.0, 4.0]])
    y = F.rms_norm(t64(x, False), eps=0.0).data
    np.testing.assert_allclose(y, x / math.sqrt((9 + 16) / 2))


def test_layer_norm_output_statistics():
    x = tl.randn(5, 16) * 3 + 2
    y = F.layer_norm(x).data
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(y.var(-1), 1, atol=1e-3)


# ---------------------------------------------------------------------- activations
ACTS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, "tanh"),
    "silu": F.silu,
    "elu": F.elu,
    "relu": F.relu,
    "sigmoid": F.sigmoid,
    "tanh": F.tanh,
}


@pytest.mark.parametrize("name", sorted(ACTS))
@given(x=hnp.array_shapes(min_dims=1, max_dims=3, max_side=4).flatmap(lambda s: values(s, -4, 4)))
def test_activation_gradcheck(name, x):
    fn = ACTS[name]
    x = t64(away_from(x, [0.0]))
    tl.gradcheck(fn, [x])
    if name in ("gelu", "gelu_tanh", "silu", "elu"):
        tl.gradgradcheck(fn, [x])


def test_activation_values():
    x = np.linspace(-5, 5, 101)
    xt = t64(x, False)
    phi = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    # |erf error| <= 1.5e-7, so |gelu error| <= |x| / 2 * 1.5e-7
    assert (np.abs(F.gelu(xt).data - x * phi) <= 0.75e-7 * np.abs(x) + 1e-15).all()
    c = math.sqrt(2 / math.pi)
    tanh_form = 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(F.gelu(xt, "tanh").data, tanh_form, atol=1e-12)
    np.testing.assert_allclose(F.silu(xt).data, x / (1 + np.exp(-x)), atol=1e-12)
    np.testing.assert_allclose(F.elu(xt, 0.5).data, np.where(x > 0, x, 0.5 * np.expm1(x)))
    with pytest.raises(ValueError):
        F.gelu(xt, "fast")


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (7,)])
def test_gelu_on_scalars_and_empty_arrays(shape):
    x = t64(np.full(shape, 0.5))
    y = F.gelu(x)
    y.sum().backward()
    assert y.shape == x.grad.shape == shape
    phi = 0.5 * (1 + math.erf(0.5 / math.sqrt(2)))
    np.testing.assert_allclose(y.numpy(), np.full(shape, 0.5 * phi), atol=1e-7)


def test_gelu_in_blocks_matches_the_formula():
    """An input bigger than one cache block (nn.fused._util.BLOCK) is done block by block
    (whole rows, a last block shorter); values and gradients must be those of the formula
    everywhere, including across block edges and for a non-contiguous input. Tolerances as in
    test_activation_values: the erf approximation's 1.5e-7, times |x|/2 (|x| ≤ 5 here), and
    for the gradient Φ + xφ with the exact φ."""
    from nn.fused._util import BLOCK

    rng = np.random.default_rng(0)
    xv = rng.uniform(-5, 5, (3, BLOCK // 700 + 5, 700)).transpose(1, 0, 2)  # > 3 blocks
    x = t64(xv)
    y = F.gelu(x)
    y.backward(tl.tensor(np.ones_like(xv)))
    erf_v = np.vectorize(math.erf)(xv / math.sqrt(2))
    phi, pdf = 0.5 * (1 + erf_v), np.exp(-0.5 * xv**2) / math.sqrt(2 * math.pi)
    assert (np.abs(y.numpy() - xv * phi) <= 0.75e-7 * np.abs(xv) + 1e-15).all()
    np.testing.assert_allclose(x.grad.numpy(), phi + xv * pdf, atol=1e-7)


def test_erf_accuracy():
    z = np.linspace(-6, 6, 2001)
    exact = np.array([math.erf(v) for v in z])
    assert np.abs(erf(z) - exact).max() <= 1.5e-7
    z32 = z.astype(np.float32)
    exact32 = np.array([math.erf(float(v)) for v in z32])
    assert np.abs(erf(z32) - exact32).max() <= 4e-7  # plus a few float32 roundings
    assert abs(erf(np.array([0.0]))[0]) < 1e-8


def test_activations_keep_float32():
    x = tl.randn(4, 5)
    for fn in ACTS.values():
        y = fn(x)
        assert y.dtype == np.float32


# ---------------------------------------------------------------------- dropout
def test_dropout_functional():
    x = tl.ones(1000, 100)
    assert F.dropout(x, 0.3, training=False) is x
    assert F.dropout(x, 0.0) is x
    tl.manual_seed(3)
    y = F.dropout(x, 0.3).data
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.7)}
    assert abs(y.mean() - 1.0) < 0.01
    assert abs((y == 0).mean() - 0.3) < 0.01
    with pytest.raises(ValueError):
        F.dropout(x, 1.0)


def test_dropout_gradient_uses_the_same_mask():
    tl.manual_seed(0)
    x = tl.randn(50, 20, dtype=np.float64, requires_grad=True)
    y = F.dropout(x, 0.5)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.data, (y.data != 0) * 2.0)

    def fn(x):
        tl.manual_seed(1)
        return F.dropout(x, 0.4)

    tl.gradcheck(fn, [t64(np.random.default_rng(0).standard_normal((3, 4)))])


# ---------------------------------------------------------------------- losses
@given(
    st.integers(1, 5),
    st.integers(2, 5),
    st.sampled_from([0.0, 0.1]),
    st.sampled_from(["mean", "sum", "none"]),
    st.booleans(),
    st.data(),
)
def test_cross_entropy_gradcheck_and_composed(N, C, eps, reduction, batched, data):
    shape = (N, 2) if batched else (N,)
    t = data.draw(hnp.arrays(np.int64, shape, elements=st.integers(-1, C - 1)))
    t[t == -1] = -100  # some ignored targets
    z = t64(data.draw(values(shape + (C,), -3, 3)))
    fused = lambda z: F.cross_entropy(z, t, label_smoothing=eps, reduction=reduction)
    composed = lambda z: cross_entropy_ref(z, t, eps=eps, reduction=reduction)
    tl.gradcheck(fused, [z])
    assert_same(fused, composed, [z])


def test_cross_entropy_gradgradcheck():
    rng = np.random.default_rng(0)
    z = rand64(rng, 4, 3)
    t = np.array([0, 2, -100, 1])
    for reduction in ("mean", "none"):
        tl.gradgradcheck(
            lambda z, r=reduction: F.cross_entropy(z, t, label_smoothing=0.1, reduction=r), [z]
        )


def test_cross_entropy_by_hand_and_errors():
    z = t64([[0.0, math.log(3.0)]], False)  # p = (1/4, 3/4)
    assert F.cross_entropy(z, np.array([1])).item() == pytest.approx(-math.log(0.75))
    assert F.cross_entropy(z, np.array([-100])).item() == 0.0  # nothing left to average
    with pytest.raises(ValueError):
        F.cross_entropy(z, np.array([1, 0]))
    with pytest.raises(ValueError):
        F.cross_entropy(z, np.array([1]), reduction="avg")


def test_mse_loss():
    rng = np.random.default_rng(0)
    a, b = rand64(rng, 3, 4), rand64(rng, 3, 4)
    np.testing.assert_allclose(F.mse_loss(a, b).item(), ((a.data - b.data) ** 2).mean())
    assert F.mse_loss(a, b, reduction="none").shape == (3, 4)
    tl.gradcheck(lambda a, b: F.mse_loss(a, b, reduction="sum"), [a, b])


def test_softmax_and_log_softmax():
    x = rand64(np.random.default_rng(0), 3, 5)
    np.testing.assert_allclose(F.softmax(x).data.sum(-1), 1.0)
    np.testing.assert_allclose(np.exp(F.log_softmax(x).data), F.softmax(x).data)


# ---------------------------------------------------------------------- attention
@given(
    st.integers(1, 2),
    st.integers(1, 2),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 3),
    st.sampled_from(["none", "causal", "mask", "bias"]),
    st.data(),
)
def test_attention_gradcheck_and_composed(B, H, Tq, Tk, d, kind, data):
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    q, k, v = rand64(rng, B, H, Tq, d), rand64(rng, B, H, Tk, d), rand64(rng, B, H, Tk, d)
    mask = bias = None
    if kind == "mask":
        mask = rng.random((B, 1, Tq, Tk)) > 0.4
        mask[..., 0] = True  # every query sees at least one key
    if kind == "bias":
        bias = rand64(rng, H, Tq, Tk)
    if kind == "causal" and Tk < Tq:
        Tk = Tq
        k, v = rand64(rng, B, H, Tk, d), rand64(rng, B, H, Tk, d)
    causal = kind == "causal"
    inputs = [q, k, v] + ([bias] if bias is not None else [])

    def fused(q, k, v, *b):
        return F.scaled_dot_product_attention(
            q, k, v, mask=mask, causal=causal, bias=b[0] if b else None
        )

    def composed(q, k, v, *b):
        return attention_ref(q, k, v, mask=mask, causal=causal, bias=b[0] if b else None)

    tl.gradcheck(fused, inputs)
    assert_same(fused, composed, inputs)


@pytest.mark.parametrize("kind", ["causal", "mask", "bias"])
def test_attention_gradgradcheck(kind):
    rng = np.random.default_rng(0)
    q, k, v = rand64(rng, 1, 2, 3, 2), rand64(rng, 1, 2, 4, 2), rand64(rng, 1, 2, 4, 2)
    mask = rng.random((1, 1, 3, 4)) > 0.3
    mask[..., 0] = True
    bias = rand64(rng, 2, 3, 4)
    if kind == "causal":
        fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, causal=True)
        tl.gradgradcheck(fn, [q, k, v])
    elif kind == "mask":
        fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, mask=mask)
        tl.gradgradcheck(fn, [q, k, v])
    else:
        fn = lambda q, k, v, b: F.scaled_dot_product_attention(q, k, v, bias=b)
        tl.gradgradcheck(fn, [q, k, v, bias])


def test_attention_pattern_and_fully_masked_rows():
    rng = np.random.default_rng(0)
    q, k, v = rand64(rng, 1, 1, 3, 2), rand64(rng, 1, 1, 3, 2), rand64(rng, 1, 1, 3, 2)
    y, A = F.scaled_dot_product_attention(q, k, v, causal=True, return_pattern=True)
    np.testing.assert_allclose(A.data.sum(-1), 1.0)
    np.testing.assert_array_equal(np.triu(A.data[0, 0], 1), 0)
    mask = np.array([[True, True, False], [False, False, False], [True, True, True]])
    y, A = F.scaled_dot_product_attention(q, k, v, mask=mask, return_pattern=True)
    assert np.isfinite(y.data).all() and (A.data[0, 0, 1] == 0).all()
    with pytest.raises(TypeError):
        F.scaled_dot_product_attention(q, k, v, mask=mask.astype(float))


def test_attention_dropout_is_seeded():
    rng = np.random.default_rng(0)
    q, k, v = rand64(rng, 1, 2, 4, 3), rand64(rng, 1, 2, 4, 3), rand64(rng, 1, 2, 4, 3)

    def fn(q, k, v):
        tl.manual_seed(5)
        return F.scaled_dot_product_attention(q, k, v, causal=True, dropout_p=0.3)

    np.testing.assert_array_equal(fn(q, k, v).data, fn(q, k, v).data)
    tl.gradcheck(fn, [q, k, v])


# ---------------------------------------------------------------------- against PyTorch
def _torch():
    return pytest.importorskip("torch")


def _pair(a):
    torch = _torch()
    return t64(a), torch.tensor(a, dtype=torch.float64, requires_grad=True)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(approximate):
    torch = _torch()
    a = np.linspace(-6, 6, 97).reshape(97)
    x, tx = _pair(a)
    y, ty = F.gelu(x, approximate), torch.nn.functional.gelu(tx, approximate=approximate)
    np.testing.assert_allclose(y.data, ty.detach().numpy(), atol=3e-7)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(x.grad.data, tx.grad.numpy(), atol=1e-6)


def test_layer_norm_matches_torch():
    torch = _torch()
    rng = np.random.default_rng(0)
    x, tx = _pair(rng.standard_normal((3, 5, 8)))
    w, tw = _pair(rng.standard_normal(8))
    b, tb = _pair(rng.standard_normal(8))
    g = rng.standard_normal((3, 5, 8))
    y = F.layer_norm(x, w, b)
    ty = torch.nn.functional.layer_norm(tx, (8,), tw, tb, eps=1e-5)
    np.testing.assert_allclose(y.data, ty.detach().numpy(), atol=1e-12)
    y.backward(t64(g, False))
    ty.backward(torch.tensor(g))
    for ours, theirs in ((x, tx), (w, tw), (b, tb)):
        np.testing.assert_allclose(ours.grad.data, theirs.grad.numpy(), atol=1e-10)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch(reduction):
    torch = _torch()
    rng = np.random.default_rng(0)
    z, tz = _pair(rng.standard_normal((2, 6, 7)))
    t = rng.integers(0, 7, size=(2, 6))
    t[0, :2] = -1
    kw = dict(ignore_index=-1, label_smoothing=0.2, reduction=reduction)
    y = F.cross_entropy(z, t, **kw)
    ty = torch.nn.functional.cross_entropy(tz.permute(0, 2, 1), torch.tensor(t), **kw)
    np.testing.assert_allclose(y.data, ty.detach().numpy(), atol=1e-12)
    g = rng.standard_normal(y.shape)
    y.backward(t64(g, False))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(z.grad.data, tz.grad.numpy(), atol=1e-12)


def test_attention_causal_matches_torch():
    torch = _torch()
    rng = np.random.default_rng(0)
    pairs = [_pair(rng.standard_normal((2, 3, 5, 4))) for _ in range(3)]
    (q, tq), (k, tk), (v, tv) = pairs
    y = F.scaled_dot_product_attention(q, k, v, causal=True)
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    np.testing.assert_allclose(y.data, ty.detach().numpy(), atol=1e-12)
    g = rng.standard_normal(y.shape)
    y.backward(t64(g, False))
    ty.backward(torch.tensor(g))
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.grad.data, theirs.grad.numpy(), atol=1e-12)
