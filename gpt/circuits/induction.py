"""Induction heads: induction and previous-token scores of every head on repeated random
tokens [r, r], the per-position loss on them, and a text table of per-head scores."""

from __future__ import annotations

import numpy as np

from gpt.circuits.hooks import run_with_cache, token_losses
from nn.checks import check_int
from tensorlab import Tensor


def repeated_tokens(
    batch: int,
    seq_len: int,
    low: int = 0,
    high: int = 64,
    seed: int = 0,
    bos: int | None = None,
    distinct: bool = True,
) -> np.ndarray:
    """``batch`` sequences [r, r] (optionally after a first token ``bos``) with r of
    ``seq_len`` random tokens from [low, high): (batch, 2·seq_len (+1)) int64.

    ``distinct``: draw r without repeats when the range allows, so every token of the second
    copy has exactly one earlier occurrence to look up (with a small vocabulary, repeats inside
    r would split even a perfect induction head's attention)."""
    if high - low <= 0:
        raise ValueError(f"empty token range [{low}, {high})")
    rng = np.random.default_rng(seed)
    if distinct and high - low >= seq_len:
        r = np.stack([rng.permutation(high - low)[:seq_len] for _ in range(batch)]) + low
    else:
        r = rng.integers(low, high, size=(batch, seq_len))
    out = np.concatenate([r, r], axis=1)
    if bos is not None:
        out = np.concatenate([np.full((batch, 1), bos), out], axis=1)
    return out.astype(np.int64)


def _patterns(model, tokens) -> tuple[np.ndarray, Tensor]:
    """Attention patterns of every layer, stacked: (n_layer, B, H, T, T), and the logits."""
    L = len(model.blocks)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(L)]
    logits, cache = run_with_cache(model, tokens, names=names)
    return np.stack([cache[n] for n in names]) if L else np.zeros((0,)), logits


def _induction_from(pat: np.ndarray, seq_len: int, offset: int) -> np.ndarray:
    """Mean attention (per layer, head) from each token of the second copy to the token after
    its earlier occurrence: query q = offset + seq_len + i, key q - seq_len + 1."""
    q = offset + seq_len + np.arange(seq_len)
    return pat[:, :, :, q, q - seq_len + 1].mean(axis=(1, 3))


def _previous_from(pat: np.ndarray) -> np.ndarray:
    """Mean attention (per layer, head) from every position t ≥ 1 to position t - 1."""
    t = np.arange(1, pat.shape[-1])
    return pat[:, :, :, t, t - 1].mean(axis=(1, 3))


def induction_report(
    model,
    seq_len: int | None = None,
    batch: int = 8,
    low: int = 0,
    high: int | None = None,
    seed: int = 0,
    bos: int | None = None,
    distinct: bool = True,
) -> dict:
    """One run on :func:`repeated_tokens`: "induction" and "previous_token" scores (n_layer,
    n_head), "per_position" loss (T-1,), "first_half" and "second_half" mean losses (see
    :func:`repeated_sequence_losses`), and the "tokens". ``seq_len`` defaults to half the
    block size, ``high`` to the vocabulary size."""
    offset = 0 if bos is None else 1
    seq_len = (model.config.block_size - offset) // 2 if seq_len is None else seq_len
    high = model.config.vocab_size if high is None else high
    if 2 * seq_len + offset > model.config.block_size:
        raise ValueError(
            f"2·seq_len{' + 1' if offset else ''} = {2 * seq_len + offset} positions exceed "
            f"block_size={model.config.block_size}"
        )
    check_int("seq_len", seq_len, 2)
    tokens = repeated_tokens(batch, seq_len, low, high, seed, bos, distinct)
    pat, logits = _patterns(model, tokens)
    L, H = len(model.blocks), model.config.n_head
    per_pos = token_losses(logits, tokens).mean(0)  # entry t-1 predicts token t
    # tokens offset+1 .. offset+seq_len-1 (first copy), offset+seq_len+1 .. T-1 (second)
    first = per_pos[offset : offset + seq_len - 1].mean()
    second = per_pos[offset + seq_len :].mean()
    return {
        "induction": _induction_from(pat, seq_len, offset) if L else np.zeros((0, H)),
        "previous_token": _previous_from(pat) if L else np.zeros((0, H)),
        "per_position": per_pos,
        "first_half": float(first),
        "second_half": float(second),
        "tokens": tokens,
    }


def induction_scores(model, *args, **kwargs) -> np.ndarray:
    """Induction score of every head (n_layer, n_head) on :func:`repeated_tokens`: the mean
    attention from each token in the second copy to the token right after its earlier copy
    (near 1 for an induction head). Arguments as for :func:`induction_report`."""
    return induction_report(model, *args, **kwargs)["induction"]


def previous_token_scores(model, tokens=None, **kwargs) -> np.ndarray:
    """Mean attention to the previous position (n_layer, n_head) over every position t ≥ 1
    of ``tokens`` (default: :func:`induction_report`'s, with ``kwargs``)."""
    if tokens is None:
        return induction_report(model, **kwargs)["previous_token"]
    pat, _ = _patterns(model, tokens)
    return _previous_from(pat)


def repeated_sequence_losses(model, **kwargs) -> dict:
    """:func:`induction_report`'s "per_position" loss (T-1,), and "first_half"/"second_half":
    the means over the tokens of the first and second copy of r (each copy's first token
    left out: nothing predicts it). An induction head lowers the second half's."""
    rep = induction_report(model, **kwargs)
    return {k: rep[k] for k in ("per_position", "first_half", "second_half")}


def format_head_table(
    scores: np.ndarray, title: str = "", fmt: str = "{:6.3f}", row: str = "layer", col: str = "h"
) -> str:
    """A (rows, heads) array as a small text table; rows are labelled ``f"{row} {i}"`` and
    columns ``f"{col}{j}"`` (default: layers × heads)."""
    R, H = scores.shape
    width = len(f"{row} {R - 1}")
    lines = [title] if title else []
    lines.append(" " * width + " " + " ".join(f"{col + str(h):>6}" for h in range(H)))
    for i in range(R):
        lines.append(f"{row + ' ' + str(i):<{width}} " + " ".join(fmt.format(s) for s in scores[i]))
    return "\n".join(lines)
