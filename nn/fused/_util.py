"""Small helpers shared by the fused ops."""

from __future__ import annotations

from tensorlab import function as _function
from tensorlab.tensor import Tensor

const = Tensor._wrap  # a constant Tensor around an array (no graph, no checks)


def recording() -> bool:
    """True inside a backward run with ``create_graph=True`` (and in ordinary forward code):
    then a backward must be written in Tensor ops so that it records a graph."""
    return _function.grad_enabled
