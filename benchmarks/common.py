"""Timing helpers shared by the benchmark scripts: medians of repeated runs."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_time(fn: Callable[[], object], reps: int = 30, warmup: int = 5, inner: int = 1) -> float:
    """Median wall time of ``fn()`` in seconds (each sample times ``inner`` calls)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def try_import_torch():
    """PyTorch if installed (``pip install torch==2.13.0`` uses a CPU wheel), else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def row(name: str, ours: float, ref: float | None, unit: str = "us", scale: float = 1e6) -> str:
    ref_s = f"{ref * scale:10.1f}" if ref is not None else "         -"
    ratio = f"{ours / ref:6.2f}x" if ref else "     -"
    return f"{name:<44} {ours * scale:10.1f} {ref_s} {ratio}  ({unit})"
