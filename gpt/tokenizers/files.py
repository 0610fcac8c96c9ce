"""Saving and loading tokenizers: this package's own JSON format, and finding the right reader.

Our format is one JSON object: ``{"format": "tensorlab-tokenizer", "version": 1, "kind": ...}``
followed by what that kind needs to rebuild itself (no pickle: a tokenizer file is data, and
loading it must never run code). Files are written atomically: to a temporary file in the same
folder, flushed to disk, then renamed over the target, so a crash never leaves half a file.

``load`` accepts any tokenizer file this package can read and tells them apart by content:

* our format,
* a Hugging Face ``tokenizer.json`` (see ``hf_format.py``),
* a GPT-2 ``vocab.json`` with ``merges.txt`` beside it, or a folder holding either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from nn.serialization import atomic_write

from .base import Tokenizer, TokenizerError, TokenizerFileError, file_errors
from .bpe import ByteBPE
from .char import CharTokenizer
from .fields import entries, get, items, pair, show
from .hf_format import from_hf_json, load_gpt2, printable_vocab, to_hf_json
from .pretokenize import text_to_bytes
from .unigram import Unigram
from .wordpiece import WordPiece

FORMAT = "tensorlab-tokenizer"
VERSION = 1


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 text to ``path`` atomically (:func:`nn.serialization.atomic_write`): readers
    see the old file or the new one, never a mix, with the permissions of any new file."""
    atomic_write(path, lambda f: f.write(text.encode("utf-8")))


def save(tok: Tokenizer, path: str | os.PathLike, format: str = "tensorlab") -> None:
    """Save ``tok``. ``format``: "tensorlab" (ours) or "huggingface" (tokenizer.json, for
    ByteBPE, WordPiece, Unigram and Pipeline). A Pipeline, read from a tokenizer.json, is
    always written as one: our format has no form for it."""
    if format == "huggingface" or (format == "tensorlab" and tok.kind == "pipeline"):
        data = to_hf_json(tok)
    elif format == "tensorlab":
        data = to_json(tok)
    else:
        raise TokenizerError(f"unknown tokenizer file format {format!r}")
    atomic_write_text(path, json.dumps(data, ensure_ascii=False, indent=1) + "\n")


def to_json(tok: Tokenizer) -> dict[str, Any]:
    """The JSON object for our format."""
    head = {"format": FORMAT, "version": VERSION, "kind": tok.kind}
    specials = sorted(tok.special.items(), key=lambda kv: kv[1])
    if isinstance(tok, CharTokenizer):
        return head | {
            "chars": tok.chars,
            "special_tokens": [t for t, _ in specials],
            "unknown": tok.unknown,
        }
    if isinstance(tok, ByteBPE):
        return head | {
            "pattern": tok.pattern,
            "add_prefix_space": tok.add_prefix_space,
            "ignore_merges": tok.ignore_merges,
            "special_tokens": dict(specials),
            # ordinary tokens in GPT-2's printable byte spelling, by id
            "vocab": printable_vocab(tok),
            "merges": [list(m) for m in tok.merges],
        }
    if isinstance(tok, WordPiece):
        return head | {
            "vocab": tok.itos,
            "special_tokens": [t for t, _ in specials],
            "unk_token": tok.unk_token,
            "prefix": tok.prefix,
            "max_word_chars": tok.max_word_chars,
            "normalizer": tok.normalizer,
            "cleanup": tok.cleanup,
        }
    if isinstance(tok, Unigram):
        return head | {
            "pieces": [[t, s] for t, s in tok.pieces],
            "special_tokens": [t for t, _ in specials],
            "unk_token": tok.unk_token,
            "pattern": tok.pattern,
            "prepend_scheme": tok.prepend_scheme,
            "replacement": tok.replacement,
            "fuse_unk": tok.fuse_unk,
        }
    raise TokenizerError(f"cannot save a {type(tok).__name__}")


def from_json(data: dict[str, Any], path: str | os.PathLike = "<memory>") -> Tokenizer:
    """Rebuild a tokenizer from our format; any problem becomes a TokenizerFileError naming the
    file and the field (types are checked by ``fields.get``, never coerced)."""
    version = data.get("version")
    if version != VERSION:
        raise TokenizerFileError(path, f"unsupported {FORMAT} version {show(version)}")
    kind = data.get("kind")
    with file_errors(path, f"{kind} tokenizer"):
        if kind == "char":
            return CharTokenizer(
                list(entries(get(data, "chars", "list", path), "str", path, "chars")),
                _strings(data, "special_tokens", path),
                get(data, "unknown", "str", path),
            )
        if kind == "byte_bpe":
            vocab = {}
            for t, i in items(get(data, "vocab", "object", path), "int", path, "vocab"):
                try:
                    vocab[i] = text_to_bytes(t)
                except KeyError:
                    raise TokenizerFileError(
                        path, f"field vocab[{show(t, 30)}] is not in GPT-2's byte alphabet"
                    ) from None
            specials = dict(
                items(get(data, "special_tokens", "object", path), "int", path, "special_tokens")
            )
            merges = [
                pair(m, "int,int", path, f"merges[{k}]")
                for k, m in enumerate(get(data, "merges", "list", path))
            ]
            return ByteBPE(
                vocab,
                merges,
                specials,
                get(data, "pattern", "str", path),
                get(data, "add_prefix_space", "bool", path),
                get(data, "ignore_merges", "bool", path),
            )
        if kind == "wordpiece":
            norm = get(data, "normalizer", "object", path)
            return WordPiece(
                _strings(data, "vocab", path),
                _strings(data, "special_tokens", path),
                get(data, "unk_token", "str", path),
                get(data, "prefix", "str", path),
                get(data, "max_word_chars", "int", path),
                clean_text=get(norm, "clean_text", "bool", path, "normalizer"),
                handle_chinese_chars=get(norm, "handle_chinese_chars", "bool", path, "normalizer"),
                strip_accents=get(norm, "strip_accents", "bool|null", path, "normalizer"),
                lowercase=get(norm, "lowercase", "bool", path, "normalizer"),
                cleanup=get(data, "cleanup", "bool", path, default=False),
            )
        if kind == "unigram":
            return Unigram(
                [
                    pair(p, "str,number", path, f"pieces[{k}]")
                    for k, p in enumerate(get(data, "pieces", "list", path))
                ],
                _strings(data, "special_tokens", path),
                get(data, "unk_token", "str|null", path),
                get(data, "pattern", "str", path),
                get(data, "prepend_scheme", "str", path),
                get(data, "replacement", "str", path),
                get(data, "fuse_unk", "bool", path),
            )
    raise TokenizerFileError(path, f"unknown tokenizer kind {show(kind)}")


def _strings(data: dict[str, Any], name: str, path: str | os.PathLike) -> list[str]:
    """A field holding a list of strings."""
    return list(entries(get(data, name, "list", path), "str", path, name))


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


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file, turning every failure into a TokenizerFileError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        raise TokenizerFileError(path, "no such file") from None
    except UnicodeDecodeError as e:
        raise TokenizerFileError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise TokenizerFileError(path, f"not valid JSON: {e}") from None
    except RecursionError:  # deeper than this Python parses, so deeper than the limit
        raise TokenizerFileError(path, TOO_DEEP) from None
    except OSError as e:
        raise TokenizerFileError(path, f"cannot be read: {e.strerror or e}") from None
    if _nesting(data) > MAX_JSON_DEPTH:
        raise TokenizerFileError(path, TOO_DEEP)
    return data


def _from(path: str | os.PathLike, tok: Tokenizer) -> Tokenizer:
    """Remember which file a tokenizer came from, so its errors can name it."""
    tok.source = os.fspath(path)
    return tok


def load(path: str | os.PathLike) -> Tokenizer:
    """Load any tokenizer file this package understands (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").exists():
            return load(path / "tokenizer.json")
        if (path / "vocab.json").exists() and (path / "merges.txt").exists():
            return _from(path, load_gpt2(path / "vocab.json", path / "merges.txt"))
        raise TokenizerFileError(path, "folder has no tokenizer.json nor vocab.json + merges.txt")
    data = read_json(path)
    if not isinstance(data, dict):
        raise TokenizerFileError(path, f"expected a JSON object, found {type(data).__name__}")
    if data.get("format") == FORMAT:
        return _from(path, from_json(data, path))
    # a vocab.json before a tokenizer.json: GPT-2's vocabulary has the token "model" too
    if data and all(isinstance(v, int) for v in data.values()):
        merges = path.with_name("merges.txt")
        if merges.exists():
            return _from(path, load_gpt2(path, merges))
        raise TokenizerFileError(path, "looks like a GPT-2 vocab.json, but merges.txt is missing")
    if "model" in data:
        return _from(path, from_hf_json(data, path))
    raise TokenizerFileError(
        path, "not a tokenizer file (neither tensorlab, Hugging Face nor GPT-2 format)"
    )
