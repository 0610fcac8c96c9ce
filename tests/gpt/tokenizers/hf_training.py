"""A reference tokenizer from the `tokenizers` library, trained on a text: the pipeline parts
are set before training (they shape what is learnt), the post-processor after."""

from __future__ import annotations


def hf_trained(corpus: str, model, trainer, normalizer=None, pre=None, decoder=None, post=None):
    """``tokenizers.Tokenizer(model)`` with these parts, trained on ``corpus`` by ``trainer``."""
    import tokenizers

    t = tokenizers.Tokenizer(model)
    if normalizer is not None:
        t.normalizer = normalizer
    if pre is not None:
        t.pre_tokenizer = pre
    if decoder is not None:
        t.decoder = decoder
    t.train_from_iterator([corpus], trainer)
    if post is not None:
        t.post_processor = post
    return t


def sentencepiece_charsmap(rule: str = "nmt_nfkc") -> bytes:
    """SentencePiece's compiled character map for one of its built-in normalization rules
    (``nmt_nfkc``, T5's and ALBERT's; ``nfkc``; ``nmt_nfkc_cf``, ...): the
    ``precompiled_charsmap`` a ``tokenizer.json`` converted from such a model carries. Made by
    training a tiny model in memory and reading field 3 (``normalizer_spec``), then its field 2,
    of the ModelProto bytes (protobuf's wire format, read by hand: no protobuf needed)."""
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    text = ["the quick brown fox jumps over the lazy dog"] * 20
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(text),
        model_writer=model,
        vocab_size=30,
        normalization_rule_name=rule,
        minloglevel=2,
    )
    spec = _field(model.getvalue(), 3)
    return _field(spec, 2)


def _field(message: bytes, number: int) -> bytes:
    """The first length-delimited field ``number`` of a protobuf message."""

    def varint(pos: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = message[pos]
            value |= (byte & 0x7F) << shift
            pos, shift = pos + 1, shift + 7
            if byte < 0x80:
                return value, pos

    pos = 0
    while pos < len(message):
        key, pos = varint(pos)
        kind = key & 7
        if kind == 0:
            _, pos = varint(pos)
        elif kind == 1:
            pos += 8
        elif kind == 5:
            pos += 4
        elif kind == 2:
            size, pos = varint(pos)
            if key >> 3 == number:
                return message[pos : pos + size]
            pos += size
        else:
            raise ValueError(f"protobuf wire type {kind} is not read here")
    raise KeyError(f"field {number} is not in the message")


def sentencepiece_bpe(corpus: str, vocab_size: int) -> tuple[object, dict]:
    """A SentencePiece BPE model trained on ``corpus`` as Llama 2's was (byte fallback, digits
    split, whitespace-only pieces allowed, no normalization), and the ``tokenizer.json`` that
    Llama 2's converted file has the shape of: "▁" put in by the normalizer, no pre-tokenizer,
    BPE with fused unknowns and byte fallback. Returns (the SentencePiece processor, the file's
    data). The merges are read off the pieces, the converters' way: every split of a piece into
    two pieces is a merge, ranked by the piece's score (best first), then by the two halves'
    ids."""
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus.splitlines()),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="bpe",
        byte_fallback=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        remove_extra_whitespaces=False,
        normalization_rule_name="identity",
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    merges = []
    for piece in sorted(vocab, key=lambda piece: -sp.get_score(vocab[piece])):
        halves = [(piece[:k], piece[k:]) for k in range(1, len(piece))]
        halves = [(a, b) for a, b in halves if a in vocab and b in vocab]
        merges += sorted(halves, key=lambda ab: (vocab[ab[0]], vocab[ab[1]]))
    specials = [sp.id_to_piece(i) for i in (sp.unk_id(), sp.bos_id(), sp.eos_id())]
    added = [
        {"id": vocab[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False}
        | {"normalized": False, "special": True}
        for t in specials
    ]
    replace_space = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    decoders = [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0},
    ]
    data = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {
            "type": "Sequence",
            "normalizers": [{"type": "Prepend", "prepend": "▁"}, replace_space],
        },
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {"type": "Sequence", "decoders": decoders},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": specials[0],
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [list(m) for m in merges],
        },
    }
    return sp, data


def library_offsets(encoding) -> list[tuple[int, tuple[int, int]]]:
    """A library ``Encoding`` as (id, (start, end)) pairs, the form of
    ``gpt.tokenizers.encode_with_offsets``."""
    return list(zip(encoding.ids, map(tuple, encoding.offsets)))


def assert_encodes_as_library(ours, theirs, text: str, special: bool = False, label=None):
    """``ours`` gives the library tokenizer ``theirs``'s ids and offsets for ``text`` (the
    library adding its special tokens only with ``special``)."""
    import gpt.tokenizers as tk

    expected = theirs.encode(text, add_special_tokens=special)
    label = text if label is None else label
    assert ours.encode(text) == expected.ids, label
    assert tk.encode_with_offsets(ours, text) == library_offsets(expected), label
    return expected
