"""Tokenizers trained, measured and interoperable: characters, byte-level BPE, WordPiece, Unigram.

One class, ``Tokenizer``, runs the pipeline a Hugging Face ``tokenizer.json`` describes, the
one file format; the four trainers are its subclasses, and ``load`` reads any such file (and
GPT-2's ``vocab.json`` + ``merges.txt``). docs/tokenizers.md is the guide:

    import gpt.tokenizers as tk
    tok = tk.ByteBPE.train(text, vocab_size=512, special_tokens=["<|endoftext|>"])
    assert tok.decode(tok.encode("Hello world<|endoftext|>")) == "Hello world<|endoftext|>"
    tok.save("tokenizer.json"); tok = tk.load("tokenizer.json")
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
