"""A tokenizer assembled from the parts a Hugging Face ``tokenizer.json`` names.

The file describes a pipeline, and ``Pipeline`` runs it in the ``tokenizers`` library's order:

1. **Added tokens** (``<s>``, ``[CLS]``, ...) are cut out of the raw text first and never split.
   Their flags: ``lstrip``/``rstrip`` also swallow the whitespace on that side, ``single_word``
   matches only a whole word, ``normalized`` matches in the normalized text instead of the raw
   text, ``special`` marks tokens that ``decode(..., skip_special_tokens=True)`` leaves out.
2. The **normalizer** cleans each remaining stretch of text (``normalizers.py``).
3. The **pre-tokenizer** cuts it into words (``pre_tokenizers.py``).
4. The **model** turns each word into ids (``hf_models.py``).
5. With ``add_special_tokens=True`` the **post-processor** puts the template's special tokens
   around the ids (``post_processors.py``).
6. **Truncation** and **padding**, when set (by the file or by assigning ``truncation`` and
   ``padding``), cut and fill encodings to a length (``batching.py``).

Decoding looks the ids up and hands the token strings to the **decoder** (``decoders.py``).

``hf_format.from_hf_json`` reads a file into one of our own classes (``ByteBPE``,
``WordPiece``, ``Unigram``) when the file is in a form they run, since they encode faster
(``benchmarks/bench_tokenizers.py`` times both: its "as a Pipeline" row); any other
combination of supported parts becomes a
``Pipeline``. Where both do the same thing they call the same functions (BERT's normalizer and
split, GPT-2's pattern, Metaspace's "▁").
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

import regex

from . import (
    alignment,
    batching,
    decoders,
    hf_models,
    normalizers,
    post_processors,
    pre_tokenizers,
)
from .base import AllowedSpecial, Tokenizer, TokenizerError
from .fields import check, get
from .pre_tokenizers import SPACE
from .spelling import Spelling

#: What ``single_word`` counts as part of a word: the library's ``\w`` there (Rust's ``regex``
#: crate: letters, marks, decimal digits, connector punctuation, the joiners), which is the
#: ``regex`` module's; so a combining accent is part of a word and "²" is not
_WORD_CHAR = regex.compile(r"\w")
_SPACE_BEFORE = regex.compile(rf"{SPACE}+$")
_SPACE_AFTER = regex.compile(rf"^{SPACE}+")


@dataclass(frozen=True)
class AddedToken:
    """An entry of the file's ``added_tokens``."""

    content: str
    id: int
    special: bool = True
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False
    normalized: bool = False


def read_added_tokens(data: dict[str, Any], path: str | os.PathLike) -> list[AddedToken]:
    """The ``added_tokens`` list of a file, every flag type-checked."""
    out = []
    for k, e in enumerate(get(data, "added_tokens", "list", path, default=[])):
        where = f"added_tokens[{k}]"
        check(e, "object", path, where)
        special = get(e, "special", "bool", path, where, False)
        out.append(
            AddedToken(
                get(e, "content", "str", path, where),
                get(e, "id", "int", path, where),
                special,
                get(e, "lstrip", "bool", path, where, False),
                get(e, "rstrip", "bool", path, where, False),
                get(e, "single_word", "bool", path, where, False),
                get(e, "normalized", "bool", path, where, not special),
            )
        )
    return out


def split_added(text: str, tokens: list[AddedToken]) -> list[tuple[str, AddedToken | None, int]]:
    """Cut ``text`` at the added tokens: (text, the token or None, start offset) in order.

    At each position the longest token wins; ``single_word``, ``lstrip`` and ``rstrip`` are
    applied as described in the module docstring.
    """
    if not tokens or not text:
        return [(text, None, 0)] if text else []
    by_content = {t.content: t for t in tokens if t.content}
    alternatives = sorted(by_content, key=len, reverse=True)
    found = regex.finditer("|".join(regex.escape(t) for t in alternatives), text)
    out: list[tuple[str, AddedToken | None, int]] = []
    pos = 0
    for m in found:
        token = by_content[m.group()]
        start, end = m.span()
        if token.single_word and (
            (start > 0 and _WORD_CHAR.match(text[start - 1]))
            or (end < len(text) and _WORD_CHAR.match(text[end]))
        ):
            continue
        if start < pos:  # inside whitespace an earlier token's rstrip took
            continue
        if token.lstrip:
            space = _SPACE_BEFORE.search(text, pos, start)
            if space:
                start = space.start()
        if token.rstrip:
            space = _SPACE_AFTER.match(text[end:])
            if space:
                end += space.end()
        if start > pos:
            out.append((text[pos:start], None, pos))
        out.append((text[start:end], token, start))
        pos = end
    if pos < len(text):
        out.append((text[pos:], None, pos))
    return out


def _spread(content: str, chunk: str, start: int) -> alignment.Aligned:
    """An added token's text aligned with its chunk of the original: ``chunk`` is ``content``
    with the whitespace its ``lstrip``/``rstrip`` swallowed, which its ends then cover."""
    text, spans = alignment.identity(content, start + chunk.index(content))
    if spans:
        spans[0] = (start, spans[0][1])
        spans[-1] = (spans[-1][0], start + len(chunk))
    return text, spans


class Pipeline(Tokenizer):
    """A tokenizer run as a ``tokenizer.json`` pipeline (see the module docstring)."""

    kind = "pipeline"
    #: the parsed tokenizer.json this pipeline was built from (``to_hf_json`` writes it back)
    file_data: dict[str, Any] | None = None
    #: whether the pre-tokenizer treats the first piece apart (``Metaspace`` with
    #: ``prepend_scheme="first"``), so that encoding must find out which piece that is
    first_matters: bool = True

    def __init__(
        self,
        model: hf_models.Model,
        added: list[AddedToken],
        normalizer: normalizers.Normalizer | None = None,
        pre_tokenizer: pre_tokenizers.PreTokenizer | None = None,
        post_processor: post_processors.PostProcessor | None = None,
        decoder: decoders.Decoder | None = None,
        truncation: batching.Truncation | None = None,
        padding: batching.Padding | None = None,
    ):
        # a normalized added token is matched, and decoded, in its normalized spelling
        shown = [
            replace(t, content=normalizer(t.content)) if normalizer and t.normalized else t
            for t in added
        ]
        by_id = {i: t for t, i in model.vocab.items()} | {t.id: t.content for t in shown}
        if set(by_id) != set(range(len(by_id))):
            raise TokenizerError(f"token ids are not 0..{len(by_id) - 1} without gaps")
        self.itos = [by_id[i] for i in range(len(by_id))]
        self.stoi = dict(model.vocab) | {t.content: t.id for t in added}
        super().__init__({t.content: t.id for t in added if t.special})
        self.added = added
        self.model = model
        self.unk_token = model.unk_token
        self.normalizer = normalizer
        self.pre_tokenizer = pre_tokenizer
        self.post_processor = post_processor
        self.decoder = decoder
        self.truncation = truncation
        self.padding = padding
        self._raw_added = [t for t in shown if not t.normalized]
        self._normalized_added = [t for t in shown if t.normalized]
        self._cache: dict[str, list[int]] = {}
        # a word the model can cut (hf_models.Model.parts) is encoded part by part, each part
        # through the word cache: a file with no pre-tokenizer (Llama 2's) hands the model the
        # whole text as one word, whose parts are its words again
        self._encode_word = model.encode_word if model.parts is None else self._encode_parts

    @classmethod
    def from_hf(cls, data: dict[str, Any], path: str | os.PathLike = "<memory>") -> Pipeline:
        """Assemble the pipeline a parsed ``tokenizer.json`` describes; an unsupported part is
        refused with its type and its place in the file."""
        added = read_added_tokens(data, path)
        model = hf_models.build(
            get(data, "model", "object", path), {t.content: t.id for t in added}, path
        )
        tok = cls(
            model,
            added,
            normalizers.build(data.get("normalizer"), path),
            pre_tokenizers.build(data.get("pre_tokenizer"), path),
            post_processors.build(data.get("post_processor"), path),
            decoders.build(data.get("decoder"), path),
            batching.read_truncation(data.get("truncation"), path),
            batching.read_padding(data.get("padding"), path),
        )
        tok.spelling = Spelling.of(data)
        tok.file_data = copy.deepcopy(data)
        tok.first_matters = '"first"' in json.dumps(data.get("pre_tokenizer"))
        return tok

    def to_hf_json(self) -> dict[str, Any]:
        """The ``tokenizer.json`` this pipeline was read from, with its current truncation and
        padding settings (a Pipeline is saved in that form only)."""
        if self.file_data is None:
            raise TokenizerError("this Pipeline was not read from a file: nothing to write")
        data = copy.deepcopy(self.file_data)
        data["truncation"] = batching.truncation_json(self.truncation)
        pad = self.padding
        pad_token = self.itos[pad.pad_id] if pad and 0 <= pad.pad_id < len(self.itos) else ""
        data["padding"] = batching.padding_json(pad, pad_token)
        return data

    # ----- encoding ----------------------------------------------------------------------------

    def encode(
        self,
        text: str,
        allowed_special: AllowedSpecial = "all",
        add_special_tokens: bool = False,
        pair: str | None = None,
    ) -> list[int]:
        """Text to ids. ``allowed_special`` chooses which *special* added tokens are recognised
        (other added tokens always are); ``add_special_tokens`` applies the post-processor's
        template, to ``text`` alone or to ``text`` and ``pair``. Truncation and padding apply
        when set (padding "to the longest" pads one text only to a multiple, if one is set)."""
        ids = self._finish(text, pair, allowed_special, add_special_tokens)
        if self.padding is not None:
            ids = batching.pad([ids], self.padding)[0][0]
        return ids

    def _finish(
        self, text: str, pair: str | None, allowed_special: AllowedSpecial, add_special: bool
    ) -> list[int]:
        """Encode, truncate and apply the template (everything but padding)."""
        ids = self._encode_one(text, allowed_special)
        pair_ids = None if pair is None else self._encode_one(pair, allowed_special)
        template = self.post_processor if add_special else None
        if self.truncation is not None:
            n_added = template.n_added(pair is not None) if template is not None else 0
            ids, pair_ids = batching.truncate(ids, pair_ids, self.truncation, n_added)
        if template is not None:
            return template(ids, pair_ids)
        return ids if pair_ids is None else ids + pair_ids

    def _encode_one(self, text: str, allowed_special: AllowedSpecial) -> list[int]:
        return [i for _, _, ids, _ in self.segments(text, allowed_special) for i in ids]

    def segments(
        self, text: str, allowed_special: AllowedSpecial = "all"
    ) -> list[tuple[int, int, list[int], bool]]:
        """The text cut as the model sees it: ``(start, end, ids, added)`` for each added token
        (its id alone, ``added`` True) and each stretch of text between them (the ids the model
        gives it), in order; ``start`` and ``end`` index the text of :meth:`normalize_aligned`
        (added tokens as they are, the rest normalized). Encoding is these ids one after
        another; the offsets of ``offsets.py`` are looked for in each stretch apart."""
        if not isinstance(text, str):
            raise TokenizerError(f"encode expects str, got {type(text).__name__}")
        allowed = self._allowed(allowed_special)
        out: list[tuple[int, int, list[int], bool]] = []
        pos = 0  # where this chunk starts in the normalized text
        try:
            for chunk, token, start in split_added(text, allowed(self._raw_added)):
                if token is not None:
                    out.append((pos, pos + len(token.content), [token.id], True))
                    pos += len(token.content)
                    continue
                first = start == 0
                if self.normalizer is not None:
                    if first and self.first_matters:
                        first = self._keeps_first_character(chunk)
                    chunk = self.normalizer(chunk)
                for part, token2, start2 in split_added(chunk, allowed(self._normalized_added)):
                    if token2 is not None:
                        ids = [token2.id]
                    else:
                        ids = self._encode_ordinary(part, first and start2 == 0)
                    out.append((pos + start2, pos + start2 + len(part), ids, token2 is not None))
                pos += len(chunk)
        except TokenizerError as e:
            if self.source and not str(e).startswith(self.source):
                raise TokenizerError(f"{self.source}: {e}") from None
            raise
        return out

    def _keeps_first_character(self, text: str) -> bool:
        """Whether the normalized ``text`` still begins where ``text`` does. The library counts a
        piece as the first (``Metaspace(prepend_scheme="first")``) only if it starts at the
        original text's first character, so not when the normalizer dropped that character."""
        _, spans = self.normalizer.align(alignment.identity(text))
        return bool(spans) and spans[0][0] == 0

    def normalize_aligned(self, text: str) -> alignment.Aligned:
        """The text as the model sees it (added tokens as they are, the rest normalized), with
        the original span of each character (see ``alignment.py``)."""
        out_text: list[str] = []
        out_spans: list[alignment.Span] = []
        for chunk, token, start in split_added(text, self._raw_added):
            if token is not None:  # the token, over the whitespace it swallowed too
                aligned = _spread(token.content, chunk, start)
            else:
                aligned = alignment.identity(chunk, start)
                if self.normalizer is not None:
                    aligned = self.normalizer.align(aligned)
            out_text.append(aligned[0])
            out_spans.extend(aligned[1])
        return "".join(out_text), out_spans

    def _allowed(self, allowed_special: AllowedSpecial):
        if allowed_special == "all":
            return lambda tokens: tokens
        if allowed_special == "none":
            return lambda tokens: [t for t in tokens if not t.special]
        pattern = self._special_pattern(allowed_special)  # validates the collection
        chosen = set(allowed_special) if pattern is not None else set()
        return lambda tokens: [t for t in tokens if not t.special or t.content in chosen]

    def _encode_ordinary(self, text: str, first: bool) -> list[int]:
        pieces = [(text, first)]
        if self.pre_tokenizer is not None:
            pieces = self.pre_tokenizer(pieces)
        return self._encode_words((w for w, _ in pieces), self._encode_word)

    def _encode_parts(self, word: str) -> list[int]:
        return self._encode_words(self.model.parts(word), self.model.encode_word)

    def encode_batch(
        self,
        texts: Iterable[str],
        allowed_special: AllowedSpecial = "all",
        add_special_tokens: bool = False,
        pairs: Iterable[str] | None = None,
    ) -> list[list[int]]:
        """Encode many texts (each with its pair, if ``pairs`` are given), truncated and padded
        as set; ``attention_masks`` gives the masks of such a batch."""
        return self.encode_batch_with_masks(texts, allowed_special, add_special_tokens, pairs)[0]

    def encode_batch_with_masks(
        self,
        texts: Iterable[str],
        allowed_special: AllowedSpecial = "all",
        add_special_tokens: bool = False,
        pairs: Iterable[str] | None = None,
    ) -> tuple[list[list[int]], list[list[int]]]:
        """``encode_batch`` and the attention masks (1 for a token, 0 for padding)."""
        texts = list(texts)
        pair_list = [None] * len(texts) if pairs is None else list(pairs)
        if len(pair_list) != len(texts):
            raise TokenizerError(f"{len(texts)} texts but {len(pair_list)} pairs")
        batch = [
            self._finish(t, p, allowed_special, add_special_tokens)
            for t, p in zip(texts, pair_list)
        ]
        if self.padding is None:
            return batch, [[1] * len(ids) for ids in batch]
        return batching.pad(batch, self.padding)

    # ----- decoding ----------------------------------------------------------------------------

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Ids to text through the file's decoder (tokens joined by spaces if it has none)."""
        ids = self.check_ids(ids)
        tokens = [
            self.itos[i] for i in ids if not (skip_special_tokens and i in self._special_by_id)
        ]
        if self.decoder is None:
            return " ".join(tokens)
        return "".join(self.decoder(tokens))

    def _decode_pieces(self, ids: list[int]) -> str:
        return self.decode(ids)
