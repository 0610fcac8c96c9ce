import pytest
from hypothesis import given, settings
from tokenizer_strategies import text_over

from gpt.tokenizers import TokenizerError, WordPiece
from gpt.tokenizers.pretokenize import bert_normalize, bert_pretokenize


def test_merges_by_likelihood_gain_worked_by_hand():
    # words: "ab" x5, "ac" x5, "xy" x2. Pieces and their counts:
    #   a: 10, ##b: 5, ##c: 5, x: 2, ##y: 2
    # pair scores count(pq) / (count(p) * count(q)):
    #   (a, ##b) = 5 / (10 * 5) = 0.1    (a, ##c) = 0.1    (x, ##y) = 2 / (2 * 2) = 0.5
    # BPE would merge a frequent pair (count 5); WordPiece merges "xy", whose parts never
    # occur apart. Next (a, ##b) and (a, ##c) tie at 0.1 and the smaller ids win: "ab".
    # Then a: 5, ##c: 5, (a, ##c) = 5 / 25 = 0.2: "ac".
    text = "ab " * 5 + "ac " * 5 + "xy " * 2
    tok = WordPiece.train(text, vocab_size=9)
    assert tok.itos == ["[UNK]", "##b", "##c", "##y", "a", "x", "xy", "ab", "ac"]
    assert [tok.id_to_token(i) for i in tok.encode("ab xy ac")] == ["ab", "xy", "ac"]


def hand_vocab() -> WordPiece:
    return WordPiece(["[UNK]", "un", "##aff", "##able", "aff", "##a", "##b", "able", "u", "##n"])


def test_greedy_longest_match_first_by_hand():
    tok = hand_vocab()
    ids = tok.encode("unaffable")
    assert [tok.id_to_token(i) for i in ids] == ["un", "##aff", "##able"]
    # "una": longest start "un", then "##a"
    assert [tok.id_to_token(i) for i in tok.encode("una")] == ["un", "##a"]
    # greedy, not optimal: "affb" -> "aff", "##b"
    assert [tok.id_to_token(i) for i in tok.encode("affb")] == ["aff", "##b"]


def test_word_that_cannot_be_covered_is_one_unk():
    tok = hand_vocab()
    assert tok.encode("unx able") == [tok.unk_id, tok.token_to_id("able")]
    long_word = "u" + "n" * 150
    assert tok.encode(long_word) == [tok.unk_id]  # longer than max_word_chars


def test_bert_pre_tokenization():
    assert bert_pretokenize("Hello, world!  it's") == ["Hello", ",", "world", "!", "it", "'", "s"]
    assert bert_normalize("Héllo\x00\tWörld", lowercase=True) == "hello world"
    assert bert_pretokenize(bert_normalize("中文")) == ["中", "文"]


ALPHABET = "abcdefgh ,.!\n"


@pytest.fixture(scope="module")
def small_wp():
    text = "abc abd a.b, hhh gg ee ff!\n" * 20 + " ".join(c + c for c in "abcdefgh")
    return WordPiece.train(text, vocab_size=30)


@settings(deadline=None)  # timing varies on a shared 2-core machine
@given(text_over(ALPHABET))
def test_decode_gives_the_words_back_separated_by_spaces(small_wp, text):
    # WordPiece drops whitespace, so the promise is: the same words, space-separated
    assert small_wp.decode(small_wp.encode(text)) == " ".join(bert_pretokenize(text))


def test_lowercase_option(train_text):
    tok = WordPiece.train(train_text[:30_000], 300, lowercase=True)
    assert tok.encode("HELLO") == tok.encode("hello")
    assert all(t == t.lower() for t in tok.itos if not t.startswith("["))


def test_vocab_size_limits():
    with pytest.raises(TokenizerError, match="below the base alphabet"):
        WordPiece.train("abc", vocab_size=3)
    with pytest.raises(TokenizerError, match="more than the text supports"):
        WordPiece.train("abc", vocab_size=100)
