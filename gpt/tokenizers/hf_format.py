"""Hugging Face ``tokenizer.json`` and GPT-2 ``vocab.json`` + ``merges.txt`` files.

A ``tokenizer.json`` describes a pipeline: normalizer -> pre-tokenizer -> model -> (post-
processor, decoder), plus "added tokens" that are cut out of the text before anything else
runs. A file in the form one of our own classes writes is read into that class (they encode
faster):

* byte-level BPE: no normalizer, a ``ByteLevel`` pre-tokenizer (GPT-2's pattern) or a regex
  ``Split`` followed by ``ByteLevel(use_regex=False)`` (a custom pattern, as GPT-4-style files
  have), a ``BPE`` model whose tokens are spelled in GPT-2's printable byte alphabet,
* WordPiece: ``BertNormalizer`` (or none), ``BertPreTokenizer``, a ``WordPiece`` model and
  decoder (the class decodes as that decoder does, with or without ``cleanup``),
* Unigram: no normalizer, ``Metaspace`` (optionally followed by a ``Split`` on a regex), a
  ``Unigram`` model with log probabilities.

Any other combination of the parts ``pipeline.py`` knows (other normalizers and pre-tokenizers,
byte fallback, WordLevel, added-token flags, a post-processor that adds tokens, truncation or
padding) is read into a ``Pipeline``; a part it does not know is refused with an error naming
the file, the part's type and its place in the JSON, rather than silently encoding differently.
Our classes give what the library gives with ``add_special_tokens=False``; a ``Pipeline``
applies the post-processor when asked.

GPT-2's original files are a ``vocab.json`` (token -> id) and a ``merges.txt`` (one merge
"a b" per line, after a ``#version`` header), both in the printable byte alphabet.
"""

from __future__ import annotations

import os
from typing import Any

from .base import Tokenizer, TokenizerError, TokenizerFileError, file_errors
from .bpe import ByteBPE
from .fields import check, get, items, pair
from .pretokenize import (
    GPT2_PATTERN,
    METASPACE,
    METASPACE_SPLIT_PATTERN,
    bytes_to_text,
    from_oniguruma,
    text_to_bytes,
    to_oniguruma,
)
from .spelling import Spelling
from .unigram import Unigram
from .wordpiece import WordPiece

# ----- reading ---------------------------------------------------------------------------------

#: the one ``version`` of ``tokenizer.json`` there is (the library writes and reads only this)
HF_VERSION = "1.0"


def from_hf_json(data: dict[str, Any], path: str | os.PathLike = "<memory>") -> Tokenizer:
    """Build a tokenizer from a parsed ``tokenizer.json``: one of our classes when the file is in
    a form it writes (or an equivalent one), else a ``Pipeline`` of the parts the file names."""
    model = data.get("model")
    if not isinstance(model, dict):
        raise TokenizerFileError(path, "'model' must be a JSON object")
    # the library refuses other versions too: their meaning is unknown
    version = get(data, "version", "str", path, default=HF_VERSION)
    _require(version == HF_VERSION, path, f"unsupported tokenizer.json version {version!r}")
    for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        check(data.get(part), "object|null", path, part)
    kind = model.get("type") or _guess_model_type(model)
    try:
        _native(_plain_extras(data, path), path, "added-token flags, post-processor, padding")
        with file_errors(path, f"{kind} model"):
            added = _added_tokens(data, path)
            readers = {"BPE": _read_bpe, "WordPiece": _read_wordpiece, "Unigram": _read_unigram}
            if kind in readers:
                tok = readers[kind](data, model, added, path)
                tok.spelling = Spelling.of(data)
                return tok
    except NotNative:
        pass
    from .pipeline import Pipeline

    with file_errors(path, f"{kind} pipeline"):
        return Pipeline.from_hf(data, path)


def _plain_extras(data: dict[str, Any], path) -> bool:
    """Whether the added tokens have no flags our classes would ignore, no post-processor adds
    tokens and no truncation or padding is set: then the file's ids are what our classes give."""
    from .pipeline import read_added_tokens

    for t in read_added_tokens(data, path):
        if t.lstrip or t.rstrip or t.single_word or (t.normalized and data.get("normalizer")):
            return False
    if data.get("truncation") is not None or data.get("padding") is not None:
        return False
    post = data.get("post_processor")
    return post is None or (isinstance(post, dict) and post.get("type") == "ByteLevel")


def load_hf(path: str | os.PathLike) -> Tokenizer:
    """Read a Hugging Face ``tokenizer.json``."""
    from .files import read_json

    data = read_json(path)
    if not isinstance(data, dict) or "model" not in data:
        raise TokenizerFileError(path, "not a Hugging Face tokenizer.json (no 'model')")
    return from_hf_json(data, path)


def _guess_model_type(model: dict) -> str | None:
    if "merges" in model:
        return "BPE"
    if isinstance(model.get("vocab"), list):
        return "Unigram"
    if "continuing_subword_prefix" in model and "max_input_chars_per_word" in model:
        return "WordPiece"
    return None


def _added_tokens(data: dict, path) -> dict[str, int]:
    """The file's added tokens: content -> id."""
    from .pipeline import read_added_tokens

    return {t.content: t.id for t in read_added_tokens(data, path)}


def merge_pair_of(m: Any, path, where: str) -> tuple[str, str]:
    """A merge as a file stores it: "a b" (older files) or ["a", "b"]."""
    if isinstance(m, str):
        parts = m.split(" ")
        if len(parts) != 2:
            raise TokenizerFileError(path, f'field {where} must be two tokens "a b", got {m!r}')
        return parts[0], parts[1]
    return pair(m, "str,str", path, where)


def _model_vocab(model: dict, path) -> dict[str, int]:
    """``model.vocab`` as token -> id, every id checked to be an integer."""
    return dict(items(get(model, "vocab", "object", path, "model"), "int", path, "model.vocab"))


def _is_split_step(step: dict) -> bool:
    """Whether a pre-tokenizer step is one ``_split_step`` writes: the only Split we read."""
    return (
        step.get("type") == "Split"
        and step.get("behavior") == "Isolated"
        and not step.get("invert", False)
        and "Regex" in (step.get("pattern") or {})
    )


class NotNative(TokenizerFileError):
    """The file combines parts in a way none of our four classes runs; ``from_hf_json`` then
    builds a ``Pipeline`` instead."""


def _native(cond: bool, path, problem: str) -> None:
    """Check that the file is in a form one of our classes runs (see ``NotNative``)."""
    if not cond:
        raise NotNative(path, problem)


def _require(cond: bool, path, problem: str) -> None:
    if not cond:
        raise TokenizerFileError(path, problem)


def ids_to_list(vocab: dict[str, int], added: dict[str, int], path) -> list[str]:
    """Merge model vocab and added tokens into one list indexed by id (no gaps allowed)."""
    by_id: dict[int, str] = {}
    for t, i in list(vocab.items()) + list(added.items()):
        _require(isinstance(i, int) and i >= 0, path, f"token {t!r} has a bad id {i!r}")
        if by_id.setdefault(i, t) != t:
            raise TokenizerFileError(path, f"id {i} is used by both {by_id[i]!r} and {t!r}")
    n = len(by_id)
    _require(set(by_id) == set(range(n)), path, f"token ids are not 0..{n - 1} without gaps")
    return [by_id[i] for i in range(n)]


def _read_bpe(data, model, added, path) -> ByteBPE:
    _native(data.get("normalizer") is None, path, "BPE: normalizers are not supported")
    pre = data.get("pre_tokenizer") or {}
    if pre.get("type") == "Sequence":
        # Split(Regex, Isolated) then ByteLevel(use_regex=False): GPT-4-style custom patterns
        steps = pre.get("pretokenizers") or []
        ok = (
            len(steps) == 2
            and _is_split_step(steps[0])
            and steps[1].get("type") == "ByteLevel"
            and not steps[1].get("use_regex", True)
            and not steps[1].get("add_prefix_space", False)
        )
        _native(ok, path, "BPE: only Split(Regex, Isolated) + ByteLevel(use_regex=False)")
        pattern, prefix_space = from_oniguruma(steps[0]["pattern"]["Regex"]), False
    else:
        _native(
            pre.get("type") == "ByteLevel" and pre.get("use_regex", True),
            path,
            f"BPE: only a ByteLevel pre-tokenizer is supported, found {pre.get('type')!r}",
        )
        pattern = GPT2_PATTERN
        prefix_space = get(pre, "add_prefix_space", "bool", path, "pre_tokenizer", False)
    for field in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        _native(not model.get(field), path, f"BPE: {field}={model.get(field)!r} not supported")
    _native(not model.get("byte_fallback"), path, "BPE: byte_fallback is not supported")
    vocab_t2i = _model_vocab(model, path)
    itos = ids_to_list(vocab_t2i, added, path)
    vocab: dict[int, bytes] = {}
    for i, t in enumerate(itos):
        if t in added:
            continue
        try:
            vocab[i] = text_to_bytes(t)
        except KeyError:  # the library keeps such a token (no byte-level text reaches it)
            raise NotNative(path, f"BPE token {t!r} is not in the byte-level alphabet") from None
    merges = []
    for k, m in enumerate(get(model, "merges", "list", path, "model")):
        a, b = merge_pair_of(m, path, f"model.merges[{k}]")
        if a not in vocab_t2i or b not in vocab_t2i:
            raise TokenizerFileError(path, f"merge {k} ({a!r}, {b!r}) uses unknown tokens")
        merges.append((vocab_t2i[a], vocab_t2i[b]))
    return ByteBPE(
        vocab,
        merges,
        {t: added[t] for t in added},
        pattern,
        add_prefix_space=prefix_space,
        ignore_merges=get(model, "ignore_merges", "bool", path, "model", False),
    )


def _read_wordpiece(data, model, added, path) -> WordPiece:
    norm = data.get("normalizer")
    if norm is None:
        options = dict(
            clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=False
        )
    else:
        _native(
            norm.get("type") == "BertNormalizer",
            path,
            f"WordPiece: only BertNormalizer is supported, found {norm.get('type')!r}",
        )
        options = dict(
            clean_text=get(norm, "clean_text", "bool", path, "normalizer", True),
            handle_chinese_chars=get(
                norm, "handle_chinese_chars", "bool", path, "normalizer", True
            ),
            strip_accents=get(norm, "strip_accents", "bool|null", path, "normalizer", None),
            lowercase=get(norm, "lowercase", "bool", path, "normalizer", True),
        )
    pre = data.get("pre_tokenizer") or {}
    _native(
        pre.get("type") == "BertPreTokenizer",
        path,
        f"WordPiece: only BertPreTokenizer is supported, found {pre.get('type')!r}",
    )
    prefix = get(model, "continuing_subword_prefix", "str", path, "model", "##")
    # the class decodes as the WordPiece decoder does (with or without its cleanup); a file
    # with no decoder (tokens joined by spaces) or another one decodes as a Pipeline
    dec = data.get("decoder") or {}
    _native(
        dec.get("type") == "WordPiece" and dec.get("prefix", "##") == prefix,
        path,
        f"WordPiece: only a WordPiece decoder with the model's prefix, found {dec.get('type')!r}",
    )
    vocab = _model_vocab(model, path)
    itos = ids_to_list(vocab, added, path)
    unk = get(model, "unk_token", "str", path, "model", "[UNK]")
    return WordPiece(
        itos,
        list(added),  # the unknown token only if the file adds it: else "[UNK]" is plain text
        unk,
        prefix,
        get(model, "max_input_chars_per_word", "int", path, "model", 100),
        **options,
        cleanup=get(dec, "cleanup", "bool", path, "decoder", True),
    )


def _read_unigram(data, model, added, path) -> Unigram:
    _native(data.get("normalizer") is None, path, "Unigram: normalizers are not supported")
    _native(not model.get("byte_fallback"), path, "Unigram: byte_fallback is not supported")
    pre = data.get("pre_tokenizer") or {}
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else [pre]
    meta = steps[0] if steps else {}
    _native(
        meta.get("type") == "Metaspace",
        path,
        f"Unigram: expected a Metaspace pre-tokenizer, found {meta.get('type')!r}",
    )
    replacement = get(meta, "replacement", "str", path, "pre_tokenizer", METASPACE)
    if "prepend_scheme" in meta:
        scheme = get(meta, "prepend_scheme", "str", path, "pre_tokenizer")
    else:  # files from before tokenizers 0.19
        prefix = get(meta, "add_prefix_space", "bool", path, "pre_tokenizer", True)
        scheme = "always" if prefix else "never"
    if len(steps) == 1:
        _native(meta.get("split", True), path, "Unigram: Metaspace(split=False) alone")
        pattern = METASPACE_SPLIT_PATTERN.replace(METASPACE, replacement)
    else:
        split = steps[1]
        ok = len(steps) == 2 and not meta.get("split", True) and _is_split_step(split)
        _native(ok, path, "Unigram: only Metaspace(split=False) + Split(Regex, Isolated)")
        pattern = from_oniguruma(split["pattern"]["Regex"])
    pieces = [
        pair(p, "str,number", path, f"model.vocab[{k}]")
        for k, p in enumerate(get(model, "vocab", "list", path, "model"))
    ]
    itos = ids_to_list({t: i for i, (t, _) in enumerate(pieces)}, added, path)
    _native(len(itos) == len(pieces), path, "Unigram: added tokens outside the model vocab")
    unk_id = get(model, "unk_id", "int|null", path, "model", None)
    # null: no unknown token (encoding then refuses a character no piece covers alone)
    if unk_id is not None:
        _require(0 <= unk_id < len(pieces), path, f"Unigram: unk_id {unk_id} is out of range")
    unk = None if unk_id is None else pieces[unk_id][0]
    # the unknown token is special only if the file adds it: else "<unk>" in the text is a piece
    return Unigram(pieces, list(added), unk, pattern, scheme, replacement, fuse_unk=True)


def load_gpt2(
    vocab_path: str | os.PathLike,
    merges_path: str | os.PathLike,
    special_tokens: tuple[str, ...] = ("<|endoftext|>",),
) -> ByteBPE:
    """Read GPT-2's ``vocab.json`` + ``merges.txt``. Tokens listed in ``special_tokens`` that
    the vocabulary holds become special tokens."""
    from .files import read_json

    vocab_t2i = read_json(vocab_path)
    if not isinstance(vocab_t2i, dict) or not all(isinstance(i, int) for i in vocab_t2i.values()):
        raise TokenizerFileError(vocab_path, "expected a JSON object mapping tokens to ids")
    try:
        with open(merges_path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise TokenizerFileError(merges_path, "no such file") from None
    except UnicodeDecodeError as e:
        raise TokenizerFileError(merges_path, f"not UTF-8 text ({e.reason})") from None
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
            {"id": vocab_t2i[t], "content": t} for t in special_tokens if t in vocab_t2i
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True},
        "model": {"type": "BPE", "vocab": vocab_t2i, "merges": merges},
    }
    try:
        return from_hf_json(data, vocab_path)
    except TokenizerFileError as e:
        raise TokenizerFileError(f"{vocab_path} + {merges_path}", e.problem) from None


# ----- writing ---------------------------------------------------------------------------------


def to_hf_json(tok: Tokenizer) -> dict[str, Any]:
    """The ``tokenizer.json`` object for a ByteBPE, WordPiece, Unigram or Pipeline."""
    added = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t, i in sorted(tok.special.items(), key=lambda kv: kv[1])
    ]
    head = {"version": HF_VERSION, "truncation": None, "padding": None, "added_tokens": added}
    if isinstance(tok, ByteBPE):
        return head | _bpe_pipeline(tok)
    if isinstance(tok, WordPiece):
        return head | _wordpiece_pipeline(tok)
    if isinstance(tok, Unigram):
        return head | _unigram_pipeline(tok)
    if tok.kind == "pipeline":
        return tok.to_hf_json()
    raise TokenizerError(f"{type(tok).__name__} has no Hugging Face tokenizer.json form")


def printable_vocab(tok: ByteBPE) -> dict[str, int]:
    """A ByteBPE's ordinary tokens in GPT-2's printable byte spelling -> id, in id order: the
    form in which our format, ``tokenizer.json`` and ``vocab.json`` all store them."""
    return {bytes_to_text(b): i for i, b in sorted(tok.vocab.items())}


def _gpt2_vocab_and_merges(tok: ByteBPE) -> tuple[dict[str, int], list[str]]:
    """The vocabulary (special tokens included) and the merges ("a b", in order), printable,
    as ``tokenizer.json`` and GPT-2's ``vocab.json`` + ``merges.txt`` both hold them."""
    vocab = printable_vocab(tok)
    vocab.update(tok.special)
    merges = [f"{bytes_to_text(tok.vocab[a])} {bytes_to_text(tok.vocab[b])}" for a, b in tok.merges]
    return vocab, merges


def _split_step(pattern: str) -> dict[str, Any]:
    """The pre-tokenizer step that cuts text at the matches of one of our regexes, keeping every
    piece (spelled for Oniguruma, which the file's readers run it with)."""
    regex = {"Regex": to_oniguruma(pattern)}
    return {"type": "Split", "pattern": regex, "behavior": "Isolated", "invert": False}


def _bpe_pipeline(tok: ByteBPE) -> dict[str, Any]:
    if tok.pattern == GPT2_PATTERN:
        pre = {
            "type": "ByteLevel",
            "add_prefix_space": tok.add_prefix_space,
            "trim_offsets": True,
            "use_regex": True,
        }
    elif not tok.add_prefix_space:
        pre = {
            "type": "Sequence",
            "pretokenizers": [
                _split_step(tok.pattern),
                {
                    "type": "ByteLevel",
                    "add_prefix_space": False,
                    "trim_offsets": True,
                    "use_regex": False,
                },
            ],
        }
    else:
        raise TokenizerError("a custom pattern with add_prefix_space has no tokenizer.json form")
    vocab, merges = _gpt2_vocab_and_merges(tok)
    return {
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": tok.ignore_merges,
            "vocab": vocab,
            "merges": merges,
        },
    }


def _wordpiece_pipeline(tok: WordPiece) -> dict[str, Any]:
    return {
        "normalizer": {"type": "BertNormalizer", **tok.normalizer},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": tok.prefix, "cleanup": tok.cleanup},
        "model": {
            "type": "WordPiece",
            "unk_token": tok.unk_token,
            "continuing_subword_prefix": tok.prefix,
            "max_input_chars_per_word": tok.max_word_chars,
            "vocab": {t: i for i, t in enumerate(tok.itos)},
        },
    }


def _unigram_pipeline(tok: Unigram) -> dict[str, Any]:
    r, scheme = tok.replacement, tok.prepend_scheme
    if tok.pattern == METASPACE_SPLIT_PATTERN.replace(METASPACE, r):
        pre = {"type": "Metaspace", "replacement": r, "prepend_scheme": scheme, "split": True}
    else:
        pre = {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Metaspace", "replacement": r, "prepend_scheme": scheme, "split": False},
                _split_step(tok.pattern),
            ],
        }
    return {
        "normalizer": None,
        "pre_tokenizer": pre,
        "post_processor": None,
        "decoder": {"type": "Metaspace", "replacement": r, "prepend_scheme": scheme, "split": True},
        "model": {
            "type": "Unigram",
            "unk_id": tok.unk_id,
            "vocab": [[t, s] for t, s in tok.pieces],
            "byte_fallback": False,
        },
    }


def save_gpt2(tok: ByteBPE, folder: str | os.PathLike) -> None:
    """Write ``vocab.json`` and ``merges.txt`` (GPT-2's layout) into ``folder``."""
    import json
    from pathlib import Path

    from .files import atomic_write_text

    if not isinstance(tok, ByteBPE) or tok.pattern != GPT2_PATTERN:
        raise TokenizerError("only a ByteBPE with GPT-2's pattern has a GPT-2 file form")
    folder = Path(folder)
    vocab, merges = _gpt2_vocab_and_merges(tok)
    lines = ["#version: 0.2", *merges]
    atomic_write_text(folder / "vocab.json", json.dumps(vocab, ensure_ascii=False))
    atomic_write_text(folder / "merges.txt", "\n".join(lines) + "\n")
