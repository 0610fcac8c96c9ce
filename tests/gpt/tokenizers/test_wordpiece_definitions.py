"""WordPiece against its definitions: training against a plain trainer that recounts everything
after each merge, encoding against the ``tokenizers`` library's WordPiece model.

The trainer keeps pair and token counts incrementally and re-pushes changed scores onto a heap;
whatever it does, each merge must be the pair with the best score over the current segmentation
of the corpus (ties: the smaller pair of ids), as a trainer that recounts from scratch finds.
"""

import os
import random
from collections import Counter

import pytest

from gpt.tokenizers import WordPiece
from gpt.tokenizers.normalizers import bert_normalize
from gpt.tokenizers.tokenizer import word_splitter

os.environ.setdefault("RAYON_NUM_THREADS", "1")


def bert_pretokenize(text: str) -> list[str]:
    """BERT's pre-tokenization, as a file's ``BertPreTokenizer`` cuts text."""
    return word_splitter(None, {"type": "BertPreTokenizer"})(text, True)


def train_by_recounting(text: str, score: str, prefix: str = "##") -> list[str]:
    """Every token WordPiece training learns from ``text`` until no pair is left, in id order,
    recounting pairs (overlapping ones too, as BPE) and tokens over the whole corpus before
    each merge. The likelihood score of a pair is count(ab) / (count(a) * count(b))."""
    words = Counter(bert_pretokenize(bert_normalize(text)))
    alphabet = set()
    for w in words:
        alphabet.add(w[0])
        alphabet.update(prefix + c for c in w[1:])
    itos = ["[UNK]", *sorted(alphabet)]
    stoi = {t: i for i, t in enumerate(itos)}
    seqs = [([stoi[w[0]]] + [stoi[prefix + c] for c in w[1:]], f) for w, f in words.items()]
    while True:
        pairs, tokens = Counter(), Counter()
        for s, f in seqs:
            for t in s:
                tokens[t] += f
            for p in zip(s, s[1:]):
                pairs[p] += f
        if not pairs:
            return itos

        if score == "likelihood":
            value = {p: n / (tokens[p[0]] * tokens[p[1]]) for p, n in pairs.items()}
        else:
            value = pairs
        a, b = best = min(pairs, key=lambda p: (-value[p], p))
        merged = itos[a] + itos[b][len(prefix) :]
        if merged not in stoi:  # two merges may spell the same token: it keeps its first id
            stoi[merged] = len(itos)
            itos.append(merged)
        new = []
        for s, f in seqs:
            out, i = [], 0
            while i < len(s):
                if tuple(s[i : i + 2]) == best:
                    out.append(stoi[merged])
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            new.append((out, f))
        seqs = new


def random_corpus(rng: random.Random) -> str:
    words = ["".join(rng.choice("aabc") for _ in range(rng.randint(1, 7))) for _ in range(12)]
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, 25)))


@pytest.mark.parametrize("score", ["frequency", "likelihood"])
def test_training_merges_the_best_pair_of_a_recount(score):
    rng = random.Random(0)
    for _ in range(60):
        text = random_corpus(rng)
        expected = train_by_recounting(text, score)
        assert WordPiece.train(text, len(expected), score=score).itos == expected, text


# ----- encoding ----------------------------------------------------------------------------

VOCAB = ["[UNK]", "a", "b", "c", "ab", "abcabcab", "##a", "##b", "##c", "##ab", "##bca", "##cc"]


@pytest.mark.parametrize("max_chars", [4, 6, 100])
def test_encoding_matches_the_librarys_wordpiece_model(max_chars):
    hf = pytest.importorskip("tokenizers")
    theirs = hf.Tokenizer(
        hf.models.WordPiece(
            {t: i for i, t in enumerate(VOCAB)},
            unk_token="[UNK]",
            max_input_chars_per_word=max_chars,
        )
    )
    ours = WordPiece(VOCAB, max_word_chars=max_chars)
    rng = random.Random(max_chars)
    words = ["abcabcab", "abcabcabc", "abcabca", "abca", "abcab", "abcabc", "cc", "ad", "bccab"]
    words += ["".join(rng.choice("abc") for _ in range(rng.randint(1, 10))) for _ in range(150)]
    for word in words:
        assert ours.encode(word) == theirs.encode(word, add_special_tokens=False).ids, word
