"""Bad input gets a clear TokenizerError, never a crash or a silent wrong answer."""

import pytest

import gpt.tokenizers as tk
from gpt.tokenizers import TokenizerError

TRAINABLE = [tk.ByteBPE, tk.WordPiece, tk.Unigram]


@pytest.mark.parametrize("cls", [*TRAINABLE, tk.CharTokenizer])
@pytest.mark.parametrize("empty", ["", [], ["", ""]])
def test_empty_training_text(cls, empty):
    with pytest.raises(TokenizerError, match="empty text"):
        cls.train(empty, 300)


@pytest.mark.parametrize("cls", TRAINABLE)
def test_vocab_size_below_the_base_alphabet(cls):
    with pytest.raises(TokenizerError, match="below the base alphabet"):
        cls.train("hello world, how are you", 5)


@pytest.mark.parametrize("cls", TRAINABLE)
def test_vocab_size_above_what_the_text_supports(cls):
    with pytest.raises(TokenizerError, match="more than the text supports"):
        cls.train("hello world", 5000)


@pytest.mark.parametrize("cls", [*TRAINABLE, tk.CharTokenizer])
def test_bad_special_tokens(cls):
    with pytest.raises(TokenizerError, match="duplicates"):
        cls.train("hello world " * 20, 300, special_tokens=["<s>", "<s>"])
    with pytest.raises(TokenizerError, match="non-empty"):
        cls.train("hello world " * 20, 300, special_tokens=[""])
    with pytest.raises(TokenizerError, match="not one string"):
        cls.train("hello world " * 20, 300, special_tokens="<s>")


def test_training_chunks_must_be_strings():
    with pytest.raises(TokenizerError, match="must be str"):
        tk.ByteBPE.train(["ok", b"bytes"], 257)


@pytest.fixture(scope="module")
def all_tokenizers():
    text = "the quick brown fox jumps over the lazy dog. " * 30
    special = ["<|eot|>"]
    return [
        tk.CharTokenizer.train(text, special_tokens=special),
        tk.ByteBPE.train(text, 270, special),
        tk.WordPiece.train(text, 50, special),
        tk.Unigram.train(text, 60, special),
    ]


def test_unknown_special_tokens(all_tokenizers):
    for tok in all_tokenizers:
        with pytest.raises(TokenizerError, match="unknown special tokens"):
            tok.encode("hi <|nope|>", allowed_special={"<|nope|>"})
        with pytest.raises(TokenizerError):
            tok.token_to_id("<|nope|>")
        with pytest.raises(TokenizerError, match="allowed_special"):
            tok.encode("hi", allowed_special="some")


@pytest.mark.parametrize("bad", [-1, 10**6, 2.5, "3", None])
def test_decode_ids_out_of_range(all_tokenizers, bad):
    for tok in all_tokenizers:
        with pytest.raises(TokenizerError, match="token id"):
            tok.decode([0, bad])
        with pytest.raises(TokenizerError):
            tok.id_to_token(bad)


def test_decode_accepts_numpy_integers(all_tokenizers):
    np = pytest.importorskip("numpy")
    for tok in all_tokenizers:
        ids = tok.encode("the fox")
        assert tok.decode(np.array(ids)) == tok.decode(ids)


def test_encode_requires_text(all_tokenizers):
    for tok in all_tokenizers:
        with pytest.raises(TokenizerError, match="expects str"):
            tok.encode(b"bytes")


def test_invalid_utf8_from_byte_tokens_is_replaced_not_raised():
    tok = tk.ByteBPE.train("héllo wörld", 256)
    ids = list("é".encode())[:1] + list(b"ok") + [0xFF]
    assert tok.decode(ids) == "\ufffdok\ufffd"
