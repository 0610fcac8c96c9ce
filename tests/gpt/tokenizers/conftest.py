"""Fixtures for the tokenizer tests (their hypothesis strategies are in
``tokenizer_strategies.py``, named so it cannot shadow the shared ``tests/strategies.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"


def _fallback_corpus() -> str:
    """English text that ships with CPython, for machines without the shared corpus."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


@pytest.fixture(scope="session")
def shakespeare_path() -> Path:
    return SHAKESPEARE


@pytest.fixture(scope="session")
def corpus() -> str:
    """About 300 KB of English: the start of tinyshakespeare, or CPython's help topics."""
    if SHAKESPEARE.exists():
        return SHAKESPEARE.read_text(encoding="utf-8")[:300_000]
    return _fallback_corpus()[:300_000]


@pytest.fixture(scope="session")
def train_text(corpus: str) -> str:
    return corpus[:200_000]


@pytest.fixture(scope="session")
def heldout_text(corpus: str) -> str:
    return corpus[200_000:260_000]
