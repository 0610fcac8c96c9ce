"""Load a Llama-family checkpoint (Llama, Qwen2, Mistral) from disk, continue a prompt, and
look at one attention head.

python examples/load_llama.py --path DIR [--prompt "The capital of France is"] [--tokens 20]
python examples/load_llama.py --demo          # a small random Mistral-style folder (needs
                                              # transformers), made in
                                              # out/load_llama/random-mistral and read back

DIR is a local ``save_pretrained`` folder: ``config.json``, ``model.safetensors`` (or shards
with ``model.safetensors.index.json``) and ``tokenizer.json``; nothing is downloaded or
unpickled. The story: the model loads without a random initialisation first, generates
greedily with its key/value cache (which holds only the key/value heads of its grouped-query
attention), and then ``gpt.circuits`` caches the prompt's attention patterns; one head's
pattern is printed as a grid and saved as a heatmap (``out/load_llama/llama_pattern.png``)
and as an interactive page (``out/load_llama/llama_attention.html``). With ``--demo`` the
weights are random, so the text is noise, but the pattern shows the architecture: Mistral's
sliding window of 4 lets each query see itself and the 3 tokens before it, a band along the
diagonal.
"""

import argparse
import time
from pathlib import Path

import numpy as np

import gpt.circuits as C
import tensorlab as tl
from gpt.generate import generate
from gpt.hf import from_pretrained, tokenizer_from_pretrained

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--path", help="a Llama, Qwen2 or Mistral checkpoint folder")
parser.add_argument("--demo", action="store_true", help="make a small random Mistral folder")
parser.add_argument("--prompt", default="The capital of France is")
parser.add_argument("--tokens", type=int, default=20, help="new tokens to generate")
parser.add_argument("--layer", type=int, default=0, help="the layer of the head to show")
parser.add_argument("--head", type=int, default=0, help="the query head to show")
parser.add_argument(
    "--out",
    default="out/load_llama",
    help="folder for the pictures and the demo model (default: out/load_llama)",
)
args = parser.parse_args()
if (args.path is None) == (not args.demo):
    parser.error("give --path DIR or --demo (one of them)")


def demo_folder() -> str:
    """A random MistralForCausalLM (4 query heads sharing 2 key/value heads, window 4) and a
    byte-level BPE tokenizer trained on CPython's docs, saved the way the Hub stores them."""
    try:
        import tokenizers
        import torch
        import transformers
    except ImportError:
        raise SystemExit("--demo needs transformers: pip install -e '.[reference]'") from None
    from gpt.data import default_text

    folder = str(Path(args.out) / "random-mistral")  # made again on every --demo run
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    alphabet = tokenizers.pre_tokenizers.ByteLevel.alphabet()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=512, initial_alphabet=alphabet)
    tok.train_from_iterator([default_text()[:200_000]], trainer)
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(folder)
    torch.manual_seed(0)
    config = transformers.MistralConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=128,
        intermediate_size=352,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        sliding_window=4,
    )
    transformers.MistralForCausalLM(config).save_pretrained(folder)
    print(f"made a random Mistral-style folder: {folder}")
    return folder


path = args.path or demo_folder()
start = time.perf_counter()
model = from_pretrained(path)
tok = tokenizer_from_pretrained(path)
cfg = model.config
print(
    f"loaded {path} in {time.perf_counter() - start:.2f}s: {model.num_parameters():,} "
    f"parameters (n_layer={cfg.n_layer}, n_head={cfg.n_head}, n_kv_head={cfg.n_kv_head}, "
    f"d_model={cfg.d_model}, sliding_window={cfg.sliding_window}, vocab={cfg.vocab_size})"
)

prompt = tok.encode(args.prompt)
start = time.perf_counter()
ids = generate(model, prompt, max_new_tokens=args.tokens, temperature=0.0)
elapsed = time.perf_counter() - start
print(f"greedy, {args.tokens} tokens in {elapsed:.2f}s ({args.tokens / elapsed:.0f} tokens/s):")
print(repr(tok.decode(ids)))

name = f"blocks.{args.layer}.attn.hook_pattern"
_, cache = C.run_with_cache(model, tl.tensor(np.array([prompt])), names=[name])
pattern = cache[name][0, args.head]  # (query, key)
labels = [tok.decode([t]) for t in prompt]
print(f"\nlayer {args.layer}, head {args.head}: attention from each prompt token (rows) to each")
print("earlier one (columns), in percent:")
width = max(len(repr(s)) for s in labels)
for label, row in zip(labels, pattern):
    print(f"{label!r:>{width}} " + " ".join(f"{100 * a:3.0f}" for a in row))

out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
title = f"layer {args.layer}, head {args.head}"
try:
    from gpt.plots import attention_pattern

    print(
        "saved", attention_pattern(pattern, out / "llama_pattern.png", labels=labels, title=title)
    )
except ImportError:
    print("(matplotlib is not installed: no heatmap)")
C.attention_html(cache[name][0], labels, out / "llama_attention.html", title=f"layer {args.layer}")
print("saved", out / "llama_attention.html")
