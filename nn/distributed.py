"""Data parallelism across processes with MPI: the same program on every process (a *rank*,
0..N−1), each on its share of the batch, gradients averaged after backward::

    mpiexec -n 2 python -m gpt train ...       # nothing else changes

Every rank holds the whole model, keeps rows [r·B/N, (r+1)·B/N) of the same global batch, and
after backward all-reduces ḡ = (1/N) Σ_r g_r, the gradient of the mean loss over the whole
batch; the same optimizer step then keeps the parameters identical on every rank. The
all-reduce packs the gradients into a few flat float32 *buckets* and calls MPI once per
bucket; the last one carries a few extra numbers (the step's loss, a stop request). How and
why: docs/distributed.md.

``world()`` gives this process's :class:`Distributed` when ``mpiexec`` started more than one
process, otherwise :class:`Solo`, whose collectives do nothing. CuPy gradients are staged
through host memory (an MPI that is not CUDA-aware cannot read device memory).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

import tensorlab as tl
from tensorlab.backend import device_of, to_device

# Environment variables that MPI launchers set in each process they start (MPICH/Hydra,
# Open MPI, Slurm's PMI): how a program knows it was started by mpiexec without importing MPI.
_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE")


class PeerError(RuntimeError):
    """Another rank failed in a :meth:`Distributed.together` block; the message names it."""


class Solo:
    """One process: rank 0 of 1; every collective returns its input."""

    rank, size, local_size = 0, 1, 1

    @contextlib.contextmanager
    def together(self):
        yield

    def broadcast_parameters(self, params) -> None:
        pass

    def average_gradients(self, params, extras=()) -> list[float]:
        return list(extras)

    def sum(self, values: np.ndarray) -> np.ndarray:
        return values

    def gather(self, obj) -> list:
        return [obj]

    def barrier(self) -> None:
        pass

    def abort(self, code: int) -> None:
        sys.exit(code)


class Distributed:
    """This process's place in an MPI job and the collectives training needs."""

    def __init__(self, comm, bucket_bytes: int = 25 * 2**20):
        from mpi4py import MPI

        self.MPI, self.comm = MPI, comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        # processes of this job on this machine (they share its cores)
        self.local_size = comm.Split_type(MPI.COMM_TYPE_SHARED).Get_size()
        self.bucket_bytes = bucket_bytes
        self._buckets: list[tuple[np.ndarray, list]] | None = None
        self._params: list | None = None

    @contextlib.contextmanager
    def together(self):
        """Run a block that has no collectives in it (setup: reading configs and files) on
        every rank, then agree: if it raised anywhere, it raises everywhere: a failed rank
        its own error, the others a :class:`PeerError` naming the first failed rank. Either
        way the error has ``agreed = True``: every rank knows, so the job can end normally
        rather than by MPI_Abort."""
        failure = None
        try:
            yield
        except Exception as err:
            failure = err
        reports = self.comm.allgather(None if failure is None else str(failure))
        failed = [r for r, msg in enumerate(reports) if msg is not None]
        if not failed:
            return
        if failure is None:
            first = failed[0]
            failure = PeerError(f"rank {first}/{self.size}: {reports[first]}")
        failure.agreed = True
        raise failure

    def broadcast_parameters(self, params) -> None:
        """Every rank takes rank 0's parameter values (in place)."""
        for p in params:
            host = np.ascontiguousarray(to_device(p.data, "cpu"))
            self.comm.Bcast(host, root=0)
            p.data[...] = to_device(host, device_of(p.data))

    def _plan(self, params, n_extras: int) -> list[tuple[np.ndarray, list]]:
        """Buckets of consecutive parameters, each one flat buffer of their common dtype; the
        last one has ``n_extras`` more slots at its end."""
        dtype = np.result_type(*[p.data.dtype for p in params])
        buckets, current, size = [], [], 0
        limit = max(self.bucket_bytes // dtype.itemsize, 1)
        for p in params:
            if current and size + p.data.size > limit:
                buckets.append((current, size))
                current, size = [], 0
            current.append((p, size))
            size += p.data.size
        buckets.append((current, size))
        out = []
        for i, (members, size) in enumerate(buckets):
            extra = n_extras if i == len(buckets) - 1 else 0
            out.append((np.empty(size + extra, dtype=dtype), members))
        return out

    def average_gradients(self, params, extras=()) -> list[float]:
        """Replace each parameter's ``.grad`` by its mean over the ranks (a missing gradient
        counts as zeros); returns ``extras`` summed over the ranks."""
        params, extras = list(params), [float(e) for e in extras]
        if self._buckets is None or self._params != params or len(extras) != self._n_extras:
            self._buckets, self._params = self._plan(params, len(extras)), params
            self._n_extras = len(extras)
        MPI, scale = self.MPI, 1.0 / self.size
        for buf, members in self._buckets:
            for p, at in members:
                view = buf[at : at + p.data.size]
                if p.grad is None:
                    view[...] = 0.0
                else:
                    view[...] = to_device(p.grad.data, "cpu").ravel()
            if members is self._buckets[-1][1]:
                buf[len(buf) - len(extras) :] = extras
            self.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
            for p, at in members:
                mean = buf[at : at + p.data.size].reshape(p.data.shape) * scale
                mean = to_device(mean.astype(p.data.dtype, copy=False), device_of(p.data))
                if p.grad is None:
                    p.grad = tl.as_tensor(mean)
                else:
                    p.grad.data[...] = mean
        last = self._buckets[-1][0]
        return [float(v) for v in last[len(last) - len(extras) :]]

    def sum(self, values: np.ndarray) -> np.ndarray:
        """Elementwise sum of a float64 array over the ranks."""
        out = np.array(values, dtype=np.float64)
        self.comm.Allreduce(self.MPI.IN_PLACE, out, op=self.MPI.SUM)
        return out

    def gather(self, obj) -> list | None:
        """Every rank's ``obj`` on rank 0 (None elsewhere)."""
        return self.comm.gather(obj, root=0)

    def barrier(self) -> None:
        self.comm.Barrier()

    def abort(self, code: int) -> None:
        """End every process of the job (one rank's error must not leave the others waiting
        in a collective forever). Before aborting, wait a moment: the lines this rank just
        printed travel through mpiexec's forwarder, and an abort that tears the job down
        first loses them (seen once in CI: an empty stderr)."""
        sys.stdout.flush()
        sys.stderr.flush()
        time.sleep(0.5)
        self.comm.Abort(code)


def world() -> Solo | Distributed:
    """The MPI world if this program was started by mpiexec with N > 1 processes, else Solo."""
    n = next((int(os.environ[v]) for v in _SIZE_VARS if v in os.environ), 1)  # the launcher's
    if n <= 1:
        return Solo()
    try:
        from mpi4py import MPI
    except ImportError as err:
        raise RuntimeError(
            f"started by an MPI launcher with {n} processes, but mpi4py is not installed: "
            "pip install -e '.[mpi]'"
        ) from err
    return Distributed(MPI.COMM_WORLD)


def fail(dist: Solo | Distributed, message: str, code: int) -> None:
    """Print one line and end the job. Ranks other than 0 wait a moment first: when every
    rank fails the same way (a bad flag), rank 0's line is the one printed."""
    if dist.size > 1 and dist.rank != 0:
        time.sleep(0.5)
    prefix = f"rank {dist.rank}/{dist.size}: " if dist.size > 1 and dist.rank != 0 else ""
    print(f"error: {prefix}{message}", file=sys.stderr, flush=True)
    dist.abort(code)
