"""Forward + backward of one pre-norm transformer block: tensorlab vs PyTorch eager (CPU).

    python benchmarks/bench_block.py [--reps 50] [--gelu tanh|none] [--profile] [--embedding]

The block (d_model 128, 4 heads, T 64, batch 12, float32, causal, GELU MLP 4x)::

    x = x + attn(ln1(x));  x = x + mlp(ln2(x))

Both sides time ``y = block(x); y.backward(g)`` with a fixed upstream gradient g, after a
warmup, and print the median over ``--reps`` repetitions. PyTorch gets the same number of
threads as NumPy's BLAS uses by default (threadpoolctl's report if installed, else the CPU
count), and uses its own fused ``scaled_dot_product_attention``. ``--profile`` prints a
cProfile of our block; ``--embedding`` times the candidate scatter-adds for an embedding
backward.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import nn  # noqa: E402
import tensorlab as tl  # noqa: E402

B, T, D, H = 12, 64, 128, 4


class Block(nn.Module):
    def __init__(self, approximate: str):
        super().__init__()
        self.ln1 = nn.LayerNorm(D)
        self.attn = nn.SelfAttention(D, H, causal=True)
        self.ln2 = nn.LayerNorm(D)
        self.mlp = nn.FeedForward(D, activation="gelu" if approximate == "none" else "gelu_tanh")

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


def blas_threads() -> int:
    try:
        from threadpoolctl import threadpool_info

        n = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
        if n:
            return int(n[0])
    except ImportError:
        pass
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        if os.environ.get(var):
            return int(os.environ[var])
    return os.cpu_count() or 1


def median_ms(step, reps: int, warmup: int = 10) -> float:
    for _ in range(warmup):
        step()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def interleaved_ms(steps, reps: int, warmup: int = 10) -> list[float]:
    """Median ms of each step, timed in turns."""
    times = [[] for _ in steps]
    for i in range(warmup + reps):
        for step, ts in zip(steps, times):
            t0 = time.perf_counter()
            step()
            if i >= warmup:
                ts.append((time.perf_counter() - t0) * 1e3)
    return [statistics.median(ts) for ts in times]


def ours(approximate: str):
    tl.manual_seed(0)
    block = Block(approximate)
    x = tl.randn(B, T, D, requires_grad=True)
    g = tl.randn(B, T, D)

    def step():
        block.zero_grad()
        x.grad = None
        block(x).backward(g)

    return step


def torch_step(approximate: str, threads: int):
    import torch
    import torch.nn as tnn
    import torch.nn.functional as TF

    torch.set_num_threads(threads)
    torch.manual_seed(0)

    class TorchBlock(tnn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = tnn.LayerNorm(D), tnn.LayerNorm(D)
            self.qkv, self.proj = tnn.Linear(D, 3 * D), tnn.Linear(D, D)
            self.fc, self.out = tnn.Linear(D, 4 * D), tnn.Linear(4 * D, D)

        def forward(self, x):
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
            q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))
            z = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(z.transpose(1, 2).reshape(B, T, D))
            return x + self.out(TF.gelu(self.fc(self.ln2(x)), approximate=approximate))

    block = TorchBlock()
    x = torch.randn(B, T, D, requires_grad=True)
    g = torch.randn(B, T, D)

    def step():
        block.zero_grad(set_to_none=True)
        x.grad = None
        block(x).backward(g)

    return step


def bench_embedding() -> None:
    from tensorlab.ops.index import scatter_add_rows

    rng = np.random.default_rng(0)
    for V in (65, 1024, 50257):
        idx = rng.integers(0, V, size=(B, T))
        g = rng.standard_normal((B, T, D)).astype(np.float32)

        def add_at(idx=idx, g=g, V=V):
            out = np.zeros((V, D), np.float32)
            np.add.at(out, idx.reshape(-1), g.reshape(-1, D))
            return out

        def sort_reduceat(idx=idx, g=g, V=V):
            return scatter_add_rows(idx, g, V)

        for fn in (add_at, sort_reduceat):
            print(f"embedding backward V={V:6d} {fn.__name__:14s} {median_ms(fn, 30):8.3f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--gelu", choices=("tanh", "none"), default="tanh")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--embedding", action="store_true")
    args = ap.parse_args()
    if args.embedding:
        bench_embedding()
        return
    threads = blas_threads()
    step = ours(args.gelu)
    if args.profile:
        median_ms(step, 5)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(args.reps):
            step()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return
    print(f"block: B={B} T={T} d_model={D} n_head={H}, float32, causal, GELU({args.gelu}) MLP 4x")
    print(f"threads: NumPy BLAS {threads}; torch.set_num_threads({threads})")
    try:
        other = torch_step(args.gelu, threads)
    except ImportError:
        print(f"tensorlab      : {median_ms(step, args.reps):8.3f} ms (median of {args.reps})")
        print("PyTorch not installed: no comparison")
        return
    # Interleaved (ours, torch, ours, torch, ...) so that both see the same machine load.
    t_ours, t_torch = interleaved_ms([step, other], args.reps)
    print(f"tensorlab      : {t_ours:8.3f} ms (median of {args.reps})")
    print(f"PyTorch eager  : {t_torch:8.3f} ms (median of {args.reps})")
    print(f"ratio ours/torch: {t_ours / t_torch:.2f}")


if __name__ == "__main__":
    main()
