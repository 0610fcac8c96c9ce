"""gpt/circuits/detectors.py: the detection patterns on a known token list, and detect_head on
hand-built heads (previous-token, induction, duplicate-token) over a user's own prompts."""

from __future__ import annotations

import numpy as np
import pytest

from gpt import circuits as C
from gpt.config import GPTConfig
from gpt.model import GPT

from .circuit_models import hand_built_induction_model, randomized, set_param


def test_detection_patterns_on_a_known_sequence():
    tokens = [5, 1, 5, 2, 1]
    dup = C.duplicate_token_pattern(tokens)
    assert {tuple(ij) for ij in np.argwhere(dup)} == {(2, 0), (4, 1)}
    ind = C.induction_pattern(tokens)
    assert {tuple(ij) for ij in np.argwhere(ind)} == {(2, 1), (4, 2)}
    prev = C.previous_token_pattern(tokens)
    assert {tuple(ij) for ij in np.argwhere(prev)} == {(i, i - 1) for i in range(1, 5)}


def duplicate_token_model(V: int = 8, T: int = 12, c: float = 100.0) -> GPT:
    """One head, no norm, one-hot token and position subspaces (d = V + T): the query reads
    c·(token, position), the key (token, -position), so the score (before the 1/√d_head
    scale) is c for an earlier copy of the same token and 0 for the query itself and every
    other key."""
    cfg = GPTConfig(
        vocab_size=V,
        block_size=T,
        n_layer=1,
        n_head=1,
        d_model=V + T,
        attn_only=True,
        positional="learned",
        norm="none",
        bias=False,
        final_norm=False,
        tie_weights=False,
    )
    model = GPT(cfg)
    tok, pos = np.arange(V), V + np.arange(T)
    E, P = np.zeros((V, V + T)), np.zeros((T, V + T))
    E[tok, tok] = 1
    P[np.arange(T), pos] = 1
    set_param(model.embed.W, E)
    set_param(model.pos.W_pos, P)
    Wq, Wk = np.zeros((V + T, 1, V + T)), np.zeros((V + T, 1, V + T))
    Wq[tok, 0, tok], Wq[pos, 0, pos] = c, c
    Wk[tok, 0, tok], Wk[pos, 0, pos] = 1, -1
    set_param(model.blocks[0].attn.W_q, Wq)
    set_param(model.blocks[0].attn.W_k, Wk)
    return model


def test_a_hand_built_duplicate_token_head_is_detected():
    """On the user's own prompts (two token lists with repeats at irregular places) the
    hand-built head puts all its attention on earlier copies: duplicate-token score 1, and
    low previous-token and induction scores."""
    model = duplicate_token_model()
    prompts = np.array([[3, 1, 4, 1, 5, 2, 6, 5, 3, 0, 7, 2], [0, 1, 2, 0, 3, 4, 5, 6, 7, 4, 4, 1]])
    dup = C.detect_head(model, prompts, "duplicate_token")
    assert dup.shape == (1, 1)
    assert dup[0, 0] > 0.99
    assert C.detect_head(model, prompts, "previous_token")[0, 0] < 0.3
    assert C.detect_head(model, prompts, "induction")[0, 0] < 0.1


def test_hand_built_induction_model_heads_are_detected_on_a_users_prompt():
    """Layer 0 of the hand-built model is a previous-token head and layer 1 an induction
    head: detect_head says so on a prompt that repeats a phrase (not [r, r]), agreeing with
    induction_scores on repeated random tokens."""
    model = hand_built_induction_model(V=9, seq_len=8)
    prompt = [8, 0, 1, 2, 3, 4, 5, 0, 1, 2, 6, 7, 4, 5, 3]  # "0 1 2" and "4 5" come back
    prev = C.detect_head(model, prompt, "previous_token")
    ind = C.detect_head(model, prompt, "induction")
    assert prev[0, 0] > 0.9 > 0.3 > prev[1, 0]
    assert ind[1, 0] > 0.9 > 0.1 > ind[0, 0]
    kw = dict(seq_len=8, batch=4, low=0, high=8, bos=8, seed=1)
    np.testing.assert_allclose(ind[1, 0], C.induction_scores(model, **kw)[1, 0], atol=0.05)


def test_user_pattern_and_exclusions():
    """A user's own pattern (here the previous-token one as an array) scores as the named
    one; excluding the first token renormalizes the rest."""
    model = hand_built_induction_model(V=9, seq_len=8)
    prompt = np.array([[8, 0, 1, 2, 3, 0, 1, 2, 3]])
    named = C.detect_head(model, prompt, "previous_token")
    own = C.detect_head(model, prompt, np.eye(9, k=-1))
    np.testing.assert_allclose(own, named)
    excl = C.detect_head(model, prompt, "previous_token", exclude_bos=True)
    assert excl[0, 0] >= named[0, 0] - 1e-9
    with pytest.raises(ValueError, match="pattern must be one of"):
        C.detect_head(model, prompt, "copying")
    with pytest.raises(ValueError, match="empty on these tokens"):
        C.detect_head(model, [[0, 1, 2, 3]], "duplicate_token")


def test_a_users_pattern_must_be_square_and_causal():
    """As TransformerLens requires: (T, T) and lower triangular. A weight above the diagonal
    marks a key the query can never attend to, so that query would score 0 without a word
    (a "next token" pattern would read as a head that never does it); a (T,) row would
    broadcast to every query."""
    model = hand_built_induction_model(V=9, seq_len=8)
    prompt = np.array([[8, 0, 1, 2, 3, 0, 1, 2, 3]])
    with pytest.raises(ValueError, match="above the diagonal"):
        C.detect_head(model, prompt, np.eye(9, k=1))
    with pytest.raises(ValueError, match=r"pattern must be \(T, T\) = \(9, 9\) .* got \(9,\)"):
        C.detect_head(model, prompt, np.ones(9))


def test_exclusions_renormalize_the_attention_left_by_hand():
    """On a random model with large weights (heads that put real mass on key 0 and on the
    query itself), each score equals the module docstring's recipe done by hand with loops
    over the cached patterns: drop key 0 (exclude_bos) and/or the diagonal
    (exclude_current_token) from both the pattern and the detection pattern, divide each
    query's attention on its targets by what is left of its row, and average over the
    queries (of every prompt) that still have a target. The patterns are float32 model
    outputs (detect_head's own run may round them differently): rtol 1e-5. Without the
    division the hand scores would differ by more than 0.01 (far above that tolerance), so
    the renormalization is what is checked."""
    model = randomized(0, std=1.0, n_layer=2, attn_only=True)
    tokens = np.array([[3, 1, 4, 1, 5, 3, 1, 4, 2, 5, 3, 1], [0, 2, 2, 7, 0, 2, 7, 7, 9, 0, 2, 6]])
    B, T = tokens.shape
    L, H = 2, model.config.n_head
    _, cache = C.run_with_cache(model, tokens)
    patterns = [cache[f"blocks.{i}.attn.hook_pattern"].astype(np.float64) for i in range(L)]
    assert np.mean([p[:, :, 1:, 0].mean() for p in patterns]) > 0.1  # real mass on key 0
    named = {
        "previous_token": C.previous_token_pattern,
        "duplicate_token": C.duplicate_token_pattern,
        "induction": C.induction_pattern,
    }
    for name, make in named.items():
        detection = [make(t) for t in tokens]
        for bos, cur in ((True, False), (False, True), (True, True)):
            expect, unnormalized = np.zeros((L, H)), np.zeros((L, H))
            for layer, h in np.ndindex(L, H):
                masses, raw = [], []
                for b, i in np.ndindex(B, T):
                    keys = [j for j in range(T) if not (bos and j == 0) and not (cur and j == i)]
                    targets = [j for j in keys if detection[b][i, j]]
                    if not targets:
                        continue
                    row = patterns[layer][b, h, i]
                    masses.append(row[targets].sum() / row[keys].sum())
                    raw.append(row[targets].sum())
                expect[layer, h], unnormalized[layer, h] = np.mean(masses), np.mean(raw)
            assert np.abs(expect - unnormalized).max() > 0.01, (name, bos, cur)
            got = C.detect_head(model, tokens, name, exclude_bos=bos, exclude_current_token=cur)
            np.testing.assert_allclose(got, expect, rtol=1e-5, err_msg=f"{name} {bos} {cur}")
