"""Milliseconds per global training step: one process, two MPI processes and PyTorch, at the
same global batch (the nanoGPT CPU config by default).

    python benchmarks/bench_distributed.py              # 8 rounds
    python benchmarks/bench_distributed.py --large      # 6 layers × 384, block 256, batch 8
    python benchmarks/bench_distributed.py --ranks 1,2,4,8 --batch 24   # a scaling sweep

Each way of running is its own fresh process (``mpiexec -n 2`` for MPI), and the ways take
turns, round after round, so that the machine's drift hits them alike; each measurement is
the median of 10 steps after 3 warm-up steps. Printed: the median over rounds of each way's
time, and the median over rounds of the per-round ratios.

- ``1 process``: ``Trainer.step``, NumPy's BLAS on every core;
- ``1 rank alone``: one process, one BLAS thread, half the batch: one MPI rank's share of a
  step with the other rank's core left idle;
- ``MPI ×2``: ``mpiexec -n 2``, each rank one BLAS thread and half the batch;
- ``PyTorch``: benchmarks/torch_gpt.py, ``torch.set_num_threads(2)``.

The rank alone bounds what two processes can gain on two cores: two ranks side by side can at
best each run as fast as one alone (no sharing of memory bandwidth or caches, a free
all-reduce), so the throughput gain over one process is at most t(1 process) / t(1 rank
alone); the script prints that bound beside the measured gain.

With ``--ranks``, a scaling sweep instead: ``mpiexec -n N`` for each N given, one BLAS
thread per rank, the same global batch (``--batch``, which every N must divide), the Ns
taking turns round after round; printed as ranks × ms per step × sequences per second ×
speed-up over N = 1 × efficiency (speed-up / N), the table ``docs/distributed.md`` compares
with its model of step time against N. It needs as many cores as the largest N.

All of ours run the real ``gpt.train.Trainer.step`` on tiny Shakespeare (characters).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

CONFIGS = {
    "tiny": dict(n_layer=4, n_head=4, d_model=128, block_size=64, batch_size=12),
    "large": dict(n_layer=6, n_head=6, d_model=384, block_size=256, batch_size=8),
}
WARMUP, STEPS = 3, 10


def worker_ours(
    name: str, threads: int | None = None, half: bool = False, batch: int | None = None
) -> None:
    import numpy as np

    import nn
    from benchmarks.bench_train import DATA
    from gpt.config import GPTConfig
    from gpt.train import TrainConfig, Trainer
    from tensorlab.blas_threads import blas_threads

    cfg = dict(CONFIGS[name])
    default = cfg.pop("batch_size")
    batch = (batch or default) // (2 if half else 1)
    out = tempfile.mkdtemp()
    dist = nn.distributed.world()
    tcfg = TrainConfig(
        text=DATA,
        out_dir=os.path.join(out, "run"),
        batch_size=batch,
        progress=False,
    )
    trainer = Trainer(GPTConfig(**cfg), tcfg, dist=dist)
    dist.broadcast_parameters(trainer.model.parameters())
    times = []
    share = threads or max(1, (os.cpu_count() or 1) // dist.local_size)
    with blas_threads(share):  # as Trainer.run does
        for i in range(WARMUP + STEPS):
            dist.barrier()
            t0 = time.perf_counter()
            trainer.step()
            dist.barrier()
            if i >= WARMUP:
                times.append(time.perf_counter() - t0)
    shutil.rmtree(out, ignore_errors=True)
    if dist.rank == 0:
        print(json.dumps({"ms": 1e3 * float(np.median(times))}))


def worker_torch(name: str) -> None:
    import numpy as np
    import torch

    from benchmarks.bench_train import make_torch

    torch.set_num_threads(2)
    step = make_torch(CONFIGS[name])
    times = [sum(step()) for _ in range(WARMUP + STEPS)][WARMUP:]  # a step's phases, summed
    print(json.dumps({"ms": 1e3 * float(np.median(times))}))


def run(args: list[str], mpi: int = 0, blas: int | None = None) -> float | None:
    env = dict(os.environ)
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE"):
        env.pop(var, None)
    if blas is not None:
        env.update(OPENBLAS_NUM_THREADS=str(blas), OMP_NUM_THREADS=str(blas))
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    if mpi:
        cmd = [shutil.which("mpiexec"), "-n", str(mpi), *cmd]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if res.returncode != 0:
        if "No module named 'torch'" in res.stderr:
            return None
        raise RuntimeError(res.stderr[-3000:])
    return json.loads(res.stdout.strip().splitlines()[-1])["ms"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--large", action="store_true")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--half-batch", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ranks", default=None, help="a scaling sweep over these process counts")
    ap.add_argument("--batch", type=int, default=None, help="global batch (default: config's)")
    args = ap.parse_args()
    name = "large" if args.large else "tiny"
    if args.worker == "ours":
        return worker_ours(name, args.threads, args.half_batch, args.batch)
    if args.worker == "torch":
        return worker_torch(name)
    if args.ranks is not None:
        return sweep(name, args)
    have_mpi = shutil.which("mpiexec") is not None
    ways = {
        "1 process": lambda: run(["--worker", "ours"] + large(args)),
        "1 rank alone": lambda: run(
            ["--worker", "ours", "--threads", "1", "--half-batch"] + large(args), blas=1
        ),
        "MPI x2": (
            (lambda: run(["--worker", "ours"] + large(args), mpi=2, blas=1)) if have_mpi else None
        ),
        "PyTorch": lambda: run(["--worker", "torch"] + large(args)),
    }
    ways = {k: v for k, v in ways.items() if v is not None}
    times: dict[str, list[float]] = {k: [] for k in ways}
    for r in range(args.rounds):
        for k, fn in ways.items():
            ms = fn()
            if ms is not None:
                times[k].append(ms)
        print(
            f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in times.items() if v),
            file=sys.stderr,
        )
    cfg = CONFIGS[name]
    print(
        f"ms per global step, config {name} ({cfg}), medians over {args.rounds} rounds of "
        f"{STEPS} steps each"
    )
    for k, v in times.items():
        if v:
            print(f"  {k:<13} {statistics.median(v):8.1f} ms")

    def ratio(a: str, b: str) -> str:
        if not times.get(a) or not times.get(b):
            return "n/a"
        return f"{statistics.median(x / y for x, y in zip(times[a], times[b])):.3f}"

    print("median of per-round ratios:")
    print(f"  MPI x2 / PyTorch        {ratio('MPI x2', 'PyTorch')}   (target ≤ 0.8)")
    print(f"  1 process / MPI x2      {ratio('1 process', 'MPI x2')}   (throughput; target ≥ 1.7)")
    print(
        f"  bound on that gain      {ratio('1 process', '1 rank alone')}   "
        "(1 process / 1 rank alone)"
    )


def sweep(name: str, args) -> None:
    """The scaling table: ms per step for each process count, taking turns."""
    try:
        ranks = [int(n) for n in args.ranks.split(",")]
    except ValueError:
        sys.exit(f"--ranks takes process counts such as 1,2,4,8, not {args.ranks!r}")
    batch = args.batch or CONFIGS[name]["batch_size"]
    bad = [n for n in ranks if n < 1 or batch % n]
    if bad:
        sys.exit(f"--ranks {bad}: each must be ≥ 1 and divide the global batch {batch} (--batch)")
    if shutil.which("mpiexec") is None:
        sys.exit("--ranks needs mpiexec (pip install mpi4py mpich)")
    worker = ["--worker", "ours", "--threads", "1", "--batch", str(batch)] + large(args)
    times: dict[int, list[float]] = {n: [] for n in ranks}
    for r in range(args.rounds):
        for n in ranks:
            times[n].append(run(worker, mpi=n, blas=1))
        print(
            f"round {r + 1}: " + ", ".join(f"{n} {v[-1]:.1f}" for n, v in times.items()),
            file=sys.stderr,
        )
    model = {k: v for k, v in CONFIGS[name].items() if k != "batch_size"}
    print(
        f"config {name} ({model}), global batch {batch}, one BLAS thread per rank, "
        f"medians over {args.rounds} rounds of {STEPS} steps; {os.cpu_count()} cores"
    )
    print(f"{'ranks':>5} {'ms/step':>9} {'seq/s':>8} {'speed-up':>9} {'efficiency':>10}")
    one = statistics.median(times[1]) if 1 in times else float("nan")  # the speed-ups' base
    for n in ranks:
        ms = statistics.median(times[n])
        up = one / ms
        print(f"{n:>5} {ms:9.1f} {1e3 * batch / ms:8.1f} {up:8.2f}x {up / n:10.2f}")


def large(args) -> list[str]:
    return ["--large"] if args.large else []


if __name__ == "__main__":
    main()
