"""Data parallelism on CPU threads: a wrapper around the plain training step.

    model = nn.DataParallel(gpt, threads=2)
    _, loss = model(x, y)          # the batch's pieces run forward on their own threads
    loss.backward()                # ... and backward, on the same threads; gradients added
    optimizer.step()

``DataParallel(module)(*batch)`` cuts the batch into pieces, runs ``module(*piece)`` for each
on its own thread, and returns the batch's loss as one graph node whose inputs are the
module's parameters: when ``loss.backward()`` reaches it, its local gradient is each piece's
backward, run again on the pieces' threads, and summed. The engine then stores the sums in
``.grad`` as for any other node, so the training step itself is unchanged.

Why threads help at all in Python: NumPy lets go of the interpreter lock (the GIL) inside
every ufunc loop and every BLAS call, and that is where a training step spends its time. So
while one thread is in a matrix product or a layer norm, another can be in its own. Only the
Python between NumPy calls (op dispatch, the backward loop: a few milliseconds per step of
the tiny GPT benchmark) still runs one thread at a time.

Why not leave the cores to BLAS, as NumPy does by default: BLAS parallelises only the matrix
products. The elementwise work (GELU, layer norm, softmax, cross-entropy) runs on one core.
Split by batch, everything runs on every core. Each piece's matrix products must then use
only its share of the cores (:func:`blas_threads_per_piece`: one BLAS thread each on two
cores, set by ``tensorlab.blas_threads.blas_threads`` around the training loop); otherwise the
pieces' products each try to use all cores and slow each other down several times over.

The gradient is the whole batch's: a loss that is a mean over the batch's n examples splits as

    L = Σ_k (n_k / n) L_k,   so   ∇L = Σ_k (n_k / n) ∇L_k,

where piece k has n_k examples and mean loss L_k. Each piece's backward starts from the seed
gradient n_k / n instead of 1, so its gradients come out already weighted, and the node adds
them up. The sum is the unsplit batch's gradient up to float rounding, not bit for bit (it is
added in a different order).

Randomness (dropout): piece k draws from its own generator, seeded from the shared one in
piece order before any thread starts (tensorlab.backend.thread_generators), so a run is
reproducible, and resumable from a checkpoint, whatever order the threads run in. The masks
differ from those an unsplit batch would draw.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import tensorlab as tl
from nn.module import Module
from tensorlab import Tensor
from tensorlab.backend import generator, thread_generators
from tensorlab.function import Function

_pools: dict[int, ThreadPoolExecutor] = {}


def cores() -> int:
    """The number of CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def blas_threads_per_piece(pieces: int) -> int:
    """BLAS threads for each piece's matrix products, so that the pieces together fill the
    cores without asking for more threads than there are cores: cores // pieces, at least 1.
    (Measured only on 2 cores, where it is 1.)"""
    return max(1, cores() // max(1, pieces))


def _pool(workers: int) -> ThreadPoolExecutor:
    """A pool of ``workers`` threads, kept for the life of the process (one per size)."""
    pool = _pools.get(workers)
    if pool is None:
        pool = _pools[workers] = ThreadPoolExecutor(workers, thread_name_prefix="data_parallel")
    return pool


def run_pieces(run: Callable[[int], object], pieces: int) -> list:
    """[run(0), ..., run(pieces - 1)], at once: piece 0 on the calling thread, the others on
    the pool. Waits for every piece, even after one fails (the first error is raised)."""
    futures = [_pool(pieces - 1).submit(run, k) for k in range(1, pieces)]
    results = []
    try:
        results.append(run(0))
    finally:
        results += [f.result() for f in futures]
    return results


class PiecesLossFn(Function):
    """L = Σ_k w_k L_k, the batch's loss from its pieces' losses (w_k = n_k / n), as a node
    whose inputs are the parameters θ. Its local gradient is ∂L/∂θ = Σ_k w_k ∇L_k: piece k's
    own backward, seeded with g · w_k, each on its own thread (``losses`` holds the pieces'
    graphs). ``apply(*params, losses=..., weights=...)``."""

    def forward(ctx, *params, losses, weights):
        total = sum(w * loss.item() for w, loss in zip(weights, losses))
        return np.asarray(total, dtype=losses[0].dtype)

    def backward(ctx, g):
        if tl.is_grad_enabled():
            raise RuntimeError(
                "DataParallel: create_graph=True is not supported (the pieces' gradients are "
                "added as arrays); call the wrapped module directly for higher derivatives"
            )
        params, losses, weights = ctx.inputs, ctx.params["losses"], ctx.params["weights"]

        def run(k: int):
            seed = Tensor._wrap(np.asarray(g.item() * weights[k], dtype=losses[k].dtype))
            return tl.grad(losses[k], params, seed, allow_unused=True)

        parts = run_pieces(run, len(losses))
        grads = []
        for i in range(len(params)):
            arrays = [part[i].data for part in parts if part[i] is not None]
            if not arrays:
                grads.append(None)
                continue
            total = arrays[0] + arrays[1] if len(arrays) > 1 else arrays[0].copy()  # owned:
            for a in arrays[2:]:  # a returned gradient may share memory with another one
                total += a
            grads.append(total)
        return tuple(grads)


class DataParallel(Module):
    """Run ``module`` on ``threads`` pieces of each batch at once (see the module docstring).

    ``forward(*batch)`` slices every array or tensor of ``batch`` along axis 0 and calls
    ``module(*piece)``, which must return ``(output, loss)`` with the *mean* loss over the
    piece's examples (as GPT and the encoder-decoder do). Returns ``(None, loss)``: the
    pieces' outputs are not gathered. Dropout: piece k draws from its own generator, seeded
    from the device's generator in piece order, so a run is reproducible whatever order the
    threads run in (the masks differ from those of an unsplit batch). The module's state dict
    is its own: save ``module``, not the wrapper.
    """

    def __init__(self, module: Module, threads: int = 2):
        super().__init__()
        if threads < 1:
            raise ValueError(f"DataParallel: threads must be ≥ 1, got {threads}")
        self.module, self.threads = module, threads

    def forward(self, *batch):
        if not batch:
            raise ValueError("DataParallel: the batch is empty (no arrays given)")
        n = len(batch[0])
        for i, b in enumerate(batch):
            if len(b) != n:
                raise ValueError(
                    f"DataParallel: batch entries differ in length along axis 0: entry 0 "
                    f"has {n}, entry {i} has {len(b)}"
                )
        if n == 0:
            raise ValueError("DataParallel: the batch has no examples (length 0 on axis 0)")
        pieces = min(self.threads, n)
        bounds = [round(k * n / pieces) for k in range(pieces + 1)]
        seeds = generator(getattr(batch[0], "device", "cpu")).integers(2**63, size=pieces)
        recording = tl.is_grad_enabled()  # grad mode is per thread: hand it to the workers

        def run(k: int):
            lo, hi = bounds[k], bounds[k + 1]
            with thread_generators(seeds[k]), tl.set_grad_enabled(recording):
                return self.module(*(b[lo:hi] for b in batch))[1]

        losses = run_pieces(run, pieces)
        weights = [(bounds[k + 1] - bounds[k]) / n for k in range(pieces)]
        params = [p for p in self.module.parameters() if p.requires_grad]
        return None, PiecesLossFn.apply(*params, losses=losses, weights=weights)

    def extra_repr(self) -> str:
        return f"threads={self.threads}"
