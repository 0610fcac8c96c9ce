"""Quality target (issue #5): validation loss after 2000 iterations on tiny Shakespeare,
character level, nanoGPT's CPU configuration, here and in PyTorch trained the same way.

    python benchmarks/bench_shakespeare.py                 # 3 seeds each (about 15 min)
    python benchmarks/bench_shakespeare.py --seeds 1 --iters 500   # a quick look

Configuration (nanoGPT README, "I only have a macbook"): n_layer 4, n_head 4, d_model 128,
block_size 64, batch_size 12, dropout 0, 2000 iterations, lr 1e-3 with cosine decay to 1e-4
(warmup 100), AdamW (β = 0.9, 0.99, weight decay 0.1 on matrices), gradient clipping 1.0,
learned positions, GELU, pre-LayerNorm, tied head. The first 90% of the text trains, the
last 10% validates; the validation loss is the mean over 200 random batches.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.bench_train import load_ids  # noqa: E402
from gpt.data import get_batch, split_ids  # noqa: E402
from gpt.train import TrainConfig, learning_rate  # noqa: E402

SHAPE = dict(n_layer=4, n_head=4, d_model=128, block_size=64)


def schedule(iters: int) -> TrainConfig:
    return TrainConfig(max_iters=iters, learning_rate=1e-3, min_lr=1e-4, warmup_iters=100)


def val_loss(loss_fn, val, seed: int, batches: int = 200) -> float:
    rng = np.random.default_rng([seed, 999])
    return statistics.fmean(
        loss_fn(*get_batch(val, SHAPE["block_size"], 12, rng)) for _ in range(batches)
    )


def train_ours(train, val, vocab: int, seed: int, iters: int) -> tuple[float, float]:
    """The step of ``python -m gpt train`` in one process."""
    import nn
    import tensorlab as tl
    from gpt.config import GPTConfig
    from gpt.model import GPT

    tl.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=vocab, **SHAPE))
    run = model
    groups = nn.optim.param_groups_for_decay(model, 0.1)
    opt = nn.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
    cfg, rng = schedule(iters), np.random.default_rng(seed)
    t0 = time.perf_counter()
    for it in range(iters):
        for group in opt.param_groups:
            group["lr"] = learning_rate(it, cfg)
        x, y = get_batch(train, SHAPE["block_size"], 12, rng)
        opt.zero_grad()
        _, loss = run(tl.tensor(x), tl.tensor(y))
        loss.backward()
        nn.optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    seconds = time.perf_counter() - t0
    with nn.evaluating(model):
        v = val_loss(lambda x, y: model(tl.tensor(x), tl.tensor(y))[1].item(), val, seed)
    return v, seconds


def train_torch(train, val, vocab: int, seed: int, iters: int) -> tuple[float, float]:
    import torch

    from benchmarks.torch_gpt import TorchGPT, make_optimizer

    torch.manual_seed(seed)
    model = TorchGPT(
        vocab, SHAPE["block_size"], SHAPE["n_layer"], SHAPE["n_head"], SHAPE["d_model"]
    )
    opt = make_optimizer(model, 1e-3, 0.1)
    cfg, rng = schedule(iters), np.random.default_rng(seed)
    t0 = time.perf_counter()
    for it in range(iters):
        for group in opt.param_groups:
            group["lr"] = learning_rate(it, cfg)
        x, y = get_batch(train, SHAPE["block_size"], 12, rng)
        _, loss = model(torch.from_numpy(x), torch.from_numpy(y))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    seconds = time.perf_counter() - t0
    model.eval()
    with torch.no_grad():
        v = val_loss(
            lambda x, y: model(torch.from_numpy(x), torch.from_numpy(y))[1].item(), val, seed
        )
    return v, seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--only", choices=["ours", "torch"], default=None)
    args = ap.parse_args()
    ids, vocab = load_ids()
    train, val = split_ids(ids, 0.1)
    runners = {"tensorlab": train_ours, "pytorch": train_torch}
    if args.only:
        runners = {k: v for k, v in runners.items() if k.startswith(args.only[:5])}
    results: dict[str, list[float]] = {k: [] for k in runners}
    for seed in range(args.seeds):
        for name, fn in runners.items():
            try:
                v, s = fn(train, val, vocab, seed, args.iters)
            except ImportError as err:
                print(f"{name}: skipped ({err})")
                continue
            results[name].append(v)
            print(
                f"seed {seed} {name:<9} val loss {v:.4f}  ({s:.0f} s, "
                f"{1e3 * s / args.iters:.1f} ms/iter)",
                flush=True,
            )
    print(f"\nvalidation loss after {args.iters} iterations (mean of {args.seeds} seeds):")
    for name, vs in results.items():
        if vs:
            print(
                f"  {name:<9} {statistics.fmean(vs):.4f}  (seeds: "
                f"{', '.join(f'{v:.4f}' for v in vs)})"
            )
    if all(results.values()) and len(results) == 2:
        diff = statistics.fmean(results["tensorlab"]) - statistics.fmean(results["pytorch"])
        print(f"  difference {diff:+.4f} (target: |diff| <= 0.02 and tensorlab <= 1.91)")


if __name__ == "__main__":
    main()
