"""Head detectors on a user's own prompts: how much of each head's attention goes where a
previous-token, duplicate-token or induction head would look, or where any pattern the user
gives says (TransformerLens's ``detect_head``).

The detection patterns are (T_q, T_k) 0/1 matrices over the token ids (``PATTERNS``). The score
of a head is the attention mass it puts on the pattern's keys, averaged over the queries that
have at least one such key (and over the batch). A perfect detector head scores 1, a head that
never looks there 0. (TransformerLens's "mul" score divides by every query instead, so there a
perfect head scores the share of queries that have a target.)
"""

from __future__ import annotations

import numpy as np

from gpt.circuits.hooks import _as_tokens, run_with_cache


def previous_token_pattern(tokens) -> np.ndarray:
    """(T, T): 1 at [i, i-1]."""
    T = len(tokens)
    return np.eye(T, k=-1)


def duplicate_token_pattern(tokens) -> np.ndarray:
    """(T, T): 1 at [i, j] for j < i with tokens[j] == tokens[i]."""
    t = np.asarray(tokens)
    return np.tril(t[:, None] == t[None, :], k=-1).astype(np.float64)


def induction_pattern(tokens) -> np.ndarray:
    """(T, T): 1 at [i, j+1] for j < i with tokens[j] == tokens[i]."""
    dup = duplicate_token_pattern(tokens)
    out = np.zeros_like(dup)
    out[:, 1:] = dup[:, :-1]
    return out


PATTERNS = {
    "previous_token": previous_token_pattern,
    "duplicate_token": duplicate_token_pattern,
    "induction": induction_pattern,
}


def _own_pattern(pattern, T: int) -> np.ndarray:
    """A pattern of the user's own, (T, T) and lower triangular as in TransformerLens (a key
    after its query can never be attended to; a (T,) row would broadcast)."""
    pattern = np.asarray(pattern, dtype=np.float64)
    if pattern.shape != (T, T):
        raise ValueError(
            f"pattern must be (T, T) = ({T}, {T}) for these tokens, got {pattern.shape}"
        )
    if np.triu(pattern, k=1).any():
        raise ValueError(
            "pattern has weights above the diagonal (key after query), where causal "
            "attention is always 0; make it lower triangular"
        )
    return pattern


def detect_head(
    model,
    tokens,
    pattern="duplicate_token",
    exclude_bos: bool = False,
    exclude_current_token: bool = False,
) -> np.ndarray:
    """Scores (n_layer, n_head) of every head for ``pattern`` (a name in ``PATTERNS`` or a
    lower-triangular (T, T) array) on ``tokens`` (B, T) or (T,) (see the module docstring).
    ``exclude_bos`` and ``exclude_current_token`` drop the attention to key 0 and to the query
    itself and renormalize the rest."""
    tokens = _as_tokens(tokens).numpy()
    B, T = tokens.shape
    if isinstance(pattern, str):
        if pattern not in PATTERNS:
            raise ValueError(f"pattern must be one of {', '.join(PATTERNS)} or an array")
        detection = np.stack([PATTERNS[pattern](t) for t in tokens])  # (B, T, T)
    else:
        detection = np.broadcast_to(_own_pattern(pattern, T), (B, T, T)).copy()
    keep = np.ones((T, T))
    if exclude_bos:
        keep[:, 0] = 0
    if exclude_current_token:
        keep[np.arange(T), np.arange(T)] = 0
    detection = detection * keep
    rows = detection.any(-1)  # (B, T): queries with something to detect
    if not rows.any():
        raise ValueError("the detection pattern is empty on these tokens: nothing to score")
    L = len(model.blocks)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(L)]
    _, cache = run_with_cache(model, tokens, names=names)
    scores = np.zeros((L, model.config.n_head))
    for i, name in enumerate(names):
        pat = cache[name].astype(np.float64) * keep  # (B, H, T, T)
        total = pat.sum(-1)
        on_target = (pat * detection[:, None]).sum(-1)  # (B, H, T)
        mass = np.divide(on_target, total, out=np.zeros_like(total), where=total > 0)
        scores[i] = mass.transpose(1, 0, 2)[:, rows].mean(-1)
    return scores
