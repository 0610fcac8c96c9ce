"""Zero-layer statistics: bigram counts, the conditional entropy they set as the floor on
the loss, and the KL from a model's next-token distributions to them."""

from __future__ import annotations

import numpy as np

from gpt.circuits.factored import _arr
from gpt.circuits.hooks import run_with_cache
from tensorlab import log_softmax_array


def bigram_table(ids, vocab: int) -> np.ndarray:
    """Counts (vocab, vocab): ``table[a, b]`` = how often token b follows token a in ``ids``,
    one sequence (T,) or a batch (..., T) of them (pairs never cross from one sequence into
    the next)."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(f"token ids must lie in [0, {vocab}), got [{ids.min()}, {ids.max()}]")
    table = np.zeros((vocab, vocab), np.int64)
    np.add.at(table, (ids[..., :-1].ravel(), ids[..., 1:].ravel()), 1)
    return table


def _conditional(table) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """p(a) (rows' share of all pairs), p(b | a) (rows normalized; empty rows stay 0) and
    log p(b | a) (0 where p is)."""
    t = np.asarray(table, dtype=np.float64)
    rows = t.sum(1)
    total = rows.sum()
    if total <= 0:
        raise ValueError("the bigram table is empty")
    cond = np.divide(t, rows[:, None], out=np.zeros_like(t), where=rows[:, None] > 0)
    return rows / total, cond, np.log(cond, out=np.zeros_like(cond), where=cond > 0)


def conditional_entropy(table) -> float:
    """H(next | current) = -Σ_a p(a) Σ_b p(b|a) log p(b|a) in nats: the lowest mean
    cross-entropy any model that sees only the current token can reach on these pairs."""
    p_a, cond, logc = _conditional(table)
    return float(-(p_a[:, None] * cond * logc).sum())


def model_bigram_logprobs(model) -> np.ndarray:
    """log p_model(b | a) (vocab, vocab): the model's next-token distribution after each token
    a fed alone (a batch of one-token sequences at position 0). For a zero-layer model without
    positions this is its whole behaviour: log_softmax(W_E W_U) (up to the final norm)."""
    V = model.config.vocab_size
    logits, _ = run_with_cache(model, np.arange(V)[:, None], names=[])
    return log_softmax_array(_arr(logits)[:, 0], axis=-1)


def bigram_kl(model, table) -> float:
    """Σ_a p(a) KL(p(·|a) ‖ p_model(·|a)) in nats, weighting each current token by its share of
    the table's pairs: the gap between the model's cross-entropy on these pairs and the floor
    :func:`conditional_entropy` (cross-entropy = entropy + KL)."""
    p_a, cond, logc = _conditional(table)
    logq = model_bigram_logprobs(model)
    return float((p_a[:, None] * cond * (logc - logq)).sum())
