"""Induction heads appear in a two-layer attention-only transformer.

An induction head completes patterns: having seen "... A B ... A", it predicts "B". It needs
two heads in series (Elhage et al. 2021; Olsson et al. 2022): a layer-0 *previous-token head*
writes "the token before me was A" into each position's residual stream, and a layer-1 head
whose keys read that (K-composition) attends from the current "A" to the position right
after the earlier "A", and copies what it finds there ("B") to the logits.

This script trains the preset "attn-only-2l" (two layers of four heads, d_model 64, block 32)
on random tokens (vocabulary 128) in which one stretch copies the tokens D positions earlier,
with D spread evenly over the block (``make_batch``: so no fixed offset can stand in for
pattern matching), then measures on fresh repeated random sequences [r, r] (r: 15 distinct
tokens):

- the induction score of every head (mean attention from each token of the second copy to the
  token after its first occurrence) and the previous-token score;
- the loss on the first copy of r (unpredictable: about log vocab) vs the second (near 0 once
  an induction head works): in-context learning;
- the K-composition scores between the layer-0 and layer-1 heads.

Three settings differ from the preset, as in the circuits papers' toy models: no norm
(``norm="none"``, which also makes the QK and OV circuits exact), an untied unembedding, and
weights drawn with std 0.2 instead of GPT-2's 0.02. AdamW, lr 1e-2 (100 warmup steps, cosine
to 1e-3), no weight decay, batch 32, 6000 steps.

    python examples/induction_heads.py            # 75-85 s (session 10, 2-core VM)
    python examples/induction_heads.py --quick    # a few seconds (used by the tests)

Measured in session 10 (``OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python
examples/induction_heads.py --seed S``, defaults; the whole run took 75-85 s on this project's
2-core VM, on one core or two):

====  ================  ==============  ==========  ===========
seed  score > 0.5 at    best layer-1    loss, 1st   loss, 2nd
      step              induction score copy        copy
====  ================  ==============  ==========  ===========
0     800               0.933           4.918       0.235
1     800               0.931           4.922       0.242
2     800               0.939           4.924       0.201
====  ================  ==============  ==========  ===========

The head appears abruptly, as Olsson et al. (2022) describe: with seed 0 the best score is
0.08 at step 400, 0.48 at step 600 and 0.87 at step 800, and the second copy's loss falls from
4.5 to 0.7 nats with it. All four layer-1 heads become induction heads (0.91-0.93 with seed 0),
reading a layer-0 previous-token head (0.79). Seeds 0-15 all passed 0.5
by step 800 (7 of them at step 600), with best layer-1 scores of 0.92-0.95.

What did not work (seed 0, 3000-8000 steps): the earlier training data, a segment of random
length tiled over the sequence, let layer-0 heads attend at fixed offsets (12, 14: multiples
of the common periods) and copy, which lowers the second copy's loss to 1.3-1.7 nats with no
induction head (best score 0.3-0.45, in layer 0); one repeat [r, r] at a random place, or with a
random gap whose distance clusters near half the block, gave heads at those distances instead
(or heads that mix position with content and fail on shorter [r, r]). With LayerNorm no
induction head formed in 5000 steps unless the init was 0.2 and the unembedding untied; then
one formed at step 2100-2800 in six seeds, but in one of them the heads attended one
position too far (to the token after "B", reading "B" through the previous-token
head): second copy's loss 0.17 with an induction score of 0.06. ``--norm layernorm`` shows it.

Training is watched by ``gpt.circuits.CircuitWatcher``: every ``--eval-every`` steps it
records the scores above, the OV circuits' copying scores and the K-composition of each
layer-1 head next to the loss. With matplotlib installed the script writes PNGs to ``--out``:
``circuits_forming.png`` (the training loss and the loss on the second copy above, the best
score of each kind below, on one step axis: the phase change shows in both at once), the
scores per head, and the best heads' attention patterns.
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


def make_batch(
    rng: np.random.Generator, batch: int, T: int, vocab: int, min_len: int = 6, min_lag: int = 3
):
    """Random tokens with one stretch that copies the tokens D positions earlier: inputs x and
    next-token targets y, (batch, T) each.

    Per sequence: a lag D uniform in [min_lag, T + 1 - min_len], a stretch length W uniform in
    [min_len, T + 1 - D] and a start s, then seq[t] = seq[t - D] for s + D <= t < s + D + W.
    The first min(D, W) copied tokens are drawn without repeats. Every token of the stretch is
    predictable by induction (find the earlier occurrence of the current token, read what
    followed it), and by nothing that counts positions: D is spread evenly over the block, so
    no fixed offset is right often enough to compete. (Where W > D the copy overlaps its
    source and the stretch repeats with period D.)"""
    if T + 1 < min_lag + min_len:
        raise ValueError(f"block of {T} tokens is too short for min_lag + min_len - 1")
    seq = rng.integers(0, vocab, size=(batch, T + 1))
    for b in range(batch):
        D = int(rng.integers(min_lag, T + 1 - min_len + 1))
        W = int(rng.integers(min_len, T + 1 - D + 1))
        s = int(rng.integers(0, T + 1 - D - W + 1))
        n = min(D, W)
        if vocab >= n:
            seq[b, s : s + n] = rng.permutation(vocab)[:n]
        for t in range(s + D, s + D + W):
            seq[b, t] = seq[b, t - D]
    return seq[:, :-1], seq[:, 1:]


def train(args, log: bool = True) -> dict:
    """Train under a CircuitWatcher; ``log`` prints each record as it is made (a caller that
    prints the watcher's history itself, as examples/interpretability_tour.py does, passes
    False)."""
    tl.manual_seed(args.seed)
    cfg = preset(
        "attn-only-2l",
        vocab_size=args.vocab,
        block_size=args.block_size,
        d_model=args.d_model,
        n_head=args.n_head,
        positional=args.positional,
        norm=args.norm,
        tie_weights=args.tie_weights,
        init_std=args.init_std,
    )
    model = GPT(cfg)
    opt = nn.optim.AdamW(
        nn.optim.param_groups_for_decay(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.999)
    )
    rng = np.random.default_rng(args.seed)
    seq_len = (args.block_size - 1) // 2
    eval_kw = dict(seq_len=seq_len, batch=8, seed=args.seed + 1)
    # every eval_every steps: induction and previous-token scores, the loss on repeated
    # tokens, the OV copying and K-composition summaries (circuits.circuit_scores)
    watcher = circuits.CircuitWatcher(every=args.eval_every, first=False, **eval_kw)
    found = None
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        warmup = min(args.warmup, args.steps)
        lr = nn.optim.cosine_with_warmup(step - 1, warmup, args.steps, args.lr, args.lr / 10)
        for group in opt.param_groups:
            group["lr"] = lr
        x, y = make_batch(rng, args.batch, args.block_size, args.vocab, args.min_len)
        _, loss = model(tl.tensor(x), tl.tensor(y))
        model.zero_grad()
        loss.backward()
        nn.optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        record = watcher(step, model, loss, force=step == args.steps)
        if record is not None:
            best = float(record["induction"][-1].max())
            elapsed = record["seconds"] = time.perf_counter() - t0
            if log:
                print(
                    f"step {step:>5}  loss {record['loss']:.3f}  loss on the second copy "
                    f"{record['repeat_loss']:.3f}  best induction score {best:.3f}  best "
                    f"previous-token {record['previous_token'][0].max():.3f}  ({elapsed:.1f} s)",
                    flush=True,
                )
            if found is None and best > 0.5:
                found = (step, elapsed)
    return {"model": model, "watcher": watcher, "found": found, "eval_kw": eval_kw}


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
    p.add_argument("--vocab", type=int, default=128)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-head", type=int, default=4)
    p.add_argument("--positional", default="learned", help="learned | relative | rope | ...")
    p.add_argument("--min-len", type=int, default=6, help="shortest copied stretch")
    p.add_argument("--norm", default="none", help="none | layernorm | rmsnorm")
    p.add_argument("--init-std", type=float, default=0.2, help="std of the weight init")
    p.add_argument(
        "--tie-weights", action="store_true", help="unembedding = embeddingᵀ (default: untied)"
    )
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("out/induction_heads"))
    p.add_argument("--no-plots", action="store_true")
    args = p.parse_args(argv)
    if args.steps is None:
        args.steps = 40 if args.quick else 6000
    if args.eval_every is None:
        args.eval_every = 20 if args.quick else 200
    if args.quick:
        args.block_size, args.batch = min(args.block_size, 32), min(args.batch, 8)
    result = train(args)
    watcher = result["watcher"]
    if watcher.history:
        from gpt import plots

        if not args.no_plots and plots.available():
            args.out.mkdir(parents=True, exist_ok=True)
            watcher.plot(args.out / "circuits_forming.png")
    rep = report(
        result["model"], result["eval_kw"], result["found"], None if args.no_plots else args.out
    )
    return {**result, "history": watcher.history, "report": rep}


if __name__ == "__main__":
    main()
