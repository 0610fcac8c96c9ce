"""gpt/circuits/resid.py: the final stream as the sum of its components (exact without a norm;
with LayerNorm or RMSNorm through the folded, frozen-scale norm), the stream after each layer
and the logit lens, and direct logit attribution on circuits whose answer is known (a bigram
table, a head's OV circuit, the hand-built induction model)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlab as tl
from gpt import circuits as C
from gpt.config import GPTConfig
from gpt.model import GPT

from .circuit_models import hand_built_induction_model, randomized, set_param, small


def logits_and_cache(model, tokens):
    logits, cache = C.run_with_cache(model, tokens)
    return logits.numpy().astype(np.float64), cache


TOKENS = np.random.default_rng(1).integers(0, 11, (3, 9))


@pytest.mark.parametrize(
    "kw",
    [
        dict(norm="none"),
        dict(norm="none", positional="sinusoidal", parallel=True),
        dict(norm="none", positional="rope", n_layer=0),
    ],
    ids=["learned", "sinusoidal-parallel", "zero-layer"],
)
def test_components_sum_to_the_logits_without_a_norm(kw):
    """No norm anywhere: every decomposition sums to the final stream, and its unembedding to
    the model's logits (float32 forward vs float64 sums: 1e-5 of the largest logit)."""
    model = randomized(**kw)
    logits, cache = logits_and_cache(model, TOKENS)
    final = C.final_resid(model, cache)
    W_U = model.W_U.numpy().astype(np.float64)
    tol = 1e-5 * np.abs(logits).max()
    for stack, labels in (
        C.decompose_resid(model, cache, return_labels=True),
        C.full_resid_decomposition(model, cache, return_labels=True),
    ):
        assert stack.shape == (len(labels),) + final.shape
        np.testing.assert_allclose(stack.sum(0), final, atol=1e-5)
        np.testing.assert_allclose(stack.sum(0) @ W_U, logits, atol=tol)
    L, H = model.config.n_layer, model.config.n_head
    _, labels = C.full_resid_decomposition(model, cache, return_labels=True)
    heads = [f"L{i}H{h}" for i in range(L) for h in range(H)]
    mlps = [f"{i}_mlp_out" for i in range(L)]
    pos = ["pos_embed"] if model.pos is not None else []
    assert labels == heads + mlps + ["embed"] + pos + ["bias"]  # TransformerLens's order


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_folded_components_sum_to_the_logits_with_a_norm(norm):
    """With a final LayerNorm (RMSNorm), each component centred and divided by the final
    stream's scale σ, unembedded through diag(w) W_U, plus b W_U, sums to the logits. σ is
    frozen at this run's value, so the sum is exact up to rounding: measured max error 3.1e-7
    on logits up to 2.0 (LayerNorm), 9.1e-8 on logits up to 0.6 (RMSNorm); asserted below
    1e-5 of the largest logit. Left unscaled, the components miss by 0.53 (0.45)."""
    model = randomized(norm=norm)
    logits, cache = logits_and_cache(model, TOKENS)
    W_U, b_U = C.folded_unembed(model)
    tol = 1e-5 * np.abs(logits).max()
    for stack in (
        C.decompose_resid(model, cache, apply_ln=True),
        C.full_resid_decomposition(model, cache, apply_ln=True),
        C.stack_head_results(model, cache, apply_ln=True),  # a part: no sum check
    ):
        assert stack.shape[1:] == cache["hook_embed"].shape
    full = C.full_resid_decomposition(model, cache, apply_ln=True)
    np.testing.assert_allclose(full.sum(0) @ W_U + b_U, logits, atol=tol)
    # the same through logit_attrs, which applies the final norm to the raw stack itself:
    # each component's term in the logit of the next token
    nxt = TOKENS[:, 1:]
    raw = C.full_resid_decomposition(model, cache)
    attrs = C.logit_attrs(model, cache, raw[:, :, :-1], nxt, pos_slice=slice(None, -1))
    assert attrs.shape == (len(full),) + nxt.shape
    np.testing.assert_allclose(
        attrs.sum(0) + b_U[nxt],
        np.take_along_axis(logits[:, :-1], nxt[..., None], -1)[..., 0],
        atol=tol,
    )
    # without folding the scale the components do not add up to the logits
    assert np.abs(raw.sum(0) @ W_U + b_U - logits).max() > 100 * tol


def test_logit_lens_is_the_truncated_models_logits():
    """The lens at "1_pre" (the stream before layer 1 with the final norm's own statistics)
    equals the logits of the same model cut to its first layer; "final_post" equals the
    model's logits; accumulated_resid lists the streams in order, "{i}_mid" included."""
    model = randomized(norm="layernorm", n_layer=2)
    logits, cache = logits_and_cache(model, TOKENS)
    lens, labels = C.logit_lens(model, cache, return_labels=True)
    assert labels == ["0_pre", "1_pre", "final_post"]
    np.testing.assert_allclose(lens[-1], logits, atol=1e-5 * np.abs(logits).max())
    cut = GPT(small(n_layer=1, norm="layernorm"))
    params = dict(model.named_parameters())
    for name, p in cut.named_parameters():
        set_param(p, params[name].numpy())
    cut_logits = cut(tl.tensor(TOKENS))[0].numpy()
    np.testing.assert_allclose(lens[1], cut_logits, atol=1e-5 * np.abs(cut_logits).max())
    stack, labels = C.accumulated_resid(model, cache, incl_mid=True, return_labels=True)
    assert labels == ["0_pre", "0_mid", "1_pre", "1_mid", "final_post"]
    np.testing.assert_array_equal(stack[3], cache["blocks.1.hook_resid_mid"])
    assert C.accumulated_resid(model, cache, layer=1).shape == (2,) + TOKENS.shape + (16,)


def test_logit_lens_of_the_hand_built_induction_model():
    """Before the induction layer the stream holds the current token and predicts it (W_U
    reads the token subspace); after it, on the second copy of [r, r], it predicts the token
    that followed the earlier occurrence."""
    model = hand_built_induction_model()
    tokens = C.repeated_tokens(2, 8, high=8, bos=8, seed=0)  # [bos, r, r]
    _, cache = C.run_with_cache(model, tokens)
    lens, labels = C.logit_lens(model, cache, return_labels=True)
    assert labels == ["0_pre", "1_pre", "final_post"]
    second = np.arange(9, 16)  # positions whose next token is a repeat
    np.testing.assert_array_equal(lens[1].argmax(-1)[:, second], tokens[:, second])
    np.testing.assert_array_equal(lens[2].argmax(-1)[:, second], tokens[:, second + 1])


def test_direct_logit_attribution_of_the_induction_head():
    """On the hand-built model the next token's logit in the second copy comes from the
    layer-1 head (its OV writes 3·token into the token subspace, W_U reads it ×10: 30 times
    its attention to the right position), not from the embedding (the current token differs
    from the next) or the previous-token head (it writes where W_U does not read). The head
    reads its values through RMSNorm, so what it copies from key position s is divided by
    that position's RMS."""
    model = hand_built_induction_model()
    tokens = C.repeated_tokens(2, 8, high=8, bos=8, seed=0)  # [bos, r, r]
    _, cache = C.run_with_cache(model, tokens)
    stack, labels = C.full_resid_decomposition(model, cache, return_labels=True)
    assert labels == ["L0H0", "L1H0", "embed", "pos_embed", "bias"]
    q = np.arange(9, 16)
    keys = q - 7  # right after the earlier occurrence
    attrs = C.logit_attrs(model, cache, stack[:, :, q], tokens[:, q + 1], pos_slice=q)
    to_earlier = cache["blocks.1.attn.hook_pattern"][:, 0][:, q, keys]
    resid = cache["blocks.1.hook_resid_pre"].astype(np.float64)[:, keys]
    rms = np.sqrt((resid**2).mean(-1) + model.config.norm_eps)
    np.testing.assert_allclose(attrs[1], 30 * to_earlier / rms, rtol=1e-5)
    assert to_earlier.min() > 0.99
    np.testing.assert_allclose(attrs[[0, 2, 3, 4]], 0, atol=1e-6)
    # as a logit difference against the current token: the embedding now pulls the other way
    diff = C.logit_attrs(model, cache, stack[:, :, q], tokens[:, q + 1], tokens[:, q], pos_slice=q)
    np.testing.assert_allclose(diff[2], -10, rtol=1e-6)


def test_direct_logit_attribution_of_a_head_is_its_ov_circuit_weighted_by_attention():
    """One attention-only layer, no norm, no biases, no positions: head h adds to the logit
    of token j at position t exactly Σ_s A^h[t, s] OV^h[tok_s, j], with OV^h = W_E W_V^h
    W_O^h W_U (ov_circuit), and the embedding adds (W_E W_U)[tok_t, j]."""
    model = randomized(n_layer=1, attn_only=True, norm="none", bias=False, positional="none")
    _, cache = C.run_with_cache(model, TOKENS)
    stack, labels = C.full_resid_decomposition(model, cache, return_labels=True)
    assert labels == ["L0H0", "L0H1", "embed", "bias"]
    j = 4
    attrs = C.logit_attrs(model, cache, stack, j)
    E, U = model.W_E.numpy().astype(np.float64), model.W_U.numpy().astype(np.float64)
    np.testing.assert_allclose(attrs[2], (E @ U)[TOKENS, j], rtol=1e-5, atol=1e-6)
    pattern = cache["blocks.0.attn.hook_pattern"]
    for h in range(2):
        ov = C.ov_circuit(model, 0, h).full()[:, j]  # (vocab,)
        expect = np.einsum("bts,bs->bt", pattern[:, h], ov[TOKENS])
        np.testing.assert_allclose(attrs[h], expect, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(attrs[3], 0)


def test_direct_logit_attribution_of_a_bigram_model_is_its_log_table():
    """A zero-layer model set to the log of a bigram table (W_E = I, W_U = log p(b|a)):
    the embedding is the only component, and its attribution to token b after token a is
    log p(b | a)."""
    V = 6
    ids = np.random.default_rng(0).integers(0, V, 400)
    table = C.bigram_table(ids, V)
    cond = (table + 1e-12) / (table + 1e-12).sum(1, keepdims=True)
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
    set_param(model.embed.W, np.eye(V))
    set_param(model.W_U, np.log(cond))
    tokens = ids[:8][None]
    _, cache = C.run_with_cache(model, tokens)
    stack, labels = C.decompose_resid(model, cache, return_labels=True)
    assert labels == ["embed"]
    for b in range(V):
        attrs = C.logit_attrs(model, cache, stack, b)  # (1, 1, T)
        np.testing.assert_allclose(attrs[0, 0], np.log(cond)[tokens[0], b], rtol=1e-5)


def test_decomposition_refuses_norms_inside_the_stream_and_missing_hooks():
    model = randomized(norm_placement="post")
    _, cache = C.run_with_cache(model, TOKENS)
    with pytest.raises(ValueError, match="norm_placement='post'"):
        C.decompose_resid(model, cache)
    model = randomized()
    _, cache = C.run_with_cache(model, TOKENS, names=lambda n: "resid" in n)
    with pytest.raises(KeyError, match="'hook_embed' is not in the cache"):
        C.decompose_resid(model, cache)
    with pytest.raises(ValueError, match="mode must be"):
        C.decompose_resid(model, cache, mode="heads")
    with pytest.raises(IndexError, match="layer 3 is out of range"):
        C.accumulated_resid(model, cache, layer=3)


@pytest.mark.parametrize("activation", ["relu", "swiglu"])
def test_neuron_results_sum_to_each_mlps_output_and_to_the_logits(activation):
    """Each neuron writes post_n · W_out[n] (mlp.hook_post times a row of W_out): per layer
    they sum to hook_mlp_out minus b_out, and with expand_neurons the full decomposition
    (b_out moved into "bias") still sums to the logits. For ReLU a neuron whose
    pre-activation (mlp.hook_pre) is negative writes exactly nothing."""
    model = randomized(norm="layernorm", activation=activation)
    logits, cache = logits_and_cache(model, TOKENS)
    d_ff = model.config.d_ff
    neurons, labels = C.stack_neuron_results(model, cache, return_labels=True)
    assert neurons.shape == (2 * d_ff,) + TOKENS.shape + (16,)
    assert labels[:2] == ["L0N0", "L0N1"] and labels[-1] == f"L1N{d_ff - 1}"
    for i, block in enumerate(model.blocks):
        mlp_out = cache[f"blocks.{i}.hook_mlp_out"]
        layer = neurons[i * d_ff : (i + 1) * d_ff].sum(0) + block.mlp.b_out.numpy()
        np.testing.assert_allclose(layer, mlp_out, rtol=1e-5, atol=1e-5)
    full, labels = C.full_resid_decomposition(
        model, cache, apply_ln=True, expand_neurons=True, return_labels=True
    )
    assert "0_mlp_out" not in labels and "L1N0" in labels
    W_U, b_U = C.folded_unembed(model)
    np.testing.assert_allclose(full.sum(0) @ W_U + b_U, logits, atol=1e-5 * np.abs(logits).max())
    if activation == "relu":
        pre = cache["blocks.0.mlp.hook_pre"]  # (B, T, d_ff)
        off = np.moveaxis(pre <= 0, -1, 0)  # (d_ff, B, T)
        assert off.any() and (~off).any()
        assert np.all(neurons[:d_ff][off] == 0)


@pytest.mark.parametrize("kw", [dict(), dict(parallel=True), dict(attn_only=True, n_layer=3)])
def test_accumulated_resid_up_to_a_layer_ends_with_the_stream_that_layer_reads(kw):
    """accumulated_resid(layer=k) is TransformerLens's: "0_pre" ... "{k}_pre" (the "{i}_mid"
    of the layers before k with incl_mid), so its last entry is the stream layer k reads,
    blocks.{k}.hook_resid_pre, the sum of decompose_resid(layer=k); layer=n_layer ends with
    "final_post"."""
    model = randomized(norm="layernorm", **kw)
    _, cache = logits_and_cache(model, TOKENS)
    L = len(model.blocks)
    mid = not model.blocks[0].parallel
    for k in range(L + 1):
        stack, labels = C.accumulated_resid(
            model, cache, layer=k, incl_mid=True, return_labels=True
        )
        want = [s for i in range(k) for s in [f"{i}_pre"] + [f"{i}_mid"] * mid]
        assert labels == want + [f"{k}_pre" if k < L else "final_post"]
        parts = C.decompose_resid(model, cache, layer=k)
        np.testing.assert_allclose(stack[-1], parts.sum(0), rtol=1e-5, atol=1e-5)
        if k < L:
            np.testing.assert_array_equal(stack[-1], cache[f"blocks.{k}.hook_resid_pre"])


STACKS = {  # each stacking function, with the keywords it is tested under
    "decompose_resid": (C.decompose_resid, dict(layer=1)),
    "stack_head_results": (C.stack_head_results, {}),
    "stack_neuron_results": (C.stack_neuron_results, dict(layer=1)),
    "full_resid_decomposition": (C.full_resid_decomposition, dict(expand_neurons=True)),
    "accumulated_resid": (C.accumulated_resid, dict(incl_mid=True)),
    "accumulated_resid_layer": (C.accumulated_resid, dict(layer=1)),
}


@pytest.mark.parametrize("apply_ln", [False, True])
@pytest.mark.parametrize("cut", [-1, slice(2, 5), [0, 4, 8]], ids=["int", "slice", "list"])
@pytest.mark.parametrize("name", sorted(STACKS))
def test_pos_slice_keeps_those_positions_of_the_stack(name, cut, apply_ln):
    """``pos_slice`` on a stacking function is the full stack cut at those positions, before or
    after the norm (which divides each position by its own σ): exactly, with a LayerNorm."""
    fn, kw = STACKS[name]
    model = randomized(norm="layernorm", n_layer=2)
    _, cache = logits_and_cache(model, TOKENS)
    full, labels = fn(model, cache, apply_ln=apply_ln, return_labels=True, **kw)
    part, part_labels = fn(model, cache, apply_ln=apply_ln, return_labels=True, pos_slice=cut, **kw)
    assert part_labels == labels
    np.testing.assert_array_equal(np.asarray(part), np.asarray(full)[:, :, cut])


def test_pos_slice_as_a_pair_is_refused():
    model = randomized(norm="layernorm", n_layer=1)
    _, cache = logits_and_cache(model, TOKENS)
    with pytest.raises(TypeError, match=r"pos_slice=\(1, 3\): pass slice\(start, stop\)"):
        C.decompose_resid(model, cache, pos_slice=(1, 3))


@pytest.mark.parametrize("norm", ["none", "layernorm", "rmsnorm"])
def test_mlp_input_stacks_sum_to_the_stream_the_mlp_reads(norm):
    """``mlp_input``: block k's attention output joins the decomposition, whose parts then sum
    to ``blocks.k.hook_resid_mid`` (the stream the MLP reads), and ``accumulated_resid`` ends
    with that stream; with ``apply_ln`` both are divided by the σ block k's ln2 computed
    (float32 forward against float64 sums: 1e-5)."""
    model = randomized(norm=norm, n_layer=2)
    _, cache = logits_and_cache(model, TOKENS)
    mid = np.asarray(cache["blocks.1.hook_resid_mid"], np.float64)
    stack, labels = C.decompose_resid(model, cache, layer=1, mlp_input=True, return_labels=True)
    assert labels[-2:] == ["0_mlp_out", "1_attn_out"]
    np.testing.assert_allclose(stack.sum(0), mid, atol=1e-5)
    acc, acc_labels = C.accumulated_resid(model, cache, layer=1, mlp_input=True, return_labels=True)
    assert acc_labels == ["0_pre", "1_pre", "1_mid"]
    np.testing.assert_array_equal(acc[-1], cache["blocks.1.hook_resid_mid"])
    if norm == "none":
        return
    centred = mid - mid.mean(-1, keepdims=True) if norm == "layernorm" else mid
    eps = model.blocks[1].ln2.eps
    sigma = np.sqrt((centred**2).mean(-1, keepdims=True) + eps)
    normed = C.decompose_resid(model, cache, layer=1, mlp_input=True, apply_ln=True)
    np.testing.assert_allclose(normed.sum(0), centred / sigma, atol=1e-5)
    acc = C.accumulated_resid(model, cache, layer=1, mlp_input=True, apply_ln=True)
    np.testing.assert_allclose(acc[-1], centred / sigma, atol=1e-5)


def test_mlp_input_without_an_mlp_input_is_refused():
    model = randomized(norm="layernorm", n_layer=2)
    _, cache = logits_and_cache(model, TOKENS)
    for layer in (None, 2):
        with pytest.raises(ValueError, match="mlp_input=True needs a layer below n_layer=2"):
            C.decompose_resid(model, cache, layer=layer, mlp_input=True)
    parallel = randomized(norm="layernorm", n_layer=2, parallel=True)
    _, cache = logits_and_cache(parallel, TOKENS)
    with pytest.raises(ValueError, match="block 1 is parallel"):
        C.accumulated_resid(parallel, cache, layer=1, mlp_input=True)
    attn_only = randomized(norm="layernorm", n_layer=2, attn_only=True)
    _, cache = logits_and_cache(attn_only, TOKENS)
    with pytest.raises(ValueError, match="block 0 has no MLP"):
        C.apply_ln_to_stack(attn_only, cache, np.zeros((1, 3, 9, 16)), layer=0, mlp_input=True)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("where", ["ln_final", "blocks.1.ln1", "blocks.0.ln2"])
def test_a_run_that_patched_sigma_is_decomposed_with_the_sigma_it_used(norm, where):
    """A run whose norm's σ was replaced (here doubled through ``hook_scale``, as when norms are
    frozen at a clean run's σ): the normalized decomposition sums to the ``hook_normalized``
    that run computed, because σ is read from the cache (as TransformerLens does), not from
    the stream (float32 forward against float64 sums: 1e-5). Without ``hook_scale`` in the
    cache, σ is the stream's own."""
    model = randomized(norm=norm, n_layer=2)
    layer = {"ln_final": None, "blocks.1.ln1": 1, "blocks.0.ln2": 0}[where]
    kw = dict(layer=layer, mlp_input=where.endswith("ln2"), apply_ln=True)
    with C.hooks(model, [(f"{where}.hook_scale", lambda s: s * 2.0)]):
        _, cache = logits_and_cache(model, TOKENS)
    normed = C.decompose_resid(model, cache, **kw)
    np.testing.assert_allclose(normed.sum(0), cache[f"{where}.hook_normalized"], atol=1e-5)
    unpatched = {k: v for k, v in cache.items() if not k.endswith("hook_scale")}
    stream_sigma = C.decompose_resid(model, unpatched, **kw)
    np.testing.assert_allclose(stream_sigma.sum(0), 2 * normed.sum(0), rtol=1e-5, atol=1e-6)
