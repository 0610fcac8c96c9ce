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

Definitions. ``sys.setprofile`` reports Python-level 'call' and 'return' events in the main
thread ('c_call', 'c_return', 'c_exception' are ignored). A *project file* is a file
(path resolved with realpath) under the repository's tensorlab/, nn/ or gpt/ directory;
this script and benchmarks/ are not. After each event, the *current file* is the file of
the frame that runs next: the called frame's file on 'call' (including a generator being
resumed), the caller's (``frame.f_back``) file on 'return' (including a generator yielding).
Non-project files never become current: the last project file seen stays current, so
a.py -> numpy -> b.py counts as one hop a.py -> b.py. *Files touched* = the project files
in which at least one frame had an event. *Hops* = the number of events after which the
current file is a project file different from the previous current project file (the first
project file of the step is not a hop). A call from a.py into b.py and the return back are
two hops; calls within one file are none. In the table, *events* counts the 'call' and
'return' events of frames whose code is in that file; *in* and *out* count hops to and from it.
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


def measure(step) -> tuple[Counter, Counter]:
    """Run ``step()`` under the profiler; return events per file and hops per (from, to)."""
    events, pairs = Counter(), Counter()
    current = None

    def profile(frame, event, arg):
        nonlocal current
        if event not in ("call", "return"):
            return
        nxt = here = project_file(frame)
        if here is not None:
            events[here] += 1
        if event == "return":
            nxt = project_file(frame.f_back) if frame.f_back is not None else None
        if nxt is not None and nxt != current:
            if current is not None:
                pairs[current, nxt] += 1
            current = nxt

    sys.setprofile(profile)
    try:
        step()
    finally:
        sys.setprofile(None)
    return events, pairs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=1, help="n_layer of the GPT (default 1)")
    ap.add_argument("--verbose", action="store_true", help="also the 30 most frequent hops")
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
    events, pairs = measure(step)

    print(f"one training step, GPT n_layer={args.layers} (vocab 65, block 32, 4 heads, d 64)")
    print(f"files touched: {len(events)}")
    print(f"file-to-file hops: {sum(pairs.values())}")
    width = max(len(f) for f in events)
    print(f"\n{'file':<{width}}  {'events':>7}  {'in':>5}  {'out':>5}")
    for f, n in sorted(events.items(), key=lambda kv: (-kv[1], kv[0])):
        n_in = sum(k for (_, b), k in pairs.items() if b == f)
        n_out = sum(k for (a, _), k in pairs.items() if a == f)
        print(f"{f:<{width}}  {n:>7}  {n_in:>5}  {n_out:>5}")
    if args.verbose:
        print("\nmost frequent hops (from -> to):")
        for (a, b), n in pairs.most_common(30):
            print(f"{n:>5}  {a} -> {b}")


if __name__ == "__main__":
    main()
