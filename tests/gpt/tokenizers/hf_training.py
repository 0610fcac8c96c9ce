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
