"""Tokenizers trained, measured and interoperable: characters, byte-level BPE, WordPiece, Unigram.

    import gpt.tokenizers as tk
    tok = tk.ByteBPE.train(text, vocab_size=512, special_tokens=["<|endoftext|>"])
    ids = tok.encode("Hello world<|endoftext|>")
    assert tok.decode(ids) == "Hello world<|endoftext|>"
    tok.save("bpe.json"); tok = tk.load("bpe.json")
    print(tk.format_reports([tk.report(tok, heldout_text)]))

Every class has the same interface (see ``base.Tokenizer``): ``train``, ``encode``,
``encode_batch``, ``decode``, ``vocab_size``, ``id_to_token``, ``token_to_id``, ``save``,
``load``. ``load`` also reads Hugging Face ``tokenizer.json`` files (those our classes do not
run become a ``Pipeline`` of the parts the file names) and GPT-2's ``vocab.json`` +
``merges.txt``.
``encode_with_offsets`` says which characters each token covers; ``to_terminal`` and
``to_html`` show it.
"""

from .base import Tokenizer, TokenizerError, TokenizerFileError
from .bpe import ByteBPE
from .char import CharTokenizer
from .files import load, save
from .hf_format import load_gpt2, load_hf, save_gpt2, to_hf_json
from .metrics import TokenizerReport, format_reports, report
from .offsets import encode_with_offsets
from .pipeline import Pipeline
from .unigram import Unigram
from .visualize import to_html, to_terminal
from .wordpiece import WordPiece

KINDS = {"char": CharTokenizer, "bpe": ByteBPE, "wordpiece": WordPiece, "unigram": Unigram}

__all__ = [
    "KINDS",
    "ByteBPE",
    "CharTokenizer",
    "Pipeline",
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
    "save",
    "save_gpt2",
    "to_hf_json",
    "to_html",
    "to_terminal",
]
