"""Text data for language modelling: load a corpus, split it, draw random batches.

A corpus becomes one long array of token ids; a batch is ``batch_size`` random windows of
``block_size + 1`` consecutive ids: the first ``block_size`` are the input ``x`` and the
same window shifted by one is the target ``y`` (predict each next token).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


class DataError(ValueError):
    """The data cannot be used as asked; the message says why."""


def default_text() -> str:
    """The Python documentation's topic texts, which ship with CPython (``pydoc_data``),
    so that a first training run needs no download (about 0.47 MB of English and code)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


def load_text(path: str | Path | None = None) -> str:
    """Read a UTF-8 text file, or return :func:`default_text` when ``path`` is None."""
    if path is None:
        return default_text()
    p = Path(path)
    if not p.is_file():
        raise DataError(f"text file {str(p)!r} does not exist")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{str(p)!r} is not UTF-8 text ({err})") from err


def split_ids(ids: np.ndarray, val_fraction: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """The first ``1 - val_fraction`` of the ids for training, the rest for validation."""
    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n = int(len(ids) * (1 - val_fraction))
    return ids[:n], ids[n:]


def check_length(ids: np.ndarray, block_size: int, what: str) -> None:
    if len(ids) < block_size + 1:
        raise DataError(
            f"the {what} text has {len(ids)} tokens, fewer than block_size + 1 = "
            f"{block_size + 1}; use a longer text, a smaller --block-size, or a smaller "
            "validation fraction"
        )


def get_batch(
    ids: np.ndarray, block_size: int, batch_size: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``batch_size`` random windows: inputs ``x`` and next-token targets ``y``, both
    int64 arrays of shape (batch_size, block_size)."""
    check_length(ids, block_size, "given")
    starts = rng.integers(0, len(ids) - block_size, size=batch_size)
    window = starts[:, None] + np.arange(block_size + 1)
    chunk = ids[window].astype(np.int64)
    return chunk[:, :-1], chunk[:, 1:]
