"""The one tokenizer class: the pipeline a Hugging Face ``tokenizer.json`` describes.

Every tokenizer here is such a pipeline, read from a file or written by a trainer (``char.py``,
``bpe.py``, ``wordpiece.py``, ``unigram.py``). ``Tokenizer(data)`` runs the parsed file in the
``tokenizers`` library's order: the **added tokens** are cut out of the raw text first and
never split (``split_added``), the **normalizer** cleans each remaining stretch
(``normalizers.py``), the **pre-tokenizer** cuts it into words (``pre_tokenizers.py``), the
**model** turns each word into ids (``models.py``), and with ``add_special_tokens=True`` the
**post-processor** puts the template's special tokens around them (``post_processors.py``);
then **truncation** and **padding**, when set (``batching.py``). Decoding hands the token
strings to the **decoder** (``decoders.py``).
"""

from __future__ import annotations

import copy
import json
import operator
import os
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar, Literal

import regex

from nn.serialization import atomic_write

from . import alignment, batching, decoders, models, normalizers, post_processors, pre_tokenizers
from .base import TokenizerError, TokenizerFileError, file_errors
from .fields import Part, check, get
from .pre_tokenizers import SPACE

AllowedSpecial = Literal["all", "none"] | Iterable[str]
#: the one ``version`` of ``tokenizer.json`` there is (the library writes and reads only this)
HF_VERSION = "1.0"

#: What ``single_word`` counts as part of a word: the library's ``\w`` there (Rust's ``regex``
#: crate: letters, marks, decimal digits, connector punctuation, the joiners), which is the
#: ``regex`` module's; so a combining accent is part of a word and "²" is not
_WORD_CHAR = regex.compile(r"\w")
_SPACE_BEFORE = regex.compile(rf"{SPACE}+$")
_SPACE_AFTER = regex.compile(rf"^{SPACE}+")


@dataclass(frozen=True)
class AddedToken:
    """An entry of the file's ``added_tokens`` (its fields in the file's order; the defaults are
    a special token as the trainers write one): ``normalized`` ones are matched in the
    normalized text, ``special`` ones are those ``allowed_special`` chooses among and
    ``decode(..., skip_special_tokens=True)`` leaves out."""

    id: int
    content: str
    single_word: bool = False
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = False
    special: bool = True


def trained_json(special: dict[str, int], normalizer, pre_tokenizer, decoder, model) -> dict:
    """A ``tokenizer.json`` as the trainers write it: these parts, the special tokens (content
    -> id) as added tokens, no post-processor, truncation or padding."""
    added = [asdict(AddedToken(i, t)) for t, i in special.items()]
    return {"version": HF_VERSION, "truncation": None, "padding": None, "added_tokens": added} | {
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": None,
        "decoder": decoder,
        "model": model,
    }


def pre_tokenize(pre: pre_tokenizers.PreTokenizer | None, text: str, first: bool) -> list[str]:
    """The words ``pre`` cuts ``text`` into (``first``: it starts the input)."""
    if pre is None:
        return [text] if text else []
    return [w for w, _, _ in pre([(text, first, None)])]


def word_splitter(normalizer: dict | None, pre_tokenizer: dict | None):
    """``words(text, first)``: the words a file's normalizer and pre-tokenizer (JSON parts) cut
    ``text`` into. The trainers count the words they learn from with it, so they cut text as
    the files they write do."""
    normalize = normalizers.build(normalizer, "<memory>") or (lambda text: text)
    pre = pre_tokenizers.build(pre_tokenizer, "<memory>")
    return lambda text, first: pre_tokenize(pre, normalize(text), first)


def read_added_tokens(data: dict[str, Any], path: str | os.PathLike) -> list[AddedToken]:
    """The ``added_tokens`` list of a file, every flag type-checked."""
    out = []
    for k, e in enumerate(get(data, "added_tokens", "list", path, default=[])):
        p = Part(e, path, f"added_tokens[{k}]")
        special = p("special", "bool", False)
        flags = {flag: p(flag, "bool", False) for flag in ("single_word", "lstrip", "rstrip")}
        normalized = p("normalized", "bool", not special)
        out.append(
            AddedToken(
                p("id", "int"), p("content", "str"), **flags, normalized=normalized, special=special
            )
        )
    return out


def split_added(text: str, tokens: list[AddedToken]) -> list[tuple[str, AddedToken | None, int]]:
    """Cut ``text`` at the added tokens: (text, the token or None, start offset) in order.

    At each position the longest token wins; one with ``single_word`` matches only a whole
    word, ``lstrip``/``rstrip`` also swallow the whitespace on that side.
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


class Tokenizer:
    """A tokenizer run as a ``tokenizer.json`` pipeline (see the module docstring), built from
    the parsed file ``data``; ``path`` names the file in errors. A part it does not know is
    refused with an error naming the file, the part's type and its place in the file."""

    #: the file this tokenizer was loaded from (set by ``files.load``), named in its errors
    source: str | None = None
    # Distinct pre-tokens whose encoding is remembered before the cache is cleared, and the
    # longest one remembered: a whole text handed over as one word (a file with no
    # pre-tokenizer) is not kept, its parts are (``models.MergeModel.parts``).
    CACHE_LIMIT: ClassVar[int] = 1 << 18
    CACHE_WORD_CHARS: ClassVar[int] = 256

    def __init__(self, data: dict[str, Any], path: str | os.PathLike = "<memory>"):
        model_spec = data.get("model")
        if not isinstance(model_spec, dict):
            raise TokenizerFileError(path, "'model' must be a JSON object")
        # the library refuses other versions too: their meaning is unknown
        version = get(data, "version", "str", path, default=HF_VERSION)
        if version != HF_VERSION:
            raise TokenizerFileError(path, f"unsupported tokenizer.json version {version!r}")
        for part in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
            check(data.get(part), "object|null", path, part)
        with file_errors(path, f"{model_spec.get('type') or 'tokenizer'} model"):
            added = read_added_tokens(data, path)
            model = models.build(model_spec, {t.content: t.id for t in added}, path)
            normalizer = normalizers.build(data.get("normalizer"), path)
            self.pre_tokenizer = pre_tokenizers.build(data.get("pre_tokenizer"), path)
            self.post_processor = post_processors.build(data.get("post_processor"), path)
            self.decoder = decoders.build(data.get("decoder"), path)
            self.truncation = batching.read_truncation(data.get("truncation"), path)
            self.padding = batching.read_padding(data.get("padding"), path)
            # a normalized added token is matched, and decoded, in its normalized spelling
            shown = [
                replace(t, content=normalizer(t.content)) if normalizer and t.normalized else t
                for t in added
            ]
            by_id = {i: t for t, i in model.vocab.items()} | {t.id: t.content for t in shown}
            if set(by_id) != set(range(len(by_id))):
                raise TokenizerError(f"token ids are not 0..{len(by_id) - 1} without gaps")
        #: the parsed tokenizer.json (``to_hf_json`` writes it back)
        self.file_data = copy.deepcopy(data)
        self.itos = [by_id[i] for i in range(len(by_id))]
        self.stoi = dict(model.vocab) | {t.content: t.id for t in added}
        self.special = {t.content: t.id for t in added if t.special}
        self._special_by_id = {i: t for t, i in self.special.items()}
        self.added = added
        self.model = model
        self.unk_token = model.unk_token
        self.normalizer = normalizer
        self._raw_added = [t for t in shown if not t.normalized]
        self._normalized_added = [t for t in shown if t.normalized]
        self._cache: dict[str, list[int]] = {}
        # whether the pre-tokenizer treats the first piece apart (``Metaspace`` with
        # ``prepend_scheme="first"``), so that encoding must find out which piece that is
        self.first_matters = '"first"' in json.dumps(data.get("pre_tokenizer"))
        # a word the model can cut (models.MergeModel.parts) is encoded part by part, each part
        # through the word cache: a file with no pre-tokenizer (Llama 2's) hands the model the
        # whole text as one word, whose parts are its words again
        self._encode_word = self._encode_parts if model.cuts else model.encode_word

    def to_hf_json(self) -> dict[str, Any]:
        """The ``tokenizer.json`` this tokenizer was built from, with its current truncation
        and padding settings."""
        data = copy.deepcopy(self.file_data)
        data["truncation"] = batching.truncation_json(self.truncation)
        pad = self.padding
        pad_token = self.itos[pad.pad_id] if pad and 0 <= pad.pad_id < len(self.itos) else ""
        data["padding"] = batching.padding_json(pad, pad_token)
        return data

    def save(self, path: str | os.PathLike) -> None:
        """Write this tokenizer to ``path`` as a ``tokenizer.json`` (atomically: readers see the
        old file or the new one, never a mix)."""
        text = json.dumps(self.to_hf_json(), ensure_ascii=False, indent=1) + "\n"
        atomic_write(path, lambda f: f.write(text.encode("utf-8")))

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def id_to_token(self, i: int) -> str:
        (i,) = self.check_ids([i])
        return self.itos[i]

    def token_to_id(self, token: str) -> int:
        i = self.stoi.get(token)
        if i is None:
            raise TokenizerError(f"token {token!r} is not in the vocabulary")
        return i

    @property
    def unk_id(self) -> int | None:
        """The id of the unknown token, None if there is none (or it is not in the vocabulary,
        so that text the vocabulary cannot cover is an error)."""
        return None if self.unk_token is None else self.stoi.get(self.unk_token)

    def check_ids(self, ids: Iterable[int]) -> list[int]:
        """Return ids as a list of ints, raising TokenizerError for anything that is not an
        integer id of this vocabulary: ``operator.index`` accepts exactly the integer types
        (``int``, NumPy integers), not ``3.0`` or ``"3"``; ``bool`` is refused by name."""
        n = self.vocab_size
        out = []
        for i in ids:
            try:
                if isinstance(i, bool):
                    raise TypeError
                j = operator.index(i)
            except TypeError:
                raise TokenizerError(f"token id must be an integer, got {i!r}") from None
            if not 0 <= j < n:
                raise TokenizerError(f"token id {j} is out of range for vocab_size {n}")
            out.append(j)
        return out

    def encode(
        self,
        text: str,
        allowed_special: AllowedSpecial = "all",
        add_special_tokens: bool = False,
        pair: str | None = None,
    ) -> list[int]:
        """Text to ids. ``allowed_special`` chooses which *special* added tokens are recognised
        ("all", "none": special strings are then encoded as ordinary text, or a collection of
        them; other added tokens always are); ``add_special_tokens`` applies the
        post-processor's template, to ``text`` alone or to ``text`` and ``pair``. Truncation and
        padding apply when set (padding "to the longest" pads one text only to a multiple, if
        one is set)."""
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
        return self._segments(text, allowed_special, self._encode_ordinary)

    def _segments(self, text: str, allowed_special: AllowedSpecial, encode_part):
        """``segments``, each stretch of text encoded by ``encode_part(text, first)``."""
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
                        ids = encode_part(part, first and start2 == 0)
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
        if isinstance(allowed_special, str):
            raise TokenizerError(
                f"allowed_special must be 'all', 'none' or a collection, got {allowed_special!r}"
            )
        chosen = set(allowed_special)
        unknown = sorted(chosen - set(self.special))
        if unknown:
            known = sorted(self.special)
            raise TokenizerError(f"unknown special tokens: {unknown}; known: {known}")
        return lambda tokens: [t for t in tokens if not t.special or t.content in chosen]

    def words(self, text: str, first: bool) -> list[str]:
        """The words the pre-tokenizer cuts ``text`` (normalized, with no added token) into."""
        return pre_tokenize(self.pre_tokenizer, text, first)

    def _encode_ordinary(self, text: str, first: bool) -> list[int]:
        return self._encode_words(self.words(text, first), self._encode_word)

    def _encode_parts(self, word: str) -> list[int]:
        return self._encode_words(self.model.parts(word), self.model.encode_word)

    def _encode_words(self, words: Iterable[str], encode_word) -> list[int]:
        """Concatenate ``encode_word(w)`` over the pre-tokens, remembering each distinct
        pre-token's ids in ``self._cache`` (text repeats words, so most lookups hit)."""
        cache = self._cache
        ids: list[int] = []
        for word in words:
            try:
                ids.extend(cache[word])
            except KeyError:
                word_ids = encode_word(word)
                if len(word) <= self.CACHE_WORD_CHARS:
                    if len(cache) >= self.CACHE_LIMIT:
                        cache.clear()
                    cache[word] = word_ids
                ids.extend(word_ids)
        return ids

    def encode_sample(
        self, text: str, alpha: float = 0.1, seed: int | None = None, allowed_special="all"
    ) -> list[int]:
        """A Unigram model's sampled segmentation (subword regularization, Kudo 2018): each
        word's segmentation drawn with probability proportional to p(segmentation) ** alpha.

        Small alpha flattens the distribution (more varied splits), large alpha approaches the
        Viterbi segmentation. The same seed gives the same ids.
        """
        sample = self.model.sample
        if sample is None:
            raise TokenizerError("encode_sample needs a Unigram model")
        if alpha <= 0:
            raise TokenizerError(f"alpha must be positive, got {alpha}")
        rng = random.Random(seed)

        def encode_part(part: str, first: bool) -> list[int]:
            return [i for w in self.words(part, first) for i in sample(w, alpha, rng)]

        return [i for *_, ids, _ in self._segments(text, allowed_special, encode_part) for i in ids]

    def encode_batch(
        self,
        texts: Iterable[str],
        allowed_special: AllowedSpecial = "all",
        add_special_tokens: bool = False,
        pairs: Iterable[str] | None = None,
    ) -> list[list[int]]:
        """Encode many texts (each with its pair, if ``pairs`` are given), truncated and padded
        as set; ``encode_batch_with_masks`` gives the masks of such a batch too."""
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

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Ids to text through the file's decoder (tokens joined by spaces if it has none).
        Raises TokenizerError for ids outside the vocabulary."""
        ids = self.check_ids(ids)
        tokens = [
            self.itos[i] for i in ids if not (skip_special_tokens and i in self._special_by_id)
        ]
        if self.decoder is None:
            return " ".join(tokens)
        return "".join(self.decoder(tokens))

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, special={len(self.special)})"
