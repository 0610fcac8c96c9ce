"""Positional encodings: sinusoidal values by hand, learned absolute, relative bias clipping,
and RoPE's defining property (scores depend only on the offset j - i)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nn
import tensorlab as tl
from nn.fused import Rotary


def test_sinusoidal_values_by_hand():
    pe = nn.SinusoidalPositionalEncoding(4, max_len=10).pe.data
    # d = 4: frequencies 1 and 10000^(-2/4) = 0.01
    for t in (0, 1, 5):
        expect = [math.sin(t), math.cos(t), math.sin(t * 0.01), math.cos(t * 0.01)]
        np.testing.assert_allclose(pe[t], expect, rtol=1e-6, atol=1e-7)
    odd = nn.sinusoidal_table(3, 5)
    assert odd.shape == (3, 5) and odd[2, 4] == pytest.approx(math.sin(2 * 10000 ** (-4 / 5)))


def test_sinusoidal_adds_with_offset():
    enc = nn.SinusoidalPositionalEncoding(6, max_len=8)
    x = tl.zeros(2, 3, 6)
    np.testing.assert_array_equal(enc(x, offset=2).data[0], enc.pe.data[2:5])
    assert "pe" not in enc.state_dict()  # rebuilt, not saved
    with pytest.raises(ValueError):
        enc(tl.zeros(1, 9, 6))


def test_learned_positional_embedding():
    pos = nn.LearnedPositionalEmbedding(8, 4, dtype=np.float64)
    x = tl.zeros(2, 3, 4, dtype=np.float64)
    y = pos(x, offset=1)
    np.testing.assert_array_equal(y.data[1], pos.W_pos.data[1:4])
    y.sum().backward()
    assert (pos.W_pos.grad.data[1:4] == 2).all() and (pos.W_pos.grad.data[[0, 4]] == 0).all()


def test_relative_bias_clipping():
    rel = nn.RelativePositionBias(n_head=2, max_distance=2, dtype=np.float64)
    rel.W.data[...] = np.arange(10.0).reshape(2, 5)  # column c is offset c - 2
    b = rel(4).data
    assert b.shape == (2, 4, 4)
    offsets = np.arange(4)[None, :] - np.arange(4)[:, None]
    np.testing.assert_array_equal(b[0], np.clip(offsets, -2, 2) + 2)
    np.testing.assert_array_equal(b[1], np.clip(offsets, -2, 2) + 7)
    assert b[0, 3, 0] == b[0, 2, 0] == 0  # offsets -3 and -2 share the clipped value
    # queries are the last T_q positions: with a cache, query 0 sits at position 3 of 4
    np.testing.assert_array_equal(rel(1, 4).data[0, 0], np.clip([-3, -2, -1, 0], -2, 2) + 2)
    tl.gradcheck(lambda W: rel(3, 5), [rel.W])


def test_rope_rotates_pairs():
    rope = nn.RotaryEmbedding(4, base=100.0)
    x = tl.tensor(np.tile([1.0, 0.0, 1.0, 0.0], (1, 3, 1)), dtype=np.float64)
    y = rope(x).data[0]
    for t in range(3):  # θ = (1, 100^(-1/2) = 0.1)
        np.testing.assert_allclose(
            y[t], [math.cos(t), math.sin(t), math.cos(0.1 * t), math.sin(0.1 * t)], atol=1e-12
        )
    assert np.allclose(np.linalg.norm(rope(x).data, axis=-1), np.linalg.norm(x.data, axis=-1))


@given(st.integers(0, 20), st.integers(0, 20), st.integers(0, 20), st.integers(0, 1000))
def test_rope_score_depends_only_on_offset(i, j, shift, seed):
    rng = np.random.default_rng(seed)
    d = 8
    rope = nn.RotaryEmbedding(d)
    q, k = rng.standard_normal(d), rng.standard_normal(d)

    def score(pos_q, pos_k):
        rq = rope(tl.tensor(q[None], dtype=np.float64), offset=pos_q).data[0]
        rk = rope(tl.tensor(k[None], dtype=np.float64), offset=pos_k).data[0]
        return rq @ rk

    assert score(i, j) == pytest.approx(score(i + shift, j + shift), abs=1e-9)


def test_rope_gradients():
    rng = np.random.default_rng(0)
    x = tl.tensor(rng.standard_normal((2, 3, 4)), dtype=np.float64, requires_grad=True)
    rope = nn.RotaryEmbedding(4)
    tl.gradcheck(lambda x: rope(x, offset=2), [x])
    tl.gradgradcheck(lambda x: rope(x) * rope(x), [x])
    cos, sin = rope.tables(3, np.float64)
    tl.gradcheck(lambda x: Rotary.apply(x, cos=cos[:3], sin=sin[:3]), [x])
    with pytest.raises(ValueError):
        nn.RotaryEmbedding(5)
