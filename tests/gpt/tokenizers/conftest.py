"""Fixtures for the tokenizer tests (their hypothesis strategies are in
``tokenizer_strategies.py``, named so it cannot shadow the shared ``tests/strategies.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SHAKESPEARE = REPO / "data" / "tinyshakespeare.txt"  # ships with the repository


@pytest.fixture(scope="session")
def shakespeare_path() -> Path:
    return SHAKESPEARE


@pytest.fixture(scope="session")
def corpus() -> str:
    """About 300 KB of English: the start of tinyshakespeare."""
    return SHAKESPEARE.read_text(encoding="utf-8")[:300_000]


@pytest.fixture(scope="session")
def train_text(corpus: str) -> str:
    return corpus[:200_000]


@pytest.fixture(scope="session")
def heldout_text(corpus: str) -> str:
    return corpus[200_000:260_000]
