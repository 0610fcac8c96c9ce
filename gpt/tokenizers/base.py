"""What the tokenizers share: their errors, and the steps the trainers have in common (counting
the training text's pre-tokens, the merge loop of BPE and WordPiece, checking special tokens).
"""

from __future__ import annotations

import heapq
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from tqdm import tqdm


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
    (see ``pre_tokenizers.find_spans``)."""

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
    ``what`` was being read ("BPE model", ...)."""
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


Pair = tuple[int, int]


def chain(steps: list[Callable]) -> Callable:
    """The steps one after another, each given what the one before returned: a ``Sequence``
    of normalizers (and their aligned forms), pre-tokenizers or decoders."""

    def run(x):
        for step in steps:
            x = step(x)
        return x

    return run


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
    """``ids`` with every occurrence of ``pair``, left to right, replaced by ``new_id``. Given a
    list as ``changes``, appends (old, new) for each neighbouring pair an occurrence changes,
    (x, a) -> (x, new_id) and (b, y) -> (new_id, y), so a trainer can update its pair counts.
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


def learn_merges(
    words: list[list[int]],
    freqs: list[int],
    n_new: int,
    merged: Callable[[Pair], tuple[int, bool]],
    likelihood: bool = False,
    verbose: bool = False,
) -> list[Pair]:
    """Merge the best adjacent pair of ``words`` (lists of ids, each weighted by its ``freqs``,
    rewritten in place) into one token, again and again, until ``n_new`` new tokens exist or no
    pair is left; returns the merged pairs in order. ``merged(pair)`` gives the id of the token
    a merge makes and whether it is new (WordPiece spells a+##bc and ab+##c alike). The best
    pair is the most frequent (ties: the smaller pair), or with ``likelihood`` the one with the
    largest count(ab) / (count(a) count(b)). ``verbose`` shows a progress bar (tqdm, stderr).

    It is incremental: pair counts and the words that hold each pair are kept up to date, so a
    merge rewrites only the words that hold its pair, and a heap of (-score, pair) finds the
    next one. Each pair whose score a merge changes (with ``likelihood``: every pair with a or
    b) gets a fresh heap entry, and an entry whose score is no longer its pair's is skipped.
    """
    tok_count: Counter[int] = Counter()
    pairs_of: dict[int, set[Pair]] = {}  # token -> pairs it has been part of (likelihood)
    if likelihood:
        for w, f in zip(words, freqs):
            for t in w:
                tok_count[t] += f
    counts, where = count_pairs(words, freqs)

    def link(p: Pair) -> None:
        if likelihood:
            pairs_of.setdefault(p[0], set()).add(p)
            pairs_of.setdefault(p[1], set()).add(p)

    for p in counts:
        link(p)

    def score(p: Pair) -> float:
        if likelihood:
            return counts[p] / (tok_count[p[0]] * tok_count[p[1]])
        return counts[p]

    heap = [(-score(p), p) for p in counts]
    heapq.heapify(heap)
    merges: list[Pair] = []
    changes: list[tuple[Pair, Pair]] = []
    touched: set[Pair] = set()  # pairs whose score changed in this merge
    n_made = 0
    bar = tqdm(total=n_new, desc="merges", unit="merge", disable=not verbose)
    while n_made < n_new and heap:
        neg, pair = heapq.heappop(heap)
        if counts.get(pair, 0) <= 0 or -neg != score(pair):
            continue  # stale: a fresher entry for this pair is in the heap (or it is gone)
        a, b = pair
        c, new = merged(pair)
        n_made += new
        bar.update(int(new))
        merges.append(pair)
        n_ab = 0  # merges made: fewer than the pair's count where occurrences overlap ("a a a")
        touched.clear()
        for wi in where.pop(pair):
            f = freqs[wi]
            changes.clear()
            n = len(words[wi])
            words[wi] = merge_pair(words[wi], pair, c, changes)
            n_ab += f * (n - len(words[wi]))
            for old, new_pair in changes:  # the neighbouring pairs, e.g. (x, a) -> (x, c)
                counts[old] -= f
                counts[new_pair] = counts.get(new_pair, 0) + f
                touched.update((old, new_pair))
                where.setdefault(new_pair, set()).add(wi)
                link(new_pair)
        del counts[pair]  # every occurrence is merged
        if likelihood:
            tok_count[a] -= n_ab
            tok_count[b] -= n_ab
            tok_count[c] += n_ab
            touched |= pairs_of.get(a, set()) | pairs_of.get(b, set()) | pairs_of.get(c, set())
        for p in touched:
            if counts.get(p, 0) > 0:
                heapq.heappush(heap, (-score(p), p))
    bar.close()
    return merges


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


def special_splitter(tokens: Iterable[str]) -> re.Pattern | None:
    """A regex matching any of the given literal strings, longest first ('<ab>' before '<a>')."""
    tokens = sorted(tokens, key=lambda t: (-len(t), t))
    if not tokens:
        return None
    return re.compile("|".join(re.escape(t) for t in tokens))
