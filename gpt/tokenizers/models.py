"""Models of a ``tokenizer.json`` pipeline: one pre-tokenized word in, token ids out.

``build`` reads the four model types of the ``tokenizers`` library (their options are listed in
docs/tokenizers.md): ``BPE`` (``MergeModel``: ranked merges over characters; byte-level files
put a ``ByteLevel`` pre-tokenizer in front, which spells every byte as a character),
``WordPiece`` (``WordPieceModel``: greedy longest match), ``Unigram`` (``UnigramModel``: the
most probable segmentation, and sampled ones) and ``WordLevel`` (a word is a token or the
unknown token). The trainers write these models into the files they make, so every tokenizer
encodes through this file.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

from .base import Pair, TokenizerError, TokenizerFileError
from .fields import Part, items, pair


class Model:
    """What a pipeline needs of its model: ``vocab`` (token -> id), ``unk_token``,
    ``encode_word(word)`` (its ids) and ``tokens(word)`` (``(id, start, end)`` of each token, in
    UTF-8 bytes of the word, as the library counts them: offsets are made of these), here both
    from ``pieces(word)``, the tokens with their places in characters. Where ``cuts``,
    ``parts(word)`` cuts a word into pieces that encode apart, so the pipeline encodes a long
    word piece by piece through its word cache (``MergeModel._cutter``); ``sample(word, alpha,
    rng)`` is a sampled segmentation (Unigram's)."""

    unk_token: str | None = None
    cuts = False
    sample = None

    def encode_word(self, word: str) -> list[int]:
        return [i for i, _, _ in self.pieces(word)]

    def tokens(self, word: str) -> list[tuple[int, int, int]]:
        pieces = self.pieces(word)
        if word.isascii():
            return pieces
        at = [0, *itertools.accumulate(len(c.encode("utf-8")) for c in word)]
        return [(i, at[a], at[b]) for i, a, b in pieces]


def apply_merges(
    ids: list[int], ranks: dict[Pair, tuple[int, int]], lens: list[int] | None = None
) -> list[int]:
    """BPE encoding of one word: ``ids`` after merging, again and again, the adjacent pair with
    the lowest rank (ties: the leftmost) into its token, until no adjacent pair has a merge.
    ``ranks[(a, b)]`` is ``(rank, id of the merged token)``. ``ids`` is consumed; ``lens``, if
    given, are the symbols' lengths, summed as they merge.

    The pairs wait in a heap by (rank, position) and the word is a doubly linked list: O(n log n)
    for n symbols, not the O(n²) of rescanning the word after every merge. A heap entry whose
    pair has changed since it was pushed (a neighbour was merged into one side) is skipped when
    it comes up; the new pairs a merge makes are pushed then.
    """
    n = len(ids) if ranks else 0  # no merges (a character tokenizer): nothing to link up, for
    # a word as long as a text chunk (a megabyte when no pre-tokenizer splits it)
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
        if lens is not None:
            lens[pos] += lens[right]
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
    if lens is not None:
        lens[:] = [n for i, n in zip(ids, lens) if i is not None]
    return [i for i in ids if i is not None]


def byte_token(b: int) -> str:
    """The token that stands for one byte under byte fallback: 0xE2 -> "<0xE2>"."""
    return f"<0x{b:02X}>"


class MergeModel(Model):
    """BPE over characters, merging as the ``tokenizers`` library does.

    A word starts as its characters (looked up with the prefix/suffix decorations). Then,
    repeatedly, the adjacent pair with the lowest merge rank is merged (ties: the leftmost),
    until no adjacent pair has a merge (``apply_merges``).
    """

    def __init__(
        self,
        vocab: dict[str, int],
        merges: list[tuple[str, str]],
        unk_token: str | None = None,
        prefix: str = "",
        suffix: str = "",
        fuse_unk: bool = False,
        byte_fallback: bool = False,
        ignore_merges: bool = False,
    ):
        self.vocab = vocab
        self.unk_token, self.prefix, self.suffix = unk_token, prefix, suffix
        self.fuse_unk, self.byte_fallback = fuse_unk, byte_fallback
        self.ignore_merges = ignore_merges
        self.ranks: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, (a, b) in enumerate(merges):
            merged = a + (b[len(prefix) :] if prefix and b.startswith(prefix) else b)
            for t in (a, b, merged):
                if t not in vocab:
                    raise TokenizerError(f"merge {rank} ({a!r}, {b!r}) needs {t!r}, not in vocab")
            # a pair listed twice takes its later rank, as GPT-2's encoder (a dict built from the
            # list) and the tokenizers library do
            self.ranks[(vocab[a], vocab[b])] = (rank, vocab[merged])
        self._cut = self._cutter(merges)
        self.cuts = self._cut is not None

    def _cutter(self, merges: list[tuple[str, str]]) -> re.Pattern | None:
        """The pattern that finds the places :meth:`parts` cuts a word at, or None where the
        model cannot be cut (docs/tokenizers.md, "Files", tells why this is exact).

        Only a merge joins two symbols, so where no merge (a, b) has a ending in x and b
        starting with y, nothing joins across x|y and the two sides encode apart. Take the
        character most tokens start with ("▁", "Ġ") and J, the characters merges put in front
        of it; cut before every token that nothing outside J is put in front of, after every
        character outside J (an unknown one only when it cannot vanish and no merge puts a
        byte token or the unknown token there). Never with a prefix, a suffix or
        ``ignore_merges``.
        """
        if self.prefix or self.suffix or self.ignore_merges:
            return None
        joins = defaultdict(set)  # y -> every x with a merge (a, b), a ending in x, b in y
        for a, b in merges:
            if a and b:
                joins[b[0]].add(a[-1])
        known = {t for t in self.vocab if len(t) == 1}
        starts = Counter(t[0] for t in self.vocab if len(t) > 1 and t[0] in known)
        if not starts:
            return None
        J = joins[max(sorted(starts), key=starts.__getitem__)]  # (sorted: ties go to the first)
        cut_before = [y for y in known if joins[y] <= J]
        tails = None  # the last characters of what an unknown character becomes
        if self.unk_token is not None:
            tails = {self.unk_token[-1]} | ({">"} if self.byte_fallback else set())

        def chars(cs) -> str:
            return "".join(re.escape(c) for c in sorted(cs))

        if tails is not None and not tails & J:  # after any character outside J
            cut_after = f"[^{chars(J)}]" if J else "."
        elif known - J:  # after a token outside J
            cut_after = f"[{chars(known - J)}]"
        else:
            return None
        # the lookahead first: it fails fast at most places
        return re.compile(f"(?=[{chars(cut_before)}])(?<={cut_after})", re.DOTALL)

    def parts(self, word: str) -> list[str]:
        """The word cut where no merge can join its neighbours (see ``_cutter``): encoding each
        part and putting the ids one after another is encoding the word."""
        return [word] if self._cut is None else self._cut.split(word)

    def _unk_id(self, c: str, k: int) -> int:
        if self.unk_token not in self.vocab:
            raise TokenizerError(
                f"character {c!r} (U+{ord(c):04X}) at position {k} is not in the vocabulary, "
                f"nor is the unknown token {self.unk_token!r}"
            )
        return self.vocab[self.unk_token]

    def symbols(self, word: str) -> tuple[list[int], list[int]]:
        """The word's characters as ids, before any merge, and the length of each in UTF-8 bytes
        as the library counts it (a fused run of unknown characters: theirs; a byte token: 1;
        an unknown character dropped: nothing, so the offsets after it shift, as there)."""
        ids: list[int] = []
        lens: list[int] = []
        unk: int | None = None  # a run of unknown characters not yet added (fuse_unk)
        unk_len = 0
        n = len(word)
        for k, c in enumerate(word):
            s = (self.prefix if k > 0 else "") + c + (self.suffix if k == n - 1 else "")
            i = self.vocab.get(s)
            size = len(c.encode("utf-8"))
            if i is not None:
                if unk is not None:
                    ids.append(unk)
                    lens.append(unk_len)
                    unk = None
                ids.append(i)
                lens.append(size)
                continue
            if self.byte_fallback:
                byte_ids = [self.vocab.get(byte_token(b)) for b in s.encode("utf-8")]
                if None not in byte_ids:
                    ids.extend(byte_ids)  # (a pending unknown run is added after, as there)
                    lens.extend([1] * len(byte_ids))
                    continue
            if self.unk_token is not None:
                if unk is not None and self.fuse_unk:
                    unk_len += size
                    continue
                if unk is not None:
                    ids.append(unk)
                    lens.append(unk_len)
                unk, unk_len = self._unk_id(c, k), size
        if unk is not None:
            ids.append(unk)
            lens.append(unk_len)
        return ids, lens

    def encode_word(self, word: str) -> list[int]:
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        ids = None
        if not (self.prefix or self.suffix):  # the common case: every character a token
            ids = [self.vocab.get(c) for c in word]
        if ids is None or None in ids:
            ids = self.symbols(word)[0]
        return apply_merges(ids, self.ranks)

    def tokens(self, word: str) -> list[tuple[int, int, int]]:
        """``(id, start, end)`` of each token of the word, in UTF-8 bytes of the word."""
        if self.ignore_merges and word in self.vocab:
            return [(self.vocab[word], 0, len(word.encode("utf-8")))]
        ids, lens = self.symbols(word)
        ids = apply_merges(ids, self.ranks, lens)
        ends = list(itertools.accumulate(lens))
        return [(i, e - n, e) for i, n, e in zip(ids, lens, ends)]


class WordPieceModel(Model):
    """Greedy longest-match-first within each word: take the longest vocabulary piece that
    starts the word, then the longest ``prefix`` piece ("##ing") that continues it, and so on.
    If at some point no piece matches, or the word has more than ``max_word_chars``
    characters, the whole word becomes the unknown token."""

    def __init__(self, vocab: dict[str, int], unk_token: str, prefix: str, max_word_chars: int):
        if max_word_chars < 0:
            raise TokenizerError(f"max_word_chars must be at least 0, got {max_word_chars}")
        if unk_token not in vocab:
            raise TokenizerError(f"unknown token {unk_token!r} is not in the vocabulary")
        self.vocab, self.unk_token, self.unk = vocab, unk_token, vocab[unk_token]
        self.prefix, self.max_word_chars = prefix, max_word_chars
        self.max_piece_chars = max(len(t) for t in vocab)

    def pieces(self, word: str) -> list[tuple[int, int, int]]:
        whole = [(self.unk, 0, len(word))]
        if len(word) > self.max_word_chars:
            return whole
        vocab, prefix = self.vocab, self.prefix
        out = []
        start, n = 0, len(word)
        while start < n:
            end = min(n, start + self.max_piece_chars)
            while end > start:
                piece = word[start:end] if start == 0 else prefix + word[start:end]
                i = vocab.get(piece)
                if i is not None:
                    out.append((i, start, end))
                    break
                end -= 1
            else:
                return whole
            start = end
        return out


UNK_PENALTY = 10.0  # an unknown character scores this much below the least likely piece


class UnigramModel(Model):
    """The Unigram language model (Kudo, 2018): a word's encoding is its most probable
    segmentation into pieces drawn independently with probabilities p(piece).

    ``pieces`` lists (token, log probability) in id order; those in ``excluded`` (the added
    tokens) take no part in segmenting. With no ``unk_token``, a character no piece is on its
    own is an error, as in the library. Runs of unknown characters are fused into one unknown
    token, or with ``byte_fallback`` become their "<0xXX>" byte pieces if the vocabulary has them.
    """

    def __init__(
        self,
        pieces: list[tuple[str, float]],
        unk_token: str | None,
        byte_fallback: bool = False,
        excluded: Iterable[str] = (),
    ):
        self.vocab = self.stoi = {t: i for i, (t, _) in enumerate(pieces)}
        if len(self.stoi) != len(pieces):
            raise TokenizerError("Unigram vocabulary has duplicate tokens")
        for t, s in pieces:
            if not math.isfinite(s):  # a NaN score would make every comparison false
                raise TokenizerError(f"piece {t!r} has the score {s}; scores must be finite")
        excluded = set(excluded)
        self.unk_token, self.byte_fallback = unk_token, byte_fallback
        self.unk_id = None if unk_token is None else self.stoi[unk_token]
        # pieces that segmentation may use: everything but the added tokens
        self.scores = {t: float(s) for t, s in pieces if t not in excluded}
        self.max_piece_chars = max((len(t) for t in self.scores), default=1)
        self.unk_score = min((s for _, s in pieces), default=0.0) - UNK_PENALTY
        # every prefix of every piece, so a lattice scan can stop once no piece can match
        self._prefixes = {t[:k] for t in self.scores for k in range(1, len(t) + 1)}

    def _edges_from(self, word: str, i: int) -> Iterable[tuple[int, float]]:
        """Pieces starting at position i: (end position, score). An unknown character gives a
        one-character edge with the unknown score, so every word has a path."""
        scores, prefixes = self.scores, self._prefixes
        has_single = False
        for j in range(i + 1, min(len(word), i + self.max_piece_chars) + 1):
            sub = word[i:j]
            if sub not in prefixes:
                break
            s = scores.get(sub)
            if s is not None:
                has_single = has_single or j == i + 1
                yield j, s
        if not has_single:
            if self.unk_token is None:
                c = word[i]
                raise TokenizerError(
                    f"cannot encode the character {c!r} (U+{ord(c):04X}) at position {i} of the "
                    f"word {word!r}: no vocabulary piece is that character alone, and the model "
                    "has no unknown token (unk_id is null)"
                )
            yield i + 1, self.unk_score

    def pieces(self, word: str) -> list[tuple[int, int, int]]:
        return self.segment(word, self.viterbi(word))

    def viterbi(self, word: str) -> list[int]:
        """The cuts of the best segmentation: best[j] is the best score of word[:j]. Ties go to
        the path whose last piece starts earliest (the longer piece), as in SentencePiece."""
        n = len(word)
        best = [-math.inf] * (n + 1)
        back = [0] * (n + 1)
        best[0] = 0.0
        for i in range(n):
            base = best[i]
            for j, s in self._edges_from(word, i):
                if base + s > best[j]:
                    best[j] = base + s
                    back[j] = i
        cuts = [n]
        while n > 0:
            n = back[n]
            cuts.append(n)
        return cuts[::-1]

    def sample(self, word: str, alpha: float, rng: random.Random) -> list[int]:
        """A segmentation drawn with probability proportional to p(segmentation) ** alpha:
        forward sums of the sharpened (or flattened) probabilities, then a random walk
        backwards from the end of the word."""
        n = len(word)
        # forward: logf[j] = log of the summed (sharpened) probability of all paths to j
        logf = [-math.inf] * (n + 1)
        logf[0] = 0.0
        into: list[list[tuple[int, float]]] = [[] for _ in range(n + 1)]
        for i in range(n):
            for j, s in self._edges_from(word, i):
                into[j].append((i, alpha * s))
        for j in range(1, n + 1):
            xs = [logf[i] + s for i, s in into[j]]
            m = max(xs)
            logf[j] = m if m == -math.inf else m + math.log(sum(math.exp(x - m) for x in xs))
        # backward: from the end, pick the previous cut in proportion to its path mass
        cuts = [n]
        j = n
        while j > 0:
            options = into[j]
            weights = [math.exp(logf[i] + s - logf[j]) for i, s in options]
            j = rng.choices([i for i, _ in options], weights)[0]
            cuts.append(j)
        return [i for i, _, _ in self.segment(word, cuts[::-1])]

    def segment(self, word: str, cuts: list[int]) -> list[tuple[int, int, int]]:
        """``(id, start, end)`` of the pieces between cuts, in characters; a run of unknown
        pieces is fused into the unknown token or, with ``byte_fallback``, its bytes (each
        with the run's place, as the library gives them)."""
        stoi, unk_id = self.stoi, self.unk_id
        out: list[tuple[int, int, int]] = []
        run = None  # (start, end) of the unknown pieces not yet added
        for i, j in zip(cuts, cuts[1:]):
            t = word[i:j]
            k = stoi.get(t) if t in self.scores else None
            if k is None or k == unk_id:  # the unknown token's own text, in a file that does
                run = (i if run is None else run[0], j)  # not make it special, fuses too
                continue
            if run:
                out += [(u, *run) for u in self._unknown_ids(word[run[0] : run[1]])]
                run = None
            out.append((k, i, j))
        if run:
            out += [(u, *run) for u in self._unknown_ids(word[run[0] : run[1]])]
        return out

    def _unknown_ids(self, text: str) -> list[int]:
        if text == self.unk_token:  # its own text (the file does not make it special)
            return [self.stoi[text]]
        if self.byte_fallback:
            byte_ids = [self.stoi.get(byte_token(b)) for b in text.encode("utf-8")]
            if None not in byte_ids:
                return byte_ids
        return [self.stoi[self.unk_token]]


class WordLevelModel(Model):
    """Each word is a token, or the unknown token."""

    def __init__(self, vocab: dict[str, int], unk_token: str | None):
        self.vocab, self.unk_token = vocab, unk_token

    def pieces(self, word: str) -> list[tuple[int, int, int]]:
        i = self.vocab.get(word)
        if i is None:
            if self.unk_token not in self.vocab:
                raise TokenizerError(f"{word!r} is not in the vocabulary and there is no unk")
            i = self.vocab[self.unk_token]
        return [(i, 0, len(word))]


def merge_pair_of(m: Any, path, where: str) -> tuple[str, str]:
    """A merge as a file stores it: "a b" (older files) or ["a", "b"]."""
    if isinstance(m, str):
        parts = m.split(" ")
        if len(parts) != 2:
            raise TokenizerFileError(path, f'field {where} must be two tokens "a b", got {m!r}')
        return parts[0], parts[1]
    return pair(m, "str,str", path, where)


def build(
    spec: dict[str, Any], added: dict[str, int], path: str | os.PathLike, where: str = "model"
) -> Model:
    """The model a file describes; ``added`` (the added tokens) are excluded from segmenting."""
    p = Part(spec, path, where)
    kind = p("type", "str", None) or _guess_type(spec)
    if kind in ("BPE", "WordPiece", "WordLevel"):
        vocab = dict(items(p("vocab", "object"), "int", path, f"{where}.vocab"))
    if kind == "BPE":
        dropout = p("dropout", "number|null", None)
        if dropout:
            raise p.error(f"{where}: BPE dropout={dropout} is random; only null or 0 is supported")
        merges = [
            merge_pair_of(m, path, f"{where}.merges[{k}]")
            for k, m in enumerate(p("merges", "list"))
        ]
        return MergeModel(
            vocab,
            merges,
            p("unk_token", "str|null", None),
            p("continuing_subword_prefix", "str|null", None) or "",
            p("end_of_word_suffix", "str|null", None) or "",
            p("fuse_unk", "bool", False),
            p("byte_fallback", "bool", False),
            p("ignore_merges", "bool", False),
        )
    if kind == "WordPiece":
        unk, prefix = p("unk_token", "str", "[UNK]"), p("continuing_subword_prefix", "str", "##")
        return WordPieceModel(vocab, unk, prefix, p("max_input_chars_per_word", "int", 100))
    if kind == "Unigram":
        pieces = [
            pair(piece, "str,number", path, f"{where}.vocab[{k}]")
            for k, piece in enumerate(p("vocab", "list"))
        ]
        unk_id = p("unk_id", "int|null", None)
        if unk_id is not None and not 0 <= unk_id < len(pieces):
            raise p.error(f"field {where}.unk_id {unk_id} is out of range")
        # null: no unknown token; text with a character no piece covers alone is then refused
        # when it is encoded, not when the file is read (as the library does). The added tokens,
        # which are cut out of the text before the model runs, take no part in segmenting; the
        # unknown token does unless the file adds it (as the library does it)
        unk = None if unk_id is None else pieces[unk_id][0]
        return UnigramModel(pieces, unk, p("byte_fallback", "bool", False), set(added))
    if kind == "WordLevel":
        return WordLevelModel(vocab, p("unk_token", "str|null", None))
    raise p.error(
        f"{where}: unsupported model type {kind!r} (supported: BPE, WordPiece, Unigram, WordLevel)"
    )


def _guess_type(spec: dict) -> str | None:
    if "merges" in spec:
        return "BPE"
    if isinstance(spec.get("vocab"), list):
        return "Unigram"
    if "continuing_subword_prefix" in spec and "max_input_chars_per_word" in spec:
        return "WordPiece"
    return None
