"""gpt: tokenizers, decoder-only GPTs and encoder-decoder transformers built from ``nn``.

    import gpt
    tok = gpt.tokenizers.ByteBPE.train(text, vocab_size=512)
    model = gpt.GPT(gpt.GPTConfig(vocab_size=tok.vocab_size, n_layer=4, n_head=4, d_model=128))
    logits, loss = model(idx, targets)
    model, tok = gpt.load("out")          # a trained run's model and tokenizer

``python -m gpt --help`` lists the command-line jobs (train, sample, tokenizer training and
report).
"""

from gpt import data, hf, tokenizers
from gpt.compare import compare
from gpt.config import PRESETS, ConfigError, GPTConfig, Seq2SeqConfig, preset
from gpt.generate import generate, next_token_probs, sample_next
from gpt.generate_seq2seq import beam_search, greedy_decode
from gpt.model import GPT, Block, GPTCache
from gpt.run_folder import load
from gpt.seq2seq import Transformer
