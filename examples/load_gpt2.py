"""Load a Hugging Face GPT-2 checkpoint from disk and continue a prompt greedily.

python examples/load_gpt2.py --path DIR [--prompt "Hello, I'm a language model,"] [--tokens 20]

DIR is a local ``save_pretrained`` directory: ``config.json``, ``model.safetensors`` and the
tokenizer (``tokenizer.json``, or ``vocab.json`` + ``merges.txt``). Nothing is downloaded and
nothing is unpickled; a directory with only ``pytorch_model.bin`` must first be converted
(``GPT2LMHeadModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True)``).
"""

import argparse
import time

from gpt.generate import generate
from gpt.hf import from_pretrained, tokenizer_from_pretrained

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--path", required=True, help="Hugging Face GPT-2 checkpoint directory")
parser.add_argument("--prompt", default="Hello, I'm a language model,")
parser.add_argument("--tokens", type=int, default=20, help="new tokens to generate")
args = parser.parse_args()

start = time.perf_counter()
model = from_pretrained(args.path)
tok = tokenizer_from_pretrained(args.path)
cfg = model.config
print(
    f"loaded {args.path} in {time.perf_counter() - start:.1f}s: {model.num_parameters():,} "
    f"parameters (n_layer={cfg.n_layer}, n_head={cfg.n_head}, d_model={cfg.d_model}, "
    f"vocab={cfg.vocab_size}, context={cfg.block_size})"
)

prompt = tok.encode(args.prompt)
start = time.perf_counter()
ids = generate(model, prompt, max_new_tokens=args.tokens, temperature=0.0)
elapsed = time.perf_counter() - start
print(f"greedy, {args.tokens} tokens in {elapsed:.1f}s:")
print(repr(tok.decode(ids)))
