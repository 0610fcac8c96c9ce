"""Character-level tokenization: one token per Unicode character seen in training (sorted, so
training is deterministic), plus any special tokens. ``unknown`` says what becomes of a
character never seen: ``"error"`` (the default: no silent data loss), ``"replace"`` (the
``<unk>`` token) or ``"skip"``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from .base import TokenizerError, check_special_tokens, count_words
from .tokenizer import Tokenizer, trained_json

UnknownPolicy = Literal["error", "replace", "skip"]
CHAR_UNK = "<unk>"


class CharTokenizer(Tokenizer):
    """Characters: a ``tokenizer.json`` pipeline with no pre-tokenizer, a ``BPE`` model without
    merges over ``chars`` (so each character is looked up alone) and a ``Fuse`` decoder. The
    ``unknown`` policy is the model's unknown token: ``"<unk>"`` in the vocabulary (replace),
    none (skip: the model drops the character), or one the vocabulary lacks (error)."""

    def __init__(
        self,
        chars: Sequence[str],
        special_tokens: Sequence[str] = (),
        unknown: UnknownPolicy = "error",
    ):
        if unknown not in ("error", "replace", "skip"):
            raise TokenizerError(f"unknown must be 'error', 'replace' or 'skip', got {unknown!r}")
        specials = check_special_tokens(special_tokens)
        if unknown == "replace" and CHAR_UNK not in specials:
            specials.append(CHAR_UNK)
        for c in chars:
            if len(c) != 1:
                raise TokenizerError(f"character vocabulary entries must be 1 character: {c!r}")
        if len(set(chars)) != len(chars):
            raise TokenizerError("character vocabulary has duplicates")
        self.chars = list(chars)
        self.unknown = unknown
        # specials come after the characters
        vocab = {t: i for i, t in enumerate(self.chars + specials)}
        unk = None if unknown == "skip" else CHAR_UNK
        model = {"type": "BPE", "unk_token": unk, "vocab": vocab, "merges": []}
        specials = {t: vocab[t] for t in specials}
        super().__init__(trained_json(specials, None, None, {"type": "Fuse"}, model))

    @classmethod
    def train(
        cls,
        text_or_iterator: str | Iterable[str],
        vocab_size: int | None = None,
        special_tokens: Sequence[str] = (),
        unknown: UnknownPolicy = "error",
    ) -> CharTokenizer:
        """Collect the characters of the text. ``vocab_size``, if given, keeps only the most
        frequent characters so that the total (with special tokens) equals it; the rest then
        fall under the ``unknown`` policy."""
        # the pre-tokens are single characters, those of special tokens in the text included
        counts = count_words(text_or_iterator, (), lambda part, _first: part)
        specials = check_special_tokens(special_tokens)
        n_special = len(specials) + (unknown == "replace" and CHAR_UNK not in specials)
        if vocab_size is not None:
            n_chars = vocab_size - n_special
            if n_chars < 1:
                raise TokenizerError(
                    f"vocab_size {vocab_size} leaves no room for characters after "
                    f"{n_special} special tokens"
                )
            if n_chars > len(counts):
                raise TokenizerError(
                    f"vocab_size {vocab_size} is more than the text supports: it has "
                    f"{len(counts)} distinct characters (+{n_special} special tokens)"
                )
            keep = sorted(counts, key=lambda c: (-counts[c], c))[:n_chars]
        else:
            keep = list(counts)
        return cls(sorted(keep), specials, unknown)
