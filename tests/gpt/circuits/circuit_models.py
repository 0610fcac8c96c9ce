"""Models and helpers the circuits tests share.

How exactness is arranged: the circuits leave out each norm's division by a per-position
scale (and LayerNorm's centring). ``exact_model`` builds models whose embedding rows have zero
mean (so centring does nothing) and no biases; the tests read each position's scale
σ = sqrt(var + eps) from the cache (``hook_resid_pre``, see ``sigma``) and multiply it back
in: then the model's q·k and its head outputs equal the circuit entries to float32 precision.
"""

from __future__ import annotations

import numpy as np

import tensorlab as tl
from gpt.config import GPTConfig
from gpt.model import GPT


def set_param(param, value) -> None:
    with tl.no_grad():
        param.copy_(np.asarray(value, dtype=param.data.dtype))


def small(**kw) -> GPTConfig:
    base = dict(vocab_size=11, block_size=12, n_layer=2, n_head=2, d_model=16)
    base.update(kw)
    return GPTConfig(**base)


def exact_model(positional: str = "none", n_layer: int = 1, seed: int = 0) -> GPT:
    """Attention-only, no biases, no final norm, untied, LayerNorm with random gains, and
    embedding (and position) rows of zero mean."""
    cfg = small(
        n_layer=n_layer,
        attn_only=True,
        bias=False,
        final_norm=False,
        tie_weights=False,
        positional=positional,
    )
    tl.manual_seed(seed)
    model = GPT(cfg)
    rng = np.random.default_rng(seed)
    E = rng.standard_normal((cfg.vocab_size, cfg.d_model))
    set_param(model.embed.W, E - E.mean(1, keepdims=True))
    if model.pos is not None:
        P = 0.5 * rng.standard_normal((cfg.block_size, cfg.d_model))
        set_param(model.pos.W_pos, P - P.mean(1, keepdims=True))
    set_param(model.W_U, rng.standard_normal(model.W_U.shape))
    for block in model.blocks:
        set_param(block.ln1.w, rng.uniform(0.5, 1.5, cfg.d_model))
        for W in (block.attn.W_q, block.attn.W_k, block.attn.W_v, block.attn.W_O):
            set_param(W, rng.standard_normal(W.shape) / 4)
    return model


def sigma(resid: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm's per-position scale sqrt(var + eps) of (B, T, d) vectors (mean zero here)."""
    return np.sqrt(resid.astype(np.float64).var(-1) + eps)


def hand_built_induction_model(V: int = 9, seq_len: int = 8, c: float = 20.0) -> GPT:
    """Two single-head attention-only layers, RMSNorm, d_model = V + T + V with one-hot
    subspaces: token identity [0, V), position [V, V+T), previous token [V+T, V+T+V).

    - layer 0 (previous-token head): position t queries u_t, position s keys u_{s+1}, so t
      attends to t-1; its OV copies the token subspace into the previous-token subspace;
    - layer 1 (induction head): the query reads the current token, the key reads the
      previous-token subspace, so a token attends to the position after its earlier
      occurrence; its OV copies that position's token into the token subspace, and W_U reads
      the token subspace, so the model predicts the repeat.
    RMSNorm only rescales each position by a positive number, which the large c absorbs.
    """
    T = 2 * seq_len + 1
    d = V + T + V
    cfg = GPTConfig(
        vocab_size=V,
        block_size=T,
        n_layer=2,
        n_head=1,
        d_model=d,
        attn_only=True,
        positional="learned",
        norm="rmsnorm",
        bias=False,
        final_norm=False,
        tie_weights=False,
    )
    model = GPT(cfg)
    tok, pos, prev = np.arange(V), V + np.arange(T), V + T + np.arange(V)
    E, P = np.zeros((V, d)), np.zeros((T, d))
    E[tok, tok] = 1
    P[np.arange(T), pos] = 1
    set_param(model.embed.W, E)
    set_param(model.pos.W_pos, P)
    W0, W1 = np.zeros((d, 3, 1, d)), np.zeros((d, 3, 1, d))
    O0, O1 = np.zeros((1, d, d)), np.zeros((1, d, d))
    W0[pos, 0, 0, np.arange(T)] = c  # query: position t -> c u_t
    W0[pos[:-1], 1, 0, np.arange(1, T)] = 1  # key: position s -> u_{s+1}
    W0[tok, 2, 0, tok] = 1  # value: the token
    O0[0, tok, prev] = 1  # written into the previous-token subspace
    W1[tok, 0, 0, tok] = c  # query: the current token
    W1[prev, 1, 0, tok] = 1  # key: the previous token
    W1[tok, 2, 0, tok] = 1  # value: the token there
    O1[0, tok, tok] = 3  # written (strongly) into the token subspace
    for block, W, O in ((model.blocks[0], W0, O0), (model.blocks[1], W1, O1)):
        for j, name in enumerate("qkv"):  # W[:, j] is (d, H, d_head), as W_q is stored
            set_param(getattr(block.attn, f"W_{name}"), W[:, j])
        set_param(block.attn.W_O, O)
    U = np.zeros((d, V))
    U[tok, tok] = 10
    set_param(model.W_U, U)
    return model


def randomized(seed: int = 0, std: float = 0.3, **kw) -> GPT:
    """A ``small(**kw)`` GPT with every parameter N(0, std²): gains, biases and b_O far from
    their initial 1s and 0s, and heads whose patterns are far from uniform."""
    tl.manual_seed(seed)
    model = GPT(small(**kw))
    rng = np.random.default_rng(seed)
    with tl.no_grad():
        for p in model.parameters():
            p.copy_(rng.standard_normal(p.shape) * std)
    return model
