"""How many of the project's own source files one training step passes through, and how
many times execution hops from one of them to another.

    python benchmarks/step_files.py               # a 1-layer GPT
    python benchmarks/step_files.py --layers 4    # a 4-layer GPT
    python benchmarks/step_files.py --verbose     # also the 30 most frequent hops

The step is what a user writes: ``opt.zero_grad()``, ``_, loss = model(x, y)``,
``loss.backward()``, ``nn.optim.clip_grad_norm_(model.parameters(), 1.0)``, ``opt.step()``,
for ``GPT(GPTConfig(vocab_size=65, block_size=32, n_layer=N, n_head=4, d_model=64))``,
AdamW over ``nn.optim.param_groups_for_decay(model, 0.1)``, and a random int64 batch of
4 x 32. One warm-up step runs first (imports, caches); the second step is measured.

Definitions. ``sys.setprofile`` reports every Python-level call in the main thread (calls
into C are ignored). A *project file* is a file under the repository's tensorlab/, nn/ or gpt/
(this script and benchmarks/ are not). For each call into a project file, the *caller* is the
nearest project frame up the stack (so a.py -> numpy -> b.py is a call from a.py to b.py).

- *files touched*: the project files in which at least one function ran;
- *hops*: the calls whose caller's file differs from the callee's (the return is not counted
  again); what execution does, so it grows with the number of layers;
- *distinct hops*: the different (calling function, called function) pairs among those: the
  jumps between files a reader makes to follow the step once, whatever the model's size.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import nn  # noqa: E402
import tensorlab as tl  # noqa: E402
from gpt.config import GPTConfig  # noqa: E402
from gpt.model import GPT  # noqa: E402

REAL_ROOT = os.path.realpath(ROOT)
PROJECT_DIRS = tuple(os.path.join(REAL_ROOT, d) + os.sep for d in ("tensorlab", "nn", "gpt"))
_files: dict[str, str | None] = {}  # co_filename -> path relative to ROOT, or None if not ours


def project_file(frame) -> str | None:
    name = frame.f_code.co_filename
    if name not in _files:
        path = os.path.realpath(name)
        _files[name] = os.path.relpath(path, REAL_ROOT) if path.startswith(PROJECT_DIRS) else None
    return _files[name]


def measure(step) -> tuple[Counter, Counter, set]:
    """Run ``step()`` under the profiler: calls per file, hops per (from, to) file, and the
    distinct (caller function, callee function) pairs of the hops."""
    calls, pairs, edges = Counter(), Counter(), set()

    def profile(frame, event, arg):
        if event != "call":
            return
        here = project_file(frame)
        if here is None:
            return
        calls[here] += 1
        up = frame.f_back
        while up is not None and project_file(up) is None:
            up = up.f_back
        if up is not None and project_file(up) != here:
            pairs[project_file(up), here] += 1
            edges.add((f"{project_file(up)}:{up.f_code.co_name}", f"{here}:{frame.f_code.co_name}"))

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return calls, pairs, edges


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=1, help="n_layer of the GPT (default 1)")
    ap.add_argument("--verbose", action="store_true", help="also the hops, by pair and function")
    args = ap.parse_args()

    cfg = GPTConfig(vocab_size=65, block_size=32, n_layer=args.layers, n_head=4, d_model=64)
    model = GPT(cfg)
    opt = nn.optim.AdamW(nn.optim.param_groups_for_decay(model, 0.1), lr=1e-3)
    rng = np.random.default_rng(0)
    x, y = (tl.tensor(rng.integers(0, 65, size=(4, 32), dtype=np.int64)) for _ in range(2))
    zero_grad = opt.zero_grad if hasattr(opt, "zero_grad") else model.zero_grad

    def step() -> None:
        zero_grad()
        _, loss = model(x, y)
        loss.backward()
        nn.optim.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()

    step()  # warm-up
    events, pairs, edges = measure(step)

    print(f"one training step, GPT n_layer={args.layers} (vocab 65, block 32, 4 heads, d 64)")
    print(f"files touched: {len(events)}")
    print(f"file-to-file hops: {sum(pairs.values())} ({len(edges)} distinct)")
    width = max(len(f) for f in events)
    print(f"\n{'file':<{width}}  {'calls':>7}  {'in':>5}  {'out':>5}")
    for f, n in sorted(events.items(), key=lambda kv: (-kv[1], kv[0])):
        n_in = sum(k for (_, b), k in pairs.items() if b == f)
        n_out = sum(k for (a, _), k in pairs.items() if a == f)
        print(f"{f:<{width}}  {n:>7}  {n_in:>5}  {n_out:>5}")
    if args.verbose:
        print("\nmost frequent hops (from -> to):")
        for (a, b), n in pairs.most_common(30):
            print(f"{n:>5}  {a} -> {b}")
        print("\ndistinct hops (calling function -> called function):")
        for a, b in sorted(edges):
            print(f"  {a} -> {b}")


if __name__ == "__main__":
    main()
