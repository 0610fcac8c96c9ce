"""The interface every tokenizer in this package shares.

A tokenizer turns text into a list of integer ids and back. The four algorithms here (characters,
byte-level BPE, WordPiece, Unigram) differ only in how they cut ordinary text into pieces; what
they share lives in this file:

* special tokens such as ``<|endoftext|>``, which are matched literally and never split,
* lookups between ids and token strings,
* batch encoding,
* validation of ids before decoding,
* saving and loading (the formats themselves live in ``files.py`` and ``hf_format.py``),
* the steps the trainers have in common: counting the pre-tokens of the training text
  (``count_words``), and for the two that merge pairs, BPE and WordPiece, counting adjacent pairs
  (``count_pairs``) and replacing a pair by its new token (``merge_pair``),
* BPE encoding of a word by its ranked merges (``apply_merges``: ``ByteBPE`` and the BPE
  model of ``tokenizer.json`` files).

A subclass implements ``_encode_ordinary`` (text that holds no special token) and
``_decode_pieces`` (ids of ordinary tokens back to text), plus ``train``.
"""

from __future__ import annotations

import heapq
import operator
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import ClassVar, Literal

from .spelling import Spelling


class TokenizerError(ValueError):
    """Raised for bad input to a tokenizer: bad vocabulary sizes, unknown tokens, bad ids."""


class TokenizerFileError(TokenizerError):
    """Raised when a tokenizer file is missing, corrupt, or in a form this package cannot read."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class PatternTimeoutError(TokenizerError):
    """A regex pattern from a tokenizer file (or given by the caller) ran past its time limit
    (see ``pretokenize.find_spans``)."""

    def __init__(self, pattern: str, n_chars: int, limit: float):
        self.pattern, self.n_chars, self.limit = pattern, n_chars, limit
        super().__init__(
            f"pattern {pattern!r} ran past its time limit of {limit:.2f} s on {n_chars} "
            "characters (catastrophic backtracking?); fix the pattern or do not use this file"
        )


@contextmanager
def file_errors(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Turn the errors of building a tokenizer from a file's parsed contents (a rejected value,
    a missing field, a value of the wrong type) into a TokenizerFileError naming the file and
    ``what`` was being read ("bpe tokenizer", "BPE model", ...), so that both readers,
    ``files.py`` (our format) and ``hf_format.py`` (Hugging Face's), report them alike."""
    try:
        yield
    except TokenizerFileError:
        raise
    except TokenizerError as e:
        raise TokenizerFileError(path, f"invalid {what}: {e}") from None
    except KeyError as e:
        raise TokenizerFileError(path, f"{what} is missing the field {e}") from None
    except (TypeError, ValueError, AttributeError) as e:
        raise TokenizerFileError(path, f"malformed {what}: {e}") from None


AllowedSpecial = Literal["all", "none"] | Iterable[str]
Pair = tuple[int, int]


def iter_texts(text_or_iterator: str | Iterable[str]) -> Iterable[str]:
    """Training accepts one string or any iterable of strings; this yields strings either way."""
    if isinstance(text_or_iterator, str):
        yield text_or_iterator
        return
    for chunk in text_or_iterator:
        if not isinstance(chunk, str):
            raise TokenizerError(f"training text must be str, got {type(chunk).__name__}")
        yield chunk


def count_words(
    text_or_iterator: str | Iterable[str],
    special_tokens: Iterable[str],
    split: Callable[[str, bool], Iterable[str]],
) -> Counter[str]:
    """How often each pre-token occurs in the training text, in order of first appearance.

    Each text is cut at the special tokens, which are dropped (so no trainer merges them into
    anything), and ``split(part, first)`` cuts each remaining part into pre-tokens; ``first``
    says whether the part begins its text. Raises TokenizerError if nothing is left to count.
    """
    special_re = special_splitter(special_tokens)
    counts: Counter[str] = Counter()
    for chunk in iter_texts(text_or_iterator):
        parts = special_re.split(chunk) if special_re else [chunk]
        for k, part in enumerate(parts):
            counts.update(split(part, k == 0))
    if not counts:
        raise TokenizerError("cannot train on empty text")
    return counts


def count_pairs(
    words: list[list[int]], freqs: list[int]
) -> tuple[dict[Pair, int], dict[Pair, set[int]]]:
    """Count adjacent pairs of ids over ``words``, each word weighted by its frequency.

    Returns (pair -> count, pair -> indices of the words that hold it): the state that the
    incremental merge trainers (BPE, WordPiece) start from and then keep up to date.
    """
    counts: dict[Pair, int] = {}
    where: dict[Pair, set[int]] = {}
    for wi, (w, f) in enumerate(zip(words, freqs)):
        for pair in zip(w, w[1:]):
            counts[pair] = counts.get(pair, 0) + f
            where.setdefault(pair, set()).add(wi)
    return counts, where


def merge_pair(
    ids: list[int], pair: Pair, new_id: int, changes: list[tuple[Pair, Pair]] | None = None
) -> list[int]:
    """``ids`` with every occurrence of ``pair``, left to right, replaced by ``new_id``.

    This is the one step that BPE encoding and both merge trainers share. Trainers pass a list
    as ``changes`` to learn which neighbouring pairs each occurrence turned into new ones, so
    they can update their pair counts: (old, new) is appended for (x, a) -> (x, new_id) on the
    left and (b, y) -> (new_id, y) on the right, where there is a neighbour. In "a b a b" the
    second occurrence's left neighbour is the first one's ``new_id``.
    """
    a, b = pair
    out: list[int] = []
    i, n = 0, len(ids)
    while i < n:
        if ids[i] == a and i + 1 < n and ids[i + 1] == b:
            if changes is not None:
                if out:
                    changes.append(((out[-1], a), (out[-1], new_id)))
                if i + 2 < n:
                    changes.append(((b, ids[i + 2]), (new_id, ids[i + 2])))
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def apply_merges(ids: list[int], ranks: dict[Pair, tuple[int, int]]) -> list[int]:
    """BPE encoding of one word: ``ids`` after merging, again and again, the adjacent pair with
    the lowest rank (ties: the leftmost) into its token, until no adjacent pair has a merge.
    ``ranks[(a, b)]`` is ``(rank, id of the merged token)``. ``ids`` is consumed.

    A merge may make a pair that ranks below pairs already waiting, so the merges do not run in
    the list's order. The pairs wait in a heap by (rank, position) and the word is a doubly
    linked list, so a word of n symbols takes O(n log n), not the O(n²) of rescanning the word
    for its best pair after every merge (a 16,000-letter word: 0.55 s that way). A heap entry
    whose pair has changed since it was pushed (a neighbour was merged into one side) is
    skipped when it comes up; the new pairs a merge makes are pushed then.
    """
    n = len(ids)
    nxt = list(range(1, n + 1))  # the next live position; a merged-away one gets ids[pos] = None
    prv = list(range(-1, n - 1))
    heap = []
    for pos in range(n - 1):
        r = ranks.get((ids[pos], ids[pos + 1]))
        if r is not None:
            heap.append((r[0], pos, r[1]))
    heapq.heapify(heap)
    while heap:
        _, pos, new_id = heapq.heappop(heap)
        right = nxt[pos]
        if ids[pos] is None or right >= n:
            continue
        current = ranks.get((ids[pos], ids[right]))
        if current is None or current[1] != new_id:
            continue  # stale: one side was merged since this entry was pushed
        ids[pos], ids[right] = new_id, None
        after = nxt[pos] = nxt[right]
        if after < n:
            prv[after] = pos
            r = ranks.get((new_id, ids[after]))
            if r is not None:
                heapq.heappush(heap, (r[0], pos, r[1]))
        left = prv[pos]
        if left >= 0:
            r = ranks.get((ids[left], new_id))
            if r is not None:
                heapq.heappush(heap, (r[0], left, r[1]))
    return [i for i in ids if i is not None]


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
    #: the file this tokenizer was loaded from (set by ``files.load``), named in its errors
    source: str | None = None
    #: how a tokenizer.json it was read from spells tokens (``offsets.py`` asks)
    spelling: Spelling = Spelling()
    #: the token that stands for text the vocabulary cannot cover, or None if there is none
    unk_token: str | None = None

    def __init__(self, special_tokens: dict[str, int] | None = None):
        self.special: dict[str, int] = dict(special_tokens or {})
        self._special_by_id = {i: t for t, i in self.special.items()}
        self._special_re = special_splitter(self.special)

    def _init_table(
        self, tokens: list[str], special_tokens: Sequence[str], unk_token: str | None
    ) -> None:
        """``__init__`` for a vocabulary kept as a table: ``tokens`` lists every token in id order,
        the special tokens and ``unk_token`` among them (WordPiece and Unigram files store it so;
        ``unk_token`` None: there is none, as a Unigram file with ``"unk_id": null`` has it).
        Checks that no token is listed twice and that those tokens are there."""
        index = {t: i for i, t in enumerate(tokens)}
        if len(index) != len(tokens):
            raise TokenizerError(f"{type(self).__name__} vocabulary has duplicate tokens")
        missing = [t for t in special_tokens if t not in index]
        if missing:
            raise TokenizerError(f"special tokens {missing} are not in the vocabulary")
        if unk_token is not None and unk_token not in index:
            raise TokenizerError(f"unknown token {unk_token!r} is not in the vocabulary")
        Tokenizer.__init__(self, {t: index[t] for t in special_tokens})
        self.itos = tokens
        self.stoi = index
        self.unk_token = unk_token

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

    # Distinct pre-tokens whose encoding is remembered before the cache is cleared, and the
    # longest one remembered: a whole text handed over as one word (a file with no
    # pre-tokenizer) is not kept, its parts are (``Pipeline``).
    CACHE_LIMIT: ClassVar[int] = 1 << 18
    CACHE_WORD_CHARS: ClassVar[int] = 256

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

    # ----- the shared interface ----------------------------------------------------------------

    def encode(self, text: str, allowed_special: AllowedSpecial = "all") -> list[int]:
        """Text to ids. Special tokens in the text become their ids and are never split.

        ``allowed_special`` chooses which special tokens are recognised: "all", "none" (special
        strings are then encoded as ordinary text), or a collection of them.
        """
        return [i for _, _, ids, _ in self.segments(text, allowed_special) for i in ids]

    def segments(
        self, text: str, allowed_special: AllowedSpecial = "all"
    ) -> list[tuple[int, int, list[int], bool]]:
        """The text cut at its special tokens, as :meth:`encode` cuts it: ``(start, end, ids,
        special)`` for each special token (its id alone) and each stretch of text between them
        (the ids the model gives it), in order. Encoding is these ids one after another; the
        offsets of ``offsets.py`` are looked for in each stretch apart."""
        if not isinstance(text, str):
            raise TokenizerError(f"encode expects str, got {type(text).__name__}")
        out: list[tuple[int, int, list[int], bool]] = []
        pos = 0
        try:
            for chunk, special, first in self.split_special(text, allowed_special):
                ids = [self.special[chunk]] if special else self._encode_ordinary(chunk, first)
                out.append((pos, pos + len(chunk), ids, special))
                pos += len(chunk)
        except PatternTimeoutError as e:
            raise TokenizerError(f"{self.source or type(self).__name__}: {e}") from None
        return out

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
        return "".join(
            part if isinstance(part, str) else self._decode_pieces(part)
            for part in self._split_special_ids(ids)
        )

    def _split_special_ids(self, ids: list[int]) -> Iterable[str | list[int]]:
        """Cut checked ids at special tokens (``split_special`` for ids): yields each special
        token as its string and each run of ordinary ids between them as a non-empty list."""
        special_by_id = self._special_by_id
        run: list[int] = []
        for i in ids:
            if i in special_by_id:
                if run:
                    yield run
                    run = []
                yield special_by_id[i]
            else:
                run.append(i)
        if run:
            yield run

    def decode_batch(self, batch: Iterable[Iterable[int]]) -> list[str]:
        return [self.decode(ids) for ids in batch]

    def check_ids(self, ids: Iterable[int]) -> list[int]:
        """Return ids as a list of ints, raising TokenizerError for anything that is not an
        integer id of this vocabulary.

        An id must be of an integer type (``int``, a NumPy integer, an element of an int array):
        ``operator.index`` accepts exactly those. ``int()`` would also take ``3.0``, ``"3"`` and
        ``True``, which are mistakes (a float tensor's values, a string from a file, a flag), not
        ids. ``bool`` is an ``int`` subclass, so it is refused by name.
        """
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
