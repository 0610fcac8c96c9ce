"""gpt.circuits on a grouped-query model (issue 20): the cache has the key/value heads under
hook_k/hook_v and every query head's pattern, the QK and OV circuits of a query head use its
key/value head (TransformerLens's convention: key/value heads repeated), and patching sweeps
over heads count key/value heads for hook_k/hook_v."""

from __future__ import annotations

import numpy as np

import gpt.circuits as C
import tensorlab as tl
from gpt.config import GPTConfig
from gpt.model import GPT


def gqa_model() -> GPT:
    tl.manual_seed(0)
    cfg = GPTConfig(
        vocab_size=13,
        block_size=8,
        n_layer=2,
        n_head=4,
        n_kv_head=2,
        d_model=16,
        positional="rope",
        rope_layout="half",
        norm="rmsnorm",
        activation="swiglu",
        bias=False,
    )
    return GPT(cfg).eval()


def test_cache_shapes_and_the_pattern_uses_the_groups_keys():
    model = gqa_model()
    tokens = np.random.default_rng(0).integers(0, 13, (2, 6))
    _, cache = C.run_with_cache(model, tl.tensor(tokens))
    assert cache["blocks.0.attn.hook_q"].shape == (2, 6, 4, 4)
    assert cache["blocks.0.attn.hook_k"].shape == (2, 6, 2, 4)
    assert cache["blocks.0.attn.hook_pattern"].shape == (2, 4, 6, 6)
    # recompute head 3's pattern from its queries and key/value head 3 // 2 = 1 (after RoPE)
    attn = model.blocks[0].attn
    q = attn.rotary(tl.tensor(cache["blocks.0.attn.hook_q"])).numpy()
    k = attn.rotary(tl.tensor(cache["blocks.0.attn.hook_k"])).numpy()
    S = np.einsum("bqd,bkd->bqk", q[:, :, 3], k[:, :, 1]) / 2.0
    S = np.where(np.tri(6, dtype=bool), S, -np.inf)
    A = np.exp(S - S.max(-1, keepdims=True))
    A /= A.sum(-1, keepdims=True)
    np.testing.assert_allclose(cache["blocks.0.attn.hook_pattern"][:, 3], A, atol=1e-6)


def test_qk_and_ov_circuits_of_a_query_head_use_its_kv_head():
    model = gqa_model()
    attn = model.blocks[1].attn
    gain = model.blocks[1].ln1.w.numpy().astype(np.float64)[:, None]
    for head in range(4):
        kv = head // 2
        W_Q = gain * attn.W_q.numpy()[:, head].astype(np.float64)
        W_K = gain * attn.W_k.numpy()[:, kv].astype(np.float64)
        W_V = gain * attn.W_v.numpy()[:, kv].astype(np.float64)
        W_O = attn.W_O.numpy()[head].astype(np.float64)
        np.testing.assert_allclose(C.W_QK(model, 1, head).full(), W_Q @ W_K.T, atol=1e-10)
        np.testing.assert_allclose(C.W_OV(model, 1, head).full(), W_V @ W_O, atol=1e-10)


def test_patching_by_head_counts_kv_heads_for_keys():
    model = gqa_model()
    rng = np.random.default_rng(1)
    clean, corrupted = rng.integers(0, 13, (1, 6)), rng.integers(0, 13, (1, 6))
    _, cache = C.run_with_cache(model, tl.tensor(clean))

    def metric(logits):
        return logits[0, -1, 0]

    by_k = C.activation_patching(model, corrupted, cache, metric, "attn.hook_k", by="head")
    by_z = C.activation_patching(model, corrupted, cache, metric, "attn.hook_z", by="head")
    assert by_k.shape == (2, 2) and by_z.shape == (2, 4)
    # each entry is the patch of that key head alone
    one = C.patch_activation(model, corrupted, cache, "blocks.1.attn.hook_k", head=1)
    assert by_k[1, 1] == float(metric(one).item())
    # patching key head 1 of the last layer changes only query heads 2 and 3's patterns
    name, pattern = "blocks.1.attn.hook_k", ["blocks.1.attn.hook_pattern"]

    def patch(act):
        out = act.numpy().copy()
        out[:, :, 1] = cache[name][:, :, 1]
        return out

    with C.hooks(model, [(name, patch)]):
        _, patched = C.run_with_cache(model, tl.tensor(corrupted), pattern)
    _, base = C.run_with_cache(model, tl.tensor(corrupted), pattern)
    P, Q = patched[pattern[0]], base[pattern[0]]
    np.testing.assert_array_equal(P[:, :2], Q[:, :2])
    assert np.abs(P[:, 2:] - Q[:, 2:]).max() > 1e-3
