"""gpt/circuits/hooks.py: caching every hook point, selecting by name or predicate, hooks removed
after an error, and interventions."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlab as tl
from gpt import circuits as C
from gpt.model import GPT

from .circuit_models import small


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
        elif name.endswith("hook_result"):  # per head, in the residual basis, before b_O
            assert act.shape == (B, T, H, d)
            block = model.blocks[int(name.split(".")[1])]
            out = cache[name.replace("attn.hook_result", "hook_attn_out")]
            np.testing.assert_allclose(
                act.sum(2) + block.attn.b_O.numpy(), out, rtol=1e-5, atol=1e-6
            )
        elif name.endswith(("hook_scale", "hook_normalized")):  # σ and x̂ of a layer norm
            stream = cache[_norm_input(name, cfg.n_layer)]
            centred = stream - stream.mean(-1, keepdims=True)
            sigma = np.sqrt((centred**2).mean(-1, keepdims=True) + cfg.norm_eps)
            want = sigma if name.endswith("hook_scale") else centred / sigma
            assert act.shape == want.shape, name
            np.testing.assert_allclose(act, want, rtol=1e-5, atol=1e-6, err_msg=name)
        elif ".mlp." in name:  # neuron hooks (hook_pre, hook_post), once FeedForward has them
            assert act.shape == (B, T, cfg.d_ff), name
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


def _norm_input(name: str, n_layer: int) -> str:
    """The cached stream a pre-norm GPT's norm ``name`` (blocks.i.ln1/ln2, ln_final) reads."""
    if name.startswith("ln_final."):
        return f"blocks.{n_layer - 1}.hook_resid_post"
    block, norm = name.split(".")[1:3]
    return f"blocks.{block}." + ("hook_resid_pre" if norm == "ln1" else "hook_resid_mid")


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
    direct, _ = model.ln_final(tl.tensor(cache["blocks.0.hook_resid_pre"])), None
    np.testing.assert_allclose(zeroed, direct.numpy() @ model.W_U.numpy(), rtol=1e-4, atol=1e-5)
    # a hook returning None changes nothing; a two-argument hook gets the name
    seen = []
    same = C.run_with_hooks(
        model, tokens, [(lambda n: n.endswith("hook_z"), lambda x, name: seen.append(name))]
    ).numpy()
    np.testing.assert_allclose(same, base, rtol=1e-5, atol=1e-6)
    assert seen == ["blocks.0.attn.hook_z"]


def gradient_by_substitution(model, tokens, name, metric):
    """d metric / d activation at hook point ``name``, found another way: the activation is
    replaced by a leaf Tensor equal to it, and tl.grad differentiates with respect to that."""
    leaf = {}

    def substitute(act):
        leaf["x"] = tl.tensor(act.numpy().copy(), requires_grad=True)
        return leaf["x"]

    logits = C.run_with_hooks(model, tokens, [(name, substitute)], grad=True)
    (g,) = tl.grad(metric(logits), [leaf["x"]])
    return g.numpy()


def test_gradient_cache_equals_the_gradient_at_a_substituted_leaf():
    """run_with_cache(incl_bwd=True) caches, under name + "_grad", the gradient of the metric
    (default: the mean next-token loss) at every hook point, the closed ones (scores,
    pattern, per-head results) included; the parameters' .grad stay None."""
    model = GPT(small())
    tokens = np.random.default_rng(3).integers(0, 11, (2, 6))
    _, cache = C.run_with_cache(model, tokens, incl_bwd=True)
    names = C.hook_names(model)
    assert set(cache) == set(names) | {n + "_grad" for n in names}
    assert all(p.grad is None for p in model.parameters())
    loss = lambda logits: C.mean_token_loss(logits, tokens)  # noqa: E731
    for name in ("hook_embed", "blocks.0.attn.hook_pattern", "blocks.1.attn.hook_result"):
        expect = gradient_by_substitution(model, tokens, name, loss)
        assert cache[name + "_grad"].shape == cache[name].shape
        np.testing.assert_allclose(cache[name + "_grad"], expect, rtol=1e-4, atol=1e-7)
        assert np.abs(expect).max() > 1e-4  # not trivially zero

    def logit_diff(logits):  # a custom metric: logit of 3 minus logit of 4 at the last position
        return (logits[:, -1, 3] - logits[:, -1, 4]).sum()

    _, cache = C.run_with_cache(
        model, tokens, names=lambda n: "resid" in n, incl_bwd=True, metric=logit_diff
    )
    final = cache["blocks.1.hook_resid_post_grad"]
    assert np.all(final[:, :-1] == 0)  # only the last position's logits were read
    for name in ("blocks.0.hook_resid_mid", "blocks.1.hook_resid_pre"):
        expect = gradient_by_substitution(model, tokens, name, logit_diff)
        np.testing.assert_allclose(cache[name + "_grad"], expect, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="metric must be a scalar"):
        C.run_with_cache(model, tokens, incl_bwd=True, metric=lambda logits: logits)


def test_the_default_metric_is_the_models_own_next_token_loss():
    """mean_token_loss scores position t on token t + 1: the loss the model itself reports for
    inputs tokens[:, :-1] and targets tokens[:, 1:] (causal: the first T - 1 positions'
    logits do not see the last token)."""
    model = GPT(small())
    tokens = np.random.default_rng(5).integers(0, 11, (2, 7))
    logits, _ = C.run_with_cache(model, tokens, names=[])
    with tl.no_grad():
        _, loss = model.eval()(tl.tensor(tokens[:, :-1]), tl.tensor(tokens[:, 1:]))
    assert C.mean_token_loss(logits, tokens).item() == pytest.approx(loss.item(), rel=1e-6)


@pytest.mark.parametrize("positional", ["learned", "sinusoidal"])
def test_the_gradient_reaches_activations_that_depend_on_no_parameter(positional):
    """resid = embed + pos, so the gradient at hook_pos_embed is the gradient at hook_embed,
    also where the positions are a constant (sinusoidal: no parameter, so no graph records
    them; they are made a leaf of their own), in the cache and for a backward hook."""
    model = GPT(small(positional=positional))
    tokens = np.random.default_rng(6).integers(0, 11, (2, 6))
    names = ["hook_embed", "hook_pos_embed"]
    _, cache = C.run_with_cache(model, tokens, names=names, incl_bwd=True)
    assert np.abs(cache["hook_embed_grad"]).max() > 1e-4
    np.testing.assert_array_equal(cache["hook_pos_embed_grad"], cache["hook_embed_grad"])
    seen = []
    logits = C.run_with_hooks(model, tokens, bwd_hooks=[("hook_pos_embed", seen.append)])
    C.mean_token_loss(logits, tokens).backward()
    np.testing.assert_allclose(seen[0].numpy(), cache["hook_embed_grad"], rtol=1e-6, atol=1e-9)


def test_no_norm_final_gradient_is_the_unembedding_column():
    """In a model without a final norm, d logit[b, t, j] / d resid_final is W_U[:, j] at
    position t and zero elsewhere."""
    model = GPT(small(final_norm=False))
    tokens = np.array([[1, 5, 2, 7]])
    _, cache = C.run_with_cache(
        model,
        tokens,
        names="blocks.1.hook_resid_post",
        incl_bwd=True,
        metric=lambda logits: logits[0, 2, 6],
    )
    g = cache["blocks.1.hook_resid_post_grad"][0]
    np.testing.assert_allclose(g[2], model.W_U.numpy()[:, 6], rtol=1e-6)
    assert np.all(np.delete(g, 2, axis=0) == 0)


def test_backward_hooks_see_and_replace_the_gradient_at_a_hook_point():
    """A backward hook sees the gradient arriving at its hook point (the one incl_bwd
    caches) when backward runs from the returned logits; one returning zeros at hook_embed
    stops every gradient to the token embedding (untied from the unembedding) and none to
    the positions."""
    model = GPT(small(tie_weights=False))
    tokens = np.random.default_rng(4).integers(0, 11, (2, 6))
    _, cache = C.run_with_cache(model, tokens, names="blocks.0.hook_resid_mid", incl_bwd=True)
    seen = []
    logits = C.run_with_hooks(
        model,
        tokens,
        bwd_hooks=[("blocks.0.hook_resid_mid", lambda g, name: seen.append((name, g.numpy())))],
    )
    assert seen == []  # nothing until backward
    params = [model.embed.W, model.pos.W_pos]
    grads = tl.grad(C.mean_token_loss(logits, tokens), params)
    assert [n for n, _ in seen] == ["blocks.0.hook_resid_mid"]
    np.testing.assert_allclose(seen[0][1], cache["blocks.0.hook_resid_mid_grad"], rtol=1e-5)
    assert all(np.abs(g.numpy()).max() > 0 for g in grads)
    logits = C.run_with_hooks(
        model, tokens, bwd_hooks=[("hook_embed", lambda g: np.zeros(g.shape))]
    )
    d_embed, d_pos = tl.grad(C.mean_token_loss(logits, tokens), params)
    assert np.all(d_embed.numpy() == 0)
    np.testing.assert_allclose(d_pos.numpy(), grads[1].numpy(), rtol=1e-5, atol=1e-8)
    with pytest.raises(RuntimeError, match="records no graph"):
        with C.hooks(model, bwd_hooks=[("hook_embed", print)]), tl.no_grad():
            model(tl.tensor(tokens))


def test_a_replacement_of_the_wrong_shape_is_refused_naming_the_hook():
    """A hook's replacement must have the activation's shape: else the error names the hook
    point, not the LayerNorm or linear layer that would later fail to broadcast it. Without a
    next token, the default incl_bwd metric refuses instead of returning zero gradients."""
    model = GPT(small(n_layer=1))
    tokens = np.array([[1, 2, 3]])
    for bad in (np.zeros((1, 3, 5)), 0.0):
        with pytest.raises(ValueError, match=r"hook on blocks.0.hook_resid_pre returned shape"):
            C.run_with_hooks(model, tokens, [("blocks.0.hook_resid_pre", lambda x, b=bad: b)])
    assert not any(m._forward_hooks for m in model.modules())
    with pytest.raises(ValueError, match="at least 2 positions"):
        C.run_with_cache(model, np.array([[3]]), incl_bwd=True)
    _, cache = C.run_with_cache(
        model, np.array([[3]]), incl_bwd=True, metric=lambda lg: lg[0, 0, 1]
    )
    assert np.abs(cache["blocks.0.hook_resid_post_grad"]).max() > 0


def test_hooks_must_come_as_a_list_of_pairs():
    """One (name, fn) pair passed without its list, or a pair whose fn is not callable, is
    refused with a TypeError that says so (not "too many values to unpack")."""
    model = GPT(small(n_layer=1))
    with pytest.raises(TypeError, match=r"fwd_hooks must be a list of \(name, fn\) pairs"):
        C.run_with_hooks(model, [1, 2], ("hook_embed", lambda x: None))
    with pytest.raises(TypeError, match="bwd_hooks must be a list"):
        C.run_with_hooks(model, [1, 2], bwd_hooks=[("hook_embed", None)])
    assert not any(m._forward_hooks for m in model.modules())
