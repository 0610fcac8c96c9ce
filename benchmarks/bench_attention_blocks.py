"""Causal attention against PyTorch's ``scaled_dot_product_attention``, and on the CPU in query
blocks against one block: µs per forward + backward of ``AttentionFn``.

    python benchmarks/bench_attention_blocks.py                  # the CPU
    python benchmarks/bench_attention_blocks.py --device cuda    # a GPU: the flash kernels

On a GPU ``AttentionFn`` runs nn/flash_attention.cu, which has no blocks (it writes no scores):
there each shape runs it and PyTorch's SDPA, and the ratio is the one issue 46 asks about
(GPT-2 small's layer, 8 × 1024 positions, within 1.3× of SDPA). On the CPU
(nn/attention.py: ``query_blocks``):

Causal scores above the diagonal are masked for every query of a block of rows whose last
query comes before them, so a block's scores can stop at its last query's key: n blocks
compute (n + 1)/2n of the (T_q, T_k) arrays. Each shape runs with the library's blocks
(``BLOCK_ROWS`` queries at least, ``MAX_BLOCKS`` at most), with the blocks that other
settings give (``--rows``), with one block of everything, and PyTorch's
``scaled_dot_product_attention(is_causal=True)``, all in one process, taking turns (a pause
between turns, so that idle BLAS threads stop spinning). Prints medians and the ratio of each
setting to one block (below 1: blocks pay) and to PyTorch.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import nn.attention  # noqa: E402
import tensorlab as tl  # noqa: E402
from benchmarks.common import try_import_torch  # noqa: E402
from nn.attention import AttentionFn  # noqa: E402

PAUSE = 0.3  # seconds between turns on the CPU (none on a GPU, which has no spinning threads)
# (batch, time, heads, head width): the nanoGPT CPU config's layer, the 6 × 384 config at its
# CPU batch of 8, and GPT-2 small's layer at one sequence of 1024 (the GPU: its batch of 8)
SHAPES = {
    "cpu": [(12, 64, 4, 32), (8, 256, 6, 64), (1, 1024, 12, 64)],
    "cuda": [(12, 64, 4, 32), (64, 256, 6, 64), (8, 1024, 12, 64)],
}
ONE_BLOCK = 10**9  # block rows that leave every input in one block


@contextlib.contextmanager
def block_rows(rows: int | None):
    """AttentionFn's query blocks on the CPU of at least ``rows`` rows (None: the library's),
    for a while."""
    library = nn.attention.BLOCK_ROWS
    nn.attention.BLOCK_ROWS = library if rows is None else rows
    try:
        yield
    finally:
        nn.attention.BLOCK_ROWS = library


def shape_times(B, T, H, d, device, settings, rounds, calls, sync, torch, dtype) -> dict:
    """{setting: median µs}: each block rows in ``settings`` and PyTorch, in turns, with
    inputs of ``dtype`` on both sides."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((B, T, H, d)).astype(np.float32) for _ in range(4)]
    q, k, v = (
        tl.tensor(a, device=device).astype(dtype).detach().requires_grad_() for a in arrays[:3]
    )
    g = tl.tensor(arrays[3], device=device).astype(dtype)
    params = dict(scale=d**-0.5, causal=True, mask=None, dropout_mask=None)

    def ours(rows):
        def run():
            q.grad = k.grad = v.grad = None
            with block_rows(rows):
                AttentionFn.apply(q, k, v, **params).backward(g)

        return run

    fns = {rows: ours(rows) for rows in settings}
    if torch is not None:
        heads_first = [a.transpose(0, 2, 1, 3) for a in arrays]
        kind = getattr(torch, dtype)
        tq, tk, tv = (
            torch.tensor(a, device=device, dtype=kind, requires_grad=True) for a in heads_first[:3]
        )
        tg = torch.tensor(heads_first[3], device=device, dtype=kind)

        def theirs():
            tq.grad = tk.grad = tv.grad = None
            torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True).backward(
                tg
            )

        fns["PyTorch"] = theirs
    times = {key: [] for key in fns}
    for r in range(rounds + 1):
        for key, fn in fns.items():
            for _ in range(calls):
                t0 = time.perf_counter()
                fn()
                sync()
                if r:  # round 0 warms up
                    times[key].append(time.perf_counter() - t0)
            time.sleep(PAUSE if device == "cpu" else 0)
    return {key: 1e6 * statistics.median(ts) for key, ts in times.items()}


def blocks(rows: int, T: int) -> int:
    """How many query blocks a causal (T, T) input gets with blocks of ``rows`` rows."""
    return len(nn.attention.query_blocks(T, T, True, None, rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--rounds", type=int, default=5, help="turns per setting")
    ap.add_argument("--calls", type=int, default=0, help="calls per turn (0: by shape)")
    ap.add_argument("--rows", type=int, nargs="*", default=[64], help="other block rows to try")
    ap.add_argument(
        "--dtype",
        default="float32",
        choices=["float32", "bfloat16", "float16"],
        help="of q, k, v (a GPU's half types: the tensor-core kernels)",
    )
    args = ap.parse_args()
    torch = try_import_torch()
    sync = lambda: None  # noqa: E731
    if args.device == "cuda":
        import cupy

        sync = cupy.cuda.Device().synchronize
    library = nn.attention.BLOCK_ROWS
    settings = [library, *[r for r in args.rows if r != library], ONE_BLOCK]
    kind = f"BLOCK_ROWS = {library}, MAX_BLOCKS = {nn.attention.MAX_BLOCKS}"
    if args.device == "cuda":  # the flash kernels: no blocks
        settings, kind = [None], "nn/flash_attention.cu"
    print(
        f"causal attention forward + backward in {args.dtype}, µs (medians of {args.rounds} "
        f"turns); {kind}"
    )
    for B, T, H, d in SHAPES[args.device]:
        calls = args.calls or max(1, int(2e7 // (B * H * T * T)))
        med = shape_times(
            B, T, H, d, args.device, settings, args.rounds, calls, sync, torch, args.dtype
        )
        print(f"\nB={B} T={T} H={H} d={d}  ({calls} calls a turn)")
        for key, us in med.items():
            if key == "PyTorch":
                name, nb = "PyTorch", ""
            elif key is None:
                name, nb = "flash", ""
            else:
                name = "one block" if key == ONE_BLOCK else f"{key}+ rows"
                n = blocks(key, T)
                nb = f"{n} block{'s' if n > 1 else ''}"
            vs_torch = f"{us / med['PyTorch']:6.2f}x PyTorch" if "PyTorch" in med else ""
            vs_one = f"{us / med[ONE_BLOCK]:5.2f}x one block" if ONE_BLOCK in med else ""
            print(f"  {name:<12} {nb:<9} {us:10.0f}   {vs_one}   {vs_torch}")


if __name__ == "__main__":
    main()
