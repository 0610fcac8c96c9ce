"""Character-level tokenization: one token per Unicode character.

The vocabulary is the set of characters seen in the training text (sorted, so training is
deterministic), plus any special tokens. The only design question is what to do with a
character that never appeared in training. ``unknown`` chooses:

* ``"error"``: raise TokenizerError naming the character (the default: no silent data loss),
* ``"replace"``: emit the ``<unk>`` token, which is then part of the vocabulary,
* ``"skip"``: drop the character.

Decoding is exact for text whose characters were all seen in training.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

from .base import Tokenizer, TokenizerError, check_special_tokens, count_words

UnknownPolicy = Literal["error", "replace", "skip"]
CHAR_UNK = "<unk>"


class CharTokenizer(Tokenizer):
    kind = "char"

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
        self.unk_token = CHAR_UNK if unknown == "replace" else None
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        # specials come after the characters
        n = len(self.chars)
        super().__init__({t: n + k for k, t in enumerate(specials)})
        self.itos = self.chars + specials

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

    def _encode_ordinary(self, text: str, first: bool) -> list[int]:
        stoi = self.stoi
        try:
            return [stoi[c] for c in text]
        except KeyError:
            pass
        out = []
        unk = self.special.get(CHAR_UNK)
        for pos, c in enumerate(text):
            i = stoi.get(c)
            if i is not None:
                out.append(i)
            elif self.unknown == "replace":
                out.append(unk)
            elif self.unknown == "error":
                raise TokenizerError(
                    f"character {c!r} (U+{ord(c):04X}) at position {pos} is not in the "
                    "vocabulary; train on more text or use unknown='replace' or 'skip'"
                )
        return out

    def _decode_pieces(self, ids: list[int]) -> str:
        itos = self.itos
        return "".join(itos[i] for i in ids)
