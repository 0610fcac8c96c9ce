"""What watching a run costs: the time of training steps with the training-health records
(gpt/watch.py) over the same steps without, as a ratio.

    python benchmarks/bench_watch.py                      # the default --watch-interval
    python benchmarks/bench_watch.py --watch-interval 10 --rounds 9

One Trainer (the tiny preset, nanoGPT's CPU config, on tiny Shakespeare) takes turns: a turn
of ``interval`` steps plain, then a turn of ``interval`` steps each wrapped in
``watcher.step()``, of which exactly one is watched. Taking turns keeps a shared machine's
drifting speed out of the ratio; the script prints each turn's seconds and the median over
rounds of the per-round ratio (watched / plain). Evaluation and checkpoints are left out:
they cost the same with and without watching.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DATA = os.path.join(ROOT, "data", "tinyshakespeare.txt")


def main() -> None:
    from gpt.config import TrainConfig, preset
    from gpt.train import Trainer
    from gpt.watch import Watcher

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--watch-interval", type=int, default=TrainConfig.watch_interval)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    args = p.parse_args()
    every = args.watch_interval
    with tempfile.TemporaryDirectory() as out:
        cfg = TrainConfig(text=DATA, out_dir=out, watch_interval=every, device=args.device)
        trainer = Trainer(preset("tiny"), cfg)
        watcher = Watcher(trainer)
        for _ in range(every):  # warm up, and start the turns at a multiple of the interval
            trainer.step()
        ratios = []
        for r in range(args.rounds):
            t0 = time.perf_counter()
            for _ in range(every):
                trainer.step()
            plain = time.perf_counter() - t0
            t0 = time.perf_counter()
            for _ in range(every):
                with watcher.step():
                    trainer.step()
            watched = time.perf_counter() - t0
            ratios.append(watched / plain)
            print(f"round {r}: {every} steps {plain:.3f} s plain, {watched:.3f} s watched")
        n = len(trainer.run_folder.read_log(trainer.run_folder.watch))
        print(
            f"watch every {every} steps: {statistics.median(ratios):.3f}x the time of the "
            f"same steps unwatched (median of {args.rounds} rounds; {n} records written)"
        )


if __name__ == "__main__":
    main()
