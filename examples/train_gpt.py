"""Train a small character-level GPT and watch it learn to write.

    python examples/train_gpt.py                         # CPython's own docs, ~1 min
    python examples/train_gpt.py --text data/tinyshakespeare.txt --max-iters 2000

The default run needs no download: it trains on the Python documentation text that ships
with CPython. It prints the loss as it goes, writes a loss log, a loss curve (if matplotlib
is installed) and a checkpoint to ``out/``, and ends with a sample of generated text.
``--resume`` continues an interrupted run exactly where it stopped.
"""

import sys

from gpt.__main__ import main

DEFAULTS = [
    "--max-iters",
    "600",
    "--eval-interval",
    "200",
    "--eval-iters",
    "20",
    "--out-dir",
    "out/train_gpt",
]

if __name__ == "__main__":
    args = sys.argv[1:]
    given = {a.split("=")[0] for a in args if a.startswith("--")}
    extra = []
    for i in range(0, len(DEFAULTS), 2):
        if DEFAULTS[i] not in given:
            extra += DEFAULTS[i : i + 2]
    sys.exit(main(["train", *extra, *args]))
