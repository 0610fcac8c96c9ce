"""Per-op overhead of the engine: forward + backward of a tiny elementwise op and of a
256×256 matmul, beside PyTorch eager (CPU) when it is installed.

    python benchmarks/bench_ops.py

The tiny op is measured inside a chain of 100 ``y = y * c`` on 4-element float32 tensors,
then one backward, divided by the number of ops: what one op costs inside a real graph.
Target (issue #2): at most 10 µs per tiny op, forward + backward.

Two forward-only rows time a NumPy array beside a tensor: ``tensor * array`` (the Tensor's
operator) and ``array * tensor``, which NumPy hands to ``Tensor.__array_ufunc__``
(tensorlab/numpy_protocol.py) and which should cost about as much.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorlab as tl  # noqa: E402
from benchmarks.common import median_time, row, try_import_torch  # noqa: E402

CHAIN = 100


def tiny_chain_ours():
    x = tl.tensor(np.ones(4, np.float32), requires_grad=True)
    c = tl.tensor(np.full(4, 1.0001, np.float32))

    def step():
        y = x
        for _ in range(CHAIN):
            y = y * c
        y.sum().backward()

    return step


def tiny_chain_torch(torch):
    x = torch.ones(4, requires_grad=True)
    c = torch.full((4,), 1.0001)

    def step():
        y = x
        for _ in range(CHAIN):
            y = y * c
        y.sum().backward()

    return step


def with_array_ours(array_first: bool):
    x = tl.tensor(np.ones(4, np.float32), requires_grad=True)
    a = np.full(4, 1.0001, np.float32)

    def step():
        y = x
        for _ in range(CHAIN):
            y = a * y if array_first else y * a

    return step


def with_array_torch(torch, array_first: bool):
    x = torch.ones(4, requires_grad=True)
    a = torch.full((4,), 1.0001)  # PyTorch has no NumPy operand: its tensor beside it

    def step():
        y = x
        for _ in range(CHAIN):
            y = a * y if array_first else y * a

    return step


def matmul_ours(n=256):
    rng = np.random.default_rng(0)
    a = tl.tensor(rng.standard_normal((n, n), dtype=np.float32), requires_grad=True)
    b = tl.tensor(rng.standard_normal((n, n), dtype=np.float32), requires_grad=True)
    g = tl.ones(n, n)

    def step():
        (a @ b).backward(g)

    return step


def matmul_torch(torch, n=256):
    a = torch.randn(n, n, requires_grad=True)
    b = torch.randn(n, n, requires_grad=True)
    g = torch.ones(n, n)

    def step():
        (a @ b).backward(g)

    return step


def main() -> None:
    torch = try_import_torch()
    if torch is not None:
        torch.set_num_threads(max(1, os.cpu_count() or 1))
    a = np.ones(4, np.float32)
    numpy_call = median_time(lambda: np.multiply(a, a), reps=50, inner=1000)
    ours_tiny = median_time(tiny_chain_ours(), reps=50) / (CHAIN + 1)
    ref_tiny = median_time(tiny_chain_torch(torch), reps=50) / (CHAIN + 1) if torch else None
    ours_ta = median_time(with_array_ours(False), reps=50) / CHAIN
    ours_at = median_time(with_array_ours(True), reps=50) / CHAIN
    ref_ta = median_time(with_array_torch(torch, False), reps=50) / CHAIN if torch else None
    ref_at = median_time(with_array_torch(torch, True), reps=50) / CHAIN if torch else None
    ours_mm = median_time(matmul_ours(), reps=50)
    ref_mm = median_time(matmul_torch(torch), reps=50) if torch else None

    print(
        f"tensorlab per-op overhead (median of 50 runs); reference: "
        f"{'PyTorch ' + torch.__version__ if torch else 'none (pip install torch==2.13.0)'}"
    )
    print(f"{'':<44} {'tensorlab':>10} {'pytorch':>10} {'ratio':>7}")
    print(row("bare numpy multiply (4 floats)", numpy_call, None))
    print(row("tiny elementwise op, forward+backward", ours_tiny, ref_tiny))
    print(row("tensor * array, forward", ours_ta, ref_ta))
    print(row("array * tensor, forward (__array_ufunc__)", ours_at, ref_at))
    print(row("256x256 matmul, forward+backward", ours_mm, ref_mm))
    target = "met" if ours_tiny <= 10e-6 else "NOT met"
    print(f"target <= 10 us per tiny op: {target} ({ours_tiny * 1e6:.1f} us)")


if __name__ == "__main__":
    main()
