"""Byte-level Byte Pair Encoding, as used by GPT-2.

BPE (Gage, 1994; Sennrich et al., 2016) starts from a base alphabet and repeatedly *merges* the
most frequent adjacent pair of tokens into a new token; encoding replays the merges, earliest
learned first (``models.apply_merges``). GPT-2 (Radford et al., 2019) takes the 256 byte values
as the alphabet, so no text has an unknown token and decoding is exact, and merges only inside
the pre-tokens its regular expression cuts (``pre_tokenizers.GPT2_PATTERN``). Training is the
incremental loop ``base.learn_merges``; ties go to the smaller (id, id) pair, so it is
deterministic. docs/tokenizers.md tells the rest.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

from .base import Pair, TokenizerError, check_special_tokens, count_words, learn_merges
from .pre_tokenizers import GPT2_PATTERN, bytes_to_text, split_json, unicode_to_bytes
from .tokenizer import Tokenizer, trained_json, word_splitter


def byte_level_json(pattern: str, add_prefix_space: bool) -> dict:
    """The pre-tokenizer of a byte-level BPE file: ``ByteLevel`` (GPT-2's pattern), or a regex
    ``Split`` before it (another pattern)."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": add_prefix_space}
    byte_level |= {"trim_offsets": True, "use_regex": pattern == GPT2_PATTERN}
    if pattern == GPT2_PATTERN:
        return byte_level
    if add_prefix_space:
        raise TokenizerError("a custom pattern with add_prefix_space has no tokenizer.json form")
    return {"type": "Sequence", "pretokenizers": [split_json(pattern), byte_level]}


class ByteBPE(Tokenizer):
    """Byte-level BPE: a ``tokenizer.json`` pipeline of a ``ByteLevel`` pre-tokenizer (GPT-2's
    pattern; another ``pattern`` is a regex ``Split`` before it), a ``BPE`` model whose tokens
    are spelled in GPT-2's printable byte alphabet, and a ``ByteLevel`` decoder.

    ``vocab`` maps each ordinary token id to its bytes; ``merges`` lists merged pairs of ids in
    the order they were learned (rank 0 first), and each merge's result must be in ``vocab``.
    Special tokens take the ids after them.
    """

    def __init__(
        self,
        vocab: dict[int, bytes],
        merges: Sequence[Pair],
        special_tokens: dict[str, int] | None = None,
        pattern: str = GPT2_PATTERN,
        add_prefix_space: bool = False,
        ignore_merges: bool = False,
    ):
        special_tokens = dict(special_tokens or {})
        if set(vocab) & set(special_tokens.values()):
            raise TokenizerError("a special token shares its id with an ordinary token")
        if len(set(vocab.values())) != len(vocab):
            raise TokenizerError("two token ids have the same bytes")
        self.vocab, self.merges, self.pattern = dict(vocab), [tuple(m) for m in merges], pattern
        spelled = {i: bytes_to_text(b) for i, b in self.vocab.items()}
        try:
            merge_text = [f"{spelled[a]} {spelled[b]}" for a, b in self.merges]
        except KeyError as e:
            raise TokenizerError(f"a merge uses the id {e}, missing from vocab") from None
        pre = byte_level_json(pattern, add_prefix_space)
        decoder = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True}
        model = {"type": "BPE", "dropout": None, "unk_token": None}
        model |= {"continuing_subword_prefix": None, "end_of_word_suffix": None}
        model |= {"fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges}
        vocab = {t: i for i, t in sorted(spelled.items())} | special_tokens
        model |= {"vocab": vocab, "merges": merge_text}
        super().__init__(
            trained_json(special_tokens, None, pre, decoder | {"use_regex": True}, model)
        )

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
        # the pre-tokens as the file's pre-tokenizer gives them (in the printable byte alphabet)
        words_of = word_splitter(None, byte_level_json(pattern, False))
        word_counts = count_words(text_or_iterator, specials, words_of)
        table = unicode_to_bytes()
        words = [[table[c] for c in w] for w in word_counts]
        freqs = list(word_counts.values())
        ids = itertools.count(256)  # the merges' tokens: 256, 257, ... in merge order
        merges = learn_merges(words, freqs, n_merges, lambda _: (next(ids), True), False, verbose)
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

    def token_bytes(self, i: int) -> bytes:
        """The bytes of one token (a special token's UTF-8)."""
        (i,) = self.check_ids([i])
        special = self._special_by_id.get(i)
        return self.vocab[i] if special is None else special.encode("utf-8")

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The raw bytes behind the ids (special tokens as their UTF-8)."""
        return b"".join(self.token_bytes(i) for i in ids)
