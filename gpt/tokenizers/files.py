"""Reading tokenizer files: Hugging Face ``tokenizer.json`` (the one format ``Tokenizer.save``
writes) and GPT-2's ``vocab.json`` + ``merges.txt`` (one merge "a b" a line after a
``#version`` header), told apart by content. Reading a file never runs code, and every problem
with it is a one-line ``TokenizerFileError`` naming the file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nn.serialization import atomic_write

from .base import TokenizerError, TokenizerFileError
from .tokenizer import Tokenizer

#: the format of this package's tokenizer files before there was only tokenizer.json
OLD_FORMAT = "tensorlab-tokenizer"


#: The deepest nesting read: the ``tokenizers`` library's JSON reader (serde_json) stops at 128
#: levels, so no deeper file is a tokenizer file anywhere. Python's own limit differs between
#: versions (3.11 stops short of 1,000 levels, 3.13 reads 9,000) and must not decide what loads.
MAX_JSON_DEPTH = 127
TOO_DEEP = f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)"


def _nesting(value: Any) -> int:
    """How many levels of lists and objects ``value`` has (the outermost is level 1), walked a
    level at a time rather than recursively, and no further than one level past the limit."""
    containers = (dict, list)  # exactly the types json makes: a type test (faster) suffices
    depth, level = 0, [value] if type(value) in containers else []
    while level and depth <= MAX_JSON_DEPTH:
        depth += 1
        level = [
            x
            for v in level
            for x in (v.values() if type(v) is dict else v)
            if type(x) in containers
        ]
    return depth


def read_text(path: str | os.PathLike) -> str:
    """Read a UTF-8 file, turning every failure into a TokenizerFileError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        raise TokenizerFileError(path, "no such file") from None
    except UnicodeDecodeError as e:
        raise TokenizerFileError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise TokenizerFileError(path, f"cannot be read: {e.strerror or e}") from None


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file, turning every failure into a TokenizerFileError naming the file."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise TokenizerFileError(path, f"not valid JSON: {e}") from None
    except RecursionError:  # deeper than this Python parses, so deeper than the limit
        raise TokenizerFileError(path, TOO_DEEP) from None
    if _nesting(data) > MAX_JSON_DEPTH:
        raise TokenizerFileError(path, TOO_DEEP)
    return data


def load_hf(path: str | os.PathLike) -> Tokenizer:
    """Read a Hugging Face ``tokenizer.json``."""
    data = read_json(path)
    if not isinstance(data, dict):
        raise TokenizerFileError(path, f"expected a JSON object, found {type(data).__name__}")
    if data.get("format") == OLD_FORMAT:
        raise TokenizerFileError(
            path,
            f"a {OLD_FORMAT} file, a format no longer read: train the tokenizer again "
            "(python -m gpt tokenizer-train) to get a tokenizer.json",
        )
    if "model" not in data:
        raise TokenizerFileError(path, "not a Hugging Face tokenizer.json (no 'model')")
    tok = Tokenizer(data, path)
    tok.source = os.fspath(path)
    return tok


def load(path: str | os.PathLike) -> Tokenizer:
    """Load any tokenizer file this package understands (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").exists():
            return load_hf(path / "tokenizer.json")
        if (path / "vocab.json").exists() and (path / "merges.txt").exists():
            return load_gpt2(path / "vocab.json", path / "merges.txt")
        raise TokenizerFileError(path, "folder has no tokenizer.json nor vocab.json + merges.txt")
    data = read_json(path)
    # a vocab.json before a tokenizer.json: GPT-2's vocabulary has the token "model" too
    if isinstance(data, dict) and data and all(isinstance(v, int) for v in data.values()):
        merges = path.with_name("merges.txt")
        if merges.exists():
            return load_gpt2(path, merges)
        raise TokenizerFileError(path, "looks like a GPT-2 vocab.json, but merges.txt is missing")
    return load_hf(path)


def load_gpt2(
    vocab_path: str | os.PathLike,
    merges_path: str | os.PathLike,
    special_tokens: tuple[str, ...] = ("<|endoftext|>",),
) -> Tokenizer:
    """Read GPT-2's ``vocab.json`` + ``merges.txt`` as the ``tokenizer.json`` they make.
    Tokens listed in ``special_tokens`` that the vocabulary holds become special tokens."""
    vocab_t2i = read_json(vocab_path)
    if not isinstance(vocab_t2i, dict) or not all(isinstance(i, int) for i in vocab_t2i.values()):
        raise TokenizerFileError(vocab_path, "expected a JSON object mapping tokens to ids")
    lines = read_text(merges_path).splitlines()
    merges = []
    for n, line in enumerate(lines, 1):
        if not line.strip() or (n == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise TokenizerFileError(merges_path, f"line {n}: expected two tokens, got {line!r}")
        merges.append(parts)
    data = {
        "added_tokens": [
            {"id": vocab_t2i[t], "content": t, "special": True}
            for t in special_tokens
            if t in vocab_t2i
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab_t2i, "merges": merges},
    }
    tok = Tokenizer(data, f"{vocab_path} + {merges_path}")
    tok.source = os.fspath(vocab_path)
    return tok


def save_gpt2(tok: Tokenizer, folder: str | os.PathLike) -> None:
    """Write ``vocab.json`` and ``merges.txt`` (GPT-2's layout) into ``folder``: for a byte-level
    BPE with GPT-2's pattern (special tokens included in the vocabulary)."""
    data = tok.to_hf_json()
    model, pre = data["model"], data.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or pre.get("type") != "ByteLevel" or not pre.get("use_regex"):
        raise TokenizerError("only a byte-level BPE with GPT-2's pattern has a GPT-2 file form")
    vocab = dict(model["vocab"]) | tok.special
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    folder = Path(folder)
    for name, text in (
        ("vocab.json", json.dumps(vocab, ensure_ascii=False)),
        ("merges.txt", "\n".join(["#version: 0.2", *merges]) + "\n"),
    ):
        atomic_write(folder / name, lambda f, text=text: f.write(text.encode("utf-8")))
