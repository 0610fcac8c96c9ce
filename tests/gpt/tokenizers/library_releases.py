"""Which release of the `tokenizers` library (the reference) is installed, and marks that skip a
parity test on releases with a known bug in what it compares, naming the bug: our code follows
the library's intended behaviour, never a bug of one release."""

from __future__ import annotations

import re

import pytest


def library_version() -> tuple[int, int, int] | None:
    """``tokenizers.__version__`` as (major, minor, patch), or None without the library."""
    try:
        import tokenizers
    except ImportError:
        return None
    major, minor, patch = (int(n) for n in re.findall(r"\d+", tokenizers.__version__)[:3])
    return major, minor, patch


def skip_on_releases(first: tuple[int, int, int], fixed_in: tuple[int, int, int], bug: str):
    """A mark skipping the test on releases from ``first`` up to (not including) ``fixed_in``."""
    version = library_version()
    return pytest.mark.skipif(
        version is not None and first <= version < fixed_in,
        reason=f"tokenizers {'.'.join(map(str, version or ()))}: {bug}",
    )


#: Releases 0.23.0rc0-0.23.2 stop tokenizing each text once it has max_length tokens, before the
#: pair strategy and the post-processor's added tokens are counted, so pairs and templates are
#: cut wrongly (huggingface/tokenizers PR #1990; 0.23.3 restores the 0.22 results, issue #2091).
EARLY_EXIT_TRUNCATION = skip_on_releases(
    (0, 23, 0),
    (0, 23, 3),
    "truncation cuts each text to max_length before pair strategy and template "
    "(PR #1990 early exit; fixed in 0.23.3)",
)
