"""Data parallelism on CPU threads: cut the batch into pieces, run the forward and backward of
each piece on its own thread, and add up their gradients.

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
gradient n_k / n instead of 1, so its gradients come out already weighted; the main thread
adds them into ``.grad``. The sum is the unsplit batch's gradient up to float rounding, not bit
for bit (it is added in a different order).

Randomness (dropout): piece k draws from its own generator, seeded from the shared one in
piece order before any thread starts (tensorlab.backend.thread_generators), so a run is
reproducible, and resumable from a checkpoint, whatever order the threads run in. The masks
differ from those an unsplit batch would draw.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import tensorlab as tl
from nn.optim import Optimizer
from tensorlab.backend import generator, thread_generators

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


def _run_pieces(run: Callable[[int], object], pieces: int) -> list:
    """[run(0), ..., run(pieces - 1)], at once: piece 0 on the calling thread, the others on
    the pool. Waits for every piece, even after one fails (the first error is raised)."""
    futures = [_pool(pieces - 1).submit(run, k) for k in range(1, pieces)]
    results = []
    try:
        results.append(run(0))
    finally:
        results += [f.result() for f in futures]
    return results


def _bounds(n: int, pieces: int) -> list[int]:
    """Where ``pieces`` near-equal consecutive pieces of ``n`` items start (and the end)."""
    return [round(k * n / pieces) for k in range(pieces + 1)]


def backward(
    loss_fn: Callable[..., tl.Tensor],
    batch: Sequence,
    params: Iterable[tl.Tensor],
    threads: int = 2,
) -> float:
    """Accumulate into each parameter's ``.grad`` the gradient of the whole batch's loss,
    computed in ``threads`` pieces at once; return that loss as a float.

    ``loss_fn(*piece)`` gets a slice (along axis 0) of every array or tensor in ``batch``, and
    must return the *mean* loss over that slice's examples (as ``F.cross_entropy`` does), so
    that the pieces' losses weighted by their sizes give the batch's. Like
    ``loss.backward()``, this adds to ``.grad``; zero the gradients before it.

        loss = nn.data_parallel.backward(lambda x, y: model(x, y)[1], (x, y),
                                         model.parameters(), threads=2)
    """
    batch = tuple(batch)
    if not batch:
        raise ValueError("data_parallel.backward: the batch is empty (no arrays given)")
    n = len(batch[0])
    for i, b in enumerate(batch):
        if len(b) != n:
            raise ValueError(
                f"data_parallel.backward: batch entries differ in length along axis 0: "
                f"entry 0 has {n}, entry {i} has {len(b)}"
            )
    if n == 0:
        raise ValueError("data_parallel.backward: the batch has no examples (length 0 on axis 0)")
    if threads < 1:
        raise ValueError(f"data_parallel.backward: threads must be ≥ 1, got {threads}")
    params = [p for p in params if p.requires_grad]
    pieces = max(1, min(threads, n))
    bounds = _bounds(n, pieces)
    device = getattr(batch[0], "device", "cpu")
    seeds = generator(device).integers(2**63, size=pieces)

    def run(k: int):
        lo, hi = bounds[k], bounds[k + 1]
        with thread_generators(seeds[k]):
            loss = loss_fn(*(b[lo:hi] for b in batch))
            seed_grad = tl.Tensor._wrap(np.asarray((hi - lo) / n, dtype=loss.dtype))
            grads = tl.grad(loss, params, seed_grad, allow_unused=True)
        return (hi - lo) / n * loss.item(), grads

    results = _run_pieces(run, pieces)
    for i, p in enumerate(params):
        parts = [grads[i].data for _, grads in results if grads[i] is not None]
        if not parts:
            continue
        total = parts[0] + parts[1] if len(parts) > 1 else parts[0].copy()  # owned memory:
        for part in parts[2:]:  # a returned gradient may be shared with another parameter's
            total += part
        if p.grad is None:
            p.grad = tl.Tensor._wrap(total)
        else:
            p.grad = tl.Tensor._wrap(p.grad.data + total)
    return sum(loss for loss, _ in results)


def step(optimizer, threads: int = 2) -> None:
    """``optimizer.step()`` with the parameters shared out among ``threads`` threads.

    An optimizer's update of one parameter reads and writes only that parameter's arrays and
    state (``Optimizer.update``), so the updates can run at once; the result is the same, bit
    for bit, as ``optimizer.step()``. Parameters are dealt out largest first to the thread
    with the least work so far, so the threads get about equal numbers of elements. An
    optimizer that overrides ``step`` instead of ``update`` is stepped as usual.
    """
    if threads < 1:
        raise ValueError(f"data_parallel.step: threads must be ≥ 1, got {threads}")
    work = [(p, g) for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
    if threads == 1 or len(work) < 2 or type(optimizer).update is Optimizer.update:
        optimizer.step()
        return
    pieces = min(threads, len(work))
    shares: list[list] = [[] for _ in range(pieces)]
    loads = [0] * pieces
    for p, g in sorted(work, key=lambda pg: -pg[0].size):
        k = loads.index(min(loads))
        shares[k].append((p, g))
        loads[k] += p.size

    def run(k: int) -> None:
        for p, g in shares[k]:
            optimizer.update(p, g)

    _run_pieces(run, pieces)


def evaluate(loss_fn: Callable[..., tl.Tensor], batches: Sequence, threads: int = 2) -> list[float]:
    """``loss_fn(*batch).item()`` for every batch, without recording a graph, the batches
    shared out among ``threads`` threads; the losses come back in the batches' order."""
    if threads < 1:
        raise ValueError(f"data_parallel.evaluate: threads must be ≥ 1, got {threads}")
    batches = list(batches)
    pieces = max(1, min(threads, len(batches)))
    bounds = _bounds(len(batches), pieces)

    def run(k: int) -> list[float]:
        with tl.no_grad():  # grad mode is per thread: each worker switches it off itself
            return [loss_fn(*b).item() for b in batches[bounds[k] : bounds[k + 1]]]

    return [loss for part in _run_pieces(run, pieces) for loss in part]
