"""Models of a ``tokenizer.json`` pipeline: one pre-tokenized word in, token ids out.

The four model types of the ``tokenizers`` library, as ``build`` reads them from a file:

* ``BPE``: a vocabulary and a ranked list of merges over *characters* (``MergeModel`` below).
  Byte-level files (GPT-2) put a ``ByteLevel`` pre-tokenizer in front, which spells every byte
  as a character, so the same model serves them. Options: ``continuing_subword_prefix`` /
  ``end_of_word_suffix`` (decorate non-first / last characters), ``unk_token`` and ``fuse_unk``
  (characters outside the vocabulary), ``byte_fallback`` (such characters become ``<0xXX>``
  byte tokens instead), ``ignore_merges`` (a word that is a token is taken whole). ``dropout``
  (random merges, a training device) must be null or 0: encoding must be deterministic. A word
  falls apart where no merge reaches across (``MergeModel.parts``): a file with no
  pre-tokenizer (Llama 2's) gives the whole text as one word, and its parts are cached.
* ``WordPiece``: greedy longest match, the ``WordPiece`` class's own word encoder.
* ``Unigram``: the most probable segmentation, the ``Unigram`` class's own Viterbi search
  (``unk_id`` may be null: then a character no piece covers alone is an error when encoding).
* ``WordLevel``: each word is a token or the unknown token.

``build`` returns a ``Model``: the vocabulary by id and the word encoder.
"""

from __future__ import annotations

import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .base import TokenizerError, TokenizerFileError, apply_merges
from .fields import check, get, items, pair
from .unigram import Unigram
from .wordpiece import WordPiece


@dataclass
class Model:
    """What a pipeline needs from its model: token -> id, and a word's ids. ``parts``, where
    the model has it, cuts a word into pieces that encode independently (the word's ids are the
    pieces' ids one after another), so that the pipeline can encode a long word piece by piece
    through its word cache (``MergeModel.parts``)."""

    vocab: dict[str, int]
    encode_word: Callable[[str], list[int]]
    unk_token: str | None
    parts: Callable[[str], list[str]] | None = None


def byte_token(b: int) -> str:
    """The token that stands for one byte under byte fallback: 0xE2 -> "<0xE2>"."""
    return f"<0x{b:02X}>"


class MergeModel:
    """BPE over characters, merging as the ``tokenizers`` library does.

    A word starts as its characters (looked up with the prefix/suffix decorations). Then,
    repeatedly, the adjacent pair with the lowest merge rank is merged (ties: the leftmost),
    until no adjacent pair has a merge (``base.apply_merges``, as ``ByteBPE`` encodes).
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
        self.fuse_unk, self.byte_fallback, self.ignore_merges = (
            fuse_unk,
            byte_fallback,
            ignore_merges,
        )
        self.ranks: dict[tuple[int, int], tuple[int, int]] = {}
        for rank, (a, b) in enumerate(merges):
            merged = a + (b[len(prefix) :] if prefix and b.startswith(prefix) else b)
            for t in (a, b, merged):
                if t not in vocab:
                    raise TokenizerError(f"merge {rank} ({a!r}, {b!r}) needs {t!r}, not in vocab")
            self.ranks.setdefault((vocab[a], vocab[b]), (rank, vocab[merged]))
        self._cut = self._cutter(merges)

    def _cutter(self, merges: list[tuple[str, str]]) -> re.Pattern | None:
        """The pattern that finds the places :meth:`parts` cuts a word at.

        Only a merge joins two symbols, so a token that covers two neighbouring characters x|y
        of a word was made, at some step, by a merge (a, b) that joined exactly there: a ends
        with x's last symbol and b starts with y's first. For characters that are tokens those
        are x and y themselves; an unknown x becomes a byte token ("<0xE2>", under byte
        fallback) or the unknown token. So if no merge (a, b) has a ending in x and b starting
        with y, nothing ever joins across x|y, and encoding the two sides apart gives the same
        ids: the merges on each side, and their order, are the same, for the lowest-ranked
        pair of the whole word is also the lowest of its side. (A run of unknown characters
        fused into one unknown token ends where a known character starts, so it is never cut
        either.)

        The cuts this finds are those of one rule, so that one pattern of two character classes
        finds them: take the character that the most tokens start with (SentencePiece's "▁",
        whose BPE keeps whitespace at a piece's start; GPT-2's "Ġ") and J, the characters any
        merge puts in front of it; cut before every token y that nothing outside J is put in
        front of (that character, and the many that nothing joins from the left), after every
        character outside J. An unknown character (x above) counts as outside J only when
        neither ">" nor the unknown token's last character is in J, and never without an
        unknown token: then it may become nothing (no byte tokens for it), and its neighbours
        meet. With SentencePiece's "▁" (J holds at most "▁") a text cuts into its words. None
        where the model cannot be cut: with a prefix or suffix the first and last characters
        are spelled apart, and ``ignore_merges`` takes a whole word that is a token without
        merging it.
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

    def _unk_id(self) -> int:
        if self.unk_token not in self.vocab:
            raise TokenizerError(f"unknown token {self.unk_token!r} is not in the vocabulary")
        return self.vocab[self.unk_token]

    def symbols(self, word: str) -> list[int]:
        """The word's characters as ids, before any merge."""
        ids: list[int] = []
        unk: int | None = None  # a run of unknown characters not yet added (fuse_unk)
        n = len(word)
        for k, c in enumerate(word):
            s = (self.prefix if k > 0 else "") + c + (self.suffix if k == n - 1 else "")
            i = self.vocab.get(s)
            if i is not None:
                if unk is not None:
                    ids.append(unk)
                    unk = None
                ids.append(i)
                continue
            if self.byte_fallback:
                byte_ids = [self.vocab.get(byte_token(b)) for b in s.encode("utf-8")]
                if None not in byte_ids:
                    ids.extend(byte_ids)  # (a pending unknown run is added after, as there)
                    continue
            if self.unk_token is not None:
                if unk is not None and not self.fuse_unk:
                    ids.append(unk)
                unk = self._unk_id()
        if unk is not None:
            ids.append(unk)
        return ids

    def encode_word(self, word: str) -> list[int]:
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        return apply_merges(self.symbols(word), self.ranks)


def _vocab(spec: dict, path, where: str) -> dict[str, int]:
    return dict(items(get(spec, "vocab", "object", path, where), "int", path, f"{where}.vocab"))


def _merges(spec: dict, path, where: str) -> list[tuple[str, str]]:
    from .hf_format import merge_pair_of

    merges = get(spec, "merges", "list", path, where)
    return [merge_pair_of(m, path, f"{where}.merges[{k}]") for k, m in enumerate(merges)]


def build(
    spec: dict[str, Any], added: dict[str, int], path: str | os.PathLike, where: str = "model"
) -> Model:
    """The model a file describes; ``added`` (the added tokens) are excluded from segmenting."""
    check(spec, "object", path, where)
    kind = get(spec, "type", "str", path, where, None) or _guess_type(spec)
    if kind == "BPE":
        dropout = get(spec, "dropout", "number|null", path, where, None)
        if dropout:
            raise TokenizerFileError(
                path, f"{where}: BPE dropout={dropout} is random; only null or 0 is supported"
            )
        vocab = _vocab(spec, path, where)
        unk = get(spec, "unk_token", "str|null", path, where, None)
        model = MergeModel(
            vocab,
            _merges(spec, path, where),
            unk,
            get(spec, "continuing_subword_prefix", "str|null", path, where, None) or "",
            get(spec, "end_of_word_suffix", "str|null", path, where, None) or "",
            get(spec, "fuse_unk", "bool", path, where, False),
            get(spec, "byte_fallback", "bool", path, where, False),
            get(spec, "ignore_merges", "bool", path, where, False),
        )
        return Model(vocab, model.encode_word, unk, model.parts if model._cut else None)
    if kind == "WordPiece":
        vocab = _vocab(spec, path, where)
        unk = get(spec, "unk_token", "str", path, where, "[UNK]")
        itos = sorted(vocab, key=vocab.__getitem__)
        wp = WordPiece(
            itos,
            [unk],
            unk,
            get(spec, "continuing_subword_prefix", "str", path, where, "##"),
            get(spec, "max_input_chars_per_word", "int", path, where, 100),
        )
        return Model(vocab, _shift(wp._encode_word, itos, vocab), unk)
    if kind == "Unigram":
        pieces = [
            pair(p, "str,number", path, f"{where}.vocab[{k}]")
            for k, p in enumerate(get(spec, "vocab", "list", path, where))
        ]
        unk_id = get(spec, "unk_id", "int|null", path, where, None)
        if unk_id is not None and not 0 <= unk_id < len(pieces):
            raise TokenizerFileError(path, f"field {where}.unk_id {unk_id} is out of range")
        # null: no unknown token; text with a character no piece covers alone is then refused
        # when it is encoded, not when the file is read (as the library does)
        unk = None if unk_id is None else pieces[unk_id][0]
        # the added tokens, which are cut out of the text before the model runs, do not take part
        # in segmenting; the unknown token does unless the file adds it (as the library does it)
        uni = Unigram(
            pieces,
            [t for t, _ in pieces if t in added],
            unk,
            byte_fallback=get(spec, "byte_fallback", "bool", path, where, False),
        )
        return Model(dict(uni.stoi), uni._viterbi, unk)
    if kind == "WordLevel":
        vocab = _vocab(spec, path, where)
        unk = get(spec, "unk_token", "str|null", path, where, None)

        def word_level(word: str) -> list[int]:
            i = vocab.get(word)
            if i is None:
                if unk not in vocab:
                    raise TokenizerError(f"{word!r} is not in the vocabulary and there is no unk")
                i = vocab[unk]
            return [i]

        return Model(vocab, word_level, unk)
    raise TokenizerFileError(
        path,
        f"{where}: unsupported model type {kind!r} (supported: BPE, WordPiece, Unigram, WordLevel)",
    )


def _shift(encode_word, itos: list[str], vocab: dict[str, int]) -> Callable[[str], list[int]]:
    """A word encoder built on ``itos`` (ids 0..n-1 in vocab order) mapped to the file's ids,
    which need not be contiguous."""
    if all(vocab[t] == i for i, t in enumerate(itos)):
        return encode_word
    return lambda word: [vocab[itos[i]] for i in encode_word(word)]


def _guess_type(spec: dict) -> str | None:
    if "merges" in spec:
        return "BPE"
    if isinstance(spec.get("vocab"), list):
        return "Unigram"
    if "continuing_subword_prefix" in spec and "max_input_chars_per_word" in spec:
        return "WordPiece"
    return None
