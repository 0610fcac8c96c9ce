"""Train a small character-level GPT and watch it learn to write.

    python examples/train_gpt.py                         # CPython's own docs, ~1 min
    python examples/train_gpt.py --text data/tinyshakespeare.txt --max-iters 2000

The default run needs no download: it trains on the Python documentation text that ships
with CPython. It prints the loss as it goes, writes a loss log, a loss curve (if matplotlib
is installed) and a checkpoint to its run folder, and ends with a sample of generated text.

Each run gets a folder of its own, so running this again never touches a trained run: the
first of out/train_gpt, out/train_gpt-2, out/train_gpt-3, ... that does not exist yet (or
the one ``--out-dir`` names). ``--resume`` continues the newest of them exactly where it
stopped; ``--overwrite`` trains it again from the start.
"""

import itertools
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from anywhere, uninstalled

from gpt.__main__ import main  # noqa: E402

FOLDER = "out/train_gpt"
DEFAULTS = [
    "--max-iters",
    "600",
    "--eval-interval",
    "200",
    "--eval-iters",
    "20",
]


def folders():
    """out/train_gpt, out/train_gpt-2, out/train_gpt-3, ..."""
    yield FOLDER
    for n in itertools.count(2):
        yield f"{FOLDER}-{n}"


def run_folder(continuing: bool) -> str:
    """The first folder that does not exist yet; when ``continuing`` (--resume or
    --overwrite), the newest that does (the one before it), or out/train_gpt."""
    newest = FOLDER
    for folder in folders():
        if not os.path.exists(folder):
            return newest if continuing else folder
        newest = folder


if __name__ == "__main__":
    args = sys.argv[1:]
    given = {a.split("=")[0] for a in args if a.startswith("--")}
    extra = []
    for i in range(0, len(DEFAULTS), 2):
        if DEFAULTS[i] not in given:
            extra += DEFAULTS[i : i + 2]
    if "--out-dir" not in given:
        folder = run_folder(continuing=bool(given & {"--resume", "--overwrite"}))
        print(f"run folder: {folder} (--out-dir chooses another)", flush=True)
        extra += ["--out-dir", folder]
    sys.exit(main(["train", *extra, *args]))
