"""A model of data-parallel step time against the number of processes N, from measurements
of one process: where does adding machines stop paying? (docs/distributed.md explains it.)

    python benchmarks/scaling_model.py

Measured here, on one core (one BLAS thread), for the nanoGPT CPU config ("tiny") and the
shakespeare-char GPU config ("small-char"): ms per ``Trainer.step`` at two batch sizes, fitted
as ``t(b) = a + c·b`` (a: the per-step cost that does not shrink with the batch: Python's op
dispatch and backward loop, the optimizer; c: the cost per sequence). GPT-2 small (124M) is
too slow to time here, so its ``c`` is extrapolated from small-char's by training FLOPs per
sequence (``gpt.model.flops_per_token``) and its ``a`` by parameter count.

The model, for a global batch of B sequences on N processes (one core each):

    T(N) = a + c·B/N + T_allreduce,   T_allreduce = 2(N−1)/N · 4P / bandwidth + 2(N−1)·latency

(ring all-reduce of P float32 gradients; latency 20 µs per message, about a TCP round trip
on a data-centre network). Printed: T(N) and the speed-up T(1)/T(N) on 10, 25 and 100 Gb/s.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SHAPES = {
    "tiny": dict(n_layer=4, n_head=4, d_model=128, block_size=64),
    "small-char": dict(n_layer=6, n_head=6, d_model=384, block_size=256),
}
BATCH = {"tiny": 12, "small-char": 64, "gpt2-small": 512}  # nanoGPT's global batches
LATENCY = 20e-6


def step_ms(shape: dict, batch: int, steps: int = 6) -> tuple:
    from benchmarks.bench_train import DATA
    from gpt.config import GPTConfig
    from gpt.train import TrainConfig, Trainer

    out = tempfile.mkdtemp()
    cfg = TrainConfig(text=DATA, out_dir=out + "/run", batch_size=batch, progress=False)
    t = Trainer(GPTConfig(**shape), cfg)
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        t.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times), t.model_cfg


def main() -> None:
    import numpy as np

    from gpt.config import preset
    from gpt.model import GPT, flops_per_token
    from nn.init import empty_parameters

    def count(cfg) -> int:
        with empty_parameters():  # (nothing drawn: only the count is wanted)
            return GPT(cfg).num_parameters()

    fits = {}
    for name, shape in SHAPES.items():
        batches = (1, 4, 8, 12) if name == "tiny" else (1, 2, 4)
        ms = []
        for b in batches:
            m, cfg = step_ms(shape, b)
            ms.append(m)
        c, a = np.polyfit(batches, ms, 1)  # least squares: t = a + c·b
        a = max(float(a), 0.0)
        fits[name] = (a, float(c), count(cfg), cfg)
        shown = ", ".join(f"t({b}) = {m:.1f}" for b, m in zip(batches, ms))
        print(f"{name}: {shown} ms -> a = {a:.1f} ms, c = {c:.2f} ms/sequence")
    a_s, c_s, p_s, cfg_s = fits["small-char"]
    g2 = preset("gpt2-small")
    ratio = (flops_per_token(g2) * g2.block_size) / (flops_per_token(cfg_s) * cfg_s.block_size)
    fits["gpt2-small"] = (a_s * count(g2) / p_s, c_s * ratio, count(g2), g2)
    print(
        f"gpt2-small (extrapolated): a = {fits['gpt2-small'][0]:.0f} ms, "
        f"c = {fits['gpt2-small'][1]:.0f} ms/sequence, P = {count(g2):,}"
    )

    ns = [1, 2, 4, 8, 16, 32, 64]
    for name, (a, c, p, _) in fits.items():
        batch = BATCH[name]
        print(f"\n{name}: global batch {batch}; step time in ms (speed-up over N = 1)")
        print(f"{'Gb/s':>6} " + " ".join(f"{'N=' + str(n):>16}" for n in ns))
        for gbps in (10, 25, 100):
            bw = gbps * 1e9 / 8
            cells = []
            t1 = a + c * batch
            for n in ns:
                if n > batch:  # fewer than one sequence per process
                    cells.append("-")
                    continue
                comm = 0.0 if n == 1 else (2 * (n - 1) / n * 4 * p / bw + 2 * (n - 1) * LATENCY)
                t = a + c * math.ceil(batch / n) + 1e3 * comm
                cells.append(f"{t:9.1f} ({t1 / t:4.1f}x)")
            print(f"{gbps:>6} " + " ".join(f"{x:>16}" for x in cells))


if __name__ == "__main__":
    main()
