"""WordPiece, the subword tokenizer of BERT.

WordPiece (Schuster & Nakajima, 2012; used by BERT, Devlin et al., 2019) splits each word into
pieces from a vocabulary. A piece that continues a word carries the prefix ``##``, so "playing"
may become ``play ##ing`` and the vocabulary tells word starts from word middles.

Training builds the vocabulary bottom-up like BPE: words start as characters (``##`` on all
but the first), and the trainer repeatedly merges a pair of adjacent pieces into a new piece.
Which pair is a choice, ``score=``:

* ``"frequency"`` (the default): the most frequent pair, exactly as BPE does. This is what the
  Hugging Face ``tokenizers`` library's ``WordPieceTrainer`` does (it runs its BPE trainer with
  the ``##`` prefix and keeps the resulting vocabulary).
* ``"likelihood"``: under a unigram language model over the current pieces, merging a and b into
  ab raises the corpus log-likelihood by roughly
  ``count(ab) * log(count(ab) * N / (count(a) * count(b)))``, and WordPiece as described for BERT
  ranks pairs by the core of that expression, ``count(ab) / (count(a) * count(b))``: pairs whose
  parts rarely occur apart, not merely frequent pairs.

The default is chosen by measurement. On tinyshakespeare (trained on the first 90%, vocabulary
2048, measured on the last 10%) the likelihood score needs about twice the tokens of the
frequency score: it spends the vocabulary on rare words whose letters always come together
(names, odd spellings) before common words like "good", whose letters are everywhere, so "good"
stays ``g ##o ##o ##d``. The frequency score needs as many tokens as the ``tokenizers`` library's
trainer (figures in ``docs/tokenizers.md``).

Pair counts are kept incrementally as in ``bpe.py``. The likelihood score is trickier: a merge
changes count(a) and count(b), which changes the score of *every* pair containing a or b, up or
down. So after each merge those pairs are re-pushed onto the heap with fresh scores, and a popped
entry counts only if its score still equals the pair's current score.

Encoding is greedy longest-match-first within each word (``models.WordPieceModel``): take the
longest vocabulary piece that starts the word, then the longest ``##`` piece that continues it,
and so on. If at some point no piece matches, the whole word becomes ``[UNK]``. Text is
normalized and split into words the way BERT does it (``normalizers.bert_normalize``,
``pre_tokenizers.bert_pretokenize``), so decoding is not exact: whitespace and, if enabled, case
and accents are lost.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Literal

from .base import Pair, TokenizerError, check_special_tokens, count_pairs, count_words, merge_pair
from .normalizers import bert_normalize
from .pre_tokenizers import bert_pretokenize
from .tokenizer import Tokenizer, trained_json

Score = Literal["frequency", "likelihood"]
SCORES = ("frequency", "likelihood")


class WordPiece(Tokenizer):
    """WordPiece: a ``tokenizer.json`` pipeline of a ``BertNormalizer``, a ``BertPreTokenizer``,
    a ``WordPiece`` model and decoder. ``vocab`` lists every token in id order, the special
    tokens (added tokens of the file) and ``unk_token`` included."""

    def __init__(
        self,
        vocab: Sequence[str],
        special_tokens: Sequence[str] = ("[UNK]",),
        unk_token: str = "[UNK]",
        prefix: str = "##",
        max_word_chars: int = 100,
        lowercase: bool = False,
        strip_accents: bool | None = None,
        clean_text: bool = True,
        handle_chinese_chars: bool = True,
        cleanup: bool = False,
    ):
        index = {t: i for i, t in enumerate(vocab)}
        if len(index) != len(vocab):
            raise TokenizerError("WordPiece vocabulary has duplicate tokens")
        missing = [t for t in special_tokens if t not in index]
        if missing:
            raise TokenizerError(f"special tokens {missing} are not in the vocabulary")
        normalizer = dict(
            clean_text=clean_text,
            handle_chinese_chars=handle_chinese_chars,
            strip_accents=strip_accents,
            lowercase=lowercase,
        )
        model = {"type": "WordPiece", "unk_token": unk_token, "continuing_subword_prefix": prefix}
        model |= {"max_input_chars_per_word": max_word_chars, "vocab": index}
        # ``cleanup`` removes the space before punctuation and contractions in decoding
        # (" ." -> "."; BERT's files have it)
        decoder = {"type": "WordPiece", "prefix": prefix, "cleanup": cleanup}
        super().__init__(
            trained_json(
                {t: index[t] for t in special_tokens},
                {"type": "BertNormalizer", **normalizer},
                {"type": "BertPreTokenizer"},
                decoder,
                model,
            )
        )

    # ----- training ----------------------------------------------------------------------------

    @classmethod
    def train(
        cls,
        text_or_iterator: str | Iterable[str],
        vocab_size: int,
        special_tokens: Sequence[str] = (),
        unk_token: str = "[UNK]",
        lowercase: bool = False,
        prefix: str = "##",
        score: Score = "frequency",
    ) -> WordPiece:
        """Learn a vocabulary of ``vocab_size`` tokens (special tokens and ``unk_token`` included,
        they take the first ids). Special tokens in the training text are skipped. ``score``
        picks the merge rule: "frequency" or "likelihood" (see the module docstring)."""
        if score not in SCORES:
            raise TokenizerError(f"WordPiece score must be one of {SCORES}, got {score!r}")
        specials = check_special_tokens(special_tokens)
        if unk_token not in specials:
            specials.insert(0, unk_token)
        words = count_words(
            text_or_iterator,
            specials,
            lambda part, _first: bert_pretokenize(bert_normalize(part, lowercase=lowercase)),
        )

        # the base alphabet: each character as a word start and as a continuation
        alphabet: set[str] = set()
        for w in words:
            alphabet.add(w[0])
            alphabet.update(prefix + c for c in w[1:])
        itos = specials + sorted(alphabet)
        if vocab_size < len(itos):
            raise TokenizerError(
                f"vocab_size {vocab_size} is below the base alphabet: {len(itos)} tokens "
                f"({len(alphabet)} characters/continuations + {len(specials)} special)"
            )
        stoi = {t: i for i, t in enumerate(itos)}
        seqs = [[stoi[w[0]]] + [stoi[prefix + c] for c in w[1:]] for w in words]
        n_base = len(itos)
        _learn_merges(seqs, list(words.values()), itos, vocab_size - n_base, prefix, score)
        if len(itos) < vocab_size:
            raise TokenizerError(
                f"vocab_size {vocab_size} is more than the text supports: at most "
                f"{len(itos)} tokens can be learned from it"
            )
        return cls(itos, specials, unk_token, prefix, lowercase=lowercase)


def _learn_merges(
    words: list[list[int]],
    freqs: list[int],
    itos: list[str],
    n_merges: int,
    prefix: str,
    score_by: Score = "frequency",
) -> None:
    """Merge by ``score_by`` until ``n_merges`` new tokens exist (or no pair is left).

    ``itos`` grows with each new token. Two different merges can spell the same token (a+##bc
    and ab+##c are both "abc"); the second one then reuses the first one's id.
    """
    stoi = {t: i for i, t in enumerate(itos)}
    n_target = len(itos) + n_merges
    tok_count: dict[int, int] = {}
    for w, f in zip(words, freqs):
        for t in w:
            tok_count[t] = tok_count.get(t, 0) + f
    pair_count, where = count_pairs(words, freqs)
    pairs_of: dict[int, set[Pair]] = {}  # token -> pairs it has been part of

    def link(p: Pair) -> None:
        pairs_of.setdefault(p[0], set()).add(p)
        pairs_of.setdefault(p[1], set()).add(p)

    for p in pair_count:
        link(p)

    likelihood = score_by == "likelihood"

    def score(p: Pair) -> float:
        if likelihood:
            return pair_count[p] / (tok_count[p[0]] * tok_count[p[1]])
        return pair_count[p]

    touched: set[Pair] = set()  # pairs whose count changed in this merge

    def bump(p: Pair, d: int, wi: int) -> None:
        pair_count[p] = pair_count.get(p, 0) + d
        touched.add(p)
        if d > 0:
            where.setdefault(p, set()).add(wi)
            link(p)

    heap = [(-score(p), p) for p in pair_count]
    heapq.heapify(heap)
    changes: list[tuple[Pair, Pair]] = []
    while len(itos) < n_target and heap:
        neg, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) <= 0 or -neg != score(pair):
            continue  # stale: a fresher entry for this pair is in the heap (or it is gone)
        a, b = pair
        text = itos[a] + itos[b][len(prefix) :]
        c = stoi.get(text)
        if c is None:
            c = stoi[text] = len(itos)
            itos.append(text)
        n_ab = 0  # merges made: fewer than the pair's count where occurrences overlap ("a a a")
        touched.clear()
        for wi in where.pop(pair):
            f = freqs[wi]
            changes.clear()
            n = len(words[wi])
            words[wi] = merge_pair(words[wi], pair, c, changes)
            n_ab += f * (n - len(words[wi]))
            for old, new in changes:  # the neighbouring pairs, e.g. (x, a) -> (x, c)
                bump(old, -f, wi)
                bump(new, f, wi)
        del pair_count[pair]
        tok_count[a] -= n_ab
        tok_count[b] -= n_ab
        tok_count[c] = tok_count.get(c, 0) + n_ab
        # every pair whose score changed gets a fresh heap entry: those whose count changed, and
        # for the likelihood score those whose parts' counts changed
        if likelihood:
            touched |= pairs_of.get(a, set()) | pairs_of.get(b, set()) | pairs_of.get(c, set())
        for p in touched:
            if pair_count.get(p, 0) > 0:
                heapq.heappush(heap, (-score(p), p))
