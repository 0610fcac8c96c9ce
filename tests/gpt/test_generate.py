"""Sampling: greedy is deterministic, top-k and top-p restrict the support, seeds repeat,
stop tokens stop, and cached generation equals uncached."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nn
import tensorlab as tl
from gpt.config import ConfigError, GPTConfig
from gpt.generate import NextLogits, generate, next_token_probs, sample_next
from gpt.model import GPT
from tests.strategies import logit_rows


def test_greedy_picks_argmax():
    rng = np.random.default_rng(0)
    logits = np.array([0.1, 3.0, 2.9, -1.0])
    assert sample_next(logits, rng, temperature=0) == 1


def test_top_k_never_samples_outside_the_k_largest():
    rng = np.random.default_rng(0)
    logits = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    draws = {sample_next(logits, rng, temperature=5.0, top_k=2) for _ in range(300)}
    assert draws == {0, 1}


def test_top_p_keeps_the_smallest_nucleus():
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.3, 0.15, 0.05])
    # cumulative 0.5, 0.8, 0.95: top_p=0.75 keeps {0, 1}
    draws = {sample_next(np.log(p), rng, top_p=0.75) for _ in range(300)}
    assert draws == {0, 1}


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


# The distribution is computed in float64 from the same logits both ways; 1e-12 allows the
# rounding of a few exp/sum orders and nothing else.
@given(z=logit_rows(), data=st.data(), temperature=st.sampled_from([0.3, 1.0, 2.5]))
def test_top_k_is_the_softmax_of_exactly_the_k_largest(z, data, temperature):
    k = data.draw(st.integers(1, z.size + 2), label="k")
    p = next_token_probs(z, temperature, top_k=k)
    kept = np.argsort(-z)[:k]
    assert set(np.flatnonzero(p)) == set(kept)
    np.testing.assert_allclose(p[kept], softmax(z[kept] / temperature), rtol=0, atol=1e-12)


@given(z=logit_rows(), top_p=st.floats(1e-6, 1.0))
def test_top_p_keeps_the_smallest_most_probable_set_that_reaches_p(z, top_p):
    full = softmax(z)
    p = next_token_probs(z, top_p=top_p)
    kept = np.flatnonzero(p)
    order = np.argsort(-full)
    assert set(kept) == set(order[: kept.size])  # the most probable ones
    assert full[kept].sum() >= top_p - 1e-12  # reaches p ...
    assert full[order[: kept.size - 1]].sum() < top_p + 1e-12  # ... and one fewer does not
    np.testing.assert_allclose(p[kept], full[kept] / full[kept].sum(), rtol=0, atol=1e-12)


@given(z=logit_rows(), data=st.data())
def test_top_p_cuts_what_top_k_left(z, data):
    k, top_p = data.draw(st.integers(1, z.size), label="k"), data.draw(st.floats(0.05, 1.0))
    cut = np.where(np.isin(np.arange(z.size), np.argsort(-z)[:k]), z, -np.inf)
    np.testing.assert_allclose(
        next_token_probs(z, top_k=k, top_p=top_p),
        next_token_probs(cut, top_p=top_p),
        rtol=0,
        atol=1e-12,
    )


def test_ties_with_the_kth_largest_stay_and_greedy_takes_the_first_largest():
    z = np.array([1.0, 3.0, 2.0, 3.0, 2.0])  # the 3rd largest, 2.0, is there twice
    expected = np.r_[0.0, softmax(z[1:])]
    np.testing.assert_allclose(next_token_probs(z, top_k=3), expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(next_token_probs(z, temperature=0), [0, 1, 0, 0, 0])


def test_the_edges_of_each_setting_are_accepted_and_just_past_them_refused():
    z, rng = np.array([0.5, 2.0, -1.0]), np.random.default_rng(0)
    np.testing.assert_array_equal(next_token_probs(z, top_k=1), [0, 1, 0])  # k = 1: greedy
    np.testing.assert_allclose(next_token_probs(z, top_p=1.0), softmax(z), atol=1e-15)
    np.testing.assert_array_equal(next_token_probs(z, top_p=1e-9), [0, 1, 0])
    state = rng.bit_generator.state
    assert sample_next(z, rng, temperature=0) == 1
    assert rng.bit_generator.state == state  # greedy draws no random number
    for bad in (dict(top_k=0), dict(top_p=0.0), dict(top_p=1.5), dict(temperature=-0.1)):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            next_token_probs(z, **bad)


def test_sampling_frequencies_follow_temperature_scaled_softmax():
    rng = np.random.default_rng(1)
    logits = np.array([1.0, 0.0])
    n = 4000
    hits = sum(sample_next(logits, rng, temperature=0.5) == 0 for _ in range(n))
    expected = 1 / (1 + np.exp(-2.0))  # softmax([2, 0])[0] = 0.881
    assert abs(hits / n - expected) < 4 * np.sqrt(expected * (1 - expected) / n)


@pytest.fixture(scope="module")
def model():
    tl.manual_seed(0)
    return GPT(GPTConfig(vocab_size=13, block_size=10, n_layer=2, n_head=2, d_model=16))


def test_seed_repeats_and_cache_matches_recompute(model):
    a = generate(model, [1, 2, 3], 15, temperature=1.0, seed=7)
    b = generate(model, [1, 2, 3], 15, temperature=1.0, seed=7)
    c = generate(model, [1, 2, 3], 15, temperature=1.0, seed=7, use_cache=False)
    assert a == b == c  # 18 tokens > block_size: the window slides in both paths
    assert generate(model, [1, 2, 3], 15, seed=7) == a  # temperature 1 by default
    assert len(a) == 18


@pytest.mark.parametrize("prompt_len", [1, 3, 10, 14])
def test_cached_logits_equal_recomputed_logits_past_the_window(model, prompt_len):
    """Both paths see the last block_size tokens: the cached path's logits equal a full
    recompute at every step, before and after the sequence outgrows the window (block 10,
    up to 30 tokens). Tolerance 1e-5: float32, the same sums in a different order."""
    rng = np.random.default_rng(0)
    ids = [int(i) for i in rng.integers(0, 13, 30)]
    cached, fresh = NextLogits(model), NextLogits(model, use_cache=False)
    with nn.evaluating(model):
        for n in range(prompt_len, len(ids) + 1):
            np.testing.assert_allclose(cached(ids[:n]), fresh(ids[:n]), atol=1e-5, err_msg=n)
            window = ids[max(0, n - 10) : n]  # exactly the last block_size tokens, no fewer
            logits, _ = model(tl.tensor(np.array([window])))
            np.testing.assert_allclose(fresh(ids[:n]), logits.numpy()[0, -1], atol=1e-6)


def test_stop_token_ends_generation(model):
    out = generate(model, [1], 50, temperature=0)
    stop = out[3]
    short = generate(model, [1], 50, temperature=0, stop_tokens=[stop])
    assert short[-1] == stop and len(short) <= 4


def test_the_first_and_last_ids_are_a_prompt_and_no_new_tokens_is_the_prompt(model):
    assert generate(model, [0, 12], 0) == [0, 12]
    assert len(generate(model, [0, 12], 2, temperature=0)) == 4


def test_the_cache_runs_only_the_new_tokens_until_the_window_is_full(model):
    """Block 10: a prompt of 3, then one position per call up to 10 positions; after that
    the window slides and every call runs the last 10 again (see NextLogits)."""
    fed = []
    handle = model.hook_embed.register_forward_hook(lambda m, args, out: fed.append(out.shape[1]))
    try:
        generate(model, [1, 2, 3], 10, temperature=0)
    finally:
        handle.remove()
    assert fed == [3] + [1] * 7 + [10, 10]


def test_prompt_outside_vocabulary_is_a_clear_error(model):
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        generate(model, [1, 99], 3)
