import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpt.tokenizers import TokenizerError, Unigram
from gpt.tokenizers.unigram import _Lattice

from .tokenizer_strategies import text_over


def hand_model(prepend="never") -> Unigram:
    # probabilities chosen so the sums are easy on paper (natural logs of simple numbers)
    p = {"a": 0.2, "b": 0.2, "c": 0.1, "ab": 0.3, "bc": 0.15, "abc": 0.05}
    pieces = [("<unk>", 0.0)] + [(t, math.log(q)) for t, q in p.items()]
    return Unigram(pieces, prepend_scheme=prepend)


def test_viterbi_by_hand():
    tok = hand_model()
    # segmentations of "abc" and their probabilities:
    #   a|b|c  .2*.2*.1 = .004    ab|c  .3*.1 = .03    a|bc  .2*.15 = .03    abc  .05
    # "abc" as one piece wins.
    assert [tok.id_to_token(i) for i in tok.encode("abc")] == ["abc"]
    # "abab": ab|ab = .09 beats a|b|ab = .012 and a|b|a|b = .0016
    assert [tok.id_to_token(i) for i in tok.encode("abab")] == ["ab", "ab"]
    # "bcab": bc|ab = .045 vs b|c|ab = .006 vs b|c|a|b
    assert [tok.id_to_token(i) for i in tok.encode("bcab")] == ["bc", "ab"]


def test_unknown_characters_become_one_fused_unk():
    tok = hand_model()
    ids = tok.encode("abxyzab")
    assert [tok.id_to_token(i) for i in ids] == ["ab", "<unk>", "ab"]
    assert tok.unk_id == 0


def test_metaspace_and_decoding():
    pieces = [("<unk>", 0.0), ("▁", -3.0), ("▁hi", -1.0), ("h", -3.0), ("i", -3.0)]
    tok = Unigram(pieces, prepend_scheme="always")
    ids = tok.encode("hi hi")
    assert [tok.id_to_token(i) for i in ids] == ["▁hi", "▁hi"]
    assert tok.decode(ids) == "hi hi"


def all_segmentations(word):
    n = len(word)
    for k in range(n):
        for cuts in itertools.combinations(range(1, n), k):
            bounds = (0, *cuts, n)
            yield [word[i:j] for i, j in zip(bounds, bounds[1:])]


def test_forward_backward_expected_counts_match_brute_force():
    words = {"abab": 2, "abc": 1, "cab": 3}
    lat = _Lattice(words, max_len=3)
    rng = np.random.default_rng(0)
    alive = np.ones(lat.n_candidates, dtype=bool)
    logp = np.log(rng.dirichlet(np.ones(lat.n_candidates)))
    new_logp, loglik = lat._em_step(logp, alive)
    # brute force: enumerate every segmentation, weight by its probability
    p = {s: math.exp(logp[k]) for k, s in enumerate(lat.strings)}
    expected = dict.fromkeys(lat.strings, 0.0)
    total_loglik = 0.0
    for w, f in words.items():
        segs = [s for s in all_segmentations(w) if all(x in p for x in s)]
        probs = [math.prod(p[x] for x in s) for s in segs]
        z = sum(probs)
        total_loglik += f * math.log(z)
        for s, q in zip(segs, probs):
            for x in s:
                expected[x] += f * q / z
    assert math.isclose(loglik, total_loglik, rel_tol=1e-9)
    counts = np.array([max(expected[s], 1e-3) for s in lat.strings])
    assert np.allclose(np.exp(new_logp), counts / counts.sum())


def test_training_small_text_keeps_every_character():
    text = "the cat sat on the mat with the hat " * 30 + "zq"
    tok = Unigram.train(text, vocab_size=40)
    assert tok.vocab_size == 40
    for c in set(text.replace(" ", "▁")) | {"▁"}:
        assert c in tok.stoi, c
    assert tok.decode(tok.encode("the cat sat")) == "the cat sat"
    assert [tok.id_to_token(i) for i in tok.encode("the")][0].startswith("▁")


@pytest.fixture(scope="module")
def shakespeare_unigram(train_text):
    return Unigram.train(train_text[:60_000], vocab_size=500)


def test_training_on_real_text(shakespeare_unigram, train_text):
    tok = shakespeare_unigram
    assert tok.vocab_size == 500
    scores = [s for _, s in tok.pieces[1:]]
    assert scores == sorted(scores, reverse=True)  # pieces ordered by probability
    assert math.isclose(sum(math.exp(s) for s in scores), 1.0, rel_tol=1e-6)
    assert "▁the" in tok.stoi


ALPHABET = "abcdefgh ,.!\n"


@pytest.fixture(scope="module")
def small_unigram():
    text = "abc abd a.b, hhh gg ee ff!\nhead bed cafe\n" * 20
    return Unigram.train(text, vocab_size=40)


@settings(deadline=None)  # timing varies on a shared 2-core machine
@given(text_over(ALPHABET))
def test_round_trip_over_the_training_alphabet(small_unigram, text):
    # the promise: exact unless the text starts with a space (the prefix "▁" is stripped)
    ids = small_unigram.encode(text)
    assert small_unigram.unk_id not in ids
    if not text.startswith(" "):
        assert small_unigram.decode(ids) == text


@settings(deadline=None)  # timing varies on a shared 2-core machine
@given(text_over(ALPHABET), st.integers(0, 1000))
def test_sampled_segmentations_decode_to_the_same_text(small_unigram, text, seed):
    ids = small_unigram.encode_sample(text, alpha=0.5, seed=seed)
    assert ids == small_unigram.encode_sample(text, alpha=0.5, seed=seed)
    if not text.startswith(" "):
        assert small_unigram.decode(ids) == text


def test_sampling_varies_and_large_alpha_approaches_viterbi(shakespeare_unigram):
    tok = shakespeare_unigram
    text = "Wherefore art thou Romeo, remembering thy lamentations"
    samples = {tuple(tok.encode_sample(text, alpha=0.1, seed=s)) for s in range(20)}
    assert len(samples) > 1
    sharp = [tok.encode_sample(text, alpha=50.0, seed=s) for s in range(5)]
    assert all(s == tok.encode(text) for s in sharp)
    with pytest.raises(TokenizerError):
        tok.encode_sample(text, alpha=0)


def test_vocab_size_limits():
    with pytest.raises(TokenizerError, match="below the base alphabet"):
        Unigram.train("abcdef", vocab_size=4)
    with pytest.raises(TokenizerError, match="more than the text supports"):
        Unigram.train("ab", vocab_size=100)
