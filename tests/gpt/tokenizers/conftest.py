"""Fixtures for the tokenizer tests.

``strategies.py`` is registered as the module ``tokenizer_strategies`` so that test folders
elsewhere in the project can have their own ``strategies.py`` without a name clash.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "tokenizer_strategies", Path(__file__).with_name("strategies.py")
)
_module = importlib.util.module_from_spec(_spec)
sys.modules["tokenizer_strategies"] = _module
_spec.loader.exec_module(_module)

REPO = Path(__file__).resolve().parents[3]
SHAKESPEARE = REPO.parent / "shared" / "data" / "tinyshakespeare.txt"


def _fallback_corpus() -> str:
    """English text that ships with CPython, for machines without the shared corpus."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics))


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
