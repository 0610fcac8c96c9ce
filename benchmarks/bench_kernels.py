"""Forward + backward of each fused kernel of the GPT block, tensorlab vs PyTorch eager (CPU).

    python benchmarks/bench_kernels.py [--rounds 6]

Shapes are those of the nanoGPT CPU configuration (batch 12 × block 64 = 768 rows, d_model 128,
4 heads, MLP 512, vocabulary 65), float32. Each line times ``y = op(x); y.backward(g)`` on both
sides, in turns (10 calls of ours, a pause, 10 of PyTorch's, ...), and prints the medians
and their ratio. The last lines time the reductions the fused kernels are built from: NumPy's
ufunc reduction over a short last axis against the same sum as a BLAS matrix-vector product
(``nn/linear.py`` explains why the kernels use the second).

This is where to look when ``bench_train.py`` is slower than PyTorch: the step is the sum of
these kernels (and of the GEMMs, which are BLAS on both sides).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import nn  # noqa: E402
import nn.functional as F  # noqa: E402
import tensorlab as tl  # noqa: E402
from nn.attention import AttentionFn  # noqa: E402
from nn.linear import mean_last, sum_rows  # noqa: E402

B, T, D, H, V = 12, 64, 128, 4, 65
PAUSE = 0.3  # seconds between turns


def in_turns(fns, rounds: int = 6, calls: int = 10) -> list[float]:
    """Median µs of each function, timed in turns of ``calls`` calls with a pause between
    turns, so that one library's idle BLAS/OpenMP threads (which spin for up to ~0.1 s after
    their last job) do not steal the cores from the other's."""
    times = [[] for _ in fns]
    for r in range(rounds + 1):
        for fn, ts in zip(fns, times):
            for _ in range(calls):
                t0 = time.perf_counter()
                fn()
                if r > 0:  # round 0 is the warm-up
                    ts.append(time.perf_counter() - t0)
            time.sleep(PAUSE)
    return [1e6 * statistics.median(ts) for ts in times]


def cases(torch):
    """(name, our fwd+bwd, PyTorch's fwd+bwd) on the same random data."""
    TF = torch.nn.functional
    rng = np.random.default_rng(0)

    def pair(*shape):
        a = rng.standard_normal(shape).astype(np.float32)
        return tl.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)

    def grads(*shape):
        g = rng.standard_normal(shape).astype(np.float32)
        return tl.tensor(g), torch.tensor(g)

    out = []
    for d_in, d_out in [(D, 3 * D), (D, 4 * D), (4 * D, D)]:
        (x, xt), (W, Wt), (b, bt) = pair(B, T, d_in), pair(d_in, d_out), pair(d_out)
        g, gt = grads(B, T, d_out)
        Wtt = Wt.detach().T.contiguous().requires_grad_()  # PyTorch stores (d_out, d_in)
        out.append(
            (
                f"linear {d_in}->{d_out}",
                lambda x=x, W=W, b=b, g=g: F.linear(x, W, b).backward(g),
                lambda xt=xt, Wtt=Wtt, bt=bt, gt=gt: TF.linear(xt, Wtt, bt).backward(gt),
            )
        )
    (x, xt), (g, gt) = pair(B, T, D), grads(B, T, D)
    ln, lnt = nn.LayerNorm(D), torch.nn.LayerNorm(D)
    out.append(("layer norm", lambda: ln(x).backward(g), lambda: lnt(xt).backward(gt)))
    (h, ht), (g4, gt4) = pair(B, T, 4 * D), grads(B, T, 4 * D)
    out.append(("gelu (erf)", lambda: F.gelu(h).backward(g4), lambda: TF.gelu(ht).backward(gt4)))
    (qkv, qkvt), (g, gt) = pair(B, T, 3 * D), grads(B, T, D)

    def attn_ours():
        q, k, v = (t.reshape(B, T, H, D // H).permute(0, 2, 1, 3) for t in tl.split(qkv, D, 2))
        y = AttentionFn.apply(
            q, k, v, scale=(D // H) ** -0.5, causal=True, mask=None, dropout_mask=None
        )
        y.permute(0, 2, 1, 3).reshape(B, T, D).backward(g)

    def attn_torch():
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in qkvt.split(D, dim=2))
        y = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.transpose(1, 2).reshape(B, T, D).backward(gt)

    out.append(("causal attention (from qkv)", attn_ours, attn_torch))
    (z, zt) = pair(B * T, V)
    t = rng.integers(0, V, B * T)
    out.append(
        (
            "cross-entropy",
            lambda: F.cross_entropy(z, tl.tensor(t)).backward(),
            lambda: TF.cross_entropy(zt, torch.tensor(t)).backward(),
        )
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6, help="turns per side (10 calls each)")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench_kernels.py compares with PyTorch: pip install torch==2.13.0")
    threads = int(os.environ.get("OPENBLAS_NUM_THREADS", os.cpu_count() or 1))
    torch.set_num_threads(threads)
    print(
        f"µs per forward + backward, medians of {10 * args.rounds} calls taken in turns of 10, "
        f"{threads} thread(s)"
    )
    print(f"{'kernel':<32} {'tensorlab':>10} {'pytorch':>10} {'ratio':>7}")
    for name, ours, theirs in cases(torch):
        a, b = in_turns([ours, theirs], args.rounds)
        print(f"{name:<32} {a:10.1f} {b:10.1f} {a / b:6.2f}x")

    print("\nreductions on (768, 512) float32, µs: NumPy ufunc reduction vs BLAS mat-vec")
    x = np.random.default_rng(1).standard_normal((B * T, 4 * D)).astype(np.float32)
    a, b = in_turns([lambda: x.mean(axis=-1, keepdims=True), lambda: mean_last(x)], args.rounds)
    print(f"{'mean over the last axis':<32} {a:10.1f} {b:10.1f} {a / b:6.2f}x")
    a, b = in_turns([lambda: x.sum(axis=0), lambda: sum_rows(x)], args.rounds)
    print(f"{'sum over rows':<32} {a:10.1f} {b:10.1f} {a / b:6.2f}x")


if __name__ == "__main__":
    main()
