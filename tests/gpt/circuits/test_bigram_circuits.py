"""gpt/circuits/bigram.py: bigram counts, conditional entropy, and loss = entropy + KL."""

from __future__ import annotations

import numpy as np
import pytest

from gpt import circuits as C
from gpt.config import GPTConfig
from gpt.model import GPT

from .circuit_models import set_param


def test_bigram_table_entropy_and_kl():
    ids = np.array([0, 1, 0, 1, 0, 2, 2, 1])
    t = C.bigram_table(ids, 4)
    assert t.sum() == len(ids) - 1 and t[0, 1] == 2 and t[2, 2] == 1 and t[3].sum() == 0
    # row 0: 1 w.p. 2/3, 2 w.p. 1/3; row 1: 0 always; row 2: 2 or 1 equally
    p0, p1, p2 = 3 / 7, 2 / 7, 2 / 7
    h0 = -(2 / 3 * np.log(2 / 3) + 1 / 3 * np.log(1 / 3))
    assert C.conditional_entropy(t) == pytest.approx(p0 * h0 + p1 * 0 + p2 * np.log(2))
    with pytest.raises(ValueError):
        C.bigram_table([0, 5], 4)


def test_zero_layer_model_loss_is_entropy_plus_kl():
    """A zero-layer model set to the log of the bigram table has KL 0; any model's mean loss
    over the pairs is H + KL."""
    rng = np.random.default_rng(0)
    V = 6
    ids = rng.integers(0, V, 400)
    table = C.bigram_table(ids, V)
    cfg = GPTConfig(
        vocab_size=V,
        n_layer=0,
        d_model=V,
        n_head=1,
        block_size=8,
        positional="none",
        final_norm=False,
        tie_weights=False,
        bias=False,
    )
    model = GPT(cfg)
    H = C.conditional_entropy(table)
    logq = C.model_bigram_logprobs(model)
    loss = -logq[ids[:-1], ids[1:]].mean()
    assert loss == pytest.approx(H + C.bigram_kl(model, table), rel=1e-5)
    cond = (table + 1e-12) / (table + 1e-12).sum(1, keepdims=True)
    set_param(model.embed.W, np.eye(V))
    set_param(model.W_U, np.log(cond))
    assert C.bigram_kl(model, table) == pytest.approx(0.0, abs=1e-5)


def test_bigram_table_of_a_batch_counts_pairs_within_each_sequence():
    """A batch (B, T) counts B·(T-1) pairs, the sum of each row's table: the last token of
    one sequence is not followed by the first of the next."""
    ids = np.array([[0, 1, 2], [3, 0, 1]])
    t = C.bigram_table(ids, 4)
    assert t.sum() == 4 and t[2, 3] == 0
    np.testing.assert_array_equal(t, C.bigram_table(ids[0], 4) + C.bigram_table(ids[1], 4))
