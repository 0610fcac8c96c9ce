"""gpt/circuits/patching.py: activation patching whole, by position and by head, the sweeps,
and attribution patching, on the hand-built induction model (where what each patch restores
is known) and on random models (where a whole stream restores everything, and a metric
linear in the activation makes attribution patching exact)."""

from __future__ import annotations

import numpy as np
import pytest

import nn
import tensorlab as tl
from gpt import circuits as C

from .circuit_models import hand_built_induction_model, randomized

SEQ = 8
SECOND = np.arange(SEQ + 1, 2 * SEQ)  # positions of the second copy whose next token repeats


def induction_pair():
    """The hand-built induction model (vocabulary 20) with clean [bos, r, r] (r from tokens
    0-9) and corrupted [bos, s, r] (s from tokens 10-18): in the corrupted run nothing earlier
    predicts the second copy."""
    model = hand_built_induction_model(V=20, seq_len=SEQ)
    clean = C.repeated_tokens(4, SEQ, high=10, bos=19, seed=0)
    corrupted = clean.copy()
    corrupted[:, 1 : SEQ + 1] = C.repeated_tokens(4, SEQ, low=10, high=19, seed=1)[:, :SEQ]
    return model, clean, corrupted


def repeat_loss(clean):
    """The metric: mean loss on the second copy's repeated tokens, as a Tensor."""
    targets = tl.tensor(clean[:, SECOND + 1])
    return lambda logits: nn.functional.cross_entropy(logits[:, SECOND], targets)


def test_patching_the_induction_heads_output_restores_the_clean_loss():
    """Patching layer 1's head (its z or its result) from the clean run into the corrupted
    one brings the loss on the repeated tokens from 13.2 back to the clean 0; patching the
    previous-token head makes it worse (the induction head then finds the right position
    but copies the corrupted token there)."""
    model, clean, corrupted = induction_pair()
    metric = repeat_loss(clean)
    clean_logits, clean_cache = C.run_with_cache(model, clean)
    assert metric(clean_logits).item() < 1e-4
    corrupted_loss = metric(C.run_with_hooks(model, corrupted)).item()
    assert corrupted_loss > 10
    for hook in ("attn.hook_z", "attn.hook_result"):
        grid = C.activation_patching(model, corrupted, clean_cache, metric, hook, by="head")
        assert grid.shape == (2, 1)
        assert grid[1, 0] < 1e-4
        assert grid[0, 0] > corrupted_loss
    patched = C.patch_activation(model, corrupted, clean_cache, "blocks.1.attn.hook_z", head=0)
    np.testing.assert_allclose(
        patched.numpy()[:, SECOND], clean_logits.numpy()[:, SECOND], rtol=1e-5, atol=1e-4
    )


def test_patching_by_position_finds_the_key_the_induction_head_reads():
    """For the prediction at one query of the second copy, the stream before layer 1 matters
    at one position only: right after the earlier occurrence of the query's token (q - 7),
    where the previous-token head has written that token. Patching it there restores the
    clean loss; no single position of the embeddings (before layer 0) does."""
    model, clean, corrupted = induction_pair()
    q = 12
    target = tl.tensor(clean[:, q + 1])
    metric = lambda logits: nn.functional.cross_entropy(logits[:, q], target)  # noqa: E731
    _, clean_cache = C.run_with_cache(model, clean)
    corrupted_loss = metric(C.run_with_hooks(model, corrupted)).item()
    grid = C.activation_patching(model, corrupted, clean_cache, metric, "hook_resid_pre")
    assert grid.shape == (2, 2 * SEQ + 1)
    k = q - (SEQ - 1)
    assert grid[1, k] < 1e-4
    assert np.all(np.delete(grid[1], k) > corrupted_loss - 1e-3)
    assert grid[0].min() > 5
    whole = C.activation_patching(model, corrupted, clean_cache, metric, by="layer")
    np.testing.assert_allclose(whole, 0, atol=1e-4)  # the whole stream is the whole state


def test_patching_a_whole_stream_restores_the_clean_logits():
    """In any model, patching every position of a layer's resid_pre restores the clean run
    exactly; patching the attention output of the last layer at one position changes the
    logits at that position only."""
    model = randomized(0, n_layer=2)
    rng = np.random.default_rng(0)
    clean, corrupted = rng.integers(0, 11, (2, 2, 6))
    clean_logits, clean_cache = C.run_with_cache(model, clean)
    for layer in range(2):
        out = C.patch_activation(model, corrupted, clean_cache, f"blocks.{layer}.hook_resid_pre")
        np.testing.assert_allclose(out.numpy(), clean_logits.numpy(), rtol=1e-5, atol=1e-6)
    base = C.run_with_hooks(model, corrupted).numpy()
    out = C.patch_activation(model, corrupted, clean_cache, "blocks.1.hook_attn_out", pos=3)
    changed = np.abs(out.numpy() - base).max(axis=(0, 2)) > 1e-6
    np.testing.assert_array_equal(changed, np.arange(6) == 3)


def test_patching_the_pattern_indexes_the_query_position_and_the_head():
    """The pattern is (B, H, T_q, T_k): patching (pos 4, head 1) of a one-layer model's
    pattern changes only the logits at query 4; in the (layer, pos, head) sweep only the
    entries at query 4 differ from the corrupted run, one per head. (The corrupted run to
    compare with takes the composed attention path, as the patched runs do: the fused path
    rounds in another order, up to 1e-5 on these logits of up to 13.)"""
    model = randomized(1, std=1.0, n_layer=1, attn_only=True)
    rng = np.random.default_rng(1)
    clean, corrupted = rng.integers(0, 11, (2, 3, 7))
    _, clean_cache = C.run_with_cache(model, clean)
    with nn.composed_attention(model):
        base = C.run_with_hooks(model, corrupted).numpy()
    name = "blocks.0.attn.hook_pattern"
    out = C.patch_activation(model, corrupted, clean_cache, name, pos=4, head=1).numpy()
    changed = np.abs(out - base).max(axis=(0, 2)) > 1e-6
    np.testing.assert_array_equal(changed, np.arange(7) == 4)
    grid = C.activation_patching(
        model, corrupted, clean_cache, lambda lg: lg[:, 4].sum(), "attn.hook_pattern", "pos_head"
    )
    assert grid.shape == (1, 7, 2)
    base_value = base[:, 4].sum()
    np.testing.assert_allclose(grid[0, :4], base_value, rtol=1e-5)  # other queries: no change
    assert np.all(np.abs(grid[0, 4] - base_value) > 1e-4)


def test_attribution_patching_is_exact_where_the_metric_is_linear():
    """No final norm: the logits are linear in the last layer's head results, so attribution
    patching's estimate of patching them equals the real change (by head, and by position
    and head); in layer 0 the softmax of layer 1 sits in between and it is only close."""
    model = randomized(2, n_layer=2, attn_only=True, norm="none", final_norm=False)
    rng = np.random.default_rng(2)
    clean, corrupted = rng.integers(0, 11, (2, 2, 6))
    metric = lambda logits: logits[:, -1, 3].sum() - logits[:, -1, 5].sum()  # noqa: E731
    _, clean_cache = C.run_with_cache(model, clean)
    base = metric(C.run_with_hooks(model, corrupted)).item()
    for by in ("head", "pos_head", "pos"):
        hook = "attn.hook_result" if by != "pos" else "hook_attn_out"
        real = C.activation_patching(model, corrupted, clean_cache, metric, hook, by) - base
        approx = C.attribution_patching(model, clean, corrupted, metric, hook, by)
        assert approx.shape == real.shape
        np.testing.assert_allclose(approx[1], real[1], rtol=1e-4, atol=1e-4)
        assert np.abs(real[1]).max() > 0.1
    # the scores' masked entries (-inf in both runs) add nothing
    scores = C.attribution_patching(
        model, clean, corrupted, metric, "attn.hook_attn_scores", "pos_head"
    )
    assert scores.shape == (2, 6, 2) and np.isfinite(scores).all()
    # every estimate of the whole layer-1 output is the sum of its per-head estimates
    by_head = C.attribution_patching(model, clean, corrupted, metric, "attn.hook_result", "head")
    whole = C.attribution_patching(model, clean, corrupted, metric, "hook_attn_out", "layer")
    # rtol 1e-5: the model runs in float32 and hook_attn_out is the heads' results summed and
    # rounded (eps 1.2e-7 per element); the estimate takes the difference of a clean and a
    # corrupted run, which cancels about a digit (1.35e-6 measured, NumPy 2.4 / OpenBLAS 0.3.31).
    np.testing.assert_allclose(whole, by_head.sum(1), rtol=1e-5)


def test_patching_errors_name_the_problem():
    model, clean, corrupted = induction_pair()
    _, cache = C.run_with_cache(model, clean, names="blocks.0.hook_resid_pre")
    with pytest.raises(ValueError, match="has no head axis"):
        C.patch_activation(model, corrupted, cache, "blocks.0.hook_resid_pre", head=0)
    with pytest.raises(KeyError, match="not in the clean cache"):
        C.patch_activation(model, corrupted, cache, "blocks.1.hook_resid_pre")
    with pytest.raises(ValueError, match="same shape"):
        C.patch_activation(model, corrupted[:, :5], cache, "blocks.0.hook_resid_pre")
    with pytest.raises(ValueError, match="by must be one of"):
        C.activation_patching(model, corrupted, cache, lambda lg: 0.0, by="neuron")
    with pytest.raises(ValueError, match="same shape"):
        C.attribution_patching(model, clean, corrupted[:, :5], lambda lg: lg.sum())
    with pytest.raises(ValueError, match="no head axis"):
        C.attribution_patching(model, clean, corrupted, lambda lg: lg.sum(), by="head")


def test_lists_of_positions_and_heads_patch_every_pair():
    """pos=[1, 3] with head=[0, 1] patches all four (position, head) entries: with every
    head of the model listed, it is the same as patching those positions alone (NumPy would
    pair the two lists up, patching only (1, 0) and (3, 1)). For the pattern, the positions
    are queries."""
    model = randomized(2, std=1.0)
    rng = np.random.default_rng(4)
    clean, corrupted = rng.integers(0, 11, (2, 2, 6))
    _, clean_cache = C.run_with_cache(model, clean)
    base = C.run_with_hooks(model, corrupted).numpy()
    for name in ("blocks.1.attn.hook_z", "blocks.1.attn.hook_pattern"):
        both = C.patch_activation(model, corrupted, clean_cache, name, pos=[1, 3], head=[0, 1])
        pos_only = C.patch_activation(model, corrupted, clean_cache, name, pos=[1, 3])
        np.testing.assert_array_equal(both.numpy(), pos_only.numpy(), err_msg=name)
        assert np.abs(both.numpy() - base).max() > 1e-3, name
        heads = C.patch_activation(model, corrupted, clean_cache, name, pos=[1], head=[0, 1])
        np.testing.assert_array_equal(
            heads.numpy(), C.patch_activation(model, corrupted, clean_cache, name, pos=1).numpy()
        )
    with pytest.raises(IndexError, match=r"blocks.1.attn.hook_z of shape \(2, 6, 2, 8\): pos=9"):
        C.patch_activation(model, corrupted, clean_cache, "blocks.1.attn.hook_z", pos=9)


def test_a_metric_returning_more_than_one_number_is_named():
    """A per-sequence metric (B,) must be reduced by the metric itself; the error says the
    shape it returned (not NumPy's "cannot reshape array of size 4 into shape ()")."""
    model, clean, corrupted = induction_pair()
    _, cache = C.run_with_cache(model, clean)
    per_seq = lambda logits: logits[:, -1, 0]  # noqa: E731
    with pytest.raises(
        ValueError, match=r"metric\(logits\) must return one number, got shape \(4,\)"
    ):
        C.activation_patching(model, corrupted, cache, per_seq, "attn.hook_z", by="head")


def test_sweeps_over_key_and_value_heads_of_a_grouped_query_model():
    """n_head=4 query heads sharing n_kv_head=2 key/value heads: by="head" on attn.hook_k and
    attn.hook_v is (n_layer, n_kv_head) (by="pos_head" (n_layer, T, n_kv_head)), each entry
    the metric with that one key/value head patched (the same forward passes: exact);
    attribution patching has the same shape, each entry Σ (clean - corrupted) · ∂metric/∂act
    over that key/value head's slice, computed by hand from the caches (float32 sums:
    rtol 1e-5); hook_z still counts the query heads."""
    model = randomized(3, n_layer=2, n_head=4, n_kv_head=2, d_model=16)
    L, H, KV = 2, 4, 2
    rng = np.random.default_rng(3)
    clean, corrupted = rng.integers(0, 11, (2, 2, 6))
    metric = lambda logits: logits[:, -1, 3].sum() - logits[:, -1, 5].sum()  # noqa: E731
    _, clean_cache = C.run_with_cache(model, clean)
    for hook in ("attn.hook_k", "attn.hook_v"):
        names = [f"blocks.{i}.{hook}" for i in range(L)]
        assert clean_cache[names[0]].shape[2] == KV
        grid = C.activation_patching(model, corrupted, clean_cache, metric, hook, by="head")
        assert grid.shape == (L, KV)
        for layer, kv in np.ndindex(L, KV):
            one = C.patch_activation(model, corrupted, clean_cache, names[layer], head=kv)
            assert grid[layer, kv] == metric(one).item()
        by_pos = C.activation_patching(model, corrupted, clean_cache, metric, hook, "pos_head")
        assert by_pos.shape == (L, 6, KV)
        approx = C.attribution_patching(model, clean, corrupted, metric, hook, by="head")
        assert approx.shape == (L, KV)
        _, cache = C.run_with_cache(model, corrupted, names=names, incl_bwd=True, metric=metric)
        for layer, name in enumerate(names):
            diff = clean_cache[name].astype(np.float64) - cache[name].astype(np.float64)
            expect = (diff * cache[name + "_grad"]).sum(axis=(0, 1, 3))
            np.testing.assert_allclose(approx[layer], expect, rtol=1e-5, atol=1e-6)
        assert np.abs(approx).max() > 1e-3
        approx_pos = C.attribution_patching(model, clean, corrupted, metric, hook, "pos_head")
        assert approx_pos.shape == (L, 6, KV)
    by_z = C.activation_patching(model, corrupted, clean_cache, metric, "attn.hook_z", by="head")
    assert by_z.shape == (L, H)
