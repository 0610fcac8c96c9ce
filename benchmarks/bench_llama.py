"""Load time and greedy tokens/s of a Llama checkpoint here and in ``transformers``, same run.

    python benchmarks/bench_llama.py                  # ~124M parameters (the issue's 100M class)
    python benchmarks/bench_llama.py --small          # a 2-layer model, for a quick look

The model is a randomly initialised ``LlamaForCausalLM`` (12 layers, d_model 768, 12 query
heads sharing 4 key/value heads, SwiGLU 2048, vocabulary 32000, untied), saved once with
``save_pretrained`` (float32 safetensors) to a temporary folder. Then, taking turns for
``--rounds`` rounds:

- load: ``gpt.hf.from_pretrained(folder)`` against
  ``LlamaForCausalLM.from_pretrained(folder)`` (both read the same files; the page cache is warm
  after the first round, so this is parsing and building, not the disk);
- generate: greedy decoding of ``--new`` tokens after a ``--prompt``-token prompt, with the
  key/value cache, ``gpt.generate`` against ``model.generate`` (``do_sample=False``,
  ``min_new_tokens`` so that neither stops early); the two must produce the same tokens.

Prints each side's median and the median over rounds of the per-round ratio (ours / theirs).
Both use the machine's cores (NumPy's BLAS threads; ``torch.set_num_threads`` left at its
default). Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import gpt  # noqa: E402
from gpt.hf import from_pretrained  # noqa: E402

SIZES = {
    "100m": dict(
        hidden_size=768,
        intermediate_size=2048,
        num_hidden_layers=12,
        num_attention_heads=12,
        num_key_value_heads=4,
        vocab_size=32000,
    ),
    "small": dict(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=8000,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a 2-layer model instead")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=16, help="prompt length in tokens")
    parser.add_argument("--new", type=int, default=32, help="tokens to generate")
    args = parser.parse_args()
    try:
        import torch
        import transformers
    except ImportError:
        raise SystemExit("needs the reference extra: pip install -e '.[reference]'") from None
    transformers.logging.set_verbosity_error()

    size = SIZES["small" if args.small else "100m"]
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**size, max_position_embeddings=2048)
    folder = tempfile.mkdtemp(prefix="bench-llama-")
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    n_params = sum(p.numel() for p in transformers.LlamaForCausalLM(config).parameters())
    print(
        f"random LlamaForCausalLM, {n_params / 1e6:.1f}M parameters ({size}); "
        f"torch {torch.__version__} with {torch.get_num_threads()} threads, "
        f"transformers {transformers.__version__}"
    )
    prompt = np.random.default_rng(0).integers(0, size["vocab_size"], args.prompt).tolist()

    times: dict[str, list[float]] = {k: [] for k in ("load ours", "load hf", "gen ours", "gen hf")}
    for r in range(args.rounds):
        t = time.perf_counter()
        ours = from_pretrained(folder)
        times["load ours"].append(time.perf_counter() - t)
        t = time.perf_counter()
        theirs = transformers.LlamaForCausalLM.from_pretrained(folder).eval()
        times["load hf"].append(time.perf_counter() - t)

        t = time.perf_counter()
        got = gpt.generate(ours, prompt, args.new, temperature=0)
        times["gen ours"].append(time.perf_counter() - t)
        t = time.perf_counter()
        with torch.no_grad():
            want = theirs.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=args.new,
                min_new_tokens=args.new,
                do_sample=False,
            )[0].tolist()
        times["gen hf"].append(time.perf_counter() - t)
        same = "same tokens" if got == want else "TOKENS DIFFER"
        print(
            f"round {r}: load {times['load ours'][-1]:.2f} s vs {times['load hf'][-1]:.2f} s, "
            f"generate {times['gen ours'][-1]:.2f} s vs {times['gen hf'][-1]:.2f} s ({same})"
        )
        del ours, theirs

    def med(k):
        return statistics.median(times[k])

    def ratio(a, b):
        return statistics.median(x / y for x, y in zip(times[a], times[b]))

    tps_ours, tps_hf = args.new / med("gen ours"), args.new / med("gen hf")
    print(f"\nmedians over {args.rounds} rounds:")
    print(
        f"  load:     tensorlab {med('load ours'):.2f} s, transformers {med('load hf'):.2f} s, "
        f"ratio {ratio('load ours', 'load hf'):.2f}"
    )
    print(
        f"  generate: tensorlab {tps_ours:.1f} tokens/s, transformers {tps_hf:.1f} tokens/s, "
        f"time ratio {ratio('gen ours', 'gen hf'):.2f} ({args.prompt}-token prompt, {args.new} new)"
    )


if __name__ == "__main__":
    main()
