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
import tempfile
from pathlib import Path
from typing import Any

from .base import Tokenizer, TokenizerError, TokenizerFileError, file_errors
from .bpe import ByteBPE
from .char import CharTokenizer
from .hf_format import from_hf_json, load_gpt2, printable_vocab, to_hf_json
from .pretokenize import text_to_bytes
from .unigram import Unigram
from .wordpiece import WordPiece

FORMAT = "tensorlab-tokenizer"
VERSION = 1


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write text to ``path`` so that readers see the old file or the new one, never a mix."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def save(tok: Tokenizer, path: str | os.PathLike, format: str = "tensorlab") -> None:
    """Save ``tok``. ``format``: "tensorlab" (ours, any kind) or "huggingface" (tokenizer.json,
    for ByteBPE, WordPiece and Unigram)."""
    if format == "huggingface":
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
    """Rebuild a tokenizer from our format; any problem becomes a TokenizerFileError."""
    version = data.get("version")
    if version != VERSION:
        raise TokenizerFileError(path, f"unsupported {FORMAT} version {version!r}")
    kind = data.get("kind")
    with file_errors(path, f"{kind} tokenizer"):
        if kind == "char":
            return CharTokenizer(data["chars"], data["special_tokens"], data["unknown"])
        if kind == "byte_bpe":
            vocab = {_int(i): text_to_bytes(t) for t, i in data["vocab"].items()}
            specials = {t: _int(i) for t, i in data["special_tokens"].items()}
            merges = [(_int(a), _int(b)) for a, b in data["merges"]]
            return ByteBPE(
                vocab,
                merges,
                specials,
                data["pattern"],
                bool(data["add_prefix_space"]),
                bool(data["ignore_merges"]),
            )
        if kind == "wordpiece":
            return WordPiece(
                data["vocab"],
                data["special_tokens"],
                data["unk_token"],
                data["prefix"],
                _int(data["max_word_chars"]),
                **data["normalizer"],
            )
        if kind == "unigram":
            return Unigram(
                [(t, float(s)) for t, s in data["pieces"]],
                data["special_tokens"],
                data["unk_token"],
                data["pattern"],
                data["prepend_scheme"],
                data["replacement"],
                bool(data["fuse_unk"]),
            )
    raise TokenizerFileError(path, f"unknown tokenizer kind {kind!r}")


def _int(x: Any) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise ValueError(f"expected an integer, got {x!r}")
    return x


def read_json(path: str | os.PathLike) -> Any:
    """Read a JSON file, turning every failure into a TokenizerFileError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise TokenizerFileError(path, "no such file") from None
    except UnicodeDecodeError as e:
        raise TokenizerFileError(path, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise TokenizerFileError(path, f"not valid JSON: {e}") from None
    except OSError as e:
        raise TokenizerFileError(path, f"cannot be read: {e.strerror or e}") from None


def load(path: str | os.PathLike) -> Tokenizer:
    """Load any tokenizer file this package understands (see the module docstring)."""
    path = Path(path)
    if path.is_dir():
        if (path / "tokenizer.json").exists():
            return load(path / "tokenizer.json")
        if (path / "vocab.json").exists() and (path / "merges.txt").exists():
            return load_gpt2(path / "vocab.json", path / "merges.txt")
        raise TokenizerFileError(path, "folder has no tokenizer.json nor vocab.json + merges.txt")
    data = read_json(path)
    if not isinstance(data, dict):
        raise TokenizerFileError(path, f"expected a JSON object, found {type(data).__name__}")
    if data.get("format") == FORMAT:
        return from_json(data, path)
    if "model" in data:
        return from_hf_json(data, path)
    if data and all(isinstance(v, int) for v in data.values()):
        merges = path.with_name("merges.txt")
        if merges.exists():
            return load_gpt2(path, merges)
        raise TokenizerFileError(path, "looks like a GPT-2 vocab.json, but merges.txt is missing")
    raise TokenizerFileError(
        path, "not a tokenizer file (neither tensorlab, Hugging Face nor GPT-2 format)"
    )
