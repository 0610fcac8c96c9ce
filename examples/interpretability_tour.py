"""The TransformerLens moves on an induction model trained here in a few seconds: logit lens,
direct logit attribution, activation patching (by head and by position), attribution
patching, head detectors on a prompt of your own, and the interactive attention view.
docs/interpretability.md walks through its output.

The model: the two-layer attention-only setup of examples/induction_heads.py, smaller
(vocabulary 64, block 24, d_model 32, two heads per layer, no norm, untied unembedding),
trained for 800 steps on sequences with a copied stretch, watched by
``gpt.circuits.CircuitWatcher``. The probe: clean [r, r] (r: 11 distinct random tokens),
corrupted [s, r] (s: 11 other tokens, none of them in r), so that only the clean run can
predict the second copy by induction.

    python examples/interpretability_tour.py            # about 7 s (session 10, 2-core VM)
    python examples/interpretability_tour.py --seed 1 --out out/tour
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import importlib.util  # noqa: E402

import nn  # noqa: E402
import tensorlab as tl  # noqa: E402
from gpt import circuits as C  # noqa: E402
from tensorlab import log_softmax_array  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "induction_heads", Path(__file__).resolve().parent / "induction_heads.py"
)
induction_heads = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(induction_heads)


def train_model(seed: int, steps: int):
    """The induction example's training loop at the small size above; returns (model,
    watcher)."""
    p = argparse.Namespace(
        seed=seed,
        vocab=64,
        block_size=24,
        d_model=32,
        n_head=2,
        positional="learned",
        norm="none",
        tie_weights=False,
        init_std=0.2,
        lr=1e-2,
        warmup=100,
        weight_decay=0.0,
        steps=steps,
        batch=32,
        min_len=6,
        eval_every=100,
    )
    result = induction_heads.train(p, log=False)  # main() prints the watcher's history
    return result["model"], result["watcher"]


def probe(seed: int, vocab: int = 64, seq_len: int = 11, batch: int = 8):
    """Clean [r, r] and corrupted [s, r]: s drawn from the tokens not in r."""
    rng = np.random.default_rng(seed + 100)
    clean = C.repeated_tokens(batch, seq_len, high=vocab, seed=seed + 100)
    corrupted = clean.copy()
    for b in range(batch):
        others = np.setdiff1d(np.arange(vocab), clean[b, :seq_len])
        corrupted[b, :seq_len] = rng.choice(others, seq_len, replace=False)
    return clean, corrupted


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--out", type=Path, default=Path("out/interpretability_tour"))
    args = p.parse_args(argv)
    model, watcher = train_model(args.seed, args.steps)
    seq_len = 11
    clean, corrupted = probe(args.seed, seq_len=seq_len)
    second = np.arange(seq_len, 2 * seq_len - 1)  # predicting the second copy's tokens 2..
    targets = clean[:, second + 1]

    def repeat_loss(logits):
        return nn.functional.cross_entropy(logits[:, second], tl.tensor(targets))

    out: dict = {"watcher": watcher}
    print("1. Watching the circuit form (CircuitWatcher, every 100 steps)")
    for r in watcher.history:
        print(
            f"   step {r['step']:>4}: loss {r['loss']:.2f}, on the second copy "
            f"{r['repeat_loss']:.2f}, best induction score {r['induction'][1].max():.2f}"
        )

    logits, cache = C.run_with_cache(model, clean)
    corrupted_logits, _ = C.run_with_cache(model, corrupted, names=[])
    out["clean_loss"] = repeat_loss(logits).item()
    out["corrupted_loss"] = repeat_loss(corrupted_logits).item()
    print(
        f"\n2. Loss on the second copy: clean [r, r] {out['clean_loss']:.3f}, corrupted "
        f"[s, r] {out['corrupted_loss']:.3f} nats (uniform: {np.log(64):.3f})"
    )

    lens, labels = C.logit_lens(model, cache, return_labels=True)
    logp = log_softmax_array(lens, axis=-1)
    right = np.take_along_axis(logp[:, :, second], targets[None, ..., None], -1)[..., 0]
    out["lens_loss"] = dict(zip(labels, (-right.mean(axis=(1, 2))).tolist()))
    print("\n3. Logit lens: loss on the second copy read off each stream")
    for name, v in out["lens_loss"].items():
        print(f"   {name:>10}: {v:.3f}")

    # logit_attrs applies the final norm itself (as TransformerLens's cache.logit_attrs): pass
    # the stack without it, and the positions it was cut to
    stack, labels = C.full_resid_decomposition(model, cache, return_labels=True)
    attrs = C.logit_attrs(model, cache, stack[:, :, second], targets, pos_slice=second)
    out["dla"] = dict(zip(labels, attrs.mean(axis=(1, 2)).tolist()))
    print("\n4. Direct logit attribution to the correct next token (mean over the second copy)")
    for name, v in out["dla"].items():
        print(f"   {name:>9}: {v:+.2f}")

    by_head = C.activation_patching(model, corrupted, cache, repeat_loss, "attn.hook_z", "head")
    approx = C.attribution_patching(model, clean, corrupted, repeat_loss, "attn.hook_z", "head")
    whole = C.patch_activation(model, corrupted, cache, "blocks.1.hook_attn_out")
    out["patch_heads"], out["attribution_heads"] = by_head, approx + out["corrupted_loss"]
    out["patch_layer1"] = repeat_loss(whole).item()
    print("\n5. Activation patching clean -> corrupted, loss on the second copy after the patch")
    print(f"   whole attention output of layer 1: {out['patch_layer1']:.3f}")
    print(C.format_head_table(by_head, "   one head's z (hook_z), all positions:"))
    print(C.format_head_table(out["attribution_heads"], "   attribution patching's estimate:"))

    q = 2 * seq_len - 4  # one query in the second copy, first sequence
    target = tl.tensor(clean[:1, q + 1])
    one = lambda lg: nn.functional.cross_entropy(lg[:, q], target)  # noqa: E731
    _, cache0 = C.run_with_cache(model, clean[:1])
    out["query_loss"] = one(C.run_with_hooks(model, corrupted[:1])).item()
    grid = C.activation_patching(model, corrupted[:1], cache0, one, "hook_resid_pre", "pos")
    out["patch_pos"], out["query"] = grid, q
    print(f"\n6. Patching the stream one position at a time (the prediction at position {q})")
    print(f"   loss at position {q} without a patch: {out['query_loss']:.2f}")
    print(C.format_head_table(grid, "   loss after patching", fmt="{:6.2f}", col="p"))

    # where attribution patching fails: swapping a whole attention row is a large change, and
    # the loss is far from linear over it
    patched = C.activation_patching(model, corrupted[:1], cache0, one, "attn.hook_pattern", "pos")
    est = C.attribution_patching(model, clean[:1], corrupted[:1], one, "attn.hook_pattern", "pos")
    real, est = patched[1, q], est[1, q]
    out["pattern_patch"], out["pattern_estimate"] = real - out["query_loss"], est
    print(
        f"   layer 1's pattern at query {q} patched: the loss changes by "
        f"{out['pattern_patch']:+.2f}; attribution patching's estimate: {est:+.2f}"
    )

    prompt = np.array([[5, 17, 42, 8, 33, 5, 17, 42, 60, 2, 33, 9, 8, 33, 12, 50, 42, 8]])
    kinds = ("previous_token", "induction", "duplicate_token")
    out["detect"] = {k: C.detect_head(model, prompt, k) for k in kinds}
    print("\n7. Head detectors on a prompt of our own:", prompt[0].tolist())
    for k, v in out["detect"].items():
        print(C.format_head_table(v, f"   {k}"))

    args.out.mkdir(parents=True, exist_ok=True)
    _, pat = C.run_with_cache(model, clean[:1], names="blocks.1.attn.hook_pattern")
    page = args.out / "attention_layer1.html"
    C.attention_html(pat["blocks.1.attn.hook_pattern"][0], clean[0], page, title="layer 1")
    from gpt import plots

    print(f"\n8. The attention view (hover a token): {page}")
    if plots.available():
        picture = watcher.plot(args.out / "circuits_forming.png")
        print(f"   the circuits forming during training, as a picture: {picture}")
    else:
        print("   (a picture of the circuits forming needs matplotlib: pip install matplotlib)")
    out["model"], out["clean"], out["corrupted"] = model, clean, corrupted
    return out


if __name__ == "__main__":
    main()
