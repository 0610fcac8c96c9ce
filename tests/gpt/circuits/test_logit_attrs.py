"""logit_attrs as TransformerLens's ``cache.logit_attrs``: it takes the stack without the
final norm and applies the norm itself, refuses a stack already normalized, and accepts
tokens of one shape per meaning, refusing the rest. And ``apply_ln`` up to a layer: the norm
that reads the stream the parts sum to (block ``layer``'s ln1), as TransformerLens does.
(test_transformer_lens_parity.py holds the same against TransformerLens itself.)"""

from __future__ import annotations

import numpy as np
import pytest

from gpt import circuits as C

from .circuit_models import randomized

B = T = 6  # batch == positions: where a (B,) array would line up with the positions unseen
TOKENS = np.random.default_rng(0).integers(0, 11, (B, T))


def model_and_cache(norm: str = "layernorm"):
    model = randomized(norm=norm, block_size=T)
    logits, cache = C.run_with_cache(model, TOKENS)
    return model, logits.numpy().astype(np.float64), cache


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_logit_attrs_applies_the_final_norm_to_the_raw_stack(norm):
    """The raw decomposition's attributions, plus the folded bias b_U, are the logits of the
    chosen tokens: the final norm (centring, 1/σ, gain) was applied inside."""
    model, logits, cache = model_and_cache(norm)
    stack = C.full_resid_decomposition(model, cache)
    _, b_U = C.folded_unembed(model)
    attrs = C.logit_attrs(model, cache, stack, TOKENS)
    want = np.take_along_axis(logits, TOKENS[..., None], -1)[..., 0]
    np.testing.assert_allclose(attrs.sum(0) + b_U[TOKENS], want, atol=1e-5 * np.abs(want).max())


def test_a_stack_already_normalized_is_refused():
    """Normalizing twice would divide by σ twice: right shape, wrong numbers. Refused."""
    model, _, cache = model_and_cache()
    normed = C.full_resid_decomposition(model, cache, apply_ln=True)
    assert isinstance(normed, C.NormedStack)
    for cut in (normed, normed[:, :, -1], normed[2:5]):
        with pytest.raises(ValueError, match="already normalized"):
            C.logit_attrs(model, cache, cut, 3, pos_slice=-1 if cut.ndim == 3 else None)
    with pytest.raises(ValueError, match="already normalized"):
        C.apply_ln_to_stack(model, cache, normed)


def test_tokens_of_shape_batch_are_refused_against_a_stack_with_positions():
    """(B,) against a (B, T) stack: NumPy would read it as one token per position (B == T
    here, so it would say nothing). Refused, naming both shapes; (B, 1) says one per
    sequence, and equals the per-position array repeated."""
    model, _, cache = model_and_cache()
    stack = C.decompose_resid(model, cache)
    with pytest.raises(ValueError, match=r"tokens of shape \(6,\) does not fit .* \(6, 6\)"):
        C.logit_attrs(model, cache, stack, TOKENS[:, 0])
    per_seq = C.logit_attrs(model, cache, stack, TOKENS[:, :1])
    repeated = C.logit_attrs(model, cache, stack, np.repeat(TOKENS[:, :1], T, axis=1))
    np.testing.assert_allclose(per_seq, repeated)
    # one position cut out: then (B,) is one token per sequence, as in TransformerLens
    last = C.logit_attrs(model, cache, stack[:, :, -1], TOKENS[:, -1], pos_slice=-1)
    np.testing.assert_allclose(last, C.logit_attrs(model, cache, stack, TOKENS)[:, :, -1])


def test_bad_tokens_are_refused():
    model, _, cache = model_and_cache()
    stack = C.decompose_resid(model, cache)
    with pytest.raises(ValueError, match=r"tokens must be in \[0, 11\), got values in \[-1"):
        C.logit_attrs(model, cache, stack, -1)  # would index the last token's column
    with pytest.raises(ValueError, match="integer token ids, got dtype float64"):
        C.logit_attrs(model, cache, stack, TOKENS + 0.5)
    with pytest.raises(ValueError, match=r"same shape, got \(6, 6\) and \(\)"):
        C.logit_attrs(model, cache, stack, TOKENS, 3)
    with pytest.raises(TypeError, match="cache must be the dict from run_with_cache"):
        C.logit_attrs(model, stack, TOKENS, TOKENS)  # the old (model, stack, tokens, incorrect)


def test_a_cut_stack_needs_the_cut_of_the_norm_scale():
    """A stack cut to some positions is divided by those positions' σ: ``pos_slice`` says
    which. Without it the shapes disagree and it is refused, naming both."""
    model, _, cache = model_and_cache()
    stack = C.decompose_resid(model, cache)
    with pytest.raises(ValueError, match=r"batch/position axes \(6,\) .* has \(6, 6\)"):
        C.logit_attrs(model, cache, stack[:, :, -1], TOKENS[:, -1])
    with pytest.raises(ValueError, match=r"axes \(6, 5\) .* has \(6, 6\)"):
        C.apply_ln_to_stack(model, cache, stack[:, :, 1:])
    with pytest.raises(TypeError, match=r"pos_slice=\(1, 3\): pass slice\(start, stop\)"):
        C.apply_ln_to_stack(model, cache, stack[:, :, 1:3], pos_slice=(1, 3))
    full = C.apply_ln_to_stack(model, cache, stack)
    np.testing.assert_allclose(
        C.apply_ln_to_stack(
            model, cache, stack[:, 1:3, [0, 4]], pos_slice=[0, 4], batch_slice=slice(1, 3)
        ),
        full[:, 1:3, [0, 4]],
    )


def test_apply_ln_up_to_a_layer_uses_that_layers_ln1():
    """decompose_resid(layer=1) sums to the stream before block 1, which block 1's ln1 reads:
    with apply_ln the parts sum to that stream centred and divided by ln1's σ of this run (not
    the final norm's). accumulated_resid(layer=1, apply_ln=True) divides every stream by that
    same cached σ (its last entry is then the normalized stream too)."""
    model, _, cache = model_and_cache()
    resid = cache["blocks.1.hook_resid_pre"].astype(np.float64)
    centred = resid - resid.mean(-1, keepdims=True)
    sigma = np.sqrt(resid.var(-1, keepdims=True) + model.blocks[1].ln1.eps)
    normalized = centred / sigma
    parts = C.decompose_resid(model, cache, layer=1, apply_ln=True)
    np.testing.assert_allclose(parts.sum(0), normalized, atol=1e-5)
    streams = C.accumulated_resid(model, cache, layer=1, apply_ln=True)
    np.testing.assert_allclose(streams[-1], normalized, atol=1e-5)
    first = cache["blocks.0.hook_resid_pre"].astype(np.float64)
    first = first - first.mean(-1, keepdims=True)
    np.testing.assert_allclose(streams[0], first / sigma, atol=1e-5)
