"""MultiHeadAttention: the fused path against the general (hooked) path, gradients, causal
and padding masks, cross-attention, the key/value cache, per-head weight views, hooks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nn
import tensorlab as tl

B, T, D, H = 2, 5, 8, 2


def t64(a, requires_grad=False):
    return tl.tensor(np.asarray(a, dtype=np.float64), dtype=np.float64, requires_grad=requires_grad)


def make(seed=0, **kw):
    tl.manual_seed(seed)
    m = nn.MultiHeadAttention(D, H, dtype=np.float64, **kw)
    rng = np.random.default_rng(seed)
    for p in m.parameters():
        p.data[...] = rng.standard_normal(p.shape) * 0.5
    return m


def x64(seed=1, T=T, requires_grad=False):
    return t64(np.random.default_rng(seed).standard_normal((B, T, D)), requires_grad)


def reference(m, x, keep=None):
    """Attention written out head by head from the per-head views, in NumPy."""
    Wq, Wk, Wv, Wo = (w.data for w in (m.W_Q, m.W_K, m.W_V, m.W_O))
    bq, bk, bv = (b.data for b in (m.b_Q, m.b_K, m.b_V))
    xd = x.data
    Tk = xd.shape[1]
    out = np.zeros_like(xd) + m.b_O.data
    for h in range(m.n_head):
        q, k, v = xd @ Wq[h] + bq[h], xd @ Wk[h] + bk[h], xd @ Wv[h] + bv[h]
        s = q @ k.transpose(0, 2, 1) / np.sqrt(m.d_head)
        allowed = np.ones((xd.shape[0], Tk, Tk), bool)
        if m.causal:
            allowed &= np.tri(Tk, dtype=bool)
        if keep is not None:
            allowed &= keep
        s = np.where(allowed, s, -np.inf)
        a = np.exp(s - s.max(-1, keepdims=True))
        a /= a.sum(-1, keepdims=True)
        out += (a @ v) @ Wo[h]
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_matches_per_head_reference(causal):
    m = make(causal=causal)
    x = x64()
    np.testing.assert_allclose(m(x).data, reference(m, x), atol=1e-12)


@pytest.mark.parametrize("kw", [dict(causal=True), dict(relative_bias=2), dict(rotary=True)])
def test_gradcheck_parameters_and_input(kw):
    m = make(**kw)
    if m.relative_bias is not None:
        m.relative_bias.W.data[...] = np.random.default_rng(3).standard_normal(
            m.relative_bias.W.shape
        )
    x = x64(T=3, requires_grad=True)
    tl.gradcheck(lambda x, *ps: m(x), [x, *m.parameters()])


def test_fused_and_hooked_paths_agree():
    m = make(causal=True, relative_bias=2)
    x = x64(requires_grad=True)
    y1, p1 = m(x, return_pattern=True)
    g = t64(np.random.default_rng(4).standard_normal(y1.shape))
    y1.backward(g)
    grads1 = [p.grad.data.copy() for p in m.parameters()] + [x.grad.data.copy()]
    m.zero_grad()
    x.grad = None
    seen = {}
    handles = [
        getattr(m, name).register_forward_hook(lambda mod, i, o, name=name: seen.update({name: o}))
        for name in ("hook_q", "hook_k", "hook_v", "hook_pattern", "hook_z")
    ]
    y2, p2 = m(x, return_pattern=True)
    y2.backward(g)
    grads2 = [p.grad.data for p in m.parameters()] + [x.grad.data]
    for h in handles:
        h.remove()
    np.testing.assert_allclose(y1.data, y2.data, atol=1e-12)
    np.testing.assert_allclose(p1.data, p2.data, atol=1e-12)
    for a, b in zip(grads1, grads2):
        np.testing.assert_allclose(a, b, atol=1e-10)
    assert seen["hook_q"].shape == (B, T, H, D // H)
    assert seen["hook_pattern"].shape == (B, H, T, T)
    assert seen["hook_z"].shape == (B, T, H, D // H)
    np.testing.assert_allclose(seen["hook_pattern"].data.sum(-1), 1.0)


def test_hook_can_edit_the_pattern():
    m = make(causal=True)
    x = x64()

    def uniform_over_first_key(module, inputs, pattern):
        out = np.zeros(pattern.shape)
        out[..., 0] = 1.0
        return t64(out)

    h = m.hook_pattern.register_forward_hook(uniform_over_first_key)
    y = m(x).data
    h.remove()
    v0 = np.einsum("bd,hde->bhe", x.data[:, 0], m.W_V.data) + m.b_V.data  # first token's values
    expect = np.einsum("bhe,hem->bm", v0, m.W_O.data)[:, None, :] + m.b_O.data
    np.testing.assert_allclose(y, np.broadcast_to(expect, y.shape), atol=1e-12)


def test_causal_future_does_not_leak():
    m = make(causal=True)
    x = x64()
    y = m(x).data
    x2 = x.data.copy()
    x2[:, -1] += 10.0
    y2 = m(t64(x2)).data
    np.testing.assert_allclose(y[:, :-1], y2[:, :-1], atol=1e-12)
    assert not np.allclose(y[:, -1], y2[:, -1])


def test_pattern_rows_sum_to_one_and_are_causal():
    _, pattern = make(causal=True)(x64(), return_pattern=True)
    assert pattern.shape == (B, H, T, T)
    np.testing.assert_allclose(pattern.data.sum(-1), 1.0)
    assert (np.triu(pattern.data, 1) == 0).all()


def test_key_padding_mask():
    m = make()
    x = x64()
    pad = np.zeros((B, T), bool)
    pad[0, 3:] = True  # the first sequence has 3 real tokens
    y, pattern = m(x, key_padding_mask=pad, return_pattern=True)
    assert (pattern.data[0, :, :, 3:] == 0).all()
    np.testing.assert_allclose(y.data, reference(m, x, keep=~pad[:, None, :]), atol=1e-12)
    x2 = x.data.copy()
    x2[0, 3:] = 123.0  # changing padding changes nothing at the real positions
    y2 = m(t64(x2), key_padding_mask=pad).data
    np.testing.assert_allclose(y.data[0, :3], y2[0, :3], atol=1e-12)


def test_cross_attention_shapes_and_views():
    m = nn.MultiHeadAttention(D, H, cross=True, d_source=6, dtype=np.float64)
    x, src = x64(), t64(np.random.default_rng(2).standard_normal((B, 7, 6)))
    y, pattern = m(x, source=src, return_pattern=True)
    assert y.shape == (B, T, D) and pattern.shape == (B, H, T, 7)
    assert m.W_Q.shape == (H, D, D // H) and m.W_K.shape == (H, 6, D // H)
    assert m.W_V.shape == (H, 6, D // H) and m.W_O.shape == (H, D // H, D)
    assert np.shares_memory(m.W_K.data, m.W_kv.data)
    with pytest.raises(ValueError):
        m(x)
    with pytest.raises(ValueError):
        nn.MultiHeadAttention(D, H, cross=True, rotary=True)


def test_per_head_views_share_memory():
    m = make()
    assert m.W_Q.shape == (H, D, D // H) and m.W_O.shape == (H, D // H, D)
    assert m.b_Q.shape == (H, D // H) and m.b_O.shape == (D,)
    for view in (m.W_Q, m.W_K, m.W_V, m.b_Q, m.b_K, m.b_V):
        assert np.shares_memory(view.data, m.W_QKV.data) or np.shares_memory(
            view.data, m.b_QKV.data
        )
    np.testing.assert_array_equal(m.W_Q.data[1], m.W_QKV.data[:, 0, 1, :])
    with tl.no_grad():
        m.W_QKV.data[0, 0, 1, 0] = 42.0
    assert m.W_Q.data[1, 0, 0] == 42.0  # a view: the edit shows through
    (m.W_Q.sum() * 2).backward()  # views are differentiable
    assert (m.W_QKV.grad.data[:, 0] == 2).all() and (m.W_QKV.grad.data[:, 1:] == 0).all()


@pytest.mark.parametrize("kw", [dict(), dict(rotary=True), dict(relative_bias=2)])
def test_kv_cache_equals_full_recompute(kw):
    m = make(causal=True, **kw)
    x = x64(T=7)
    full = m(x).data
    cache = nn.KVCache()
    with tl.no_grad():
        steps = [m(x[:, :3], cache=cache)]
        steps += [m(x[:, t : t + 1], cache=cache) for t in range(3, 7)]
    assert len(cache) == 7 and cache.k.shape == (B, H, 7, D // H)
    np.testing.assert_allclose(np.concatenate([s.data for s in steps], 1), full, atol=1e-12)
    cache.reset()
    assert len(cache) == 0


def test_cross_attention_cache_reuses_source():
    m = nn.MultiHeadAttention(D, H, cross=True, dtype=np.float64)
    x, src = x64(T=4), x64(seed=5, T=6)
    full = m(x, source=src).data
    cache = nn.KVCache()
    first = m(x[:, :2], source=src, cache=cache).data
    rest = m(x[:, 2:], cache=cache).data  # no source needed once cached
    np.testing.assert_allclose(np.concatenate([first, rest], 1), full, atol=1e-12)


@settings(max_examples=10)
@given(st.integers(1, 3), st.integers(1, 4), st.booleans())
def test_shapes(n_head, T_, causal):
    m = nn.MultiHeadAttention(4 * n_head, n_head, causal=causal)
    assert m(tl.randn(2, T_, 4 * n_head)).shape == (2, T_, 4 * n_head)


def test_dropout_train_and_eval():
    m = make(causal=True, dropout=0.5)
    x = x64()
    m.eval()
    np.testing.assert_array_equal(m(x).data, m(x).data)
    m.train()
    tl.manual_seed(0)
    a = m(x).data
    tl.manual_seed(0)
    np.testing.assert_array_equal(a, m(x).data)


def test_bad_sizes():
    with pytest.raises(ValueError):
        nn.MultiHeadAttention(10, 3)


def test_float32_default_and_state_dict_names():
    m = nn.MultiHeadAttention(16, 4, causal=True)
    assert m.W_QKV.dtype == np.float32
    assert list(m.state_dict()) == ["W_QKV", "b_QKV", "W_O", "b_O"]
    assert m(tl.randn(1, 3, 16)).dtype == np.float32


def test_fully_masked_row_has_zero_second_order_gradients():
    """A query row that may attend to no key outputs 0 and gets 0 gradient, also under
    create_graph (the Tensor-op backward recomputes A and must not make NaN)."""
    rng = np.random.default_rng(0)
    q, k, v = (tl.tensor(rng.standard_normal((1, 1, 3, 2)), requires_grad=True) for _ in "qkv")
    mask = np.ones((3, 3), bool)
    mask[1] = False
    sdpa = nn.functional.scaled_dot_product_attention
    (gq,) = tl.grad(sdpa(q, k, v, mask=mask).sum(), [q], create_graph=True)
    assert np.all(gq.numpy()[0, 0, 1] == 0) and np.isfinite(gq.numpy()).all()
    tl.gradgradcheck(lambda q, k, v: sdpa(q, k, v, mask=mask), [q, k, v])
