"""Unigram language-model tokenization, as in SentencePiece (Kudo, 2018).

A word is a sequence of pieces drawn independently with probabilities p(piece); its
segmentations are the paths of a *lattice* whose nodes are the positions 0..n between characters
and whose edges i -> j are the vocabulary pieces word[i:j], weighted by log p(piece). Encoding
is the best path (Viterbi, ``models.UnigramModel``); the total probability of a word is the sum
over paths (forward algorithm), and the expected uses of each piece come from forward and
backward sums: E[edge] = exp(alpha[i] + log p + beta[j] - log Z).

Training goes top-down: seed a large vocabulary (every character and the most frequent
substrings), fit p by EM (expected counts by forward-backward, then renormalize), prune the
pieces whose removal costs the least likelihood (never a single character), and repeat until
the requested size is left. The lattices of all distinct words are one set of numpy edge
arrays, and every pass runs over all words at once, one character offset at a time.

Text is prepared the SentencePiece way: spaces become "▁" and a "▁" is put in front, so
"Hello world" is seen as "▁Hello▁world" (docs/tokenizers.md says when decoding is exact).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence

import numpy as np

from .base import TokenizerError, check_special_tokens, count_words
from .pre_tokenizers import (
    METASPACE,
    METASPACE_SPLIT_PATTERN,
    UNIGRAM_PATTERN,
    split_json,
)
from .tokenizer import Tokenizer, trained_json, word_splitter


def metaspace_json(pattern: str, prepend_scheme: str, replacement: str) -> dict:
    """The pre-tokenizer of a Unigram file: spaces become ``replacement`` ("▁", with one put
    in front as ``prepend_scheme`` says), then the text is cut by ``pattern``."""
    meta = {"type": "Metaspace", "replacement": replacement, "prepend_scheme": prepend_scheme}
    if pattern == METASPACE_SPLIT_PATTERN.replace(METASPACE, replacement):
        return meta | {"split": True}
    steps = [meta | {"split": False}, split_json(pattern)]
    return {"type": "Sequence", "pretokenizers": steps}


class Unigram(Tokenizer):
    """Unigram: a ``tokenizer.json`` pipeline of a ``Metaspace`` pre-tokenizer (then a regex
    ``Split`` by ``pattern``), a ``Unigram`` model and a ``Metaspace`` decoder. ``pieces`` lists
    (token, log probability) in id order, the unknown and special tokens included (their scores
    take no part in segmenting); ``unk_token=None``: no unknown token (``models.UnigramModel``).
    """

    def __init__(
        self,
        pieces: Sequence[tuple[str, float]],
        special_tokens: Sequence[str] = ("<unk>",),
        unk_token: str | None = "<unk>",
        pattern: str = UNIGRAM_PATTERN,
        prepend_scheme: str = "always",
        replacement: str = METASPACE,
    ):
        self.pieces = [(t, float(s)) for t, s in pieces]
        ids = {t: i for i, (t, _) in enumerate(self.pieces)}
        missing = [t for t in [*special_tokens, *[unk_token] * (unk_token is not None)]]
        missing = [t for t in missing if t not in ids]
        if missing:
            raise TokenizerError(f"tokens {missing} are not in the vocabulary")
        meta = {"type": "Metaspace", "replacement": replacement, "prepend_scheme": prepend_scheme}
        pre = metaspace_json(pattern, prepend_scheme, replacement)
        unk_id = None if unk_token is None else ids[unk_token]
        model = {"type": "Unigram", "unk_id": unk_id, "byte_fallback": False}
        model |= {"vocab": [list(p) for p in self.pieces]}
        specials = {t: ids[t] for t in special_tokens}
        super().__init__(trained_json(specials, None, pre, meta | {"split": True}, model))

    @classmethod
    def train(
        cls,
        text_or_iterator: str | Iterable[str],
        vocab_size: int,
        special_tokens: Sequence[str] = (),
        unk_token: str = "<unk>",
        max_piece_chars: int = 16,
        seed_size: int | None = None,
        shrink: float = 0.8,
        em_iterations: int = 2,
        pattern: str = UNIGRAM_PATTERN,
        prepend_scheme: str = "always",
        verbose: bool = False,
    ) -> Unigram:
        """Train a vocabulary of ``vocab_size`` tokens (unk and special tokens included; they
        take the first ids, then pieces follow from most to least probable).

        ``seed_size`` is the size of the initial candidate vocabulary (default 8x the target);
        each pruning round keeps ``shrink`` of the pieces.
        """
        specials = check_special_tokens(special_tokens)
        if unk_token in specials:
            specials.remove(unk_token)
        specials.insert(0, unk_token)
        if not 0 < shrink < 1:
            raise TokenizerError(f"shrink must be between 0 and 1, got {shrink}")
        words = word_splitter(None, metaspace_json(pattern, prepend_scheme, METASPACE))
        counts = count_words(text_or_iterator, specials, words)
        target = vocab_size - len(specials)
        lattice = _Lattice(counts, max_piece_chars)
        n_chars = len(lattice.chars)
        if target < n_chars:
            raise TokenizerError(
                f"vocab_size {vocab_size} is below the base alphabet: the text has {n_chars} "
                f"distinct characters, + {len(specials)} special tokens"
            )
        if target > lattice.n_candidates:
            raise TokenizerError(
                f"vocab_size {vocab_size} is more than the text supports: it has only "
                f"{lattice.n_candidates} distinct substrings of up to {max_piece_chars} "
                f"characters (+{len(specials)} special tokens)"
            )
        pieces = lattice.fit(target, seed_size or 8 * target, shrink, em_iterations, verbose)
        pieces = [(t, _exact_in_any_json_reader(s)) for t, s in pieces]
        pieces.sort(key=lambda ts: (-ts[1], ts[0]))
        return cls(
            [(t, 0.0) for t in specials] + pieces, specials, unk_token, pattern, prepend_scheme
        )


def _exact_in_any_json_reader(score: float) -> float:
    """The score to 15 significant digits, so a saved file means the same to every reader: the
    ``tokenizers`` library's JSON parser (serde_json) rounds 17-digit numbers twice, one unit in
    the last place off about one time in eight, which breaks the exact ties between
    segmentations that runs of one character make; at most 15 digits it rounds once, exactly.
    """
    return float(f"{score:.15g}")


class _Edges:
    """The lattices of ``strings`` laid end to end (``_layout``), as flat numpy arrays: string w
    of length L owns nodes ``first_node[w] .. last_node[w]`` (the cuts between its characters),
    and each occurrence of a substring of up to ``max_len`` characters is an edge (``start``
    node, ``end`` node, ``sid``: the substring's candidate id in ``sid_of``, which new
    substrings join). ``whole=False`` leaves out the edge that is a whole string. The edges are
    sorted by (end offset, end node), the order the forward and Viterbi passes visit them.
    """

    def __init__(self, strings: list[str], max_len: int, sid_of: dict[str, int], whole=True):
        spans = [(s, _span_list(len(s), max_len)) for s in strings]
        sid = [sid_of.setdefault(s[i:j], len(sid_of)) for s, ij in spans for i, j in ij]
        lengths = np.array([len(s) for s in strings], dtype=np.int64)
        base, self.n_nodes, word, starts, ends = _layout(lengths, max_len)
        keep = np.ones(len(word), bool) if whole else (starts > 0) | (ends < lengths[word])
        start, end = base[word] + starts, base[word] + ends
        order = np.flatnonzero(keep)[np.lexsort((end[keep], ends[keep]))]
        self.sid, self.start, self.end = np.array(sid, np.int64)[order], start[order], end[order]
        self.start_off, self.end_off, self.word_of_edge = starts[order], ends[order], word[order]
        self.first_node, self.last_node = base, base + lengths

    def best_paths(self, logp: np.ndarray, alive: np.ndarray, strings, carry: np.ndarray):
        """Walk the best (Viterbi) paths of ``strings`` (an index into them) at once, each from
        its last node back to its first, over the edges whose piece is ``alive``. Yields, one
        step back at a time, the edge each string still on its way takes, and those strings'
        entries of ``carry`` (a per-string array: a weight, an owner, ...)."""
        e = np.flatnonzero(alive[self.sid])
        start, end, w = self.start[e], self.end[e], logp[self.sid[e]]
        back = _viterbi(self.n_nodes, self.first_node, start, end, self.end_off[e], w)
        node, first = self.last_node[strings], self.first_node[strings]
        while len(node):
            edge = e[back[node]]
            yield edge, carry
            node = self.start[edge]
            more = node != first
            node, first, carry = node[more], first[more], carry[more]


class _Lattice(_Edges):
    """All distinct training words and their candidate pieces (``_Edges``): every substring of
    up to ``max_len`` characters is a candidate. Pieces in the current vocabulary are a subset
    of the candidates; edges of the others are filtered out.
    """

    def __init__(self, counts: dict[str, int], max_len: int):
        self.words = list(counts)
        self.freq = np.array([counts[w] for w in self.words], dtype=np.float64)
        self.max_len = max_len
        self.sid_of: dict[str, int] = {}
        super().__init__(self.words, max_len, self.sid_of)
        self.strings = list(self.sid_of)
        self.n_candidates = len(self.strings)
        # the backward pass visits the edges by (start offset descending, start node)
        self.backward_order = np.lexsort((self.start, -self.start_off))
        self.sid_len = np.array([len(s) for s in self.strings], dtype=np.int64)
        # frequency of each candidate (occurrences weighted by word counts)
        self.sid_freq = np.bincount(self.sid, weights=self.freq[self.word_of_edge])
        self.chars = [s for s in self.strings if len(s) == 1]

    def fit(
        self, target: int, seed_size: int, shrink: float, em_iterations: int, verbose: bool
    ) -> list[tuple[str, float]]:
        """Seed, then alternate EM and pruning until ``target`` pieces remain."""
        n_sid = self.n_candidates
        required = self.sid_len == 1
        # the seed: all characters, then the substrings seen at least twice with the largest
        # freq * length (a head start for long pieces), up to seed_size in all
        score = self.sid_freq * self.sid_len
        score[required] = np.inf
        score[(self.sid_freq < 2) & ~required] = -np.inf
        order = np.argsort(-score, kind="stable")
        n_keep = max(target, min(seed_size, int(np.isfinite(score).sum() + required.sum())))
        alive = np.zeros(n_sid, dtype=bool)
        alive[order[:n_keep]] = True
        logp = np.where(alive, np.log(np.maximum(score, 1.0)), -np.inf)
        logp[required] = np.log(self.sid_freq[required] * 1.0)
        logp = _normalize(logp, alive)
        alt = _Alternatives(self, alive)

        while True:
            for _ in range(em_iterations):
                logp, loglik = self._em_step(logp, alive)
            n_alive = int(alive.sum())
            if verbose:
                print(f"unigram: {n_alive} pieces, log-likelihood {loglik:.1f}")
            if n_alive <= target:
                break
            keep = max(target, int(n_alive * shrink))
            alive = self._prune(logp, alive, keep, required, alt)
            logp = _normalize(np.where(alive, logp, -np.inf), alive)
        return [(self.strings[k], float(logp[k])) for k in np.flatnonzero(alive)]

    def _em_step(self, logp: np.ndarray, alive: np.ndarray) -> tuple[np.ndarray, float]:
        """One E step (expected piece counts by forward-backward) and M step (renormalize)."""
        e = np.flatnonzero(alive[self.sid])
        start, end, w = self.start[e], self.end[e], logp[self.sid[e]]
        alpha = _sweep(self.n_nodes, self.first_node, start, end, self.end_off[e], w)
        # backwards: from each word's last node, by decreasing start offset
        b = self.backward_order[alive[self.sid[self.backward_order]]]
        beta = _sweep(
            self.n_nodes,
            self.last_node,
            self.end[b],
            self.start[b],
            -self.start_off[b],
            logp[self.sid[b]],
        )
        log_z = alpha[self.last_node]
        wf = self.freq[self.word_of_edge[e]]
        post = np.exp(alpha[start] + w + beta[end] - log_z[self.word_of_edge[e]]) * wf
        expected = np.bincount(self.sid[e], weights=post, minlength=self.n_candidates)
        # a floor keeps every living piece at a finite log probability
        expected = np.where(alive, np.maximum(expected, 1e-3), 0.0)
        with np.errstate(divide="ignore"):
            new_logp = np.log(expected) - math.log(expected.sum())
        return np.where(alive, new_logp, -np.inf), float((log_z * self.freq).sum())

    def _prune(
        self,
        logp: np.ndarray,
        alive: np.ndarray,
        keep: int,
        required: np.ndarray,
        alt: _Alternatives,
    ) -> np.ndarray:
        """Keep the ``keep`` pieces whose removal would cost the most likelihood.

        For a piece s used F(s) times in the best segmentations, removing it sends those uses to
        s's own best segmentation without s (its "alternative" pieces t), whose counts each grow
        by F(s). The loss is F(s) * (log p(s) - sum_t log p'(t)), p' being the re-normalized
        frequencies after the move. Pieces never used (F = 0) cost nothing; characters stay.
        """
        freq = self._viterbi_counts(logp, alive)
        total = freq.sum()
        owners, alts = alt.segment(logp, alive)
        n_alt = np.bincount(owners, minlength=self.n_candidates)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_sp = np.log(freq) - math.log(total)
            log_total_alt = np.log(total + freq * (n_alt - 1))
            alt_terms = np.log(freq[alts] + freq[owners])
            sum_alt = np.bincount(owners, weights=alt_terms, minlength=self.n_candidates)
            loss = freq * (log_sp - (sum_alt - n_alt * log_total_alt))
        loss = np.where(freq > 0, loss, 0.0)
        loss = np.where(np.isfinite(loss), loss, np.inf)  # no alternative: never remove
        loss[~alive] = -np.inf
        loss[required] = np.inf
        order = np.argsort(-loss, kind="stable")
        new_alive = np.zeros_like(alive)
        new_alive[order[:keep]] = True
        return new_alive

    def _viterbi_counts(self, logp: np.ndarray, alive: np.ndarray) -> np.ndarray:
        """How often each piece appears in the best segmentations of the corpus."""
        counts = np.zeros(self.n_candidates)
        for edge, weight in self.best_paths(logp, alive, slice(None), self.freq):
            np.add.at(counts, self.sid[edge], weight)
        return counts


class _Alternatives(_Edges):
    """Each candidate piece as its own little lattice, without the edge that is the whole piece:
    its best path is the segmentation the piece would get if it were removed."""

    def __init__(self, lat: _Lattice, alive: np.ndarray):
        self.owners = np.flatnonzero(alive & (lat.sid_len > 1))
        strings = [lat.strings[k] for k in self.owners]
        super().__init__(strings, lat.max_len, lat.sid_of, whole=False)

    def segment(self, logp: np.ndarray, alive: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """For every living owner piece, its alternative pieces: parallel arrays (owner, alt)."""
        live = alive[self.owners]
        out_owner, out_alt = [], []
        for edge, owner in self.best_paths(logp, alive, live, self.owners[live]):
            out_owner.append(owner)
            out_alt.append(self.sid[edge])
        if not out_owner:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(out_owner), np.concatenate(out_alt)


def _layout(lengths: np.ndarray, max_len: int):
    """Nodes and edges of the lattices of strings with these lengths, laid end to end.

    String w owns nodes ``base[w] .. base[w] + lengths[w]`` (``n_nodes`` in all); each of its
    substrings of up to ``max_len`` characters is an edge, string after string, each string's in
    ``_span_list`` order. Returns (base, n_nodes, word, starts, ends): per edge, its string and
    its start and end offsets in it.
    """
    base = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]]).astype(np.int64)
    n_nodes = int(lengths.sum() + len(lengths))
    spans = [_span_array(n, max_len) for n in lengths.tolist()]
    starts, ends = np.concatenate(spans).reshape(-1, 2).T
    word = np.repeat(np.arange(len(lengths)), [len(a) // 2 for a in spans])
    return base, n_nodes, word, starts, ends


@functools.cache
def _span_list(n: int, max_len: int) -> tuple[tuple[int, int], ...]:
    """(start, end) of every substring of up to ``max_len`` characters of a string of length
    ``n``, by start, then end: the one order in which candidate ids are read off the strings and
    ``_layout`` lists their edges, so the two line up."""
    return tuple((i, j) for i in range(n) for j in range(i + 1, min(n, i + max_len) + 1))


@functools.cache
def _span_array(n: int, max_len: int) -> np.ndarray:
    """``_span_list`` flat, as an array: start, end, start, end, ..."""
    return np.array(_span_list(n, max_len), dtype=np.int64).reshape(-1)


def _normalize(logp: np.ndarray, alive: np.ndarray) -> np.ndarray:
    m = logp[alive].max()
    return np.where(alive, logp - (m + math.log(np.exp(logp[alive] - m).sum())), -np.inf)


def _layers(offsets: np.ndarray, nodes: np.ndarray):
    """For edges already sorted by (offset, node): yield, per offset, the edge indices and the
    groups of edges that share a node (as reduceat boundaries, the size of each group, and its
    node)."""
    cuts = np.flatnonzero(np.diff(offsets)) + 1
    for chunk in np.split(np.arange(len(offsets)), cuts):
        n = nodes[chunk]
        bounds = np.concatenate([[0], np.flatnonzero(np.diff(n)) + 1])
        yield chunk, bounds, np.diff(np.append(bounds, len(chunk))), n[bounds]


def _sweep(n_nodes, sources, frm, to, offset, w):
    """Forward (or, with edges reversed, backward) log-sum over paths for all words at once.

    Edges come sorted by (``offset``, ``to``), so every edge's source is final before use.
    """
    acc = np.full(n_nodes, -np.inf)
    acc[sources] = 0.0
    for chunk, bounds, sizes, targets in _layers(offset, to):
        vals = acc[frm[chunk]] + w[chunk]
        m = np.maximum.reduceat(vals, bounds)
        s = np.add.reduceat(np.exp(vals - np.repeat(m, sizes)), bounds)
        acc[targets] = m + np.log(s)
    return acc


def _viterbi(n_nodes, sources, frm, to, offset, w):
    """Best incoming edge of every node (an index into the given edge arrays, which come sorted
    as for ``_sweep``), all words at once. Ties go to the first edge ending at the node: the
    one starting earliest, i.e. the longest piece."""
    best = np.full(n_nodes, -np.inf)
    best[sources] = 0.0
    back = np.zeros(n_nodes, dtype=np.int64)
    for chunk, bounds, sizes, targets in _layers(offset, to):
        vals = best[frm[chunk]] + w[chunk]
        m = np.maximum.reduceat(vals, bounds)
        is_max = np.flatnonzero(vals == np.repeat(m, sizes))
        group = np.searchsorted(bounds, is_max, side="right") - 1
        first = is_max[np.concatenate([[True], group[1:] != group[:-1]])]
        best[targets] = m
        back[targets] = chunk[first]
    return back
