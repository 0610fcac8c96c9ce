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
