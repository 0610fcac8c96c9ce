"""gpt/circuits/hooks.py: caching every hook point, selecting by name or predicate, hooks removed
after an error, and interventions."""

from __future__ import annotations

import numpy as np
import pytest
from circuit_models import small

import tensorlab as tl
from gpt import circuits as C
from gpt.model import GPT


def test_run_with_cache_records_every_hook_with_its_shape():
    cfg = small()
    model = GPT(cfg)
    B, T, d, H, dh = 3, 7, cfg.d_model, cfg.n_head, cfg.d_head
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (B, T))
    logits, cache = C.run_with_cache(model, tokens)
    assert logits.shape == (B, T, cfg.vocab_size)
    assert set(cache) == set(C.hook_names(model))
    assert list(cache)[0] == "hook_embed"
    for name, act in cache.items():
        assert isinstance(act, np.ndarray)
        if name.endswith("hook_attn_scores"):
            assert act.shape == (B, H, T, T)
            future = np.triu(np.ones((T, T), dtype=bool), 1)
            assert np.isneginf(act[..., future]).all()  # masked before the softmax
            assert np.isfinite(act[..., ~future]).all()
        elif name.endswith("hook_pattern"):
            assert act.shape == (B, H, T, T)
            np.testing.assert_allclose(act.sum(-1), 1.0, rtol=1e-5)
            assert np.all(np.triu(act, 1) == 0)  # causal
        elif name.split(".")[-1] in ("hook_q", "hook_k", "hook_v", "hook_z"):
            assert act.shape == (B, T, H, dh)
        else:
            assert act.shape == (B, T, d), name
    # the cached final residual stream gives the logits
    resid = cache[f"blocks.{cfg.n_layer - 1}.hook_resid_post"]
    ref, _ = GPT.__call__(model, tl.tensor(tokens))
    np.testing.assert_allclose(logits.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    assert resid.shape == (B, T, d)
    # every hook removed again, and the model is back in training mode
    assert all(not m._forward_hooks for m in model.modules())
    assert model.training


def test_cache_filters_by_names_and_predicate():
    model = GPT(small())
    tokens = np.arange(5)  # one sequence (T,) is accepted too
    _, one = C.run_with_cache(model, tokens, names="blocks.1.attn.hook_pattern")
    assert list(one) == ["blocks.1.attn.hook_pattern"]
    assert one["blocks.1.attn.hook_pattern"].shape == (1, 2, 5, 5)
    _, some = C.run_with_cache(model, tokens, names=lambda n: n.endswith("resid_post"))
    assert list(some) == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    with pytest.raises(KeyError, match="hook points are"):
        C.run_with_cache(model, tokens, names=["blocks.9.hook_resid_pre"])


def test_hooks_are_removed_after_an_error():
    model = GPT(small()).eval()
    tokens = tl.tensor(np.arange(4)[None])
    before = model(tokens)[0].numpy()

    def boom(x):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        C.run_with_hooks(model, np.arange(4), [("blocks.0.hook_resid_mid", boom)])
    assert all(not m._forward_hooks for m in model.modules())
    np.testing.assert_array_equal(model(tokens)[0].numpy(), before)  # nothing left behind


def test_run_with_hooks_intervenes():
    model = GPT(small(n_layer=1, attn_only=True))
    tokens = np.array([[1, 2, 3, 4]])
    base = C.run_with_hooks(model, tokens).numpy()
    # replacing the attention output by zeros leaves the direct path embed -> unembed
    zeroed = C.run_with_hooks(
        model, tokens, [("blocks.0.hook_attn_out", lambda x: np.zeros(x.shape))]
    ).numpy()
    _, cache = C.run_with_cache(model, tokens, names=["blocks.0.hook_resid_pre"])
    assert not np.allclose(base, zeroed)
    direct, _ = model.ln_f(tl.tensor(cache["blocks.0.hook_resid_pre"])), None
    np.testing.assert_allclose(zeroed, direct.numpy() @ model.W_U.numpy(), rtol=1e-4, atol=1e-5)
    # a hook returning None changes nothing; a two-argument hook gets the name
    seen = []
    same = C.run_with_hooks(
        model, tokens, [(lambda n: n.endswith("hook_z"), lambda x, name: seen.append(name))]
    ).numpy()
    np.testing.assert_allclose(same, base, rtol=1e-5, atol=1e-6)
    assert seen == ["blocks.0.attn.hook_z"]
