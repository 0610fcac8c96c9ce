"""A head's weights as circuits: W_QK and W_OV on the residual stream, the QK and OV
circuits from tokens (or positions) to tokens, and Q-, K-, V-composition scores between
heads. The convention (row vectors) and what the circuits leave out: docs/interpretability.md,
section 8."""

from __future__ import annotations

import itertools

import numpy as np

from gpt.circuits.factored import FactoredMatrix, _arr
from gpt.circuits.resid import folded_unembed


def _attn(model, layer: int):
    n = len(model.blocks)
    if not -n <= layer < n:
        raise IndexError(f"layer {layer} is out of range for a model of {n} layers")
    return model.blocks[layer]


def _head_weights(model, layer: int, head: int, fold_ln: bool = True):
    """W_Q, W_K, W_V (d_model, d_head) and W_O (d_head, d_model) of one head, float64, with
    the block's pre-attention norm gain folded into the input side."""
    block = _attn(model, layer)
    attn = block.attn
    if not 0 <= head < attn.n_head:
        raise IndexError(f"head {head} is out of range for {attn.n_head} heads")
    WQ, WK, WV = (_arr(W[head]) for W in (attn.W_Q, attn.W_K, attn.W_V))
    WO = _arr(attn.W_O[head])
    # post-norm: attention reads the stream itself, and ln1 normalizes after the sum
    g = getattr(block.ln1, "w", None) if fold_ln and not block.post else None
    if g is not None:  # (no gain with norm="none")
        g = _arr(g)[:, None]
        WQ, WK, WV = g * WQ, g * WK, g * WV
    return WQ, WK, WV, WO


def _source(model, which: str) -> np.ndarray:
    if which == "token":
        return _arr(model.W_E)
    if which == "pos":
        if model.pos is None or not hasattr(model.pos, "W_pos"):
            raise ValueError(
                f"positional={model.config.positional!r} has no learned position table W_pos; "
                "the positional terms need positional='learned'"
            )
        return _arr(model.pos.W_pos)
    raise ValueError(f"expected 'token' or 'pos', got {which!r}")


def W_QK(model, layer: int, head: int, fold_ln: bool = True) -> FactoredMatrix:
    """The head's bilinear form on the residual stream, W_Q^h (W_K^h)ᵀ (d_model × d_model,
    rank ≤ d_head): score(query x, key y) = x W_QK yᵀ (before the 1/√d_head scale)."""
    WQ, WK, _, _ = _head_weights(model, layer, head, fold_ln)
    return FactoredMatrix(WQ, WK.T)


def W_OV(model, layer: int, head: int, fold_ln: bool = True) -> FactoredMatrix:
    """What the head writes for each residual vector it attends to: W_V^h W_O^h
    (d_model × d_model, rank ≤ d_head), as a row-vector map x ↦ x W_OV."""
    _, _, WV, WO = _head_weights(model, layer, head, fold_ln)
    return FactoredMatrix(WV, WO)


def qk_circuit(
    model,
    layer: int,
    head: int,
    query: str = "token",
    key: str = "token",
    scale: bool = False,
    fold_ln: bool = True,
) -> FactoredMatrix:
    """The QK circuit W_E W_Q^h (W_K^h)ᵀ W_Eᵀ (vocab × vocab) as A = W_E W_Q^h (vocab, d_head),
    B = (W_K^h)ᵀ W_Eᵀ (d_head, vocab): entry [i, j] is the score of query token i for key
    token j through the direct path.

    ``query``/``key``: "token" (W_E) or "pos" (learned W_pos) for either side, so
    ``query="pos", key="pos"`` is the positional term (block_size × block_size).
    ``scale``: multiply by the attention's 1/√d_head, so entries are the pre-softmax logits.
    """
    WQ, WK, _, _ = _head_weights(model, layer, head, fold_ln)
    A = _source(model, query) @ WQ
    if scale:
        A = A * _attn(model, layer).attn.scale
    return FactoredMatrix(A, WK.T @ _source(model, key).T)


def ov_circuit(
    model, layer: int, head: int, source: str = "token", fold_ln: bool = True
) -> FactoredMatrix:
    """The OV circuit W_E W_V^h W_O^h W_U (vocab × vocab) as A = W_E W_V^h (vocab, d_head),
    B = W_O^h W_U (d_head, vocab): row i is the change in every output logit when the head
    attends fully to token i, through the direct path (the paper's W_U W_O^h W_V^h W_E,
    transposed). ``source="pos"`` uses W_pos for the attended vector instead of W_E."""
    _, _, WV, WO = _head_weights(model, layer, head, fold_ln)
    W_U = folded_unembed(model)[0] if fold_ln else _arr(model.W_U)
    return FactoredMatrix(_source(model, source) @ WV, WO @ W_U)


def composition_scores(model, fold_ln: bool = True) -> dict[str, np.ndarray]:
    """Q-, K- and V-composition scores between every head of an earlier layer and every head
    of a later one, as in the paper: ‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F), with W_B = W_OV of the
    earlier head and W_A the later head's W_QK (Q: its query side, K: its key side) or W_OV.

    In row-vector form: Q-composition ‖W_OV^{h0} W_QK^{h1}‖, K-composition
    ‖W_QK^{h1} (W_OV^{h0})ᵀ‖, V-composition ‖W_OV^{h0} W_OV^{h1}‖ (Frobenius norms do not see
    transposes, so these equal the paper's). Returns arrays "q", "k", "v" of shape
    (n_layer, n_head, n_layer, n_head): [l1, h1, l0, h0] for l0 < l1 (zero elsewhere).
    """
    L = len(model.blocks)
    H = model.config.n_head if L else 0
    qk = {(l, h): W_QK(model, l, h, fold_ln) for l in range(L) for h in range(H)}
    ov = {(l, h): W_OV(model, l, h, fold_ln) for l in range(L) for h in range(H)}
    norms = {key: (qk[key].norm(), ov[key].norm()) for key in qk}
    out = {c: np.zeros((L, H, L, H)) for c in "qkv"}
    for (l1, h1), (l0, h0) in itertools.product(qk, ov):  # later head, earlier head
        if l0 >= l1:
            continue
        o, q = ov[l0, h0], qk[l1, h1]
        n_o, (n_q, n_v) = norms[l0, h0][1], norms[l1, h1]
        out["q"][l1, h1, l0, h0] = (o @ q).norm() / (n_o * n_q)
        out["k"][l1, h1, l0, h0] = (q @ o.T).norm() / (n_q * n_o)
        out["v"][l1, h1, l0, h0] = (o @ ov[l1, h1]).norm() / (n_o * n_v)
    return out
