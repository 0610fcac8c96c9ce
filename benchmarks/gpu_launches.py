"""Kernel launches and host waits per training step on a GPU, counted without one.

    python benchmarks/gpu_launches.py

On a GPU each array operation is one kernel launch, and each launch costs the host some
microseconds of Python and driver work whatever its size: for a small model the step's time is
mostly launches. Each read of a device value by the host (a range check, ``float()``) makes the
host wait until the GPU has run everything queued. Neither can be timed on a CPU, but both can
be counted: this script runs one training step of bench_train.py's models (the model, AdamW
with weight decay groups, clipping at 1.0) on CuPy emulated by NumPy (tests/fake_cupy.py),
which counts every array operation (a view is none, a fused kernel is one) and every read.

The counts depend neither on the batch nor on the sequence length (attention on a GPU is
three kernels, nn/flash_attention.cu, at any length), so the step runs one sequence of 64
positions (the emulated GPU runs every thread of the attention kernels on the CPU). They are
this code's, not PyTorch's: PyTorch eager launches about one kernel per operation too, but its AdamW
(``foreach``/``fused``) and clipping (``_foreach_norm``) launch a handful of kernels for all
parameters together.
"""

from __future__ import annotations

import collections
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]

from tests import fake_cupy  # noqa: E402

fake_cupy.install()

import nn  # noqa: E402
import tensorlab as tl  # noqa: E402
from benchmarks.bench_train import CONFIGS, PHASES  # noqa: E402
from gpt.config import GPTConfig  # noqa: E402
from gpt.model import GPT  # noqa: E402


def count_step(name: str, dtype: str):
    """The launches and waits of each phase of one step (the third, once the optimizer's
    state exists), the launches by operation, and the number of parameter tensors."""
    shape = {k: v for k, v in CONFIGS[name].items() if k != "batch_size"}
    tl.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=65, **shape)).to("cuda")
    opt = nn.optim.AdamW(nn.optim.param_groups_for_decay(model, 0.1), lr=1e-3)
    rng = np.random.default_rng(0)
    T = min(64, shape["block_size"])  # any length gives the same counts
    x, y = (tl.tensor(a, device="cuda") for a in rng.integers(0, 65, (2, 1, T)))
    launches, waits, kinds = [], [], collections.Counter()

    def phase(fn):
        fake_cupy.KERNELS.clear()
        fake_cupy.SYNCS.clear()
        out = fn()
        launches.append(sum(fake_cupy.KERNELS.values()))
        waits.append(sum(fake_cupy.SYNCS.values()))
        kinds.update(fake_cupy.KERNELS)
        return out

    for _ in range(3):
        launches.clear()
        waits.clear()
        kinds.clear()
        opt.zero_grad()
        with tl.autocast(None if dtype == "float32" else dtype):
            _, loss = phase(lambda: model(x, y))
        phase(loss.backward)
        phase(lambda: nn.optim.clip_grad_norm_(model.parameters(), 1.0))
        phase(opt.step)
    return launches, waits, kinds, len(list(model.parameters()))


def main() -> None:
    print("kernel launches (host waits) per training step, on CuPy emulated by NumPy")
    head = " ".join(f"{p:>12}" for p in PHASES)
    print(f"{'config':<7} {'dtype':<9} {'tensors':>7} {'total':>6} {head}")
    top = None
    for name in ("tiny", "large", "gpt2"):
        for dtype in ("float32", "bfloat16"):
            launches, waits, kinds, tensors = count_step(name, dtype)
            cells = " ".join(f"{f'{n} ({w})':>12}" for n, w in zip(launches, waits))
            print(f"{name:<7} {dtype:<9} {tensors:>7} {sum(launches):>6} {cells}")
            top = top or kinds
    print("\nthe tiny config's float32 step, by operation:")
    for op, n in top.most_common(12):
        print(f"  {n:5d}  {op}")


if __name__ == "__main__":
    main()
