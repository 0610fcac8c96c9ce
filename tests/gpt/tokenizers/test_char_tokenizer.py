from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpt.tokenizers import CharTokenizer, TokenizerError

from .tokenizer_strategies import unicode_text


@settings(deadline=None)  # timing varies on a shared 2-core machine
@given(unicode_text)
def test_round_trip_on_its_own_training_text(text):
    tok = CharTokenizer.train(text + "x")
    assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode(text)) == len(text)


def test_vocabulary_is_sorted_characters_then_specials():
    tok = CharTokenizer.train("hello", special_tokens=["<|eot|>"])
    assert [tok.id_to_token(i) for i in range(tok.vocab_size)] == ["e", "h", "l", "o", "<|eot|>"]
    assert tok.encode("hole<|eot|>") == [1, 3, 2, 0, 4]


def test_unknown_character_policies():
    with pytest.raises(TokenizerError, match="'z'.*position 2"):
        CharTokenizer.train("abc").encode("abz")
    skip = CharTokenizer.train("abc", unknown="skip")
    assert skip.decode(skip.encode("azb")) == "ab"
    rep = CharTokenizer.train("abc", unknown="replace")
    ids = rep.encode("azb")
    assert ids[1] == rep.token_to_id("<unk>") == rep.unk_id
    assert rep.decode(ids) == "a<unk>b"


def test_vocab_size_keeps_the_most_frequent_characters():
    tok = CharTokenizer.train("aaabbc", vocab_size=3, unknown="replace")
    assert tok.vocab_size == 3
    assert tok.decode(tok.encode("abc")) == "ab<unk>"
    with pytest.raises(TokenizerError, match="more than the text supports"):
        CharTokenizer.train("abc", vocab_size=10)
    with pytest.raises(TokenizerError, match="no room"):
        CharTokenizer.train("abc", vocab_size=1, special_tokens=["<s>"])


def test_unk_among_the_special_tokens_is_not_added_twice():
    tok = CharTokenizer(list("ab"), special_tokens=["<unk>"], unknown="replace")
    assert tok.vocab_size == 3
    assert [tok.id_to_token(i) for i in range(3)] == ["a", "b", "<unk>"]
    assert tok.encode("azb") == [0, 2, 1]
    # training leaves as much room for characters whether or not <unk> is named
    for specials in ([], ["<unk>"]):
        tok = CharTokenizer.train("aaabbc", 3, special_tokens=specials, unknown="replace")
        assert tok.vocab_size == 3 and tok.chars == ["a", "b"], specials


def test_vocab_size_may_take_every_character():
    assert CharTokenizer.train("cab", vocab_size=3).chars == ["a", "b", "c"]
    tok = CharTokenizer.train("cab", vocab_size=4, special_tokens=["<s>"])
    assert tok.chars == ["a", "b", "c"] and tok.vocab_size == 4


def test_equally_frequent_characters_are_kept_in_sorted_order():
    assert CharTokenizer.train("cbabc", vocab_size=2).chars == ["b", "c"]
    assert CharTokenizer.train("dcba", vocab_size=2).chars == ["a", "b"]


@settings(deadline=None)  # timing varies on a shared 2-core machine
@given(st.text(alphabet="abcdef", min_size=2, max_size=30), st.randoms(use_true_random=False))
def test_the_vocabulary_depends_on_the_counts_not_the_order(text, rng):
    # the most frequent characters, equally frequent ones taken in sorted order
    counts = Counter(text)
    n = rng.randint(1, len(counts))
    expected = sorted(sorted(counts, key=lambda c: (-counts[c], c))[:n])
    shuffled = "".join(rng.sample(text, len(text)))
    for t in (text, shuffled):
        assert CharTokenizer.train(t, vocab_size=n).chars == expected, t
