"""Forward + backward of each fused kernel of the GPT block, tensorlab vs PyTorch eager (CPU).

    python benchmarks/bench_kernels.py [--rounds 6]
    python benchmarks/bench_kernels.py --device cuda   # against PyTorch eager CUDA
    python benchmarks/bench_kernels.py --device cuda --row-threads 32,64,128,256

Shapes are those of the nanoGPT CPU configuration (batch 12 × block 64 = 768 rows, d_model 128,
4 heads, MLP 512, vocabulary 65), float32; with ``--device cuda`` those of the 6-layer,
384-wide configuration (batch 64 × block 256, 6 heads). Each line times
``y = op(x); y.backward(g)`` on both sides, in turns (10 calls of ours, a pause, 10 of
PyTorch's, ...), and prints the median of each side's calls and the median over the turns of
the ratio of a turn's medians, ours to PyTorch's just after (as ``bench_train.py`` takes the
median of per-round ratios): this machine's speed drifts by up to 40% within a minute, and a
turn's pair sees the same drift (on the GPU each call ends with a synchronisation, so the
time is the kernels' and not only their launch). Both then time
``clip_grad_norm_`` of a 6-layer model's random gradients (6×128 on the CPU, 6×384 on the
GPU; the float64 norm, nn/optim.py: sum_of_squares, and the scaling) against PyTorch's
(``foreach``), and the AdamW update of the 6-layer model's parameters (nn/optim.py:
adam_kernel, one launch for all of them on a GPU) against PyTorch's default (``foreach``).
On the CPU the last lines time the reductions the fused kernels are built from: NumPy's ufunc
reduction over a short last axis against the same sum as a BLAS matrix-vector product
(``tensorlab/fused.py: _ArrayMath`` explains why the kernels use the second), and then the
ufuncs the elementwise kernels are made of, against a multiplication.

``--row-threads`` times the row kernels (tensorlab/cuda_rows.py) again for each block size
given: layer norm at GPT-2's width and cross-entropy on bfloat16 logits of a character and of
GPT-2's vocabulary (the block size of 128 was chosen without a GPU).

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
from tensorlab.fused import NUMPY  # noqa: E402

B, T, D, H, V = 12, 64, 128, 4, 65
PAUSE = 0.3  # seconds between turns
GPU_SHAPES = dict(B=64, T=256, D=384, H=6, V=65)


def in_turns(fns, rounds: int = 6, calls: int = 10, sync=lambda: None) -> list[list[float]]:
    """µs of each call of each function, one list per turn: timed in turns of ``calls``
    calls with a pause between turns, so that one library's idle BLAS/OpenMP threads (which
    spin for up to ~0.1 s after their last job) do not steal the cores from the other's."""
    turns = [[] for _ in fns]
    for r in range(rounds + 1):
        for fn, mine in zip(fns, turns):
            ts = []
            for _ in range(calls):
                t0 = time.perf_counter()
                fn()
                sync()
                ts.append(1e6 * (time.perf_counter() - t0))
            if r > 0:  # round 0 is the warm-up
                mine.append(ts)
            time.sleep(PAUSE)
    return turns


def median_us(turns: list[list[float]]) -> float:
    """The median of all the calls' times."""
    return statistics.median(t for ts in turns for t in ts)


def turn_ratio(ours: list[list[float]], theirs: list[list[float]]) -> float:
    """The median over the turns of (our turn's median) / (their next turn's median)."""
    return statistics.median(
        statistics.median(a) / statistics.median(b) for a, b in zip(ours, theirs)
    )


def cases(torch, device: str = "cpu"):
    """(name, our fwd+bwd, PyTorch's fwd+bwd) on the same random data."""
    TF = torch.nn.functional
    rng = np.random.default_rng(0)

    def pair(*shape):
        a = rng.standard_normal(shape).astype(np.float32)
        return (
            tl.tensor(a, device=device, requires_grad=True),
            torch.tensor(a, device=device, requires_grad=True),
        )

    def grads(*shape):
        g = rng.standard_normal(shape).astype(np.float32)
        return tl.tensor(g, device=device), torch.tensor(g, device=device)

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
    ln, lnt = nn.LayerNorm(D, device=device), torch.nn.LayerNorm(D, device=device)
    out.append(("layer norm", lambda: ln(x).backward(g), lambda: lnt(xt).backward(gt)))
    (h, ht), (g4, gt4) = pair(B, T, 4 * D), grads(B, T, 4 * D)
    out.append(("gelu (erf)", lambda: F.gelu(h).backward(g4), lambda: TF.gelu(ht).backward(gt4)))
    out += [  # the tanh form (GPT-2's) and SiLU (Llama's SwiGLU)
        (
            "gelu (tanh)",
            lambda: F.gelu(h, approximate="tanh").backward(g4),
            lambda: TF.gelu(ht, approximate="tanh").backward(gt4),
        ),
        ("silu", lambda: F.silu(h).backward(g4), lambda: TF.silu(ht).backward(gt4)),
    ]
    (qkv, qkvt), (g, gt) = pair(B, T, 3 * D), grads(B, T, D)

    def attn_ours():
        # AttentionFn takes TransformerLens's (batch, T, H, d_head) layout: no transposes
        q, k, v = (t.reshape(B, T, H, D // H) for t in tl.split(qkv, D, 2))
        y = AttentionFn.apply(
            q, k, v, scale=(D // H) ** -0.5, causal=True, mask=None, dropout_mask=None
        )
        y.reshape(B, T, D).backward(g)

    def attn_torch():
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in qkvt.split(D, dim=2))
        y = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.transpose(1, 2).reshape(B, T, D).backward(gt)

    out.append(("causal attention (from qkv)", attn_ours, attn_torch))
    (z, zt) = pair(B * T, V)
    t = rng.integers(0, V, B * T)
    t_ours, t_torch = tl.tensor(t, device=device), torch.tensor(t, device=device)
    out.append(
        (
            "cross-entropy",
            lambda: F.cross_entropy(z, t_ours).backward(),
            lambda: TF.cross_entropy(zt, t_torch).backward(),
        )
    )
    return out


def gpt_parameters() -> list[np.ndarray]:
    """The parameters of a 6-layer GPT of width D (6×384 on the GPU, 6×128 on the CPU)."""
    from gpt.config import GPTConfig
    from gpt.model import GPT

    with tl.no_grad():
        model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=6, n_head=H, d_model=D))
    return [p.numpy() for p in model.parameters()]


def clip_cases(torch, device: str):
    """(name, our clip_grad_norm_, PyTorch's) over gpt_parameters() with random gradients:
    the float64 norm (nn/optim.py: sum_of_squares) and the scaling of every gradient."""
    arrays = gpt_parameters()
    rng = np.random.default_rng(0)
    ours = [nn.Parameter(tl.tensor(a, device=device)) for a in arrays]
    theirs = [torch.tensor(a, device=device, requires_grad=True) for a in arrays]
    for p, t in zip(ours, theirs):
        g = rng.standard_normal(p.shape).astype(np.float32)
        p.grad, t.grad = tl.tensor(g, device=device), torch.tensor(g, device=device)
    return [
        (
            f"clip_grad_norm_, {len(arrays)} params",
            lambda: nn.optim.clip_grad_norm_(ours, 1.0),
            lambda: torch.nn.utils.clip_grad_norm_(theirs, 1.0),
        )
    ]


def adamw_cases(torch, device: str):
    """(name, our AdamW step, PyTorch's) over gpt_parameters(), float32."""
    arrays = gpt_parameters()
    rng = np.random.default_rng(0)
    params = [nn.Parameter(tl.tensor(a.copy(), device=device)) for a in arrays]
    for p in params:
        p.grad = tl.tensor(rng.standard_normal(p.shape).astype(np.float32), device=device)
    opt = nn.optim.AdamW(params, lr=1e-4)
    tparams = [torch.tensor(a, device=device, requires_grad=True) for a in arrays]
    for p in tparams:
        p.grad = torch.randn_like(p)
    topt = torch.optim.AdamW(tparams, lr=1e-4)
    return [(f"AdamW step, {len(arrays)} params", opt.step, topt.step)]


def row_cases(torch, device: str, threads: int):
    """(name, ours, PyTorch's) for the row kernels (tensorlab/cuda_rows.py) written for
    ``threads`` threads a block: layer norm at GPT-2's width (B·T rows of 768) and
    cross-entropy over B·T rows of a character vocabulary (65) and of GPT-2's (50257), its
    logits in bfloat16 as autocast gives them. Each kernel is traced anew for the block size
    (THREADS is read when a kernel's source is written)."""
    from nn.loss import CrossEntropyFn
    from nn.norm import LayerNormFn
    from tensorlab import cuda_rows

    cuda_rows.THREADS = threads
    for op in (LayerNormFn, CrossEntropyFn):
        for kernel in (op._forward_kernel, op._backward_kernel):
            kernel._c_plans.clear()
            kernel._c_traces.clear()
    TF = torch.nn.functional
    rng = np.random.default_rng(0)
    rows = B * T
    x = rng.standard_normal((rows, 768)).astype(np.float32)
    ln, lnt = nn.LayerNorm(768, device=device), torch.nn.LayerNorm(768, device=device)
    xo, xt = tl.tensor(x, device=device, requires_grad=True), torch.tensor(x, device=device)
    xt.requires_grad_()
    g = rng.standard_normal((rows, 768)).astype(np.float32)
    go, gt = tl.tensor(g, device=device), torch.tensor(g, device=device)
    out = [
        (f"layer norm 768, {threads} threads", lambda: ln(xo).backward(go),
         lambda: lnt(xt).backward(gt))
    ]  # fmt: skip
    for vocab, n in ((65, rows), (50257, min(rows, 2048))):
        z = rng.standard_normal((n, vocab)).astype(np.float32)
        t = rng.integers(0, vocab, n)
        zo = tl.tensor(z, device=device).astype("bfloat16").detach().requires_grad_()
        zt = torch.tensor(z, device=device).to(torch.bfloat16).requires_grad_()
        to, tt = tl.tensor(t, device=device), torch.tensor(t, device=device)
        out.append(
            (
                f"cross-entropy {n}x{vocab} bf16, {threads}",
                lambda zo=zo, to=to: F.cross_entropy(zo, to).backward(),
                lambda zt=zt, tt=tt: TF.cross_entropy(zt, tt).backward(),
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6, help="turns per side (10 calls each)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument(
        "--row-threads",
        default="",
        help="with --device cuda: also time the row kernels for these threads a block, e.g. "
        "32,64,128,256 (tensorlab/cuda_rows.py: THREADS)",
    )
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("bench_kernels.py compares with PyTorch: pip install torch==2.13.0")
    if args.device == "cuda":
        global B, T, D, H, V
        B, T, D, H, V = GPU_SHAPES.values()
        from tensorlab.backend import cupy

        if cupy is None or not torch.cuda.is_available():
            sys.exit("--device cuda needs CuPy and PyTorch with a CUDA GPU")

        def sync():
            cupy.cuda.Device().synchronize()
            torch.cuda.synchronize()

        where = f"{torch.cuda.get_device_name()}, B={B} T={T} D={D}"
    else:
        threads = int(os.environ.get("OPENBLAS_NUM_THREADS", os.cpu_count() or 1))
        torch.set_num_threads(threads)
        sync, where = (lambda: None), f"{threads} thread(s)"
    print(
        f"µs per forward + backward, medians of {10 * args.rounds} calls taken in turns of 10, "
        f"{where}; ratio = median over the {args.rounds} turns of ours / PyTorch's"
    )
    print(f"{'kernel':<32} {'tensorlab':>10} {'pytorch':>10} {'ratio':>7}")
    rows = cases(torch, args.device) + clip_cases(torch, args.device)
    if args.device == "cuda":
        rows += adamw_cases(torch, args.device)
    for name, ours, theirs in rows:
        a, b = in_turns([ours, theirs], args.rounds, sync=sync)
        print(f"{name:<32} {median_us(a):10.1f} {median_us(b):10.1f} {turn_ratio(a, b):6.2f}x")
    if args.device == "cuda":
        for threads in [int(n) for n in args.row_threads.split(",") if n]:
            for name, ours, theirs in row_cases(torch, args.device, threads):
                a, b = in_turns([ours, theirs], args.rounds, sync=sync)
                print(
                    f"{name:<32} {median_us(a):10.1f} {median_us(b):10.1f} {turn_ratio(a, b):6.2f}x"
                )
        return

    print("\nreductions on (768, 512) float32, µs: NumPy ufunc reduction vs BLAS mat-vec")
    x = np.random.default_rng(1).standard_normal((B * T, 4 * D)).astype(np.float32)
    means = [lambda: x.mean(axis=-1, keepdims=True), lambda: NUMPY.mean(x, axis=-1, keepdims=True)]
    a, b = in_turns(means, args.rounds)
    print(
        f"{'mean over the last axis':<32} {median_us(a):10.1f} {median_us(b):10.1f} "
        f"{turn_ratio(a, b):6.2f}x"
    )
    a, b = in_turns([lambda: x.sum(axis=0), lambda: NUMPY.sum(x, axis=0)], args.rounds)
    print(
        f"{'sum over rows':<32} {median_us(a):10.1f} {median_us(b):10.1f} {turn_ratio(a, b):6.2f}x"
    )

    # The elementwise kernels are chains of ufunc passes; these are the ones that cost more
    # than a multiplication (nn/activation.py chooses among them by these figures).
    print("\nufuncs on (768, 512) float32, µs, against one multiplication")
    z, out = -0.5 * x * x, np.empty_like(x)
    passes = {
        "multiply": lambda: np.multiply(x, x, out=out),
        "exp": lambda: np.exp(z, out=out),
        "exp2": lambda: np.exp2(z, out=out),
        "tanh": lambda: np.tanh(x, out=out),
        "divide 1/x": lambda: np.divide(1.0, x, out=out),
        "reciprocal": lambda: np.reciprocal(x, out=out),
        "copysign": lambda: np.copysign(out, x, out=out),
    }
    times = [median_us(t) for t in in_turns(list(passes.values()), args.rounds)]
    for name, t in zip(passes, times):
        print(f"{name:<32} {t:10.1f} {t / times[0]:10.1f}x")


if __name__ == "__main__":
    main()
