"""nn/embedding.py: the token lookup (first and second order, the scatter-add of rows that is
its gradient, with negative and repeated indices, F.embedding and the layer Embedding) and positions
(sinusoidal values by hand, learned absolute, relative bias clipping, RoPE: RotaryFn against
a rotation written in engine ops, and its defining property, scores that depend only on the
offset j - i)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nn
import nn.functional as F
import tensorlab as tl
from nn.embedding import RotaryFn
from tensorlab import Tensor
from tensorlab.ops.index import scatter_add_rows
from tests.strategies import check_fused_op, grads, rand64, t64, values


# ---------------------------------------------------------------------- token embedding
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
    rng = np.random.default_rng(0)
    for V in (5, 65, 5000):
        idx = rng.integers(0, V, size=(12, 64))
        g = rng.standard_normal((12, 64, 8)).astype(np.float32)
        expect = np.zeros((V, 8), np.float32)
        np.add.at(expect, idx.ravel(), g.reshape(-1, 8))
        np.testing.assert_allclose(scatter_add_rows(idx, g, V), expect, atol=1e-5)
    empty = scatter_add_rows(np.zeros((0,), np.int64), np.zeros((0, 3)), 4)
    assert empty.shape == (4, 3) and (empty == 0).all()
    # the engine's x[idx] takes the same scatter: negative indices name the same rows as
    # their positive twins, and rows of more than one axis are kept whole
    x = t64(rng.standard_normal((5, 2, 3)), requires_grad=True)
    idx = np.array([[-1, 4, 0], [0, 1, -5]])
    g = rng.standard_normal((2, 3, 2, 3))
    x[idx].backward(tl.tensor(g))
    expect = np.zeros((5, 2, 3))
    np.add.at(expect, idx.ravel(), g.reshape(-1, 2, 3))
    np.testing.assert_allclose(x.grad.numpy(), expect, atol=1e-12)


# ---------------------------------------------------------------------- positions
def test_sinusoidal_values_by_hand():
    pe = nn.SinusoidalPositionalEncoding(4, max_len=10).pe.data
    # d = 4: frequencies 1 and 10000^(-2/4) = 0.01
    for t in (0, 1, 5):
        expect = [math.sin(t), math.cos(t), math.sin(t * 0.01), math.cos(t * 0.01)]
        np.testing.assert_allclose(pe[t], expect, rtol=1e-6, atol=1e-7)
    odd = nn.sinusoidal_table(3, 5)
    assert odd.shape == (3, 5) and odd[2, 4] == pytest.approx(math.sin(2 * 10000 ** (-4 / 5)))


def test_sinusoidal_gives_the_vectors_of_the_positions_from_offset():
    """The vectors of x's positions, broadcast to x's shape: what the model adds to x (x's
    values play no part)."""
    enc = nn.SinusoidalPositionalEncoding(6, max_len=8)
    x = tl.ones(2, 3, 6)
    pe = enc(x, offset=2)
    assert pe.shape == x.shape
    for b in range(2):
        np.testing.assert_array_equal(pe.numpy()[b], enc.pe.numpy()[2:5])
    assert "pe" not in enc.state_dict()  # rebuilt, not saved
    with pytest.raises(ValueError):
        enc(tl.zeros(1, 9, 6))


def test_learned_positional_embedding():
    pos = nn.LearnedPositionalEmbedding(8, 4, dtype=np.float64)
    x = tl.ones(2, 3, 4, dtype=np.float64)
    y = pos(x, offset=1)
    assert y.shape == x.shape
    np.testing.assert_array_equal(y.data[1], pos.W_pos.data[1:4])
    y.sum().backward()
    assert (pos.W_pos.grad.data[1:4] == 2).all() and (pos.W_pos.grad.data[[0, 4]] == 0).all()
    with pytest.raises(ValueError):
        pos(tl.zeros(1, 8, 4, dtype=np.float64), offset=1)


@pytest.mark.parametrize("kind", ["sinusoidal", "learned"])
def test_positions_fill_the_table_exactly_and_start_at_zero_by_default(kind):
    """max_len positions fit (the last row is used), one more is refused naming both; without
    an offset the vectors are those of positions 0 ... T - 1."""
    if kind == "sinusoidal":
        pos = nn.SinusoidalPositionalEncoding(4, max_len=5)
    else:
        pos = nn.LearnedPositionalEmbedding(5, 4)
    table = (pos.pe if kind == "sinusoidal" else pos.W_pos).numpy()
    np.testing.assert_array_equal(pos(tl.zeros(1, 5, 4)).numpy()[0], table)
    np.testing.assert_array_equal(pos(tl.zeros(1, 2, 4), offset=3).numpy()[0], table[3:])
    np.testing.assert_array_equal(pos(tl.zeros(2, 3, 4)).numpy()[1], table[:3])
    with pytest.raises(ValueError, match="positions up to 6 exceed max_len=5"):
        pos(tl.zeros(1, 2, 4), offset=4)


def test_learned_positions_start_at_gpt2s_scale():
    """W_pos ~ N(0, 0.02²) by default (GPT-2's initializer range): 16384 draws put the sample
    standard deviation within 2% of 0.02 (its standard error is 0.02/√(2·16384) ≈ 0.55%)."""
    tl.manual_seed(0)
    std = nn.LearnedPositionalEmbedding(1024, 16).W_pos.numpy().std()
    assert abs(std - 0.02) < 0.02 * 0.02


def test_relative_bias_clipping():
    rel = nn.RelativePositionBias(n_head=2, max_distance=2, dtype=np.float64)
    with tl.no_grad():
        rel.W.copy_(np.arange(10.0).reshape(2, 5))  # column c is offset c - 2
    b = rel(4).data
    assert b.shape == (2, 4, 4)
    offsets = np.arange(4)[None, :] - np.arange(4)[:, None]
    np.testing.assert_array_equal(b[0], np.clip(offsets, -2, 2) + 2)
    np.testing.assert_array_equal(b[1], np.clip(offsets, -2, 2) + 7)
    assert b[0, 3, 0] == b[0, 2, 0] == 0  # offsets -3 and -2 share the clipped value
    # queries are the last T_q positions: with a cache, query 0 sits at position 3 of 4
    np.testing.assert_array_equal(rel(1, 4).data[0, 0], np.clip([-3, -2, -1, 0], -2, 2) + 2)
    tl.gradcheck(lambda W: rel(3, 5), [rel.W])


# ---------------------------------------------------------------------- RoPE
def rotary_composed(x, cos, sin, half):
    """RotaryFn written in engine ops (RotaryFn has no ``composed``: its backward is itself a
    RotaryFn, so it is differentiable to any order as it is), from each layout's definition:
    the pairs (x_{2i}, x_{2i+1}) as a (..., d/2, 2) view, or (x_i, x_{i+d/2}) as the two
    halves of the last axis, each pair rotated by its angle."""
    c, s = Tensor._wrap(cos), Tensor._wrap(sin)
    if half:
        n = x.shape[-1] // 2
        a, b = x[..., :n], x[..., n:]
        return tl.cat([a * c - b * s, a * s + b * c], axis=-1)
    pairs = x.reshape(x.shape[:-1] + (-1, 2))
    a, b = pairs[..., 0], pairs[..., 1]
    return tl.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(x.shape)


@given(
    lead=hnp.array_shapes(min_dims=0, max_dims=2, max_side=2),
    T=st.integers(1, 4),
    n_pairs=st.integers(1, 3),
    offset=st.integers(0, 50),
    half=st.booleans(),
    data=st.data(),
)
def test_rotary_fn_matches_composed(lead, T, n_pairs, offset, half, data):
    """RotaryFn against the rotation in engine ops, for both pair layouts, with the tables of
    RotaryEmbedding at a drawn offset. Tolerance 1e-12 absolute: the same two products and a
    sum per entry, in the same order (entries ≤ 2, cos and sin ≤ 1), so they agree to
    rounding (≲ 1e-15); the map is linear in x, so second derivatives are 0 on both."""
    d = 2 * n_pairs
    x = t64(data.draw(values(lead + (T, d))))
    cos, sin = nn.RotaryEmbedding(d).tables(offset + T, np.float64, x.device)
    cos, sin = cos[offset : offset + T], sin[offset : offset + T]
    check_fused_op(
        lambda x: RotaryFn.apply(x, cos=cos, sin=sin, half=half),
        lambda x: rotary_composed(x, cos, sin, half),
        [x],
        atol=1e-12,
    )


def test_rope_rotates_pairs():
    rope = nn.RotaryEmbedding(4, base=100.0)
    x = tl.tensor(np.tile([1.0, 0.0, 1.0, 0.0], (1, 3, 1, 1)), dtype=np.float64)  # (B, T, H, d)
    y = rope(x).data[0, :, 0]
    for t in range(3):  # θ = (1, 100^(-1/2) = 0.1)
        np.testing.assert_allclose(
            y[t], [math.cos(t), math.sin(t), math.cos(0.1 * t), math.sin(0.1 * t)], atol=1e-12
        )
    assert np.allclose(np.linalg.norm(rope(x).data, axis=-1), np.linalg.norm(x.data, axis=-1))


def test_rope_refuses_heads_of_another_size():
    with pytest.raises(ValueError, match="d_head=8\\): x of shape \\(1, 3, 2, 4\\) is not"):
        nn.RotaryEmbedding(8)(tl.ones(1, 3, 2, 4))
    with pytest.raises(ValueError, match="is not \\(..., T, H, 8\\)"):
        nn.RotaryEmbedding(8)(tl.ones(3, 8))


@pytest.mark.parametrize("calls", [[(0, 10), (150, 20)], [(0, 64), (64, 1)], [(127, 3)]])
def test_rope_tables_grow_to_any_position(calls):
    """The cos/sin tables start at 64 positions and double on demand: every call rotates
    position t's pair (1, 0) to (cos tθ, sin tθ), past the first table and at its edge."""
    rope = nn.RotaryEmbedding(4, base=100.0)  # θ = (1, 0.1)
    for offset, T in calls:
        x = tl.tensor(np.tile([1.0, 0.0, 1.0, 0.0], (1, T, 1, 1)), dtype=np.float64)
        y = rope(x, offset=offset).data[0, :, 0]
        t = np.arange(offset, offset + T)
        expected = np.stack([np.cos(t), np.sin(t), np.cos(0.1 * t), np.sin(0.1 * t)], -1)
        np.testing.assert_allclose(y, expected, atol=1e-12)


@given(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20), st.integers(0, 1000))
def test_rope_score_depends_only_on_offset(i, j, shift, seed):
    rng = np.random.default_rng(seed)
    d = 8
    rope = nn.RotaryEmbedding(d)
    q, k = rng.standard_normal(d), rng.standard_normal(d)

    def score(pos_q, pos_k):
        rq = rope(tl.tensor(q[None, None], dtype=np.float64), offset=pos_q).numpy()[0, 0]
        rk = rope(tl.tensor(k[None, None], dtype=np.float64), offset=pos_k).numpy()[0, 0]
        return rq @ rk

    assert score(i, j) == pytest.approx(score(i + shift, j + shift), abs=1e-9)


def test_rope_gradients():
    rng = np.random.default_rng(0)
    x = tl.tensor(rng.standard_normal((2, 3, 4)), dtype=np.float64, requires_grad=True)
    rope = nn.RotaryEmbedding(4)
    tl.gradcheck(lambda x: rope(x, offset=2), [x])
    tl.gradgradcheck(lambda x: rope(x) * rope(x), [x])
    cos, sin = rope.tables(3, np.float64, x.device)
    tl.gradcheck(lambda x: RotaryFn.apply(x, cos=cos[:3], sin=sin[:3], half=False), [x])
    with pytest.raises(ValueError):
        nn.RotaryEmbedding(5)


@pytest.mark.parametrize("bad", [-1, 4])
def test_an_index_outside_the_table_is_refused(bad):
    """A negative index used to wrap silently to the last row (issue 12)."""
    W = tl.tensor(np.ones((4, 2)), requires_grad=True)
    with pytest.raises(ValueError, match=f"index {bad} is outside the table's rows 0..3"):
        F.embedding(np.array([[0, bad]]), W)


def test_rope_half_layout_rotates_dimension_i_with_i_plus_half():
    """The "half" layout pairs (x_i, x_{i+d/2}) and turns each pair counter-clockwise, as
    rotate_half in Hugging Face's Llama: y_i = x_i cos - x_{i+d/2} sin and y_{i+d/2} = x_i sin
    + x_{i+d/2} cos. With θ = (1, 0.1) (d = 4, base 100), a unit vector on dimension 0 goes
    to (cos t, 0, sin t, 0) and one on dimension 3 to (0, -sin 0.1t, 0, cos 0.1t). By hand,
    1e-12 (one product per entry)."""
    rope = nn.RotaryEmbedding(4, base=100.0, layout="half")
    for unit, want in (
        ([1.0, 0.0, 0.0, 0.0], lambda t: [math.cos(t), 0.0, math.sin(t), 0.0]),
        ([0.0, 0.0, 0.0, 1.0], lambda t: [0.0, -math.sin(0.1 * t), 0.0, math.cos(0.1 * t)]),
    ):
        x = tl.tensor(np.tile(unit, (1, 3, 1, 1)), dtype=np.float64)  # (B, T, H, d)
        y = rope(x).data[0, :, 0]
        for t in range(3):
            np.testing.assert_allclose(y[t], want(t), atol=1e-12)


@given(st.integers(0, 30), st.integers(0, 1000))
def test_rope_layouts_are_one_map_up_to_a_permutation(offset, seed):
    """Interleaved RoPE on x permuted so that pair i is (x_i, x_{i+d/2}) equals the half
    layout on x, permuted the same way (the same rotations, stored in another order).
    1e-12: the same products per entry."""
    d = 8
    x = np.random.default_rng(seed).standard_normal((2, 3, 2, d))
    perm = np.stack([np.arange(d // 2), np.arange(d // 2) + d // 2], axis=-1).reshape(-1)
    half = nn.RotaryEmbedding(d, layout="half")(tl.tensor(x), offset=offset).data
    inter = nn.RotaryEmbedding(d)(tl.tensor(x[..., perm]), offset=offset).data
    np.testing.assert_allclose(inter, half[..., perm], atol=1e-12)


def test_rope_linear_scaling_divides_every_frequency():
    """Position interpolation: θ_i / f, so position f·t turns as far as t did unscaled."""
    theta = nn.embedding.rope_frequencies(8, 10000.0)
    np.testing.assert_allclose(theta, [1.0, 0.1, 0.01, 0.001], rtol=1e-14)
    scaled = nn.embedding.rope_frequencies(8, 10000.0, {"rope_type": "linear", "factor": 4.0})
    np.testing.assert_allclose(scaled, theta / 4.0, rtol=1e-14)


def test_rope_llama3_scaling_by_hand():
    """Llama 3.1's scaling with n = 1000 original positions, l = 1, h = 4, f = 8 on θ = (1,
    0.1, 0.01, 0.001): wavelengths 2π/θ ≈ (6.3, 63, 628, 6283). The first two are below
    n/h = 250 and kept, the last is above n/l = 1000 and divided by f, and 628 is blended
    with w = (n/λ - l)/(h - l) = (10/π - 1)/3 ≈ 0.197 of the unscaled θ. rtol 1e-12 (float64,
    a few operations)."""
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1000,
    }
    w = (1000 * 0.01 / (2 * math.pi) - 1.0) / 3.0
    want = [1.0, 0.1, (1 - w) * 0.01 / 8 + w * 0.01, 0.001 / 8]
    got = nn.embedding.rope_frequencies(8, 10000.0, scaling)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert nn.RotaryEmbedding(8, scaling=scaling).theta.tolist() == got.tolist()


@pytest.mark.parametrize("low, high", [(4.0, 4.0), (4.0, 1.0)])
def test_rope_llama3_needs_high_freq_factor_above_low(low, high):
    """w divides by h - l: equal factors (or reversed ones) are refused by name."""
    scaling = {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": low,
        "high_freq_factor": high,
        "original_max_position_embeddings": 1000,
    }
    with pytest.raises(ValueError, match="high_freq_factor must exceed low_freq_factor"):
        nn.RotaryEmbedding(8, scaling=scaling)


@pytest.mark.parametrize("factor", [0, 0.0, -2.0, True, "2", None, float("nan")])
def test_rope_scaling_factors_must_be_numbers_above_zero(factor):
    """A factor of 0 would divide every frequency by 0; a bool is not a number here."""
    with pytest.raises(ValueError, match=f"rope_scaling linear: factor={factor!r} must be"):
        nn.RotaryEmbedding(8, scaling={"rope_type": "linear", "factor": factor})
