"""Where a training step's time goes, op by op: each op's forward and backward, timed alone.

    python benchmarks/profile_step.py --device cuda --config gpt2 --dtype bfloat16
    python benchmarks/profile_step.py --config tiny          # the CPU

The step is bench_train.py's (a batch, forward, backward, clipping, AdamW). Every ``Function``
subclass's ``forward`` and ``backward`` is wrapped by a stopwatch that synchronises the device
before and after (the outermost op only: a backward that applies other ops is timed as one), so
the sum of the rows is the time of the ops run one after another, with no overlap of the
Python that launches a kernel and the kernel before it: more than the real step on a GPU, but
the shares say which ops to look at. The last lines give the unprofiled step's phases for
scale (medians of ``--steps`` steps, after two warm-up steps).
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time

from bench_train import CONFIGS, GPU_BATCH, PHASES, make_ours

from tensorlab.function import Function


def _subclasses(cls) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def instrument(sync) -> dict:
    """Wrap every op's forward and backward; returns {(op, "forward"|"backward"): [s, calls]}."""
    totals: dict = collections.defaultdict(lambda: [0.0, 0])
    depth = [0]

    def timed(f, phase):
        def wrapper(*args, **kwargs):
            if depth[0]:
                return f(*args, **kwargs)
            depth[0] += 1
            sync()
            t0 = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                sync()
                key = (type(args[0]).__name__, phase)  # the op itself, not the class that
                totals[key][0] += time.perf_counter() - t0  # wrote the method (FusedFunction)
                totals[key][1] += 1
                depth[0] -= 1

        return wrapper

    for cls in _subclasses(Function):
        for phase in ("forward", "backward"):
            if phase in vars(cls):
                setattr(cls, phase, timed(vars(cls)[phase], phase))
    return totals


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="gpt2", choices=sorted(CONFIGS))
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    cfg = dict(CONFIGS[args.config])
    if args.device == "cuda":
        import cupy

        cfg["batch_size"] = GPU_BATCH[args.config]
        sync = cupy.cuda.Device().synchronize
    else:
        sync = lambda: None  # noqa: E731
    step = make_ours(cfg, device=args.device, dtype=args.dtype)
    for _ in range(2):
        step()
    plain = [list(step()) for _ in range(args.steps)]
    totals = instrument(sync)
    for _ in range(args.steps):
        step()
    n = args.steps
    rows = sorted(totals.items(), key=lambda kv: -kv[1][0])
    total = sum(s for s, _ in totals.values())
    print(f"{args.config} {args.dtype} on {args.device}: ops timed one at a time, ms per step")
    print(f"{'op':<28} {'phase':<9} {'ms':>8} {'share':>6} {'calls':>6}")
    for (op, phase), (s, calls) in rows:
        if 1e3 * s / n < 0.05:
            continue
        print(f"{op:<28} {phase:<9} {1e3 * s / n:8.2f} {s / total:6.1%} {calls // n:6d}")
    print(f"{'all ops':<38} {1e3 * total / n:8.2f}")
    phases = [statistics.median(p[i] for p in plain) for i in range(len(PHASES))]
    print(
        "the step unprofiled (medians, ms): "
        + ", ".join(f"{name} {1e3 * v:.1f}" for name, v in zip(PHASES, phases))
        + f"; total {1e3 * sum(phases):.1f}"
    )


if __name__ == "__main__":
    sys.exit(main())
