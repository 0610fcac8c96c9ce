"""gpt/circuits/induction.py: induction and previous-token scores on a hand-built induction
circuit and on forced patterns, repeated tokens, and their errors."""

from __future__ import annotations

import numpy as np
import pytest

from gpt import circuits as C
from gpt.model import GPT

from .circuit_models import hand_built_induction_model, small


def test_hand_built_induction_head_scores_high_and_previous_token_head_low():
    V, seq_len = 9, 8
    model = hand_built_induction_model(V, seq_len)
    kw = dict(seq_len=seq_len, batch=6, low=0, high=V - 1, bos=V - 1, seed=1)
    ind = C.induction_scores(model, **kw)
    prev = C.previous_token_scores(model, **kw)
    assert ind.shape == prev.shape == (2, 1)
    assert ind[1, 0] > 0.9  # the induction head
    assert ind[0, 0] < 0.05  # the previous-token head is not one
    assert prev[0, 0] > 0.9 and prev[1, 0] < 0.3
    losses = C.repeated_sequence_losses(model, **kw)
    assert losses["per_position"].shape == (2 * seq_len,)
    assert losses["second_half"] < 0.1 < 1.0 < losses["first_half"]
    rep = C.induction_report(model, **kw)
    assert rep["tokens"].shape == (6, 2 * seq_len + 1) and np.all(rep["tokens"][:, 0] == V - 1)
    # K-composition: the layer-1 head reads what the layer-0 head wrote
    comp = C.composition_scores(model)
    assert comp["k"][1, 0, 0, 0] > comp["q"][1, 0, 0, 0]
    # explicit tokens for previous_token_scores
    assert C.previous_token_scores(model, rep["tokens"])[0, 0] > 0.9


def test_forced_patterns_give_the_expected_scores():
    """Independent of any weights: force every layer-0 head to attend to the previous token
    and every layer-1 head to the induction target through hook_pattern, and check the
    scores read them back."""
    cfg = small(attn_only=True, block_size=20, vocab_size=16)
    model = GPT(cfg)
    seq_len = 10
    T = 2 * seq_len
    prev_pat = np.zeros((T, T))
    prev_pat[0, 0] = 1
    prev_pat[np.arange(1, T), np.arange(T - 1)] = 1
    ind_pat = prev_pat.copy()
    q = np.arange(seq_len, T)
    ind_pat[q] = 0
    ind_pat[q, q - seq_len + 1] = 1
    forced = [
        ("blocks.0.attn.hook_pattern", lambda p: np.broadcast_to(prev_pat, p.shape).copy()),
        ("blocks.1.attn.hook_pattern", lambda p: np.broadcast_to(ind_pat, p.shape).copy()),
    ]
    tokens = C.repeated_tokens(3, seq_len, 0, 16, seed=0)
    with C.hooks(model, forced):
        rep = C.induction_report(model, seq_len=seq_len, batch=3)
    np.testing.assert_allclose(rep["induction"][0], 0.0)
    np.testing.assert_allclose(rep["induction"][1], 1.0)
    assert np.all(rep["previous_token"][0] == 1.0)
    assert np.all(rep["previous_token"][1] < 0.5)
    assert tokens.shape == (3, T)
    assert all(not m._forward_hooks for m in model.modules())


def test_repeated_tokens_and_errors():
    r = C.repeated_tokens(4, 5, low=3, high=10, seed=2)
    assert r.shape == (4, 10) and np.all(r[:, :5] == r[:, 5:])
    assert r.min() >= 3 and r.max() < 10
    assert all(len(set(row[:5])) == 5 for row in r)  # distinct within r
    model = GPT(small(attn_only=True))
    with pytest.raises(ValueError, match="block_size"):
        C.induction_scores(model, seq_len=7)
    assert C.induction_scores(model).shape == (2, 2)  # seq_len defaults to half the block
