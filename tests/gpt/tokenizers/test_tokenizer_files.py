import json
import os

import pytest

import gpt.tokenizers as tk
from gpt.tokenizers import TokenizerFileError

SAMPLES = ["Hello there, my lord! 🤗 naïve", "  two  spaces\tand\ttabs\n", "<|eot|>x<|eot|>"]


@pytest.fixture(scope="module")
def trained(train_text):
    text = train_text[:40_000]
    special = ["<|eot|>"]
    return {
        "char": tk.CharTokenizer.train(text, special_tokens=special, unknown="replace"),
        "bpe": tk.ByteBPE.train(text, 400, special),
        "wordpiece": tk.WordPiece.train(text, 400, special),
        "unigram": tk.Unigram.train(text, 400, special),
    }


@pytest.mark.parametrize("kind", ["char", "bpe", "wordpiece", "unigram"])
def test_save_load_round_trip(trained, kind, tmp_path):
    tok = trained[kind]
    path = tmp_path / f"{kind}.json"
    tok.save(path)
    back = tk.load(path)
    assert type(back) is tk.Tokenizer
    assert back.vocab_size == tok.vocab_size
    for s in SAMPLES:
        assert back.encode(s) == tok.encode(s)
        assert back.decode(back.encode(s)) == tok.decode(tok.encode(s))
    # the file is the tokenizer.json it was built from, and no temporary file was left behind
    assert json.loads(path.read_text()) == back.to_hf_json() == tok.to_hf_json()
    assert os.listdir(tmp_path) == [f"{kind}.json"]
    # a folder holding a tokenizer.json loads as the file
    path.rename(tmp_path / "tokenizer.json")
    assert tk.load(tmp_path).encode(SAMPLES[0]) == tok.encode(SAMPLES[0])


def test_gpt2_files_round_trip(trained, tmp_path):
    tok = trained["bpe"]
    tk.save_gpt2(tok, tmp_path)
    assert (tmp_path / "merges.txt").read_text().startswith("#version")
    back = tk.load_gpt2(tmp_path / "vocab.json", tmp_path / "merges.txt", ("<|eot|>",))
    for s in SAMPLES:
        assert back.encode(s) == tok.encode(s)
    assert tk.load(tmp_path / "vocab.json").vocab_size == tok.vocab_size


def test_a_gpt2_vocab_holding_the_token_model_loads(tmp_path):
    # GPT-2's own vocab.json has "model" (and "format") among its tokens: still a vocab.json
    tok = tk.ByteBPE.train("model\nformat\n" * 20, 265)
    tk.save_gpt2(tok, tmp_path)
    vocab = json.loads((tmp_path / "vocab.json").read_text(encoding="utf-8"))
    assert "model" in vocab and "format" in vocab
    back = tk.load(tmp_path / "vocab.json")
    assert back.encode("model format") == tok.encode("model format")


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    "content, problem",
    [
        ("", "not valid JSON"),
        ("{not json", "not valid JSON"),
        ("[1, 2, 3]", "expected a JSON object"),
        ('{"hello": "world"}', "not a Hugging Face tokenizer.json"),
        # this package's own format, before tokenizer.json was the only one: refused, saying how
        (
            '{"format": "tensorlab-tokenizer", "version": 1, "kind": "char"}',
            "a format no longer read: train the tokenizer again",
        ),
        (
            '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 5}, "merges": []}}',
            "without gaps",
        ),
        ('{"model": {"type": "Magic", "vocab": {}}}', "model: unsupported model type 'Magic'"),
        (
            '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]},'
            ' "pre_tokenizer": {"type": "ByteLevel"}}',
            "merge 0",
        ),
        (
            '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},'
            ' "pre_tokenizer": {"type": "UnicodeScripts"}}',
            "pre_tokenizer: unsupported pre-tokenizer type 'UnicodeScripts'",
        ),
        (
            '{"model": {"type": "Unigram", "unk_id": 0, "vocab": [["<unk>", 0.0]]},'
            ' "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"},'
            ' {"type": "Nmt"}]}, "pre_tokenizer": {"type": "Metaspace"}}',
            r"normalizer.normalizers\[1\]: unsupported normalizer type 'Nmt'",
        ),
        ('{"a": 0, "b": 1}', "merges.txt is missing"),
    ],
)
def test_corrupt_or_foreign_files_name_the_file_and_the_problem(tmp_path, content, problem):
    path = write(tmp_path / "tok.json", content)
    with pytest.raises(TokenizerFileError, match=problem) as info:
        tk.load(path)
    assert str(path) in str(info.value)


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(TokenizerFileError, match="no such file"):
        tk.load(tmp_path / "nope.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TokenizerFileError, match="not UTF-8"):
        tk.load(tmp_path / "bin.json")
    with pytest.raises(TokenizerFileError, match="folder has no tokenizer.json"):
        tk.load(tmp_path)


def test_bad_merges_txt(tmp_path):
    write(tmp_path / "vocab.json", '{"a": 0, "b": 1}')
    write(tmp_path / "merges.txt", "#version: 0.2\na b c\n")
    with pytest.raises(TokenizerFileError, match="line 2"):
        tk.load(tmp_path)
