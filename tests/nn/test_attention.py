"""nn/attention.py: the op AttentionFn against its composed form (values, first and second
order, finite differences; with and without a score bias, causal, masks with fully masked
rows, a dropout mask), F.scaled_dot_product_attention against a reference written here and
against PyTorch, and MultiHeadAttention: a per-head reference, the fused and the composed
path against each other (self, causal, cross, padding, cache), fully masked rows, identity
hooks on every hook point, the hook points a fused layer closes, composed_attention, per-head
results (hook_result, attention_results), dropout
on the pattern, d_head apart from d_model / n_head, per-head views of the stored matrices."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nn
import nn.attention
import nn.functional as F
import tensorlab as tl
from nn.attention import AttentionFn, attention_composed, attention_results, causal_keep
from tests.strategies import assert_same, check_fused_op, rand64

B, T, D, H = 2, 5, 8, 2
HOOK_POINTS = (
    "hook_q",
    "hook_k",
    "hook_v",
    "hook_attn_scores",
    "hook_pattern",
    "hook_z",
    "hook_result",
)
OPEN_WHEN_FUSED = ("hook_q", "hook_k", "hook_v", "hook_z")


def t64(a, requires_grad=False):
    return tl.tensor(np.asarray(a, dtype=np.float64), dtype=np.float64, requires_grad=requires_grad)


def layer(d_model, n_head, cross=False, rotary=None, relative_bias=None, window=None, **kw):
    """A SelfAttention, or with ``cross`` a CrossAttention. Shorthands the tests use: rotary=True
    for positions=RotaryEmbedding(d_head), relative_bias=n for positions=RelativePositionBias(H,
    n), window=W for causal=W."""
    if cross:
        assert not kw.pop("causal", False), "cross-attention is never causal"
        return nn.CrossAttention(d_model, n_head, **kw)
    assert kw.pop("d_source", None) is None, "self-attention has no source"
    d_head = kw.get("d_head") or d_model // n_head
    if rotary:
        kw["positions"] = nn.RotaryEmbedding(d_head)
    if relative_bias is not None:
        kw["positions"] = nn.RelativePositionBias(n_head, relative_bias, kw.get("dtype"))
    if window is not None:
        kw["causal"] = window
    return nn.SelfAttention(d_model, n_head, **kw)


def make(seed=0, d_model=D, n_head=H, fused=True, **kw):
    """A float64 layer with every parameter (biases and a relative bias too) drawn N(0, ¼)."""
    tl.manual_seed(seed)
    m = layer(d_model, n_head, dtype=np.float64, **kw)
    m.fused = fused
    rng = np.random.default_rng(seed)
    with tl.no_grad():
        for p in m.parameters():
            p.copy_(rng.standard_normal(p.shape) * 0.5)
    return m


def apply(m, x, src, **kw):
    """m on x, with the source for a cross-attention layer."""
    return m(x, src, **kw) if m.cross else m(x, **kw)


def x64(seed=1, T=T, requires_grad=False, d=D):
    return t64(np.random.default_rng(seed).standard_normal((B, T, d)), requires_grad)


def capture(m, names):
    """Forward hooks that record what the hook points ``names`` of ``m`` see."""
    seen = {}
    handles = [
        getattr(m, n).register_forward_hook(lambda mod, i, o, n=n: seen.update({n: o}))
        for n in names
    ]
    return seen, handles


def assert_bitwise_equal(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


def softmax_rows(s):
    """Softmax over the last axis, with rows of -∞ only (no key allowed) giving zeros."""
    m = s.max(-1, keepdims=True)
    m = np.where(np.isneginf(m), 0.0, m)
    e = np.exp(s - m)
    total = e.sum(-1, keepdims=True)
    return e / np.where(total == 0, 1.0, total)


def reference(m, x, keep=None):
    """Attention written out head by head from the per-head views, in NumPy."""
    Wq, Wk, Wv, Wo = (w.numpy() for w in (m.W_Q, m.W_K, m.W_V, m.W_O))
    bq, bk, bv = (b.numpy() for b in (m.b_Q, m.b_K, m.b_V))
    xd = x.numpy()
    Tk = xd.shape[1]
    out = np.zeros_like(xd) + m.b_O.numpy()
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


def pattern_of(q, k, v, mask=None, causal=False):
    """(output, pattern) of attention_composed, the pattern read through its hook; q, k, v
    and the output (B, H, T, d) as in F.scaled_dot_product_attention (attention_composed
    itself holds them (B, T, H, d))."""
    seen = []
    q, k, v = (t.transpose(-3, -2) for t in (q, k, v))
    y = attention_composed(
        q,
        k,
        v,
        scale=1.0 / math.sqrt(q.shape[-1]),
        causal=causal,
        mask=mask,
        dropout_mask=None,
        hook_pattern=lambda A: seen.append(A) or A,
    )
    return y.transpose(-3, -2), seen[0]


# ---------------------------------------------------------------------- the op
@contextlib.contextmanager
def query_block_rows(rows):
    """AttentionFn's causal query blocks of ``rows`` queries (None: as the library has them),
    so that inputs of a few positions go through several blocks."""
    kept = nn.attention.BLOCK_ROWS
    nn.attention.BLOCK_ROWS = kept if rows is None else rows
    try:
        yield
    finally:
        nn.attention.BLOCK_ROWS = kept


@st.composite
def attention_cases(draw):
    """Inputs and parameters of one AttentionFn call: batch and head axes, T_q and T_k apart
    (causal with T_q > T_k leaves the first rows with no key), a score bias per head or shared
    or none, a random mask (maybe with a fully masked row), a dropout keep-mask or none."""
    Bc, Hc = draw(st.integers(1, 2)), draw(st.integers(1, 2))
    Tq, Tk, d, dv = (draw(st.integers(1, n)) for n in (3, 4, 2, 2))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    # q, k, v (batch, time, heads, d), as AttentionFn takes them; scores (batch, heads, T_q, T_k)
    q, k, v = rand64(rng, Bc, Tq, Hc, d), rand64(rng, Bc, Tk, Hc, d), rand64(rng, Bc, Tk, Hc, dv)
    bias_shape = draw(st.sampled_from([None, (Hc, Tq, Tk), (Tq, Tk)]))
    inputs = [q, k, v] + ([rand64(rng, *bias_shape)] if bias_shape else [])
    mask = None
    mask_kind = draw(st.sampled_from(["none", "random", "dead row"]))
    if mask_kind != "none":
        mask = rng.random((Bc, 1, Tq, Tk)) > 0.4
        if mask_kind == "dead row":
            mask[0, 0, draw(st.integers(0, Tq - 1))] = False
    drop = None
    if draw(st.booleans()):
        drop = (rng.random((Bc, Hc, Tq, Tk)) >= 0.5) * 2.0
    on_device = lambda a: None if a is None else tl.tensor(a).data  # noqa: E731 (op arrays)
    params = dict(
        scale=1.0 / math.sqrt(d),
        causal=draw(st.booleans()),
        mask=on_device(mask),
        dropout_mask=on_device(drop),
        window=draw(st.sampled_from([None, 1, 2])),
    )
    return inputs, params


@given(attention_cases(), st.sampled_from([None, 1, 2]))
def test_attention_fn_matches_composed(case, rows):
    """AttentionFn (the closed-form backward on arrays) against AttentionFn.composed (engine
    ops, the path whose scores and pattern can be hooked). Tolerance 1e-10 absolute: entries
    are N(0, 1), T_k ≤ 4 and d ≤ 2, so scores, outputs and derivatives up to the second are
    O(10) at most, and the two forms (one exp-normalise in place against softmax on Tensors;
    -∞ added against masked_fill) differ by rounding, ≲ 1e-14. Rows with no key allowed give
    0 and zero derivatives on both. Causal inputs go through query blocks of 1 or 2 rows too
    (``rows``), with and without a sliding window."""
    inputs, params = case
    with query_block_rows(rows):
        check_fused_op(
            lambda *a: AttentionFn.apply(*a, **params),
            lambda *a: AttentionFn.composed(*a, **params),
            inputs,
        )


@given(
    st.integers(1, 9),
    st.integers(0, 3),
    st.sampled_from([None, 1, 2, 4]),
    st.integers(1, 4),
)
def test_query_blocks_cover_every_query_once_and_every_key_it_may_see(T_q, offset, window, rows):
    """query_blocks: the blocks' rows partition the queries; each query's block holds every
    key the causal mask (and window) lets it see; there are min(MAX_BLOCKS, T_q // rows)
    blocks of consecutive rows when that is 2 or more, else one block of everything."""
    T_k = T_q + offset
    blocks = nn.attention.query_blocks(T_q, T_k, True, window, rows)
    keep = causal_keep(np, T_q, T_k, window)
    seen = np.zeros(T_q, int)
    for r, k in blocks:
        seen[r] += 1
        outside = np.ones(T_k, bool)
        outside[k] = False
        assert not keep[r][:, outside].any(), (r, k)
    assert (seen == 1).all()
    expected = min(nn.attention.MAX_BLOCKS, T_q // rows)
    assert len(blocks) == (expected if expected >= 2 else 1)
    assert nn.attention.query_blocks(T_q, T_k, False, None, rows) == [(slice(None), slice(None))]


@settings(max_examples=25)
@given(
    st.integers(2, 9),
    st.integers(0, 3),
    st.sampled_from([None, 1, 3]),
    st.sampled_from(["none", "per head", "shared", "per key"]),
    st.sampled_from(["none", "random", "padding", "keys"]),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_blocked_attention_equals_one_block(T_q, offset, window, bias_kind, mask_kind, drop, seed):
    """Causal attention in query blocks of one row (as many blocks as MAX_BLOCKS allows)
    against one block of everything: the same output and the same gradients of q, k, v and
    the bias, in float64, within 1e-12 (the two sum the same products in other groupings:
    the masked keys a block leaves out add exact zeros to the other). Biases and masks
    broadcast along the query axis (a key-padding mask (B, 1, 1, T_k), a mask of the keys alone
    (T_k,)) keep that axis whole."""
    rng = np.random.default_rng(seed)
    Bc, Hc, d, T_k = 2, 2, 3, T_q + offset
    q, k, v = rand64(rng, Bc, T_q, Hc, d), rand64(rng, Bc, T_k, Hc, d), rand64(rng, Bc, T_k, Hc, d)
    bias_shape = {"per head": (Hc, T_q, T_k), "shared": (T_q, T_k), "per key": (1, T_k)}
    inputs = [q, k, v] + ([rand64(rng, *bias_shape[bias_kind])] if bias_kind != "none" else [])
    mask = {
        "none": None,
        "random": rng.random((Bc, 1, T_q, T_k)) > 0.3,
        "padding": rng.random((Bc, 1, 1, T_k)) > 0.3,
        "keys": rng.random(T_k) > 0.3,  # one axis: the keys only
    }[mask_kind]
    params = dict(
        scale=0.5,
        causal=True,
        mask=None if mask is None else tl.tensor(mask).data,
        dropout_mask=tl.tensor((rng.random((Bc, Hc, T_q, T_k)) >= 0.5) * 2.0).data
        if drop
        else None,
        window=window,
    )
    g = rng.standard_normal((Bc, T_q, Hc, d))
    results = []
    for rows in (1, 10**9):
        with query_block_rows(rows):
            for x in inputs:
                x.grad = None
            y = AttentionFn.apply(*inputs, **params)
            (y * tl.tensor(g)).sum().backward()
        results.append([y.data] + [x.grad.data for x in inputs])
    rows = nn.attention.BLOCK_ROWS  # the library's rows: one block here
    assert len(nn.attention.query_blocks(T_q, T_k, True, window, rows)) == 1
    for blocked, whole in zip(*results):
        np.testing.assert_allclose(
            tl.tensor(blocked).numpy(), tl.tensor(whole).numpy(), atol=1e-12, rtol=0
        )


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


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
@pytest.mark.parametrize("Tq,Tk", [(3, 5), (4, 4), (5, 3)])
def test_causal_aligns_the_queries_with_the_last_keys(Tq, Tk, fused):
    """Query i sees keys j ≤ i + (T_k - T_q): with more keys (a cache) every query sees the
    earlier ones, with fewer keys the first T_q - T_k queries see none (and give 0)."""
    rng = np.random.default_rng(0)
    q, k, v = rand64(rng, 2, 2, Tq, 3), rand64(rng, 2, 2, Tk, 3), rand64(rng, 2, 2, Tk, 3)
    y = F.scaled_dot_product_attention(q, k, v, causal=True, fused=fused)
    s = q.numpy() @ k.numpy().swapaxes(-1, -2) / math.sqrt(3)
    A = softmax_rows(np.where(np.tri(Tq, Tk, Tk - Tq, dtype=bool), s, -np.inf))
    np.testing.assert_allclose(y.data, A @ v.numpy(), atol=1e-12)
    if Tq > Tk:
        assert (y.data[..., : Tq - Tk, :] == 0).all()


def test_attention_pattern_and_fully_masked_rows():
    """The pattern (read through attention_composed's hook) is a distribution per row, zero
    above the diagonal when causal, and zero on a row with every key masked, whose output is
    then finite on both paths."""
    rng = np.random.default_rng(0)
    q, k, v = rand64(rng, 1, 1, 3, 2), rand64(rng, 1, 1, 3, 2), rand64(rng, 1, 1, 3, 2)
    y, A = pattern_of(q, k, v, causal=True)
    np.testing.assert_allclose(A.data.sum(-1), 1.0)
    np.testing.assert_array_equal(np.triu(A.data[0, 0], 1), 0)
    fused_y = F.scaled_dot_product_attention(q, k, v, causal=True)
    np.testing.assert_allclose(fused_y.data, y.data, atol=1e-12)
    mask = np.array([[True, True, False], [False, False, False], [True, True, True]])
    y, A = pattern_of(q, k, v, mask=mask)
    assert np.isfinite(y.data).all() and (A.data[0, 0, 1] == 0).all()
    fused_y = F.scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.isfinite(fused_y.data).all() and (fused_y.data[0, 0, 1] == 0).all()
    np.testing.assert_allclose(fused_y.data, y.data, atol=1e-12)
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


def test_attention_dropout_draws_are_the_same_fused_or_composed():
    """F.scaled_dot_product_attention(fused=False) draws the same keep-mask for the same
    seed: values and gradients agree (1e-12 / 1e-10, rounding of two orders of operations)."""
    rng = np.random.default_rng(0)
    qkv = [rand64(rng, 2, 2, 4, 3) for _ in range(3)]

    def fn(fused, seed=5):
        def f(q, k, v):
            tl.manual_seed(seed)
            return F.scaled_dot_product_attention(q, k, v, causal=True, dropout_p=0.5, fused=fused)

        return f

    assert_same(fn(True), fn(False), qkv)
    assert not np.allclose(fn(True)(*qkv).data, fn(True, seed=6)(*qkv).data)


def test_attention_causal_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 3, 5, 4)) for _ in range(3)]
    pairs = [
        (t64(a, True), torch.tensor(a, dtype=torch.float64, requires_grad=True)) for a in arrays
    ]
    (q, tq), (k, tk), (v, tv) = pairs
    y = F.scaled_dot_product_attention(q, k, v, causal=True)
    ty = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    np.testing.assert_allclose(y.data, ty.detach().numpy(), atol=1e-12)
    g = rng.standard_normal(y.shape)
    y.backward(t64(g))
    ty.backward(torch.tensor(g))
    for ours, theirs in pairs:
        np.testing.assert_allclose(ours.grad.data, theirs.grad.numpy(), atol=1e-12)


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


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_no_keys_give_zeros_as_in_pytorch(fused, causal):
    """T_k = 0 (a cache or a source with no positions yet): the output is zeros, as PyTorch's
    scaled_dot_product_attention gives, with zero gradients and no 0/0 on the way (a first
    version of the unnormalized pattern divided the output by a row sum of 0: NaN)."""
    rng = np.random.default_rng(0)
    q = rand64(rng, 2, 3, 4)
    k, v = rand64(rng, 2, 0, 4), rand64(rng, 2, 0, 4)
    with np.errstate(all="raise"):
        y = F.scaled_dot_product_attention(q, k, v, causal=causal, fused=fused)
        y.backward(t64(rng.standard_normal(y.shape)))
    np.testing.assert_array_equal(y.numpy(), np.zeros((2, 3, 4)))
    np.testing.assert_array_equal(q.grad.numpy(), np.zeros((2, 3, 4)))


@pytest.mark.parametrize("form", ["fused", "composed"])
def test_grouped_query_attention_is_attention_on_repeated_heads(form):
    """k and v with 2 heads for 4 query heads (query head h reads key/value head h // 2): the
    output and dq are those of the same call with each key/value head repeated for its two
    query heads, and each key/value head's gradient is the sum of its two copies' (float64,
    causal with a mask and a bias); first derivatives pass gradcheck."""
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 9, h, 3)) for h in (4, 2, 2))
    bias = rng.standard_normal((4, 9, 9))
    keep = tl.tensor(rng.random((2, 1, 9, 9)) < 0.8).data  # (on the default device)
    params = dict(scale=0.6, causal=True, mask=keep, dropout_mask=None)
    attend = AttentionFn.apply if form == "fused" else attention_composed
    g = rng.standard_normal((2, 9, 4, 3))

    def run(k, v):
        ins = [tl.tensor(a, requires_grad=True) for a in (q, k, v, bias)]
        (attend(*ins, **params) * tl.tensor(g)).sum().backward()
        return attend(*ins, **params).numpy(), [t.grad.numpy() for t in ins]

    y, (dq, dk, dv, dB) = run(k, v)
    y2, (dq2, dk2, dv2, dB2) = run(k.repeat(2, axis=2), v.repeat(2, axis=2))
    for a, b in ((y, y2), (dq, dq2), (dB, dB2)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    for a, b in ((dk, dk2), (dv, dv2)):
        np.testing.assert_allclose(a, b.reshape(2, 9, 2, 2, 3).sum(axis=3), rtol=0, atol=1e-12)
    ins = [tl.tensor(a, requires_grad=True) for a in (q[:1, :4], k[:1, :4], v[:1, :4])]
    assert tl.gradcheck(lambda *a: attend(*a, **{**params, "mask": None}), ins)


def test_key_value_heads_that_do_not_divide_the_query_heads_are_refused():
    q, k = tl.zeros((1, 3, 4, 2)), tl.zeros((1, 3, 3, 2))
    with pytest.raises(ValueError, match="divides the 4 query heads .*got 3 and 3"):
        AttentionFn.apply(q, k, k, scale=1.0, causal=False, mask=None, dropout_mask=None)


def test_changing_the_attention_output_in_place_is_refused():
    """AttentionFn's backward reads its output Y (D = rowsum(G ⊙ Y)): changed in place
    before the backward, the gradients of q and k would be silently wrong, so it raises."""
    q, k, v = (rand64(np.random.default_rng(i), 2, 5, 2, 4) for i in range(3))
    y = AttentionFn.apply(q, k, v, scale=0.5, causal=True, mask=None, dropout_mask=None)
    with tl.no_grad():
        y.add_(1.0)
    with pytest.raises(RuntimeError, match="AttentionFn: its output .*modified in place"):
        y.sum().backward()


# ---------------------------------------------------------------------- the layer
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_per_head_reference(causal, fused):
    m = make(causal=causal, fused=fused)
    x = x64()
    np.testing.assert_allclose(m(x).data, reference(m, x), atol=1e-12)


@pytest.mark.parametrize("kw", [dict(causal=True), dict(relative_bias=2), dict(rotary=True)])
def test_gradcheck_parameters_and_input(kw):
    m = make(**kw)
    if m.relative_bias is not None:
        with tl.no_grad():
            W = m.relative_bias.W
            W.copy_(np.random.default_rng(3).standard_normal(W.shape))
    x = x64(T=3, requires_grad=True)
    tl.gradcheck(lambda x, *ps: m(x), [x, *m.parameters()])


def test_fused_and_hooked_paths_agree():
    """The fused layer and the composed one with hooks on q, k, v, pattern and z: the same
    output and gradients, and the pattern the hook sees is the one the fused path's q and k
    (read through its open hook points) give."""
    m = make(causal=True, relative_bias=2)
    x = x64(requires_grad=True)
    qk, handles = capture(m, ("hook_q", "hook_k"))
    y1 = m(x)
    for h in handles:
        h.remove()
    g = t64(np.random.default_rng(4).standard_normal(y1.shape))
    y1.backward(g)
    grads1 = [p.grad.data.copy() for p in m.parameters()] + [x.grad.data.copy()]
    q, k = qk["hook_q"].numpy(), qk["hook_k"].numpy()  # (B, T, H, d_head), on the host
    s = np.einsum("bihd,bjhd->bhij", q, k) * m.scale + m.relative_bias(T).numpy()
    p1 = softmax_rows(np.where(np.tri(T, dtype=bool), s, -np.inf))
    m.zero_grad()
    x.grad = None
    m.fused = False
    seen, handles = capture(m, ("hook_q", "hook_k", "hook_v", "hook_pattern", "hook_z"))
    y2 = m(x)
    y2.backward(g)
    grads2 = [p.grad.data for p in m.parameters()] + [x.grad.data]
    for h in handles:
        h.remove()
    np.testing.assert_allclose(y1.data, y2.data, atol=1e-12)
    np.testing.assert_allclose(p1, seen["hook_pattern"].data, atol=1e-12)
    for a, b in zip(grads1, grads2):
        np.testing.assert_allclose(a, b, atol=1e-10)
    assert seen["hook_q"].shape == (B, T, H, D // H)
    assert seen["hook_pattern"].shape == (B, H, T, T)
    assert seen["hook_z"].shape == (B, T, H, D // H)
    np.testing.assert_allclose(seen["hook_pattern"].data.sum(-1), 1.0)


@st.composite
def layer_cases(draw, kind: str, padding: str):
    """A MultiHeadAttention of the given kind (self, causal or cross) and its inputs: rotary,
    relative or no positions (self-attention); H, d_head and d_model independent; grouped
    key/value heads; a sliding window (causal); a key padding mask (none, some keys padded, or
    also a sequence with every key padded)."""
    position = "none" if kind == "cross" else draw(st.sampled_from(["none", "rotary", "relative"]))
    n_head, d_model = draw(st.integers(1, 4)), draw(st.integers(1, 6))
    d_head = draw(st.integers(1, 3)) * (2 if position == "rotary" else 1)
    T_q = draw(st.integers(1, 4))
    T_k = draw(st.integers(1, 5)) if kind == "cross" else T_q
    seed = draw(st.integers(0, 2**16))
    kw = dict(d_head=d_head, causal=kind == "causal", cross=kind == "cross")
    kw["n_kv_head"] = draw(st.sampled_from([h for h in range(1, n_head + 1) if n_head % h == 0]))
    if kind == "causal":
        kw["window"] = draw(st.sampled_from([None, 1, 2]))
    if kind == "cross":
        kw["d_source"] = draw(st.integers(1, 4))
    if position == "rotary":
        kw["rotary"] = True
    if position == "relative":
        kw["relative_bias"] = 2
    m = make(seed, d_model, n_head, **kw)
    rng = np.random.default_rng(seed)
    x = t64(rng.standard_normal((B, T_q, d_model)), True)
    src = t64(rng.standard_normal((B, T_k, m.d_source)), True) if kind == "cross" else None
    kpm = None
    if padding != "none":
        kpm = rng.random((B, T_k)) < 0.4
        if padding == "full row":
            kpm[0] = True
    return m, x, src, kpm


def run_layer(m, x, src, kpm, cache, g=None):
    """The layer's output on x (all at once, or through a KVCache: a first chunk, then one
    position at a time), and, given g, the gradients of Σ g ⊙ output with respect to every
    parameter, x and the source."""
    if not cache:
        out = apply(m, x, src, key_padding_mask=kpm)
    else:
        c, outs, T_q = nn.KVCache(), [], x.shape[1]
        bounds = [0, (T_q + 1) // 2, *range((T_q + 1) // 2 + 1, T_q + 1)]
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            if hi == lo:
                continue
            # the keys this call attends to: all seen so far, or a window's last W - 1 and the
            # new ones
            first = 0 if m.window is None else max(0, lo - (m.window - 1))
            pad = kpm if kpm is None or m.cross else kpm[:, first:hi]
            outs.append(apply(m, x[:, lo:hi], src, key_padding_mask=pad, cache=c))
        out = tl.cat(outs, axis=1)
    if g is None:
        return out.numpy(), []
    m.zero_grad()
    leaves = [x] + ([src] if src is not None else [])
    for t in leaves:
        t.grad = None
    out.backward(t64(g))
    grads = [p.grad for p in m.parameters()] + [t.grad for t in leaves]
    return out.numpy(), [None if gr is None else gr.numpy() for gr in grads]


@pytest.mark.parametrize("cache", [False, True], ids=["no cache", "cache"])
@pytest.mark.parametrize("padding", ["none", "some", "full row"])
@pytest.mark.parametrize("kind", ["self", "causal", "cross"])
@given(data=st.data())
def test_fused_and_composed_layers_agree(kind, padding, cache, data):
    """The same layer on its fused and its composed path: outputs and the gradients of every
    parameter, x and the source agree within 1e-10 (float64; the two paths differ only in the
    order of their roundings, ≲ 1e-14 for these O(1) sizes), are finite everywhere, and a
    sequence with every key padded gets z = 0, so the output b_O, exactly, on both paths."""
    m, x, src, kpm = data.draw(layer_cases(kind, padding))
    g = np.random.default_rng(7).standard_normal((B, x.shape[1], m.d_model))
    m.fused = True
    out_f, grads_f = run_layer(m, x, src, kpm, cache, g)
    m.fused = False
    out_c, grads_c = run_layer(m, x, src, kpm, cache, g)
    assert np.isfinite(out_f).all() and np.isfinite(out_c).all()
    np.testing.assert_allclose(out_f, out_c, atol=1e-10, rtol=0)
    for a, b in zip(grads_f, grads_c):
        assert (a is None) == (b is None)
        if a is not None:
            assert np.isfinite(a).all() and np.isfinite(b).all()
            np.testing.assert_allclose(a, b, atol=1e-10, rtol=0)
    if kpm is not None and kpm[0].all():
        for out in (out_f, out_c):
            np.testing.assert_array_equal(out[0], np.broadcast_to(m.b_O.data, out[0].shape))


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_fully_masked_row_gives_zeros_and_finite_gradients(fused):
    """A query that may attend to no key (its row of the mask all False) gets z = 0, not NaN,
    and finite first and second derivatives, on either path."""
    m = make(fused=fused)
    x = x64(requires_grad=True)
    mask = np.ones((T, T), bool)
    mask[2] = False
    seen, _ = capture(m, ["hook_z"])
    y = m(x, mask=mask)
    assert (seen["hook_z"].numpy()[:, 2] == 0).all()
    np.testing.assert_array_equal(y.numpy()[:, 2], np.broadcast_to(m.b_O.data, (B, D)))
    params = list(m.parameters())
    g = t64(np.random.default_rng(2).standard_normal(y.shape))
    first = tl.grad(y, [x, *params], grad_outputs=g, create_graph=True)
    assert all(np.isfinite(d.numpy()).all() for d in first)
    second = tl.grad(sum((d * d).sum() for d in first), [x, *params], allow_unused=True)
    assert all(d is None or np.isfinite(d.numpy()).all() for d in second)


# Layers and calls for the identity-hook test: padding (one sequence with its last keys
# padded, the other with every key padded), causal, cross-attention, the cache on and off.
SCENARIOS = {
    "self-padding": dict(layer={}, padding=True),
    "causal": dict(layer=dict(causal=True)),
    "causal-cache": dict(layer=dict(causal=True), cache=True),
    "causal-rotary-padding-cache": dict(
        layer=dict(causal=True, rotary=True), padding=True, cache=True
    ),
    "relative-padding": dict(layer=dict(relative_bias=2), padding=True),
    "cross-padding": dict(layer=dict(cross=True, d_source=6), padding=True),
    "cross-padding-cache": dict(layer=dict(cross=True, d_source=6), padding=True, cache=True),
}


def identity_hook(point, style, calls, name):
    """Register on ``point`` a hook that changes nothing and counts its calls: a forward hook
    returning its input (for a hook point, the same Tensor as its output), one returning
    None (the output stands), or a pre-hook returning its arguments unchanged."""

    def count():
        calls[name] = calls.get(name, 0) + 1

    if style == "returns input":
        return point.register_forward_hook(lambda mod, inputs, out: count() or inputs[0])
    if style == "returns None":
        return point.register_forward_hook(lambda mod, inputs, out: count())
    return point.register_forward_pre_hook(lambda mod, args: count() or args)


@pytest.mark.parametrize("style", ["returns input", "returns None", "pre-hook"])
@pytest.mark.parametrize("results", [False, True], ids=["summed", "per-head results"])
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_identity_hooks_change_nothing(scenario, fused, results, style):
    """Identity hooks on every hook point the layer's path opens (q, k, v, z when fused; the
    scores and the pattern too when composed; hook_result with per-head results) leave the
    output and every gradient bit for bit as they are without hooks, on the same path; and
    every hook did run."""
    spec = SCENARIOS[scenario]
    m = make(fused=fused, **spec["layer"])
    m.use_attn_result = results
    rng = np.random.default_rng(3)
    x = x64(requires_grad=True)
    src = t64(rng.standard_normal((B, 7, 6)), True) if m.cross else None
    kpm = None
    if spec.get("padding"):
        kpm = np.zeros((B, 7 if m.cross else T), bool)
        kpm[0, 3:] = True
        kpm[1] = True
    g = rng.standard_normal((B, T, D))
    plain = run_layer(m, x, src, kpm, spec.get("cache", False), g)
    points = [n for n in HOOK_POINTS if not getattr(m, n).closed]
    expected = OPEN_WHEN_FUSED if fused else HOOK_POINTS[:-1]
    assert tuple(points) == expected + (("hook_result",) if results else ())
    calls = {}
    handles = [identity_hook(getattr(m, n), style, calls, n) for n in points]
    hooked = run_layer(m, x, src, kpm, spec.get("cache", False), g)
    for h in handles:
        h.remove()
    assert sorted(calls) == sorted(points)
    assert np.isfinite(plain[0]).all()
    assert_bitwise_equal(hooked[0], plain[0])
    scattered = scattered_on_a_gpu(m)
    for p, a, b in zip([*m.parameters(), None, None], hooked[1], plain[1]):
        if p is not None and p is scattered:
            np.testing.assert_allclose(a, b, rtol=1e-13, atol=0)
        else:
            assert_bitwise_equal(a, b)


def scattered_on_a_gpu(m):
    """The parameter whose gradient a scatter-add sums (the relative bias table W, read by
    offset), on a GPU: CuPy's add.at adds with atomics, in no fixed order, so two runs of the
    same backward differ in the last bits there (seen: 1 ulp in float64 on an H100); the
    float64 sums of at most T² = 25 entries stay well within 1e-13 of each other."""
    if m.relative_bias is None or tl.default_device() != "cuda":
        return None
    return m.relative_bias.W


def test_fused_layer_refuses_score_and_pattern_hooks():
    """A fused layer has no scores or pattern to hook: hooking them raises, naming why and
    what to do; the composed path takes them; going back to fused with such a hook attached
    raises too (the hook would silently stop running)."""
    m = make()
    for name in ("hook_attn_scores", "hook_pattern"):
        point = getattr(m, name)
        with pytest.raises(RuntimeError, match="attention is fused.*no scores or pattern"):
            point.register_forward_hook(lambda *a: None)
        with pytest.raises(RuntimeError, match="fused = False|composed_attention"):
            point.register_forward_pre_hook(lambda *a: None)
        assert not point._forward_hooks and not point._forward_pre_hooks
    m.fused = False
    h = m.hook_pattern.register_forward_hook(lambda *a: None)
    with pytest.raises(RuntimeError, match="remove the hooks"):
        m.fused = True
    assert not m.fused
    h.remove()
    m.fused = True
    with pytest.raises(RuntimeError, match="attention is fused"):
        m.hook_attn_scores.register_forward_hook(lambda *a: None)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_per_head_results_are_each_heads_output_and_sum_to_the_layers(fused):
    """With use_attn_result, hook_result (B, T, H, d_model) is z^h W_O^h for every head
    (computed here from hook_z), its sum over heads plus b_O is the output of the summed path,
    and the gradients of input and parameters agree with it."""
    m = make(causal=True, fused=fused)
    x = x64(requires_grad=True)
    g = np.random.default_rng(2).standard_normal((B, T, D))
    params = list(m.parameters())
    y0 = m(x)
    grads0 = tl.grad((y0 * t64(g)).sum(), [x, *params])
    m.use_attn_result = True
    seen, handles = capture(m, ["hook_z", "hook_result"])
    y1 = m(x)
    for h in handles:
        h.remove()
    z, result = seen["hook_z"].numpy(), seen["hook_result"].numpy()
    assert result.shape == (B, T, H, D)
    expect = np.einsum("bthe,hed->bthd", z, m.W_O.numpy())
    np.testing.assert_allclose(result, expect, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(result.sum(2) + m.b_O.numpy(), y0.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(y1.numpy(), y0.numpy(), rtol=1e-12, atol=1e-12)
    grads1 = tl.grad((y1 * t64(g)).sum(), [x, *params])
    for a, b in zip(grads1, grads0):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-10, atol=1e-12)


def test_editing_one_heads_result_removes_that_head():
    """Zeroing head 1's hook_result gives the output of zeroing its z: the head's whole
    contribution, and nothing else."""
    m = make(causal=True)
    m.use_attn_result = True
    x = x64()

    def zero_head(module, inputs, out, axis_value=1):
        a = out.numpy().copy()
        a[:, :, axis_value] = 0
        return t64(a)

    h = m.hook_result.register_forward_hook(zero_head)
    via_result = m(x).numpy()
    h.remove()
    h = m.hook_z.register_forward_hook(zero_head)
    via_z = m(x).numpy()
    h.remove()
    np.testing.assert_allclose(via_result, via_z, rtol=1e-12, atol=1e-12)
    assert not np.allclose(via_result, m(x).numpy())


class TwoLayers(nn.Module):
    """Two attention layers in a row, the first fused and the second composed."""

    def __init__(self):
        super().__init__()
        self.first = make(causal=True)
        self.second = make(seed=1, fused=False)

    def forward(self, x):
        return self.second(self.first(x))


def test_composed_attention_switches_and_restores():
    model = TwoLayers()
    x = x64()
    fused_out = model(x).numpy()
    with nn.composed_attention(model) as inside:
        assert inside is model
        assert not model.first.fused and not model.second.fused
        seen, handles = capture(model.first, ["hook_pattern", "hook_attn_scores"])
        out = model(x).numpy()
        for h in handles:
            h.remove()
    assert seen["hook_pattern"].shape == seen["hook_attn_scores"].shape == (B, H, T, T)
    assert model.first.fused and not model.second.fused  # each back to its own setting
    np.testing.assert_allclose(out, fused_out, atol=1e-12)
    with nn.composed_attention(model):  # a hook still attached keeps its layer composed
        h = model.first.hook_pattern.register_forward_hook(lambda *a: None)
    assert not model.first.fused
    h.remove()
    model.first.fused = True
    with pytest.raises(KeyError), nn.composed_attention(model):  # restored after an error
        raise KeyError("inside")
    assert model.first.fused and not model.second.fused


def test_result_hook_is_closed_by_default_and_attention_results_opens_it():
    """By default W_O sums over heads in one product: hook_result is closed (hooking it
    raises, naming the switch); attention_results opens it for a block and restores each
    layer afterwards, except one that still carries a hook on hook_result (turning results
    off under a hook raises)."""
    model = TwoLayers()
    model.second.use_attn_result = True
    with pytest.raises(RuntimeError, match="per-head results are off.*use_attn_result"):
        model.first.hook_result.register_forward_hook(lambda *a: None)
    x = x64()
    before = model(x).numpy()
    with attention_results(model) as inside:
        assert inside is model and model.first.use_attn_result
        assert model.first.fused  # the attention keeps its path
        seen, handles = capture(model.first, ["hook_result"])
        out = model(x).numpy()
        for h in handles:
            h.remove()
    assert seen["hook_result"].shape == (B, T, H, D)
    np.testing.assert_allclose(out, before, rtol=1e-12, atol=1e-12)
    assert not model.first.use_attn_result and model.second.use_attn_result
    with attention_results(model):
        h = model.first.hook_result.register_forward_hook(lambda *a: None)
    assert model.first.use_attn_result
    with pytest.raises(RuntimeError, match="remove the hooks on hook_result"):
        model.first.use_attn_result = False
    h.remove()
    model.first.use_attn_result = False
    with pytest.raises(KeyError), attention_results(model):  # restored after an error
        raise KeyError("inside")
    assert not model.first.use_attn_result and model.second.use_attn_result


def test_hook_can_edit_the_pattern():
    m = make(causal=True, fused=False)
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
    y = m(x).numpy()
    x2 = x.numpy().copy()
    x2[:, -1] += 10.0
    y2 = m(t64(x2)).numpy()
    np.testing.assert_allclose(y[:, :-1], y2[:, :-1], atol=1e-12)
    assert not np.allclose(y[:, -1], y2[:, -1])


def test_pattern_rows_sum_to_one_and_are_causal():
    m = make(causal=True)
    with nn.composed_attention(m):
        seen, _ = capture(m, ["hook_pattern"])
        m(x64())
    pattern = seen["hook_pattern"]
    assert pattern.shape == (B, H, T, T)
    np.testing.assert_allclose(pattern.data.sum(-1), 1.0)
    assert (np.triu(pattern.data, 1) == 0).all()


def test_key_padding_mask():
    m = make()
    x = x64()
    pad = np.zeros((B, T), bool)
    pad[0, 3:] = True  # the first sequence has 3 real tokens
    y = m(x, key_padding_mask=pad)
    with nn.composed_attention(m):
        seen, _ = capture(m, ["hook_pattern"])
        m(x, key_padding_mask=pad)
    assert (seen["hook_pattern"].data[0, :, :, 3:] == 0).all()
    np.testing.assert_allclose(y.data, reference(m, x, keep=~pad[:, None, :]), atol=1e-12)
    x2 = x.numpy().copy()
    x2[0, 3:] = 123.0  # changing padding changes nothing at the real positions
    y2 = m(t64(x2), key_padding_mask=pad).data
    np.testing.assert_allclose(y.data[0, :3], y2[0, :3], atol=1e-12)


def test_cross_attention_shapes_and_views():
    m = nn.CrossAttention(D, H, d_source=6, dtype=np.float64)
    x, src = x64(), t64(np.random.default_rng(2).standard_normal((B, 7, 6)))
    y = m(x, source=src)
    with nn.composed_attention(m):
        seen, _ = capture(m, ["hook_pattern"])
        m(x, source=src)
    assert y.shape == (B, T, D) and seen["hook_pattern"].shape == (B, H, T, 7)
    assert m.W_Q.shape == (H, D, D // H) and m.W_K.shape == (H, 6, D // H)
    assert m.W_V.shape == (H, 6, D // H) and m.W_O.shape == (H, D // H, D)
    assert np.shares_memory(m.W_K.data, m.W_k.data) and np.shares_memory(m.W_V.data, m.W_v.data)
    with pytest.raises(ValueError, match="CrossAttention needs a source"):
        m(x, None)


def test_per_head_views_share_memory():
    m = make()
    dh = D // H
    assert m.W_Q.shape == (H, D, dh) and m.W_O.shape == (H, dh, D)
    assert m.b_Q.shape == (H, dh) and m.b_O.shape == (D,)
    pairs = [(m.W_Q, m.W_q), (m.W_K, m.W_k), (m.W_V, m.W_v)]
    pairs += [(m.b_Q, m.b_q), (m.b_K, m.b_k), (m.b_V, m.b_v)]
    for view, stored in pairs:
        assert np.shares_memory(view.data, stored.data)
    np.testing.assert_array_equal(m.W_Q.data[1], m.W_q.data[:, 1])  # W_q is (D, H, d_head)
    assert m.W_O.shape == (H, dh, D)  # W_O is stored in the per-head layout itself
    with tl.no_grad():
        m.W_q.data[0, 1, 0] = 42.0
    assert m.W_Q.data[1, 0, 0] == 42.0  # a view: the edit shows through
    (m.W_Q.sum() * 2).backward()  # views are differentiable
    assert (m.W_q.grad.data == 2).all() and m.W_k.grad is None and m.W_v.grad is None


@pytest.mark.parametrize("cross", [False, True])
def test_biases_are_one_dimensional_and_per_head_biases_are_views(cross):
    m = make(d_model=6, n_head=3, d_head=4, cross=cross, d_source=5 if cross else None)
    for name in ("b_q", "b_k", "b_v"):
        assert getattr(m, name).shape == (12,)
    assert m.b_O.shape == (6,)
    for view, stored in ((m.b_Q, m.b_q), (m.b_K, m.b_k), (m.b_V, m.b_v)):
        assert view.shape == (3, 4) and np.shares_memory(view.data, stored.data)
        np.testing.assert_array_equal(view.data, stored.data.reshape(3, 4))
    with tl.no_grad():
        m.b_k.data[5] = 9.0
    assert m.b_K.data[1, 1] == 9.0
    (m.b_V.sum() * 3).backward()
    assert (m.b_v.grad.data == 3).all()
    plain = nn.SelfAttention(6, 3, bias=False)
    assert all(getattr(plain, n) is None for n in ("b_q", "b_k", "b_v", "b_O", "b_Q"))


@pytest.mark.parametrize(
    "kw",
    [
        dict(causal=True),
        dict(causal=True, rotary=True),
        dict(relative_bias=2),
        dict(cross=True, d_source=3),
    ],
)
def test_d_head_apart_from_d_model(kw):
    """d_model 5, 3 heads of width 4 (5 is no multiple of 3): the shapes of every matrix and
    activation, gradcheck of the input (and source) and every parameter on the fused path, and
    the composed path's output and gradients equal to it (1e-10)."""
    m = make(d_model=5, n_head=3, d_head=4, **kw)
    assert m.W_q.shape == (5, 3, 4) and m.W_O.shape == (3, 4, 5) and m.b_q.shape == (12,)
    assert m.W_k.shape == (m.d_source, 3, 4) and m.W_K.shape == (3, m.d_source, 4)
    assert m.W_Q.shape == (3, 5, 4) and m.W_O.shape == (3, 4, 5) and m.b_Q.shape == (3, 4)
    x = x64(T=3, d=5, requires_grad=True)
    src = t64(np.random.default_rng(5).standard_normal((B, 4, 3)), True) if m.cross else None
    seen, handles = capture(m, ["hook_q", "hook_z"])
    y = apply(m, x, src)
    for h in handles:
        h.remove()
    assert y.shape == (B, 3, 5)
    assert seen["hook_q"].shape == seen["hook_z"].shape == (B, 3, 3, 4)
    leaves = [x] + ([src] if src is not None else [])
    tl.gradcheck(lambda *a: apply(m, a[0], src), [*leaves, *m.parameters()])
    g = np.random.default_rng(6).standard_normal(y.shape)
    fused = run_layer(m, x, src, None, False, g)
    m.fused = False
    composed = run_layer(m, x, src, None, False, g)
    np.testing.assert_allclose(fused[0], composed[0], atol=1e-10)
    for a, b in zip(fused[1], composed[1]):
        np.testing.assert_allclose(a, b, atol=1e-10)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
@pytest.mark.parametrize("kw", [dict(), dict(rotary=True), dict(relative_bias=2)])
def test_kv_cache_equals_full_recompute(kw, fused):
    m = make(causal=True, fused=fused, **kw)
    x = x64(T=7)
    full = m(x).data
    cache = nn.KVCache()
    with tl.no_grad():
        steps = [m(x[:, :3], cache=cache)]
        steps += [m(x[:, t : t + 1], cache=cache) for t in range(3, 7)]
    assert len(cache) == 7 and cache.k.shape == (B, 7, H, D // H)  # (batch, time, heads, d)
    np.testing.assert_allclose(np.concatenate([s.data for s in steps], 1), full, atol=1e-12)
    cache.reset()
    assert len(cache) == 0


def test_cross_attention_cache_reuses_source():
    m = nn.CrossAttention(D, H, dtype=np.float64)
    x, src = x64(T=4), x64(seed=5, T=6)
    full = m(x, source=src).data
    cache = nn.KVCache()
    first = m(x[:, :2], source=src, cache=cache).data
    rest = m(x[:, 2:], cache=cache).data  # no source needed once cached
    np.testing.assert_allclose(np.concatenate([first, rest], 1), full, atol=1e-12)


@settings(max_examples=10)
@given(st.integers(1, 3), st.integers(1, 4), st.booleans())
def test_shapes(n_head, T_, causal):
    m = nn.SelfAttention(4 * n_head, n_head, causal=causal)
    assert m(tl.randn(2, T_, 4 * n_head)).shape == (2, T_, 4 * n_head)


# ---------------------------------------------------------------------- dropout
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


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_attention_dropout_zeroes_about_half_of_the_pattern(fused):
    """Dropout p = 0.5 on the pattern, seen directly: hook_v replaces the values by one-hot
    vectors of their key position (d_head = T), so that z[b, i, h, j] = (A ⊙ M)[b, h, i, j],
    the pattern after dropout. Against the pattern A of the same layer in eval mode (the
    queries and keys do not depend on dropout): about half of the causal pattern's 288
    entries are 0 (the rate's sd is 0.03 here, the bounds 0.4-0.6), the others are exactly
    2 A, and nothing outside the pattern appears. With the attention dropout off (p silently
    0 inside nn/attention.py) z would equal A and this fails; the output dropout of the layer
    acts after W_O and cannot hide that."""
    Bd, Td, Dd, Hd = 4, 8, 16, 2
    m = make(d_model=Dd, n_head=Hd, causal=True, dropout=0.5, fused=fused)
    x = t64(np.random.default_rng(1).standard_normal((Bd, Td, Dd)))
    onehot = np.zeros((Bd, Td, Hd, Td))
    onehot[:, np.arange(Td), :, np.arange(Td)] = 1.0
    m.hook_v.register_forward_hook(lambda mod, inputs, v: t64(onehot))
    seen, _ = capture(m, ["hook_z"])
    m.eval()
    m(x)
    A = seen["hook_z"].numpy()  # (B, T_q, H, T_k)
    m.train()
    tl.manual_seed(0)
    m(x)
    Z = seen["hook_z"].numpy()
    inside = np.tri(Td, dtype=bool)[None, :, None, :].repeat(Bd, 0).repeat(Hd, 2)
    assert (A[inside] > 0).all() and (A[~inside] == 0).all()
    dropped = Z[inside] == 0
    assert inside.sum() == 288 and 0.4 < dropped.mean() < 0.6
    np.testing.assert_allclose(Z[inside][~dropped], 2 * A[inside][~dropped], rtol=1e-12)
    assert (Z[~inside] == 0).all()


def test_dropout_draws_are_the_same_on_both_paths():
    """With dropout on, one seed gives one set of draws, whichever the path: the outputs
    agree (1e-12) and the gradients too (1e-10); another seed gives another output."""
    m = make(causal=True, dropout=0.3)
    x = x64(requires_grad=True)
    g = np.random.default_rng(8).standard_normal((B, T, D))

    def run(fused, seed):
        m.fused = fused
        tl.manual_seed(seed)
        return run_layer(m, x, None, None, False, g)

    (yf, gf), (yc, gc) = run(True, 5), run(False, 5)
    np.testing.assert_allclose(yf, yc, atol=1e-12)
    for a, b in zip(gf, gc):
        np.testing.assert_allclose(a, b, atol=1e-10)
    assert not np.allclose(run(True, 6)[0], yf)


# ---------------------------------------------------------------------- construction
def test_bad_sizes():
    with pytest.raises(ValueError):
        nn.SelfAttention(10, 3)


def test_float32_default_and_state_dict_names():
    m = nn.SelfAttention(16, 4, causal=True)
    assert m.W_q.dtype == np.float32
    assert list(m.state_dict()) == ["W_q", "W_k", "W_v", "W_O", "b_q", "b_k", "b_v", "b_O"]
    assert m(tl.randn(1, 3, 16)).dtype == np.float32


# ---------------------------------------------------------------------- grouped-query attention
def repeat_kv_as_mha(gqa):
    """A plain multi-head layer whose key/value heads are the GQA layer's, repeated to the
    query heads they serve (head h reads key/value head h // group): the definition of GQA."""
    H, group = gqa.n_head, gqa.n_head // gqa.n_kv_head
    mha = make(d_model=gqa.d_model, n_head=H, causal=gqa.causal, window=gqa.window)
    for name in ("W_q", "W_O", "b_q", "b_O"):
        getattr(mha, name).data[...] = getattr(gqa, name).data
    for name in ("W_k", "W_v"):
        getattr(mha, name).data[...] = np.repeat(getattr(gqa, name).data, group, axis=1)
    for name in ("b_k", "b_v"):
        b = getattr(gqa, name).data.reshape(gqa.n_kv_head, -1)
        getattr(mha, name).data[...] = np.repeat(b, group, axis=0).reshape(-1)
    return mha


@settings(max_examples=8, deadline=None)
@given(
    H_kv=st.sampled_from([1, 2]),
    group=st.sampled_from([1, 2, 3]),
    T_=st.integers(1, 4),
    window=st.sampled_from([None, 1, 2]),
    rotary=st.booleans(),
    fused=st.booleans(),
)
def test_grouped_query_attention_gradchecks(H_kv, group, T_, window, rotary, fused):
    """GQA's gradients against central differences in float64, first and second order, for
    the input and every parameter (the key/value weights' gradient sums over the query heads
    of their group: the repeat's backward). Shapes, groups, windows and paths are drawn;
    gradcheck's float64 tolerances (its defaults, rtol 1e-3 and atol 1e-5 on differences with
    h = 1e-6) are far above the ~1e-9 error of central differences here."""
    H = H_kv * group
    m = make(d_model=4, n_head=H, d_head=2, n_kv_head=H_kv, causal=True, window=window)
    m.fused = fused
    if rotary:
        m.rotary = nn.RotaryEmbedding(2, layout="half")
    x = x64(T=T_, d=4, requires_grad=True)
    tl.gradcheck(lambda x, *ps: m(x), [x, *m.parameters()])
    tl.gradgradcheck(lambda x, Wk, Wv: m(x), [x, m.W_k, m.W_v])


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
@pytest.mark.parametrize("n_kv_head", [1, 2])
def test_grouped_query_attention_is_mha_with_repeated_kv_heads(n_kv_head, fused):
    """Outputs and input gradients equal a plain layer's with the key/value heads repeated
    (1e-12: the same products in the same order, up to the repeat's copy)."""
    gqa = make(d_model=8, n_head=4, n_kv_head=n_kv_head, causal=True, fused=fused)
    mha = repeat_kv_as_mha(gqa)
    assert gqa.W_k.shape == (8, n_kv_head, 2) and gqa.b_k.shape == (2 * n_kv_head,)
    x = x64(T=5, requires_grad=True)
    y = gqa(x)
    (gx,) = tl.grad(y.sum(), [x])
    x2 = x64(T=5, requires_grad=True)
    y2 = mha(x2)
    (gx2,) = tl.grad(y2.sum(), [x2])
    np.testing.assert_allclose(y.data, y2.data, atol=1e-12)
    np.testing.assert_allclose(gx.data, gx2.data, atol=1e-12)
    # the per-query-head views are the repeated key/value matrices (TransformerLens's GQA)
    np.testing.assert_array_equal(gqa.W_K.data, mha.W_K.data)
    for view in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V"):  # one per query head, each as MHA's
        assert getattr(gqa, view).shape[0] == 4
        np.testing.assert_array_equal(getattr(gqa, view).data, getattr(mha, view).data)


@pytest.mark.parametrize("window", [None, 3])
def test_gqa_cache_keeps_only_the_kv_heads_and_equals_full_recompute(window):
    m = make(d_model=8, n_head=4, n_kv_head=2, causal=True, window=window, rotary=True)
    x = x64(T=8, d=8)
    full = m(x).data
    cache = nn.KVCache()
    with tl.no_grad():
        steps = [m(x[:, :4], cache=cache)]
        steps += [m(x[:, t : t + 1], cache=cache) for t in range(4, 8)]
    kept = 8 if window is None else window - 1
    assert cache.k.shape == (B, kept, 2, 2) and cache.seen == 8  # (batch, time, H_kv, d_head)
    np.testing.assert_allclose(np.concatenate([s.data for s in steps], 1), full, atol=1e-12)


def test_sliding_window_pattern_is_the_band():
    """Query i attends to key j iff 0 ≤ i - j < W (itself and the W - 1 keys before it), and
    the fused path gives the composed path's output (1e-12, as above)."""
    W, T_ = 3, 6
    m = make(causal=True, window=W, fused=False)
    x = x64(T=T_)
    seen = {}
    handle = m.hook_pattern.register_forward_hook(lambda mod, inp, out: seen.update(A=out.data))
    composed = m(x).data
    handle.remove()
    i, j = np.arange(T_)[:, None], np.arange(T_)[None, :]
    band = (i - j >= 0) & (i - j < W)
    assert seen["A"].shape == (B, H, T_, T_)
    np.testing.assert_array_equal(seen["A"] > 0, np.broadcast_to(band, seen["A"].shape))
    m.fused = True
    np.testing.assert_allclose(m(x).data, composed, atol=1e-12)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "composed"])
def test_window_of_padding_keys_gives_zero_not_nan(fused):
    """A query whose window holds only padding keys attends to nothing: its heads give 0 and
    zero gradients on both paths (the composed path gave NaN: its dead-row check ignored the
    window). Window 2 over 4 positions with keys 1 and 2 padded: query 2 sees keys 1 and 2."""
    m = make(causal=True, window=2, fused=fused)
    pad = np.array([[False, True, True, False]] * B)
    seen, _ = capture(m, ["hook_z"])
    x = x64(T=4, requires_grad=True)
    y = m(x, key_padding_mask=pad)
    z = seen["hook_z"].data  # (B, T, H, d_head)
    assert np.isfinite(y.data).all()
    np.testing.assert_array_equal(z[:, 2], 0.0)
    assert np.abs(z[:, [0, 1, 3]]).min() > 0
    y.sum().backward()
    assert np.isfinite(x.grad.data).all()


def test_bad_kv_heads_and_window_are_refused():
    with pytest.raises(
        ValueError, match="n_kv_head=3 must be a whole number ≥ 1 dividing n_head=4"
    ):
        nn.SelfAttention(8, 4, n_kv_head=3)
    for causal in (0.5, 0, -2, "yes"):
        with pytest.raises(ValueError, match="must be True, False or a sliding window W ≥ 1"):
            nn.SelfAttention(8, 4, causal=causal)
    with pytest.raises(TypeError, match="positions must be a RotaryEmbedding"):
        nn.SelfAttention(8, 4, positions=True)
    with pytest.raises(ValueError, match="bias='kv' must be True, False, 'qkv' or 'out'"):
        nn.CrossAttention(8, 4, bias="kv")


def test_masks_of_the_wrong_shape_are_one_line_errors():
    """A padding mask must cover the keys the call attends to, (B, T_k); with a sliding
    window's cache those are its last W - 1 keys and the new ones, not every position seen
    (this passed a matmul error up from inside the op before). A general mask must broadcast
    to the scores (B, H, T_q, T_k)."""
    m = make(causal=True, window=2)
    cache = nn.KVCache()
    m(x64(T=3), cache=cache, key_padding_mask=np.zeros((B, 3), bool))
    with pytest.raises(ValueError) as err:  # 4 positions seen; the call sees 1 cached + 1 new
        m(x64(T=1), cache=cache, key_padding_mask=np.zeros((B, 4), bool))
    assert str(err.value) == (
        "MultiHeadAttention: key_padding_mask of shape (2, 4) needs (batch, keys) = (2, 2) "
        "(2 with the cache: the keys it holds and the new ones)"
    )
    with pytest.raises(ValueError) as err:
        make()(x64(), mask=np.ones((T, T + 1), bool))
    assert str(err.value) == (
        "MultiHeadAttention: mask of shape (5, 6) does not broadcast to the scores "
        "(batch, heads, queries, keys) = (2, 2, 5, 5)"
    )


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("rows", [None, 2], ids=["one block", "blocks of 2"])
def test_half_inputs_are_computed_in_float32_and_rounded_once(half, rows):
    """float16/bfloat16 q, k, v: the node's output is the float32 computation on the same
    (already rounded) inputs, rounded once (bit-equal), and its gradients are that float32
    backward's, rounded to the inputs' dtype; in one block and in causal query blocks."""
    if half == "bfloat16":
        pytest.importorskip("ml_dtypes", reason="bfloat16 on the CPU needs ml_dtypes")
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((2, 5, 3, 4)).astype(np.float32) for _ in range(3)]
    lo = [tl.tensor(a, dtype=half, requires_grad=True) for a in arrays]
    hi = [tl.tensor(t.numpy().astype(np.float32), requires_grad=True) for t in lo]
    params = dict(scale=0.5, causal=True, mask=None, dropout_mask=None)
    with query_block_rows(rows):
        y_lo, y_hi = AttentionFn.apply(*lo, **params), AttentionFn.apply(*hi, **params)
        assert y_lo.dtype == lo[0].dtype
        np.testing.assert_array_equal(y_lo.numpy(), y_hi.numpy().astype(y_lo.dtype))
        g = rng.standard_normal(y_hi.shape).astype(np.float32)
        got = tl.grad(y_lo, lo, tl.tensor(g, dtype=half))
        g_hi = tl.tensor(tl.tensor(g, dtype=half).numpy().astype(np.float32))
        want = tl.grad(y_hi, hi, g_hi)
    for a, b in zip(got, want):
        assert a.dtype == lo[0].dtype
        np.testing.assert_array_equal(a.numpy(), b.numpy().astype(a.dtype))


@pytest.mark.parametrize(
    "bias, names",
    [
        ("qkv", ["b_q", "b_k", "b_v"]),  # Qwen2
        ("out", ["b_O"]),
        (False, []),
        (True, ["b_q", "b_k", "b_v", "b_O"]),
    ],
)
def test_bias_puts_the_query_key_value_biases_apart_from_b_O(bias, names):
    """bias="qkv" puts biases on q, k, v (key/value ones of width H_kv·d_head) and "out" on
    the output only. b_q, b_v and b_O each move the output when raised by 1 (by far more than
    rounding); b_k does not (up to 1e-12): it adds q·b_k to every score of a query, which the
    softmax cancels."""
    m = make(d_model=8, n_head=4, n_kv_head=2, bias=bias, causal=True)
    got = [k for k in m.state_dict() if k.startswith("b_")]
    assert got == names
    widths = {"b_q": 8, "b_k": 4, "b_v": 4, "b_O": 8}
    assert all(getattr(m, k).shape == (widths[k],) for k in names)
    x = x64()
    with tl.no_grad():
        before = m(x).data
        for k in names:
            getattr(m, k).data[...] += 1.0
            moved = not np.allclose(m(x).data, before, rtol=0, atol=1e-12)
            assert moved == (k != "b_k"), k
            getattr(m, k).data[...] -= 1.0
