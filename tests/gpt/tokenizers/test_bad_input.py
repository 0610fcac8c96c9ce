"""Bad input gets a clear TokenizerError, never a crash or a silent wrong answer."""

import json
import re
import time

import pytest

import gpt.tokenizers as tk
from gpt.tokenizers import TokenizerError, TokenizerFileError, pre_tokenizers

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


# ----- tokenizer files are data from elsewhere: safe to load (issue 12) ------------------------


@pytest.fixture(scope="module")
def bpe_file_data(tmp_path_factory):
    """A small byte-level BPE's tokenizer.json, as a dict to corrupt field by field."""
    path = tmp_path_factory.mktemp("bpe") / "bpe.json"
    tk.ByteBPE.train("the quick brown fox jumps over the lazy dog. " * 30, 270, ["<s>"]).save(path)
    return json.loads(path.read_text())


def write_json(path, data):
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_catastrophic_pattern_given_to_a_trainer_is_named():
    with pytest.raises(TokenizerError, match=r"pattern '\(a\|a\)\+\$' ran past its time limit"):
        pre_tokenizers.PATTERN_TIME_LIMIT, old = 0.2, pre_tokenizers.PATTERN_TIME_LIMIT
        try:
            tk.ByteBPE.train("a" * 40 + "b", 260, pattern="(a|a)+$")
        finally:
            pre_tokenizers.PATTERN_TIME_LIMIT = old


def test_time_limit_grows_with_the_text():
    assert pre_tokenizers.time_limit("") == pre_tokenizers.PATTERN_TIME_LIMIT
    one_mb = pre_tokenizers.time_limit("x" * 1_000_000)
    assert one_mb == pytest.approx(pre_tokenizers.PATTERN_TIME_LIMIT + 1e6 * 5e-6)


def test_custom_pattern_under_the_limit_gives_the_same_pieces_as_without():
    pattern = r"\p{L}+|\p{N}"  # not shipped, so it runs under a time limit
    text = "abc 123 déjà-vu 4"
    regex = pytest.importorskip("regex")
    plain = [m.span() for m in regex.finditer(pattern, text)]
    assert pre_tokenizers.find_spans(pattern, text) == plain


def nested_file(tmp_path, depth: int):
    """A tokenizer.json-like file nested ``depth`` levels deep (its outer object is level 1)."""
    path = tmp_path / "deep.json"
    lists = depth - 1
    path.write_text('{"model": ' + "[" * lists + "]" * lists + "}", encoding="utf-8")
    return path


@pytest.mark.parametrize("depth", [128, 2_000, 100_000])
def test_deeply_nested_json_is_a_file_error_not_a_recursion_error(tmp_path, depth):
    """The same one-line error on every Python: 3.11 cannot parse 2,000 levels, 3.12.3 and
    3.13 can, and 100,000 is past all of them (a RecursionError inside ``json``)."""
    path = nested_file(tmp_path, depth)
    with pytest.raises(TokenizerFileError, match="nested too deeply") as info:
        tk.load(path)
    assert str(info.value) == f"{path}: JSON nested too deeply (more than 127 levels)"


@pytest.mark.parametrize("depth", [127, 128])
def test_json_nesting_limit_is_the_library_s(tmp_path, depth):
    """127 levels are read (and refused for what they hold); 128 are refused as too deep, by
    the `tokenizers` library (serde_json's recursion limit) as here."""
    path = nested_file(tmp_path, depth)
    with pytest.raises(TokenizerFileError) as info:
        tk.load(path)
    assert ("nested too deeply" in str(info.value)) == (depth > 127)
    hf = pytest.importorskip("tokenizers")
    with pytest.raises(Exception) as theirs:
        hf.Tokenizer.from_file(str(path))
    assert ("recursion limit exceeded" in str(theirs.value)) == (depth > 127)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("vocab", [], "field model.vocab must be an object, got []"),
        ("merges", {"a": 1}, "field model.merges must be a list, got {'a': 1}"),
        ("merges", [["a", "b", "c"]], "field model.merges[0] must be a list of two entries"),
        ("merges", [["t", 1]], "field model.merges[0][1] must be a string, got 1"),
        ("ignore_merges", "no", "field model.ignore_merges must be true or false, got 'no'"),
        ("fuse_unk", 1, "field model.fuse_unk must be true or false, got 1"),
    ],
)
def test_field_types_are_checked_in_a_saved_file(bpe_file_data, tmp_path, field, value, message):
    data = bpe_file_data | {"model": bpe_file_data["model"] | {field: value}}
    path = write_json(tmp_path / "bad.json", data)
    with pytest.raises(TokenizerFileError, match=re.escape(message)) as info:
        tk.load(path)
    assert str(info.value).startswith(str(path) + ": ")


def test_vocab_entry_of_the_wrong_type_is_named(bpe_file_data, tmp_path):
    vocab = dict(bpe_file_data["model"]["vocab"])
    vocab["the"] = 3.5
    data = bpe_file_data | {"model": bpe_file_data["model"] | {"vocab": vocab}}
    path = write_json(tmp_path / "bad.json", data)
    message = "field model.vocab['the'] must be an integer, got 3.5"
    with pytest.raises(TokenizerFileError, match=re.escape(message)):
        tk.load(path)


HF_BPE = {
    "added_tokens": [{"id": 2, "content": "<s>", "special": True}],
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
}


@pytest.mark.parametrize(
    "patch, message",
    [
        (
            {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": "no"}},
            "field pre_tokenizer.add_prefix_space must be true or false, got 'no'",
        ),
        (
            {"added_tokens": [{"id": "2", "content": "<s>"}]},
            "field added_tokens[0].id must be an integer, got '2'",
        ),
        (
            {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b c"]}},
            "field model.merges[0] must be two tokens",
        ),
        (
            {"model": {"type": "BPE", "vocab": {"a": 0, "b": "1"}, "merges": []}},
            "field model.vocab['b'] must be an integer, got '1'",
        ),
        # parts our classes read without a Pipeline are checked as the Pipeline checks them
        ({"pre_tokenizer": 7}, "field pre_tokenizer must be an object or null, got 7"),
        ({"normalizer": "NFC"}, "field normalizer must be an object or null, got 'NFC'"),
        ({"decoder": []}, "field decoder must be an object or null, got []"),
        # a version the library does not know is refused, as the library refuses it
        ({"version": "2.0"}, "unsupported tokenizer.json version '2.0'"),
        ({"version": 1}, "field version must be a string, got 1"),
    ],
)
def test_field_types_are_checked_in_hugging_face_files(tmp_path, patch, message):
    path = write_json(tmp_path / "tokenizer.json", HF_BPE | patch)
    with pytest.raises(TokenizerFileError, match=re.escape(message)):
        tk.load(path)


def test_catastrophic_split_pattern_in_a_tokenizer_json(tmp_path, monkeypatch):
    # (a|a)+$ backtracks 2**n ways on "a"*n + "b": about 40 s at n = 28 without a limit
    monkeypatch.setattr(pre_tokenizers, "PATTERN_TIME_LIMIT", 0.2)
    data = {
        "pre_tokenizer": {
            "type": "Split",
            "pattern": {"Regex": "(a|a)+$"},
            "behavior": "Isolated",
            "invert": False,
        },
        "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "a": 1}, "unk_token": "<unk>"},
    }
    path = write_json(tmp_path / "tokenizer.json", data)
    tok = tk.load(path)
    assert tok.encode("aaa") == tok.encode("aaa")  # harmless input still encodes
    start = time.monotonic()
    with pytest.raises(TokenizerError) as info:
        tok.encode("a" * 40 + "b")
    assert time.monotonic() - start < 5
    assert str(info.value).startswith(f"{path}: pattern '(a|a)+$' ran past its time limit")
    assert "\n" not in str(info.value)


def test_sequences_nested_too_deep_are_refused(tmp_path):
    spec = {"type": "NFC"}
    for _ in range(40):
        spec = {"type": "Sequence", "normalizers": [spec]}
    data = {"normalizer": spec, "model": {"type": "WordLevel", "vocab": {"a": 0}}}
    path = write_json(tmp_path / "tokenizer.json", data)
    with pytest.raises(TokenizerFileError, match="Sequences nested more than 32 deep") as info:
        tk.load(path)
    assert str(info.value).startswith(f"{path}: normalizer.normalizers[0]")


@pytest.mark.parametrize(
    "part, field, value, message",
    [
        # "" would delete every space in encoding, and decoding would put spaces everywhere
        ("pre_tokenizer", "replacement", "", "replacement must be one character, got ''"),
        ("pre_tokenizer", "replacement", "__", "replacement must be one character, got '__'"),
        # NaN (which Python's json reads) would make every Viterbi comparison false
        ("model", "vocab", [["<unk>", 0.0], ["a", float("nan")]], "piece 'a' has the score nan"),
        ("model", "vocab", [["<unk>", 0.0], ["a", float("-inf")]], "piece 'a' has the score -inf"),
    ],
)
def test_unigram_values_are_checked(tmp_path, part, field, value, message):
    pattern = pre_tokenizers.METASPACE_SPLIT_PATTERN  # (a Metaspace pre-tokenizer alone)
    tok = tk.Unigram([("<unk>", 0.0), ("a", -1.0)], ["<unk>"], pattern=pattern)
    tok.save(tmp_path / "ok.json")
    data = json.loads((tmp_path / "ok.json").read_text(encoding="utf-8"))
    path = write_json(tmp_path / "bad.json", data | {part: data[part] | {field: value}})
    with pytest.raises(TokenizerFileError, match=re.escape(message)) as info:
        tk.load(path)
    assert str(info.value).startswith(f"{path}: ")


def test_wordpiece_max_word_chars_must_not_be_negative():
    with pytest.raises(TokenizerError, match="max_word_chars must be at least 0, got -1"):
        tk.WordPiece(["[UNK]", "a"], max_word_chars=-1)
