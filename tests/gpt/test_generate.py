"""Sampling: greedy is deterministic, top-k and top-p restrict the support, seeds repeat,
stop tokens stop, and cached generation equals uncached."""

import numpy as np
import pytest

import nn
import tensorlab as tl
from gpt.config import GPTConfig
from gpt.generate import NextLogits, generate, sample_next
from gpt.model import GPT


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


def test_prompt_outside_vocabulary_is_a_clear_error(model):
    with pytest.raises(ValueError, match="outside the model's vocabulary"):
        generate(model, [1, 99], 3)
