"""Parity with TransformerLens (a test-only dependency, ``pip install transformer-lens``; the
test is skipped without it): a randomly initialised GPT-2-shaped model (LayerNorm, learned
positions, GELU MLP, biases, untied) loaded into a HookedTransformer gives the same logits and
the same activations at every hook name both models have, the same decomposed residual stream
(by layer, by head, and fully with neurons, in the same order and with the same labels) with
the final norm folded (or, up to a layer, that layer's ln1), the same logit lens, the same
direct logit attribution (``cache.logit_attrs``), and the same patching sweeps.

Written against TransformerLens's API (HookedTransformerConfig, run_with_cache,
ActivationCache.decompose_resid / stack_head_results / accumulated_resid / logit_attrs, the
patching module) and run against TransformerLens 3.9."""

from __future__ import annotations

import numpy as np
import pytest

from gpt import circuits as C

from .circuit_models import randomized

torch = pytest.importorskip("torch")
transformer_lens = pytest.importorskip("transformer_lens")
from transformer_lens import HookedTransformer, HookedTransformerConfig, patching  # noqa: E402

V, T, L, H, D, DFF = 23, 10, 2, 4, 32, 128


def both_models():
    model = randomized(
        3, vocab_size=V, block_size=T, n_layer=L, n_head=H, d_model=D, d_ff=DFF, dropout=0.0
    )
    for p in (model.ln_final.w, *(b.ln1.w for b in model.blocks), *(b.ln2.w for b in model.blocks)):
        p.data[...] += 1.0  # gains around 1, as trained ones are
    cfg = HookedTransformerConfig(
        n_layers=L,
        d_model=D,
        n_ctx=T,
        d_head=D // H,
        n_heads=H,
        d_mlp=DFF,
        d_vocab=V,
        act_fn="gelu",
        normalization_type="LN",
        eps=model.config.norm_eps,
        positional_embedding_type="standard",
        use_attn_result=True,
    )
    lens = HookedTransformer(cfg)
    t = lambda x: torch.tensor(np.asarray(x.numpy() if hasattr(x, "numpy") else x))  # noqa: E731
    sd = {
        "embed.W_E": t(model.W_E),
        "pos_embed.W_pos": t(model.pos.W_pos),
        "unembed.W_U": t(model.W_U),
        "unembed.b_U": torch.zeros(V),
        "ln_final.w": t(model.ln_final.w),
        "ln_final.b": t(model.ln_final.b),
    }
    for i, block in enumerate(model.blocks):
        a, m = block.attn, block.mlp
        sd.update(
            {
                f"blocks.{i}.ln1.w": t(block.ln1.w),
                f"blocks.{i}.ln1.b": t(block.ln1.b),
                f"blocks.{i}.ln2.w": t(block.ln2.w),
                f"blocks.{i}.ln2.b": t(block.ln2.b),
                f"blocks.{i}.attn.W_Q": t(a.W_Q),
                f"blocks.{i}.attn.W_K": t(a.W_K),
                f"blocks.{i}.attn.W_V": t(a.W_V),
                f"blocks.{i}.attn.W_O": t(a.W_O),
                f"blocks.{i}.attn.b_Q": t(a.b_Q),
                f"blocks.{i}.attn.b_K": t(a.b_K),
                f"blocks.{i}.attn.b_V": t(a.b_V),
                f"blocks.{i}.attn.b_O": t(a.b_O),
                f"blocks.{i}.mlp.W_in": t(m.W_in),
                f"blocks.{i}.mlp.b_in": t(m.b_in),
                f"blocks.{i}.mlp.W_out": t(m.W_out),
                f"blocks.{i}.mlp.b_out": t(m.b_out),
            }
        )
    result = lens.load_state_dict(sd, strict=False)
    buffers = {name for name, _ in lens.named_buffers()}
    assert not result.unexpected_keys, result.unexpected_keys
    assert set(result.missing_keys) <= buffers, set(result.missing_keys) - buffers
    return model, lens.eval()


TOKENS = np.random.default_rng(0).integers(0, V, (3, T))


def folded(lens):
    """``lens`` with its norms' gains and biases folded into the next weights (``fold_ln``,
    what ``from_pretrained`` does by default): TransformerLens's W_U then holds the final
    norm's gain, as ``folded_unembed`` does here, which ``logit_attrs`` reads."""
    out = HookedTransformer(lens.cfg)
    out.load_and_process_state_dict(
        {k: v.clone() for k, v in lens.state_dict().items()},
        fold_ln=True,
        center_writing_weights=False,
        center_unembed=False,
        fold_value_biases=False,
        refactor_factored_attn_matrices=False,
    )
    return out.eval()


def as_np(x):
    return x.detach().cpu().numpy().astype(np.float64)


def test_logits_and_activations_agree_at_every_shared_hook_name():
    model, lens = both_models()
    logits, cache = C.run_with_cache(model, TOKENS)
    tl_logits, tl_cache = lens.run_with_cache(torch.tensor(TOKENS))
    np.testing.assert_allclose(logits.numpy(), as_np(tl_logits), rtol=1e-4, atol=1e-4)
    shared = [n for n in cache if n in tl_cache.keys()]
    expected = {"hook_embed", "hook_pos_embed", "ln_final.hook_scale", "ln_final.hook_normalized"}
    expected |= {
        f"blocks.{i}.{s}"
        for i in range(L)
        for s in (
            "hook_resid_pre", "hook_attn_out", "hook_resid_mid", "hook_mlp_out",
            "hook_resid_post", "attn.hook_q", "attn.hook_k", "attn.hook_v",
            "attn.hook_attn_scores", "attn.hook_pattern", "attn.hook_z", "attn.hook_result",
            "mlp.hook_pre", "mlp.hook_post", "ln1.hook_scale", "ln1.hook_normalized",
            "ln2.hook_scale", "ln2.hook_normalized",
        )
    }  # fmt: skip
    assert expected <= set(shared), expected - set(shared)
    causal = np.tril(np.ones((T, T), dtype=bool))
    for name in shared:
        ours, theirs = cache[name], as_np(tl_cache[name])
        assert ours.shape == theirs.shape, name
        if name.endswith("hook_attn_scores"):  # masked entries: -inf here, a large negative there
            ours, theirs = ours[..., causal], theirs[..., causal]
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-4, err_msg=name)


def test_decomposed_residual_stream_and_logit_lens_agree():
    model, lens = both_models()
    _, cache = C.run_with_cache(model, TOKENS)
    _, tl_cache = lens.run_with_cache(torch.tensor(TOKENS))
    for ours, theirs in (
        (
            C.decompose_resid(model, cache, apply_ln=True, return_labels=True),
            tl_cache.decompose_resid(apply_ln=True, return_labels=True),
        ),
        (
            C.stack_head_results(model, cache, apply_ln=True, return_labels=True),
            tl_cache.stack_head_results(layer=-1, apply_ln=True, return_labels=True),
        ),
        (
            C.accumulated_resid(model, cache, return_labels=True),
            tl_cache.accumulated_resid(return_labels=True),
        ),
        (
            C.accumulated_resid(model, cache, layer=1, incl_mid=True, return_labels=True),
            tl_cache.accumulated_resid(layer=1, incl_mid=True, return_labels=True),
        ),
        (
            C.full_resid_decomposition(
                model, cache, apply_ln=True, expand_neurons=True, return_labels=True
            ),
            tl_cache.get_full_resid_decomposition(
                expand_neurons=True, apply_ln=True, return_labels=True
            ),
        ),
    ):
        assert ours[1] == list(theirs[1])
        np.testing.assert_allclose(ours[0], as_np(theirs[0]), rtol=1e-4, atol=1e-4)
    stack = tl_cache.accumulated_resid()
    tl_lens = torch.stack([lens.unembed(lens.ln_final(s)) for s in stack])
    np.testing.assert_allclose(C.logit_lens(model, cache), as_np(tl_lens), rtol=1e-4, atol=1e-4)


def test_patching_sweeps_agree():
    model, lens = both_models()
    corrupted = np.random.default_rng(1).integers(0, V, (3, T))
    _, cache = C.run_with_cache(model, TOKENS)
    _, tl_cache = lens.run_with_cache(torch.tensor(TOKENS))
    ours = lambda lg: lg[:, -1, 3].mean() - lg[:, -1, 5].mean()  # noqa: E731
    theirs = lambda lg: lg[:, -1, 3].mean() - lg[:, -1, 5].mean()  # noqa: E731
    for fn, hook, by in (
        (patching.get_act_patch_resid_pre, "hook_resid_pre", "pos"),
        (patching.get_act_patch_attn_head_out_all_pos, "attn.hook_z", "head"),
        (patching.get_act_patch_attn_head_out_by_pos, "attn.hook_z", "pos_head"),
    ):
        got = C.activation_patching(model, corrupted, cache, ours, hook, by)
        want = as_np(fn(lens, torch.tensor(corrupted), tl_cache, theirs))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=hook)


def test_decomposition_up_to_a_layer_is_normalized_by_that_layers_ln1():
    """With ``layer`` < n_layer and ``apply_ln``, TransformerLens divides by the scale of the
    norm that reads the stream the parts sum to, block ``layer``'s ln1, not the final norm's
    (and accumulated_resid uses that cached scale, not each stream's own)."""
    model, lens = both_models()
    _, cache = C.run_with_cache(model, TOKENS)
    _, tl_cache = lens.run_with_cache(torch.tensor(TOKENS))
    for ours, theirs in (
        (
            C.decompose_resid(model, cache, layer=1, apply_ln=True, return_labels=True),
            tl_cache.decompose_resid(layer=1, apply_ln=True, return_labels=True),
        ),
        (
            C.stack_head_results(model, cache, layer=1, apply_ln=True, return_labels=True),
            tl_cache.stack_head_results(layer=1, apply_ln=True, return_labels=True),
        ),
        (
            C.accumulated_resid(model, cache, layer=1, incl_mid=True, apply_ln=True,
                                return_labels=True),
            tl_cache.accumulated_resid(layer=1, incl_mid=True, apply_ln=True, return_labels=True),
        ),
    ):  # fmt: skip
        assert ours[1] == list(theirs[1])
        np.testing.assert_allclose(ours[0], as_np(theirs[0]), rtol=1e-4, atol=1e-4)


def test_pos_slice_on_the_stacking_functions_agrees_with_transformer_lens():
    """``pos_slice`` on the stacking functions (an int, a slice, a list: TransformerLens's
    (start, stop) pair is our slice) with ``apply_ln``: the stack at those positions divided by
    their σ. On the folded model, where the logit lens's norm has no gain or bias here or
    there (unfolded, TransformerLens's lens applies ln_final's gain and bias too)."""
    model, lens = both_models()
    lens = folded(lens)
    _, cache = C.run_with_cache(model, TOKENS)
    _, tl_cache = lens.run_with_cache(torch.tensor(TOKENS))
    for ours_cut, tl_cut in ((-1, -1), (slice(1, 4), (1, 4)), ([0, 2], [0, 2])):
        for name, kw in (
            ("decompose_resid", dict(layer=1)),
            ("stack_head_results", {}),
            ("accumulated_resid", dict(layer=1, incl_mid=True)),
            ("accumulated_resid", {}),  # the logit lens: each stream by its own σ
        ):
            ours = getattr(C, name)(model, cache, apply_ln=True, pos_slice=ours_cut, **kw)
            theirs = getattr(tl_cache, name)(apply_ln=True, pos_slice=tl_cut, **kw)
            assert ours.shape == tuple(theirs.shape), (name, ours_cut)
            np.testing.assert_allclose(ours, as_np(theirs), rtol=1e-4, atol=1e-4)


def test_mlp_input_agrees_with_transformer_lens():
    """``mlp_input=True``: the decomposition and the accumulated stream up to the stream block
    1's MLP reads, normalized by block 1's ln2 scale, here and in TransformerLens."""
    model, lens = both_models()
    _, cache = C.run_with_cache(model, TOKENS)
    _, tl_cache = lens.run_with_cache(torch.tensor(TOKENS))
    kw = dict(layer=1, mlp_input=True, apply_ln=True, return_labels=True)
    for ours, theirs in (
        (C.decompose_resid(model, cache, **kw), tl_cache.decompose_resid(**kw)),
        (
            C.accumulated_resid(model, cache, incl_mid=True, pos_slice=[0, 3], **kw),
            tl_cache.accumulated_resid(incl_mid=True, pos_slice=[0, 3], **kw),
        ),
    ):
        assert ours[1] == list(theirs[1])
        np.testing.assert_allclose(ours[0], as_np(theirs[0]), rtol=1e-4, atol=1e-4)


def test_logit_attrs_agree_with_transformer_lens():
    """TransformerLens's ``cache.logit_attrs(stack, tokens, incorrect_tokens, pos_slice)`` takes
    the stack without the final norm and applies it; so does ``logit_attrs``. Per position
    (tokens (B, T)), at one position (a (B,) token each, ``pos_slice=-1``), as a logit
    difference, and for one token everywhere."""
    model, lens = both_models()
    lens = folded(lens)
    _, cache = C.run_with_cache(model, TOKENS)
    _, tl_cache = lens.run_with_cache(torch.tensor(TOKENS))
    stack, labels = C.full_resid_decomposition(model, cache, return_labels=True)
    tl_stack, tl_labels = tl_cache.get_full_resid_decomposition(
        expand_neurons=False, return_labels=True
    )
    assert labels == list(tl_labels)
    nxt, other = TOKENS[:, 1:], (TOKENS[:, 1:] + 1) % V
    cases = (
        (
            C.logit_attrs(model, cache, stack[:, :, :-1], nxt, pos_slice=slice(0, -1)),
            tl_cache.logit_attrs(tl_stack[:, :, :-1], torch.tensor(nxt), pos_slice=(0, -1)),
        ),
        (
            C.logit_attrs(model, cache, stack[:, :, -1], nxt[:, -1], other[:, -1], pos_slice=-1),
            tl_cache.logit_attrs(
                tl_stack[:, :, -1],
                torch.tensor(nxt[:, -1]),
                torch.tensor(other[:, -1]),
                pos_slice=-1,
            ),
        ),
        (C.logit_attrs(model, cache, stack, 4), tl_cache.logit_attrs(tl_stack, 4)),
    )
    for ours, theirs in cases:
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_allclose(ours, as_np(theirs), rtol=1e-4, atol=1e-4)
        assert np.abs(ours).max() > 0.1  # terms of a real size, not zeros that agree
