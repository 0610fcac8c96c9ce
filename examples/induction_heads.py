"""Induction heads appear in a two-layer attention-only transformer.

An induction head completes patterns: having seen "... A B ... A", it predicts "B". It needs
two heads in series (Elhage et al. 2021; Olsson et al. 2022): a layer-0 *previous-token head*
writes "the token before me was A" into each position's residual stream, and a layer-1 head
whose keys read that (K-composition) attends from the current "A" to the position right
after the earlier "A", and copies what it finds there ("B") to the logits.

This script trains the preset "attn-only-2l" on random token sequences that contain a
repeated segment of random length at a random place (so no fixed offset can stand in for
real pattern matching), then measures on fresh repeated random sequences [r, r]:

- the induction score of every head (mean attention from each token of the second copy to the
  token after its first occurrence) and the previous-token score;
- the loss on the first copy of r (unpredictable: about log vocab) vs the second (near 0 once
  an induction head works): in-context learning;
- the K-composition scores between the layer-0 and layer-1 heads.

    python examples/induction_heads.py            # ~1 min on an idle 2-core CPU (3000 steps)
    python examples/induction_heads.py --quick    # a few seconds (used by the tests)

Measured (seed 0, defaults): the model learns in context (loss on the second copy of r about
1.3 nats against 3.65 on the first) but within 3000 steps no head passed an induction score
of 0.5 (best ≈ 0.3, in layer 0, which cannot be a true induction head); the abrupt formation
of induction heads (Olsson et al. 2022) may need more steps than this default, which is kept
short. Try ``--steps 20000`` and watch the score column. The tests check the scores on a
hand-built induction circuit instead (tests/gpt/test_circuits.py).

With matplotlib installed it writes PNGs (scores per head, the best head's attention pattern,
the loss curve) to ``--out``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import nn  # noqa: E402
import tensorlab as tl  # noqa: E402
from gpt import circuits  # noqa: E402
from gpt.config import preset  # noqa: E402
from gpt.model import GPT  # noqa: E402


def make_batch(rng: np.random.Generator, batch: int, T: int, vocab: int, min_len: int = 3):
    """Sequences that repeat a random segment r of random length L (min_len ≤ L ≤ T/2) over
    and over, after a few random tokens: inputs x and next-token targets y, (batch, T) each.
    Every token after the first copy is predictable by looking up its earlier occurrence
    (induction), and, with L random, by nothing that counts positions."""
    seq = rng.integers(0, vocab, size=(batch, T + 1))
    for b in range(batch):
        L = int(rng.integers(min_len, (T + 1) // 2 + 1))
        start = int(rng.integers(0, 4))
        r = seq[b, start : start + L].copy()
        n = T + 1 - start
        seq[b, start:] = np.tile(r, -(-n // L))[:n]
    return seq[:, :-1], seq[:, 1:]


def train(args) -> dict:
    tl.manual_seed(args.seed)
    cfg = preset(
        "attn-only-2l",
        vocab_size=args.vocab,
        block_size=args.block_size,
        d_model=args.d_model,
        n_head=args.n_head,
        positional=args.positional,
    )
    model = GPT(cfg)
    opt = nn.optim.AdamW(
        nn.optim.param_groups_for_decay(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.99)
    )
    rng = np.random.default_rng(args.seed)
    seq_len = (args.block_size - 1) // 2
    eval_kw = dict(seq_len=seq_len, batch=8, seed=args.seed + 1)
    history, found = [], None
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        warmup = min(args.warmup, args.steps)
        lr = nn.optim.cosine_with_warmup(step - 1, warmup, args.steps, args.lr, args.lr / 10)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = make_batch(rng, args.batch, args.block_size, args.vocab)
        _, loss = model(tl.tensor(x), tl.tensor(y))
        model.zero_grad()
        loss.backward()
        nn.optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % args.eval_every == 0 or step == args.steps:
            rep = circuits.induction_report(model, **eval_kw)
            best = float(rep["induction"][-1].max())
            elapsed = time.perf_counter() - t0
            history.append(
                {
                    "iter": step,
                    "train_loss": loss.item(),
                    "first_half": rep["first_half"],
                    "second_half": rep["second_half"],
                    "induction": best,
                    "seconds": elapsed,
                }
            )
            print(
                f"step {step:>5}  loss {loss.item():.3f}  repeated: first half "
                f"{rep['first_half']:.3f}, second half {rep['second_half']:.3f}  best "
                f"induction score {best:.3f}  ({elapsed:.1f} s)",
                flush=True,
            )
            if found is None and best > 0.5:
                found = (step, elapsed)
    return {"model": model, "history": history, "found": found, "eval_kw": eval_kw}


def report(model, eval_kw: dict, found, out: Path | None) -> dict:
    rep = circuits.induction_report(model, **eval_kw)
    print()
    print(circuits.format_head_table(rep["induction"], "induction scores (layer × head)"))
    print()
    print(circuits.format_head_table(rep["previous_token"], "previous-token scores"))
    layer, head = np.unravel_index(np.argmax(rep["induction"]), rep["induction"].shape)
    print(
        f"\nbest induction head: layer {layer} head {head}, score "
        f"{rep['induction'][layer, head]:.3f}"
    )
    print(
        f"loss on repeated random tokens: first copy {rep['first_half']:.3f} nats, second "
        f"copy {rep['second_half']:.3f} (uniform guessing: {np.log(model.config.vocab_size):.3f})"
    )
    if found:
        print(f"first induction score > 0.5 at step {found[0]} ({found[1]:.1f} s of training)")
    else:
        print("no head reached an induction score of 0.5 in this run")
    if len(model.blocks) >= 2:
        k = circuits.composition_scores(model)["k"][1, :, 0]
        print()
        print(
            circuits.format_head_table(
                k,
                "K-composition of layer-1 heads (rows) with layer-0 heads",
                row="L1 h",
                col="L0 h",
            )
        )
    if out is not None:
        from gpt import plots

        if plots.available():
            out.mkdir(parents=True, exist_ok=True)
            plots.head_scores(rep["induction"], out / "induction_scores.png", "induction score")
            plots.head_scores(
                rep["previous_token"], out / "previous_token_scores.png", "previous-token score"
            )
            _, cache = circuits.run_with_cache(
                model, rep["tokens"][:1], names=f"blocks.{layer}.attn.hook_pattern"
            )
            plots.attention_pattern(
                cache[f"blocks.{layer}.attn.hook_pattern"][0, head],
                out / "induction_head_pattern.png",
                tokens=rep["tokens"][0],
                title=f"layer {layer} head {head} on [r, r]",
            )
            prev = int(np.argmax(rep["previous_token"][0]))
            _, cache = circuits.run_with_cache(
                model, rep["tokens"][:1], names="blocks.0.attn.hook_pattern"
            )
            plots.attention_pattern(
                cache["blocks.0.attn.hook_pattern"][0, prev],
                out / "previous_token_head_pattern.png",
                tokens=rep["tokens"][0],
                title=f"layer 0 head {prev} on [r, r]",
            )
            print(f"\nplots written to {out}/")
        else:
            print("\n(matplotlib is not installed: no plots; pip install 'tensorlab[plot]')")
    return rep


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a short run (seconds), for tests")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--vocab", type=int, default=32)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--positional", default="learned", help="learned | relative | rope | ...")
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("out/induction_heads"))
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    if args.steps is None:
        args.steps = 40 if args.quick else 3000
    if args.eval_every is None:
        args.eval_every = 20 if args.quick else 250
    if args.quick:
        args.block_size, args.batch = min(args.block_size, 32), min(args.batch, 8)
    result = train(args)
    if result["history"]:
        from gpt import plots

        if not args.no_plots and plots.available():
            args.out.mkdir(parents=True, exist_ok=True)
            plots.loss_curves(
                result["history"],
                args.out / "loss.png",
                keys=("train_loss", "first_half", "second_half"),
            )
    rep = report(
        result["model"], result["eval_kw"], result["found"], None if args.no_plots else args.out
    )
    return {**result, "report": rep}


if __name__ == "__main__":
    main()
