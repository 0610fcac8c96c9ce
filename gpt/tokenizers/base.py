"""The interface every tokenizer in this package shares.

A tokenizer turns text into a list of integer ids and back. The four algorithms here (characters,
byte-level BPE, WordPiece, Unigram) differ only in how they cut ordinary text into pieces; what
they share lives in this file:

* special tokens such as ``<|endoftext|>``, which are matched literally and never split,
* lookups between ids and token strings,
* batch encoding,
* validation of ids before decoding,
* saving and loading (the formats themselves live in ``files.py`` and ``hf_format.py``).

A subclass implements ``_encode_ordinary`` (text that holds no special token) and
``_decode_pieces`` (ids of ordinary tokens back to text), plus ``train``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import ClassVar, Literal


class TokenizerError(ValueError):
    """Raised for bad input to a tokenizer: bad vocabulary sizes, unknown tokens, bad ids."""


class TokenizerFileError(TokenizerError):
    """Raised when a tokenizer file is missing, corrupt, or in a form this package cannot read."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


AllowedSpecial = Literal["all", "none"] | Iterable[str]


def iter_texts(text_or_iterator: str | Iterable[str]) -> Iterable[str]:
    """Training accepts one string or any iterable of strings; this yields strings either way."""
    if isinstance(text_or_iterator, str):
        yield text_or_iterator
        return
    for chunk in text_or_iterator:
        if not isinstance(chunk, str):
            raise TokenizerError(f"training text must be str, got {type(chunk).__name__}")
        yield chunk


def check_special_tokens(special_tokens: Iterable[str]) -> list[str]:
    """Validate a list of special tokens: non-empty strings, no duplicates."""
    if isinstance(special_tokens, str):
        raise TokenizerError("special_tokens must be a list of strings, not one string")
    tokens = list(special_tokens)
    for tok in tokens:
        if not isinstance(tok, str) or not tok:
            raise TokenizerError(f"special tokens must be non-empty strings, got {tok!r}")
    if len(set(tokens)) != len(tokens):
        raise TokenizerError(f"special tokens contain duplicates: {tokens}")
    return tokens


class Tokenizer:
    """Base class. Subclasses fill ``self.special`` (token -> id) and implement the hooks."""

    kind: ClassVar[str] = "base"
    #: the token that stands for text the vocabulary cannot cover, or None if there is none
    unk_token: str | None = None

    def __init__(self, special_tokens: dict[str, int] | None = None):
        self.special: dict[str, int] = dict(special_tokens or {})
        self._special_by_id = {i: t for t, i in self.special.items()}
        self._special_re = special_splitter(self.special)

    # ----- what subclasses provide -------------------------------------------------------------

    @classmethod
    def train(
        cls,
        text_or_iterator: str | Iterable[str],
        vocab_size: int,
        special_tokens: Sequence[str] = (),
    ) -> Tokenizer:
        raise NotImplementedError

    def _encode_ordinary(self, text: str, first: bool) -> list[int]:
        """Encode text that contains no special token. ``first``: is this the start of the input?"""
        raise NotImplementedError

    def _decode_pieces(self, ids: list[int]) -> str:
        """Decode ids of ordinary (non-special) tokens."""
        raise NotImplementedError

    # Lookups for tokenizers that keep their vocabulary as a table: ``itos`` (id -> token
    # string) and ``stoi`` (token -> id). Byte-level BPE keeps bytes and overrides these.
    itos: list[str]
    stoi: dict[str, int]

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def id_to_token(self, i: int) -> str:
        (i,) = self.check_ids([i])
        return self.itos[i]

    def token_to_id(self, token: str) -> int:
        i = self.stoi.get(token, self.special.get(token))
        if i is None:
            raise TokenizerError(f"token {token!r} is not in the vocabulary")
        return i

    # Distinct pre-tokens whose encoding is remembered before the cache is cleared.
    CACHE_LIMIT: ClassVar[int] = 1 << 18

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
                if len(cache) >= self.CACHE_LIMIT:
                    cache.clear()
                cache[word] = word_ids
                ids.extend(word_ids)
        return ids

    # ----- the shared interface ----------------------------------------------------------------

    def encode(self, text: str, allowed_special: AllowedSpecial = "all") -> list[int]:
        """Text to ids. Special tokens in the text become their ids and are never split.

        ``allowed_special`` chooses which special tokens are recognised: "all", "none" (special
        strings are then encoded as ordinary text), or a collection of them.
        """
        if not isinstance(text, str):
            raise TokenizerError(f"encode expects str, got {type(text).__name__}")
        ids: list[int] = []
        for chunk, special, first in self.split_special(text, allowed_special):
            if special:
                ids.append(self.special[chunk])
            else:
                ids.extend(self._encode_ordinary(chunk, first))
        return ids

    def split_special(
        self, text: str, allowed_special: AllowedSpecial = "all"
    ) -> Iterable[tuple[str, bool, bool]]:
        """Cut text at special tokens: yields (chunk, is_special, starts_the_text)."""
        pattern = self._special_pattern(allowed_special)
        if pattern is None:
            if text:
                yield text, False, True
            return
        start = 0
        for m in pattern.finditer(text):
            if m.start() > start:
                yield text[start : m.start()], False, start == 0
            yield m.group(), True, m.start() == 0
            start = m.end()
        if start < len(text):
            yield text[start:], False, start == 0

    def encode_batch(
        self, texts: Iterable[str], allowed_special: AllowedSpecial = "all"
    ) -> list[list[int]]:
        """Encode many texts (one after another: the per-word caches make repeats cheap)."""
        return [self.encode(t, allowed_special) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        """Ids to text. Raises TokenizerError for ids outside the vocabulary."""
        ids = self.check_ids(ids)
        if not self.special:
            return self._decode_pieces(ids)
        out: list[str] = []
        run: list[int] = []
        for i in ids:
            if i in self._special_by_id:
                if run:
                    out.append(self._decode_pieces(run))
                    run = []
                out.append(self._special_by_id[i])
            else:
                run.append(i)
        if run:
            out.append(self._decode_pieces(run))
        return "".join(out)

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def check_ids(self, ids: Iterable[int]) -> list[int]:
        """Return ids as a list of ints, raising TokenizerError for anything out of range."""
        n = self.vocab_size
        out = []
        for i in ids:
            try:
                j = int(i)
            except (TypeError, ValueError):
                raise TokenizerError(f"token id must be an integer, got {i!r}") from None
            if j != i or not 0 <= j < n:
                raise TokenizerError(f"token id {i!r} is out of range for vocab_size {n}")
            out.append(j)
        return out

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self.special)

    @property
    def unk_id(self) -> int | None:
        return None if self.unk_token is None else self.token_to_id(self.unk_token)

    def _special_pattern(self, allowed_special: AllowedSpecial) -> re.Pattern | None:
        if allowed_special == "all":
            return self._special_re
        if allowed_special == "none":
            return None
        if isinstance(allowed_special, str):
            raise TokenizerError(
                f"allowed_special must be 'all', 'none' or a collection, got {allowed_special!r}"
            )
        chosen = set(allowed_special)
        unknown = sorted(chosen - set(self.special))
        if unknown:
            known = sorted(self.special)
            raise TokenizerError(f"unknown special tokens: {unknown}; known: {known}")
        return special_splitter(chosen)

    # ----- files -------------------------------------------------------------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write this tokenizer to ``path`` in this package's JSON format (atomically)."""
        from .files import save

        save(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """Read a tokenizer file (ours, Hugging Face tokenizer.json, or GPT-2 vocab.json)."""
        from .files import load

        tok = load(path)
        if cls is not Tokenizer and not isinstance(tok, cls):
            raise TokenizerFileError(path, f"holds a {type(tok).__name__}, not a {cls.__name__}")
        return tok

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size}, special={len(self.special)})"


def special_splitter(tokens: Iterable[str]) -> re.Pattern | None:
    """A regex matching any of the given literal strings, longest first ('<ab>' before '<a>')."""
    tokens = sorted(tokens, key=lambda t: (-len(t), t))
    if not tokens:
        return None
    return re.compile("|".join(re.escape(t) for t in tokens))
