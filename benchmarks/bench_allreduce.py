"""Milliseconds of one gradient all-reduce (``Distributed.average_gradients``) for the
nanoGPT CPU model and the 6-layer, 384-wide one: the share of a step that overlapping the
all-reduce with backward could save at most.

    OPENBLAS_NUM_THREADS=1 mpiexec -n 2 python benchmarks/bench_allreduce.py
"""

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import nn  # noqa: E402
import tensorlab as tl  # noqa: E402
from gpt.config import GPTConfig  # noqa: E402
from gpt.model import GPT  # noqa: E402

SHAPES = {
    "tiny": dict(n_layer=4, n_head=4, d_model=128, block_size=64),
    "small-char": dict(n_layer=6, n_head=6, d_model=384, block_size=256),
}


def main() -> None:
    dist = nn.distributed.world()
    for name, shape in SHAPES.items():
        model = GPT(GPTConfig(vocab_size=65, **shape))
        params = model.parameters()
        for p in params:
            p.grad = tl.tensor(np.ones(p.shape, np.float32))
        times = []
        for _ in range(30):
            dist.barrier()
            t0 = time.perf_counter()
            dist.average_gradients(params, [1.0, 0.0])
            times.append(time.perf_counter() - t0)
        if dist.rank == 0:
            print(
                f"{name}: {model.num_parameters():,} parameters, all-reduce "
                f"{1e3 * np.median(times[5:]):.2f} ms (median of 25, {dist.size} processes)"
            )


if __name__ == "__main__":
    main()
