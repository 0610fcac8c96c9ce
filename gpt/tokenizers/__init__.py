"""Tokenizers trained, measured and interoperable: characters, byte-level BPE, WordPiece, Unigram.

    import gpt.tokenizers as tk
    tok = tk.ByteBPE.train(text, vocab_size=512, special_tokens=["<|endoftext|>"])
    ids = tok.encode("Hello world<|endoftext|>")
    assert tok.decode(ids) == "Hello world<|endoftext|>"
    tok.save("tokenizer.json"); tok = tk.load("tokenizer.json")
    print(tk.format_reports([tk.report(tok, heldout_text)]))

There is one tokenizer class, ``Tokenizer``: the pipeline a Hugging Face ``tokenizer.json``
describes (normalizer, pre-tokenizer, model, post-processor, decoder, added tokens), and one
file format, that file. The four trainers (``CharTokenizer``, ``ByteBPE``, ``WordPiece``,
``Unigram``) are ``Tokenizer`` subclasses that write such a file's contents from what they
learn; ``load`` reads any ``tokenizer.json`` (and GPT-2's ``vocab.json`` + ``merges.txt``) into
a ``Tokenizer``. ``encode_with_offsets`` says which characters each token covers; ``to_terminal``
and ``to_html`` show it.
"""

from .base import TokenizerError, TokenizerFileError
from .bpe import ByteBPE
from .char import CharTokenizer
from .files import load, load_gpt2, load_hf, save_gpt2
from .metrics import TokenizerReport, format_reports, report
from .offsets import encode_with_offsets
from .tokenizer import Tokenizer
from .unigram import Unigram
from .visualize import to_html, to_terminal
from .wordpiece import WordPiece

KINDS = {"char": CharTokenizer, "bpe": ByteBPE, "wordpiece": WordPiece, "unigram": Unigram}

__all__ = [
    "KINDS",
    "ByteBPE",
    "CharTokenizer",
    "Tokenizer",
    "TokenizerError",
    "TokenizerFileError",
    "TokenizerReport",
    "Unigram",
    "WordPiece",
    "encode_with_offsets",
    "format_reports",
    "load",
    "load_gpt2",
    "load_hf",
    "report",
    "save_gpt2",
    "to_html",
    "to_terminal",
]
