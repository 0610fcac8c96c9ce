"""WordPiece, the subword tokenizer of BERT (Schuster & Nakajima, 2012; Devlin et al., 2019).

A piece that continues a word carries the prefix ``##`` ("playing" -> ``play ##ing``). Training
merges pairs of pieces like BPE (``base.learn_merges``), words starting as characters with
``##`` on all but the first; ``score=`` picks the pair: ``"frequency"`` (the default, as the
``tokenizers`` library's trainer) or ``"likelihood"``, the largest
``count(ab) / (count(a) * count(b))`` (WordPiece as described for BERT). Encoding is greedy
longest-match-first (``models.WordPieceModel``) on text normalized and split the BERT way, so
decoding loses whitespace. docs/tokenizers.md measures the two scores and tells why the
default is frequency.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from .base import Pair, TokenizerError, check_special_tokens, count_words, learn_merges
from .tokenizer import Tokenizer, trained_json, word_splitter

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
        normalizer = {"type": "BertNormalizer", "strip_accents": None, "lowercase": lowercase}
        words_of = word_splitter(normalizer, {"type": "BertPreTokenizer"})
        words = count_words(text_or_iterator, specials, words_of)

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

        def merged(pair: Pair) -> tuple[int, bool]:
            """The merged token's id; two merges can spell the same token (a+##bc and ab+##c
            are both "abc"), and the second one then reuses the first one's id."""
            text = itos[pair[0]] + itos[pair[1]][len(prefix) :]
            if text in stoi:
                return stoi[text], False
            stoi[text] = len(itos)
            itos.append(text)
            return stoi[text], True

        likelihood = score == "likelihood"
        learn_merges(seqs, list(words.values()), vocab_size - n_base, merged, likelihood)
        if len(itos) < vocab_size:
            raise TokenizerError(
                f"vocab_size {vocab_size} is more than the text supports: at most "
                f"{len(itos)} tokens can be learned from it"
            )
        return cls(itos, specials, unk_token, prefix, lowercase=lowercase)
