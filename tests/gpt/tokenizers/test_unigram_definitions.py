"""Unigram against its definitions, worked out independently on small cases.

Encoding is the most probable segmentation (ties: the path whose last piece starts earliest,
as SentencePiece), found here by listing every segmentation; sampling draws a segmentation with
probability proportional to p(segmentation) ** alpha; training's Viterbi counts are the pieces of
each word's best segmentation; pruning keeps the pieces whose removal costs the corpus the most
likelihood, by the formula in ``_Lattice._prune``'s docstring; training seeds the vocabulary
with every character and every substring seen at least twice, and each pruning round keeps
``shrink`` of the pieces. Scores are small integers where ties matter, so that sums are exact.
"""

import itertools
import math
import random
import re
from collections import Counter

import numpy as np
import pytest

from gpt.tokenizers import Unigram
from gpt.tokenizers.models import UNK_PENALTY
from gpt.tokenizers.unigram import _Alternatives, _Lattice


def segmentations(word: str, max_len: int):
    """Every way to cut ``word`` into pieces of at most ``max_len`` characters, as cut lists
    (0, ..., len(word))."""
    n = len(word)
    for k in range(n):
        for cuts in itertools.combinations(range(1, n), k):
            bounds = (0, *cuts, n)
            if all(j - i <= max_len for i, j in zip(bounds, bounds[1:])):
                yield bounds


def best_segmentation(word: str, score: dict[str, float], unk_score: float | None) -> list[str]:
    """The most probable segmentation by listing them all. A character that is no piece on its
    own may stand alone as an unknown piece (score ``unk_score``). Ties go to the segmentation
    whose last piece starts earliest, then whose second-to-last does, and so on."""
    max_len = max(map(len, score))
    best = None
    for bounds in segmentations(word, max_len):
        pieces = [word[i:j] for i, j in zip(bounds, bounds[1:])]
        total = 0.0
        for p in pieces:
            if p in score:
                total += score[p]
            elif len(p) == 1 and unk_score is not None:
                total += unk_score
            else:
                break
        else:
            key = (-total, bounds[::-1])
            if best is None or key < best[0]:
                best = (key, pieces)
    return best[1]


def fused_ids(tok: Unigram, pieces: list[str], score: dict[str, float]) -> list[int]:
    """Ids of pieces, a run of unknown ones (characters that are no piece) being one <unk>."""
    ids: list[int] = []
    for p in pieces:
        if p in score:
            ids.append(tok.token_to_id(p))
        elif not ids or ids[-1] != tok.unk_id:
            ids.append(tok.unk_id)
    return ids


def random_model(rng: random.Random, alphabet: str = "abcd") -> dict[str, float]:
    """Some characters, and pieces of 2 to 4 characters, with integer scores (ties happen)."""
    chars = rng.sample(alphabet, rng.randint(2, len(alphabet)))
    pieces = {c: -float(rng.randint(1, 4)) for c in chars}
    for _ in range(rng.randint(2, 8)):
        p = "".join(rng.choice(alphabet) for _ in range(rng.randint(2, 4)))
        pieces[p] = -float(rng.randint(1, 6))
    return pieces


def test_encoding_is_the_best_segmentation_by_listing_them_all():
    rng = random.Random(1)
    for _ in range(40):
        score = random_model(rng)
        tok = Unigram([("<unk>", 0.0), *score.items()], prepend_scheme="never")
        unk_score = min(score.values()) - UNK_PENALTY  # below the least likely piece
        for _ in range(10):
            word = "".join(rng.choice("abcd") for _ in range(rng.randint(1, 7)))
            expected = best_segmentation(word, score, unk_score)
            assert tok.encode(word) == fused_ids(tok, expected, score), (score, word, expected)


def test_ties_go_to_the_longer_piece_as_in_the_tokenizers_library():
    hf = pytest.importorskip("tokenizers")
    pieces = [("<unk>", 0.0), ("a", -1.0), ("b", -1.0), ("c", -1.0), ("ab", -2.0)]
    pieces += [("bc", -2.0), ("abc", -3.0), ("cab", -3.0)]
    theirs = hf.Tokenizer(hf.models.Unigram(pieces, unk_id=0))
    tok = Unigram(pieces, prepend_scheme="never")
    for word in ["ab", "abc", "bcab", "cabc", "abcab", "aab", "cc"]:
        assert tok.encode(word) == theirs.encode(word).ids, word


def test_the_longest_piece_of_the_vocabulary_is_used():
    pieces = [("<unk>", 0.0), ("a", -5.0), ("b", -5.0), ("ab", -5.0), ("abab", -1.0)]
    tok = Unigram(pieces, prepend_scheme="never")
    assert [tok.id_to_token(i) for i in tok.encode("abab")] == ["abab"]  # -1 beats ab ab: -10
    assert [tok.id_to_token(i) for i in tok.encode("ababa")] == ["abab", "a"]


# ----- sampling ----------------------------------------------------------------------------


@pytest.mark.parametrize("alpha", [0.5, 2.0])
def test_samples_follow_the_segmentation_probability_to_the_power_alpha(alpha):
    p = {"a": 0.3, "b": 0.2, "ab": 0.25, "ba": 0.15, "aba": 0.06, "bab": 0.04}
    pieces = [(t, math.log(q)) for t, q in p.items()]
    tok = Unigram(pieces, special_tokens=[], unk_token=None, prepend_scheme="never")
    word = "abab"
    weights = {}
    for bounds in segmentations(word, 3):
        pieces = [word[i:j] for i, j in zip(bounds, bounds[1:])]
        if all(x in p for x in pieces):
            weights[tuple(tok.token_to_id(x) for x in pieces)] = math.prod(p[x] for x in pieces)
    z = sum(w**alpha for w in weights.values())
    expected = {seg: w**alpha / z for seg, w in weights.items()}
    n = 3000
    seen = Counter(tuple(tok.encode_sample(word, alpha=alpha, seed=s)) for s in range(n))
    assert set(seen) <= set(expected)
    for seg, q in expected.items():
        # binomial standard deviation at most 0.0092; 0.035 is about four of them
        assert abs(seen[seg] / n - q) < 0.035, (seg, seen[seg] / n, q)


# ----- decoding ----------------------------------------------------------------------------


def test_decoding_keeps_the_space_after_a_special_token_as_the_library():
    hf = pytest.importorskip("tokenizers")
    pieces = [("<unk>", 0.0), ("<s>", 0.0), ("▁", -3.0), ("▁hi", -1.0), ("h", -3.0), ("i", -3.0)]
    ours = Unigram(pieces, special_tokens=["<unk>", "<s>"], prepend_scheme="always")
    theirs = hf.Tokenizer(hf.models.Unigram(pieces, unk_id=0))
    theirs.add_special_tokens(["<s>"])
    theirs.decoder = hf.decoders.Metaspace(replacement="▁", prepend_scheme="always")
    s, hi = ours.token_to_id("<s>"), ours.token_to_id("▁hi")
    for ids in ([s, hi], [hi, s, hi], [hi, hi, s, hi, s]):
        assert ours.decode(ids) == theirs.decode(ids, skip_special_tokens=False), ids


# ----- training ----------------------------------------------------------------------------

#: a corpus of distinct words with counts, for the training passes
WORDS = {"abab": 3, "abc": 2, "cab": 4, "bcbca": 1, "aabb": 2, "cabcab": 1, "ba": 5}


def test_viterbi_counts_are_the_pieces_of_each_words_best_segmentation():
    lat = _Lattice(WORDS, max_len=4)
    rng = np.random.default_rng(0)
    for _ in range(20):
        alive = (rng.random(lat.n_candidates) < 0.5) | (lat.sid_len == 1)
        logp = -rng.integers(1, 5, lat.n_candidates).astype(float)  # integers: many ties
        counts = lat._viterbi_counts(logp, alive)
        score = {lat.strings[k]: logp[k] for k in np.flatnonzero(alive)}
        expected = np.zeros(lat.n_candidates)
        for w, f in WORDS.items():
            for piece in best_segmentation(w, score, None):
                expected[lat.sid_of[piece]] += f
        np.testing.assert_array_equal(counts, expected)


def test_pruning_keeps_the_pieces_whose_removal_costs_most():
    lat = _Lattice(WORDS, max_len=4)
    required = lat.sid_len == 1
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(10):
        alive = (rng.random(lat.n_candidates) < 0.6) | required
        logp = np.where(alive, np.log(rng.dirichlet(np.ones(lat.n_candidates))), -np.inf)
        score = {lat.strings[k]: logp[k] for k in np.flatnonzero(alive)}
        # F(s): uses of each piece in the best segmentations of the corpus
        freq = Counter()
        for w, f in WORDS.items():
            for piece in best_segmentation(w, score, None):
                freq[piece] += f
        total = sum(freq.values())
        loss = {}
        for s in score:
            if len(s) == 1:
                loss[s] = math.inf
            elif freq[s] == 0:
                loss[s] = 0.0
            else:
                # its uses go to its best segmentation without it, each alternative piece's
                # count grows by F(s), and the total by F(s) * (number of alternatives - 1)
                alts = best_segmentation(s, {t: v for t, v in score.items() if t != s}, None)
                new_total = total + freq[s] * (len(alts) - 1)
                log_p_alt = sum(math.log((freq[t] + freq[s]) / new_total) for t in alts)
                loss[s] = freq[s] * (math.log(freq[s] / total) - log_p_alt)
        ranked = sorted(score, key=lambda s: (-loss[s], lat.sid_of[s]))
        alt = _Alternatives(lat, alive)
        for keep in range(int(required.sum()), len(ranked)):
            a, b = loss[ranked[keep - 1]], loss[ranked[keep]]
            if abs(a - b) < 1e-9 and not a == b == 0.0:
                continue  # a near tie at the cut: rounding may order it either way
            kept = lat._prune(logp, alive, keep, required, alt)
            assert {lat.strings[k] for k in np.flatnonzero(kept)} == set(ranked[:keep]), keep
            checked += 1
    assert checked > 20


def verbose_counts(capsys, text, **options) -> list[int]:
    """The vocabulary sizes training reports after each round of EM."""
    capsys.readouterr()
    Unigram.train(text, verbose=True, **options)
    return [int(n) for n in re.findall(r"unigram: (\d+) pieces", capsys.readouterr().out)]


TEXT = (
    "the quick brown fox jumps over the lazy dog while seven wizards quietly hex "
    "jovial kings and sphinxes of black quartz judge my vow "
) * 3 + "zq xj"  # some substrings only once


def test_training_seeds_every_character_and_every_repeated_substring(capsys):
    words = Counter()
    for w in TEXT.split():
        words["▁" + w] += 1
    seen = Counter()
    for w, f in words.items():
        for i in range(len(w)):
            for j in range(i + 1, min(len(w), i + 16) + 1):
                seen[w[i:j]] += f
    n_chars = sum(len(s) == 1 for s in seen)
    n_repeated = sum(len(s) > 1 and f >= 2 for s, f in seen.items())
    assert n_chars + n_repeated < len(seen)
    assert verbose_counts(capsys, TEXT, vocab_size=60, seed_size=10**6)[0] == n_chars + n_repeated
    assert verbose_counts(capsys, TEXT, vocab_size=60, seed_size=100)[0] == 100


def test_each_pruning_round_keeps_shrink_of_the_pieces(capsys):
    target = 60 - 1  # the <unk> takes one id
    for shrink in (0.5, 0.8):
        counts = verbose_counts(capsys, TEXT, vocab_size=60, seed_size=200, shrink=shrink)
        assert counts[0] == 200
        assert counts[-1] == target
        for before, after in zip(counts, counts[1:]):
            assert after == max(target, int(before * shrink))
