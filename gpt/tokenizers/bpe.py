"""Byte-level Byte Pair Encoding, as used by GPT-2.

Byte Pair Encoding (Gage, 1994; applied to subwords by Sennrich et al., 2016) starts from a base
alphabet and repeatedly *merges* the most frequent adjacent pair of tokens into a new token,
recording each merge. Encoding replays the merges, lowest rank (earliest learned) first.

GPT-2 (Radford et al., 2019) made two choices that this class follows:

* The base alphabet is the 256 byte values of the UTF-8 encoding. Any string is a sequence of
  bytes, so there is never an unknown token, and decoding is exact.
* Text is first cut into pre-tokens by a regular expression (see ``pretokenize.py``), and merges
  happen only inside a pre-token, so tokens do not span "dog" and "." at once.

Training, done naively, recounts all pairs after every merge: O(merges x corpus). Here it is
incremental. Pre-tokens are counted first, so the work is over *distinct* words with a frequency
each. We keep

* ``counts``: pair -> number of occurrences (weighted by word frequency),
* ``where``: pair -> indices of the words that contain it (a superset; stale entries are
  harmless because a merge rescans only those words),
* a heap of (-count, pair) to find the most frequent pair. Entries go stale as counts change;
  when the top entry's count is out of date it is pushed back with the current count. This is
  sound because a merge only ever *lowers* the count of an existing pair: every pair it creates
  contains the new token, and those new pairs are pushed fresh.

A merge then rewrites only the words that contain the pair and adjusts the counts of the pairs
around each occurrence. Ties between equally frequent pairs go to the smaller (id, id) pair, so
training is deterministic.

Encoding caches the token ids of each distinct pre-token; natural text repeats its words so
often that most pre-tokens are cache hits.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from tqdm import tqdm

from .base import (
    Pair,
    Tokenizer,
    TokenizerError,
    apply_merges,
    check_special_tokens,
    count_pairs,
    count_words,
    merge_pair,
)
from .pretokenize import GPT2_PATTERN, bytes_to_text, splitter, text_to_bytes


class ByteBPE(Tokenizer):
    """Byte-level BPE tokenizer.

    ``vocab`` maps each ordinary token id to its bytes; ``merges`` lists merged pairs of ids in
    the order they were learned (rank 0 first), and each merge's result must be in ``vocab``.
    """

    kind = "byte_bpe"

    def __init__(
        self,
        vocab: dict[int, bytes],
        merges: Sequence[Pair],
        special_tokens: dict[str, int] | None = None,
        pattern: str = GPT2_PATTERN,
        add_prefix_space: bool = False,
        ignore_merges: bool = False,
    ):
        super().__init__(special_tokens)
        self.vocab = dict(vocab)
        self.merges = [tuple(m) for m in merges]
        self.pattern = pattern
        self.add_prefix_space = add_prefix_space
        self.ignore_merges = ignore_merges
        self._split = splitter(pattern)
        self._check_ids_layout()
        self.bytes_to_id = {b: i for i, b in self.vocab.items()}
        # byte value -> id of its one-byte token (None if the vocabulary lacks it)
        self.byte_ids = [self.bytes_to_id.get(bytes([b])) for b in range(256)]
        self.ranks: dict[Pair, tuple[int, int]] = {}
        for rank, (a, b) in enumerate(self.merges):
            if a not in self.vocab or b not in self.vocab:
                raise TokenizerError(f"merge {rank} ({a}, {b}) uses an id missing from vocab")
            merged = self.bytes_to_id.get(self.vocab[a] + self.vocab[b])
            if merged is None:
                raise TokenizerError(f"merge {rank} ({a}, {b}) produces a token not in vocab")
            # A pair listed twice takes its later rank, as GPT-2's encoder (a dict built
            # from the list) and the tokenizers library do.
            self.ranks[(a, b)] = (rank, merged)
        self._cache: dict[str, list[int]] = {}

    def _check_ids_layout(self) -> None:
        ids = set(self.vocab) | set(self.special.values())
        if len(ids) != len(self.vocab) + len(self.special):
            raise TokenizerError("a special token shares its id with an ordinary token")
        if ids != set(range(len(ids))):
            raise TokenizerError(f"token ids are not 0..{len(ids) - 1} without gaps")
        if len(set(self.vocab.values())) != len(self.vocab):
            raise TokenizerError("two token ids have the same bytes")

    # ----- training ----------------------------------------------------------------------------

    @classmethod
    def train(
        cls,
        text_or_iterator: str | Iterable[str],
        vocab_size: int,
        special_tokens: Sequence[str] = (),
        pattern: str = GPT2_PATTERN,
        verbose: bool = False,
    ) -> ByteBPE:
        """Learn ``vocab_size - 256 - len(special_tokens)`` merges from the text.

        Ids 0..255 are the bytes, then the merges in order, then the special tokens. Special
        tokens appearing in the training text are cut out and not merged into anything.
        ``verbose`` shows a progress bar of the merges (tqdm, on stderr).
        """
        specials = check_special_tokens(special_tokens)
        n_merges = vocab_size - 256 - len(specials)
        if n_merges < 0:
            raise TokenizerError(
                f"vocab_size {vocab_size} is below the base alphabet: 256 bytes + "
                f"{len(specials)} special tokens = {256 + len(specials)}"
            )
        split = splitter(pattern)
        word_counts = count_words(text_or_iterator, specials, lambda part, _first: split(part))
        words = [list(w.encode("utf-8")) for w in word_counts]
        freqs = list(word_counts.values())
        merges = _learn_merges(words, freqs, n_merges, verbose)
        if len(merges) < n_merges:
            raise TokenizerError(
                f"vocab_size {vocab_size} is more than the text supports: it has only "
                f"{len(merges)} distinct mergeable pairs, so at most "
                f"{256 + len(merges) + len(specials)} tokens"
            )
        vocab = {i: bytes([i]) for i in range(256)}
        for k, (a, b) in enumerate(merges):
            vocab[256 + k] = vocab[a] + vocab[b]
        n = len(vocab)
        return cls(vocab, merges, {t: n + k for k, t in enumerate(specials)}, pattern)

    # ----- encoding ----------------------------------------------------------------------------

    def _encode_ordinary(self, text: str, first: bool) -> list[int]:
        if self.add_prefix_space and not text.startswith(" "):
            text = " " + text
        return self._encode_words(self._split(text), self._encode_word)

    def _encode_word(self, word: str) -> list[int]:
        """Bytes of one pre-token, then its merges by rank until none applies."""
        if self.ignore_merges:
            whole = self.bytes_to_id.get(word.encode("utf-8"))
            if whole is not None:
                return [whole]
        byte_ids = self.byte_ids
        # a byte without a one-byte token (possible only in foreign files) is dropped
        ids = [i for i in (byte_ids[b] for b in word.encode("utf-8")) if i is not None]
        return apply_merges(ids, self.ranks)

    # ----- decoding and lookups ----------------------------------------------------------------

    def _decode_pieces(self, ids: list[int]) -> str:
        vocab = self.vocab
        return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The raw bytes behind the ids (special tokens as their UTF-8)."""
        return b"".join(self._bytes_of(i) for i in self.check_ids(ids))

    @property
    def vocab_size(self) -> int:
        return len(self.vocab) + len(self.special)

    def token_bytes(self, i: int) -> bytes:
        (i,) = self.check_ids([i])
        return self._bytes_of(i)

    def _bytes_of(self, i: int) -> bytes:
        """The bytes of a checked id: a special token's UTF-8, or the vocabulary entry."""
        special = self._special_by_id.get(i)
        return self.vocab[i] if special is None else special.encode("utf-8")

    def id_to_token(self, i: int) -> str:
        """The token's printable spelling: specials as-is, others in GPT-2's byte alphabet."""
        (i,) = self.check_ids([i])
        if i in self._special_by_id:
            return self._special_by_id[i]
        return bytes_to_text(self.vocab[i])

    def token_to_id(self, token: str) -> int:
        if token in self.special:
            return self.special[token]
        try:
            i = self.bytes_to_id.get(text_to_bytes(token))
        except KeyError:
            i = None
        if i is None:
            raise TokenizerError(f"token {token!r} is not in the vocabulary")
        return i


def _learn_merges(
    words: list[list[int]], freqs: list[int], n_merges: int, verbose: bool = False
) -> list[Pair]:
    """The incremental BPE training loop described in the module docstring.

    ``words`` are rewritten in place. Returns the merged pairs in order; new token ids are
    256, 257, ... in merge order.
    """
    counts, where = count_pairs(words, freqs)
    heap = [(-c, p) for p, c in counts.items()]
    heapq.heapify(heap)

    merges: list[Pair] = []
    changes: list[tuple[Pair, Pair]] = []
    new_id = 256
    bar = tqdm(total=n_merges, desc="BPE merges", unit="merge", disable=not verbose)
    while len(merges) < n_merges and heap:
        neg, pair = heapq.heappop(heap)
        current = counts.get(pair, 0)
        if current <= 0:
            continue
        if -neg != current:  # stale entry: counts only fall, so re-queue at the true count
            heapq.heappush(heap, (-current, pair))
            continue
        merges.append(pair)
        bar.update(1)
        touched: set[Pair] = set()
        for wi in where.pop(pair):
            f = freqs[wi]
            changes.clear()
            words[wi] = merge_pair(words[wi], pair, new_id, changes)
            for old, new in changes:  # the neighbouring pairs, e.g. (x, a) -> (x, new_id)
                counts[old] -= f
                counts[new] = counts.get(new, 0) + f
                touched.add(new)
                where.setdefault(new, set()).add(wi)
        del counts[pair]  # every occurrence is merged
        for p in touched:
            c = counts[p]
            if c > 0:
                heapq.heappush(heap, (-c, p))
        new_id += 1
    bar.close()
    return merges
