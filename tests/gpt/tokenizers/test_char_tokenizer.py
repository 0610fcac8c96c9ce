import pytest
from hypothesis import given, settings
from tokenizer_strategies import unicode_text

from gpt.tokenizers import CharTokenizer, TokenizerError


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
