import pytest
from hypothesis import given, settings

from gpt.tokenizers import TokenizerError, WordPiece
from gpt.tokenizers.normalizers import bert_normalize
from gpt.tokenizers.tokenizer import word_splitter

from .tokenizer_strategies import text_over


def bert_pretokenize(text: str) -> list[str]:
    """BERT's pre-tokenization, as a file's ``BertPreTokenizer`` cuts text."""
    return word_splitter(None, {"type": "BertPreTokenizer"})(text, True)


def test_merges_by_likelihood_gain_worked_by_hand():
    # words: "ab" x5, "ac" x5, "xy" x2. Pieces and their counts:
    #   a: 10, ##b: 5, ##c: 5, x: 2, ##y: 2
    # pair scores count(pq) / (count(p) * count(q)):
    #   (a, ##b) = 5 / (10 * 5) = 0.1    (a, ##c) = 0.1    (x, ##y) = 2 / (2 * 2) = 0.5
    # BPE would merge a frequent pair (count 5); WordPiece merges "xy", whose parts never
    # occur apart. Next (a, ##b) and (a, ##c) tie at 0.1 and the smaller ids win: "ab".
    # Then a: 5, ##c: 5, (a, ##c) = 5 / 25 = 0.2: "ac".
    text = "ab " * 5 + "ac " * 5 + "xy " * 2
    tok = WordPiece.train(text, vocab_size=9, score="likelihood")
    assert tok.itos == ["[UNK]", "##b", "##c", "##y", "a", "x", "xy", "ab", "ac"]
    assert [tok.id_to_token(i) for i in tok.encode("ab xy ac")] == ["ab", "xy", "ac"]


def test_merges_by_frequency_worked_by_hand():
    # the same words; by frequency (the default, as the `tokenizers` library trains) the pairs
    # count (a, ##b) = 5, (a, ##c) = 5, (x, ##y) = 2: "ab" first (tie broken by the smaller
    # ids), then "ac", and only then "xy"
    text = "ab " * 5 + "ac " * 5 + "xy " * 2
    tok = WordPiece.train(text, vocab_size=8)
    assert tok.itos == ["[UNK]", "##b", "##c", "##y", "a", "x", "ab", "ac"]
    assert [tok.id_to_token(i) for i in tok.encode("ab xy ac")] == ["ab", "x", "##y", "ac"]
    # two continuation pieces merge into one: in "abc" x3 + "bc" x2, (a, ##b) and (##b, ##c)
    # both count 3; ids are [UNK]=0 ##b=1 ##c=2 a=3 b=4, so (1, 2) < (3, 1) wins: "##bc"
    tok = WordPiece.train("abc " * 3 + "bc " * 2, vocab_size=6)
    assert tok.itos[-1] == "##bc"
    with pytest.raises(TokenizerError, match="score must be one of"):
        WordPiece.train(text, vocab_size=8, score="best")


def test_likelihood_counts_a_merge_of_overlapping_pairs_once_worked_by_hand():
    # words "a" x2, "aa", "aaaa": a: 4, ##a: 4; (a, ##a) = 2 and (##a, ##a) = 2 (the two
    # overlapping pairs of "aaaa"): both score 2 / 16, the smaller ids win: ##a ##a -> "##aa".
    # "aaaa" becomes a ##aa ##a: that was ONE merge, so ##a: 2, ##aa: 1 (counting it twice, as
    # the pair count, left ##a at 0 and the next score divided by zero). Now (a, ##a) = 1 / 8,
    # (a, ##aa) = 1 / 4, (##aa, ##a) = 1 / 2: "##aaa". Then (a, ##a) and (a, ##aaa) both score
    # 1 / 4: "aa" (smaller ids), then "aaaa".
    tok = WordPiece.train("a a aa aaaa", vocab_size=7, score="likelihood")
    assert tok.itos == ["[UNK]", "##a", "a", "##aa", "##aaa", "aa", "aaaa"]


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


def test_default_score_compresses_like_the_tokenizers_library(train_text, heldout_text):
    """Issue 19: at the same vocabulary size, our default WordPiece needs at most 1.05x the
    tokens of the `tokenizers` library's WordPiece trainer on held-out text."""
    hf = pytest.importorskip("tokenizers", reason="the `tokenizers` library is the reference")
    from tokenizers import models, normalizers, pre_tokenizers, trainers

    theirs = hf.Tokenizer(models.WordPiece(unk_token="[UNK]"))
    theirs.normalizer = normalizers.BertNormalizer(lowercase=False)
    theirs.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=1000, special_tokens=["[UNK]"])
    theirs.train_from_iterator([train_text], trainer)
    n_theirs = len(theirs.encode(heldout_text, add_special_tokens=False).ids)

    ours = WordPiece.train(train_text, 1000)
    n_ours = len(ours.encode(heldout_text))
    assert n_ours <= 1.05 * n_theirs
    # the likelihood score is the one that compresses far worse
    n_likelihood = len(WordPiece.train(train_text, 1000, score="likelihood").encode(heldout_text))
    assert n_likelihood > 1.3 * n_theirs
