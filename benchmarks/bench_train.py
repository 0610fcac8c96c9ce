"""Milliseconds per training iteration of a GPT here and in PyTorch eager (CPU), same run.

    python benchmarks/bench_train.py            # the nanoGPT CPU config (issue #5 target)
    python benchmarks/bench_train.py --large    # also 6 layers, 6 heads, 384 wide, block 256

One iteration = a random batch from tiny Shakespeare (characters), forward, backward,
gradient clipping at 1.0, and an AdamW step. Peak memory is the growth of the process's
maximum resident set during the timed loop, measured in a fresh subprocess per framework.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DATA = os.path.join(ROOT, "..", "shared", "data", "tinyshakespeare.txt")

CONFIGS = {
    "tiny": dict(n_layer=4, n_head=4, d_model=128, block_size=64, batch_size=12),
    "large": dict(n_layer=6, n_head=6, d_model=384, block_size=256, batch_size=8),
}


def load_ids():
    text = open(DATA, encoding="utf-8").read() if os.path.exists(DATA) else None
    if text is None:
        from gpt.data import default_text

        text = default_text()
    chars = sorted(set(text))
    lut = {c: i for i, c in enumerate(chars)}
    return np.array([lut[c] for c in text], dtype=np.int64), len(chars)


def run_ours(cfg: dict, iters: int, warmup: int) -> list[float]:
    import time

    import nn
    import tensorlab as tl
    from gpt.config import GPTConfig
    from gpt.data import get_batch
    from gpt.model import GPT

    ids, vocab = load_ids()
    tl.manual_seed(0)
    bs = cfg["batch_size"]
    mcfg = GPTConfig(vocab_size=vocab, **{k: v for k, v in cfg.items() if k != "batch_size"})
    model = GPT(mcfg)
    opt = nn.optim.AdamW(nn.optim.param_groups_for_decay(model, 0.1), lr=1e-3, betas=(0.9, 0.99))
    rng = np.random.default_rng(0)
    times = []
    for i in range(warmup + iters):
        x, y = get_batch(ids, mcfg.block_size, bs, rng)
        t0 = time.perf_counter()
        _, loss = model(tl.tensor(x), tl.tensor(y))
        model.zero_grad()
        loss.backward()
        nn.optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def run_torch(cfg: dict, iters: int, warmup: int) -> list[float]:
    import time

    import torch

    from benchmarks.torch_gpt import TorchGPT, make_optimizer

    torch.manual_seed(0)
    ids, vocab = load_ids()
    bs = cfg["batch_size"]
    model = TorchGPT(vocab, cfg["block_size"], cfg["n_layer"], cfg["n_head"], cfg["d_model"])
    opt = make_optimizer(model, 1e-3, 0.1)
    rng = np.random.default_rng(0)
    from gpt.data import get_batch

    times = []
    for i in range(warmup + iters):
        x, y = get_batch(ids, cfg["block_size"], bs, rng)
        t0 = time.perf_counter()
        _, loss = model(torch.from_numpy(x), torch.from_numpy(y))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def child(framework: str, name: str, iters: int, warmup: int) -> None:
    """Run one framework in this (fresh) process and print JSON with times and memory."""
    if framework == "torch":
        import torch

        torch.set_num_threads(int(os.environ.get("BENCH_THREADS", os.cpu_count() or 1)))
        torch.zeros(1)
    else:
        import nn  # noqa: F401
        import tensorlab  # noqa: F401
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fn = run_torch if framework == "torch" else run_ours
    times = fn(CONFIGS[name], iters, warmup)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"median_ms": 1e3 * float(np.median(times)), "peak_mb": (peak - base) / 1024}))


def measure(framework: str, name: str, iters: int, warmup: int) -> dict | None:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        framework,
        "--config",
        name,
        "--iters",
        str(iters),
        "--warmup",
        str(warmup),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        if framework == "torch" and "No module named 'torch'" in res.stderr:
            return None
        raise RuntimeError(res.stderr)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--large", action="store_true")
    ap.add_argument("--iters", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--child", default=None)
    ap.add_argument("--config", default="tiny")
    args = ap.parse_args()
    if args.child:
        child(args.child, args.config, args.iters, args.warmup)
        return
    names = ["tiny", "large"] if args.large else ["tiny"]
    print(
        f"ms per training iteration (median of {args.iters}, after {args.warmup} warm-up); "
        "peak = growth of max RSS during the loop"
    )
    print(
        f"{'config':<8} {'tensorlab ms':>13} {'pytorch ms':>11} {'ratio':>7} "
        f"{'tensorlab MB':>13} {'pytorch MB':>11}"
    )
    for name in names:
        iters = args.iters if name == "tiny" else max(5, args.iters // 4)
        ours = measure("ours", name, iters, args.warmup)
        ref = measure("torch", name, iters, args.warmup)
        ratio = f"{ours['median_ms'] / ref['median_ms']:6.2f}x" if ref else "     -"
        ref_ms = f"{ref['median_ms']:11.1f}" if ref else "          -"
        ref_mb = f"{ref['peak_mb']:11.1f}" if ref else "          -"
        print(
            f"{name:<8} {ours['median_ms']:13.1f} {ref_ms} {ratio} {ours['peak_mb']:13.1f} {ref_mb}"
        )


if __name__ == "__main__":
    main()
