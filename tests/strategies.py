"""Hypothesis strategies shared by all tests: shapes, broadcastable shape pairs, arrays.

Values are drawn well-conditioned for finite differences: bounded in magnitude, and kept
away from the kinks of non-smooth ops by the tests that need it (see ``away_from``).
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorlab as tl

# Small dimensions keep full-Jacobian gradchecks cheap (one backward per output entry).
small_shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=1, max_side=4)
shapes_with_empty = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3)
nonscalar_shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)


@st.composite
def broadcast_pair(draw, min_dims: int = 0, max_dims: int = 3):
    """Two shapes that broadcast together (size-1 axes, missing leading axes)."""
    shapes = draw(
        hnp.mutually_broadcastable_shapes(
            num_shapes=2, min_dims=min_dims, max_dims=max_dims, max_side=4
        )
    )
    return shapes.input_shapes


def values(shape, low: float = -2.0, high: float = 2.0, dtype=np.float64):
    """A strategy for arrays of ``shape`` with finite values in [low, high]."""
    return hnp.arrays(
        dtype, shape, elements=st.floats(low, high, allow_nan=False, allow_infinity=False, width=64)
    )


@st.composite
def tensor64(draw, shape=None, low=-2.0, high=2.0, requires_grad=True):
    """A float64 Tensor (for gradcheck) of a drawn or given shape."""
    if shape is None:
        shape = draw(small_shapes)
    data = draw(values(shape, low, high))
    return tl.tensor(data, dtype=np.float64, requires_grad=requires_grad)


@st.composite
def axis_for(draw, ndim: int, allow_tuple: bool = True):
    """An axis argument valid for ``ndim`` dims: None, an int (maybe negative) or a tuple."""
    if ndim == 0:
        return None
    options = [st.none(), st.integers(-ndim, ndim - 1)]
    if allow_tuple:
        options.append(
            st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(
                lambda axes: tuple(a - ndim if i % 2 else a for i, a in enumerate(axes))
            )
        )
    return draw(st.one_of(*options))


def away_from(x: np.ndarray, points, margin: float = 1e-3) -> np.ndarray:
    """Nudge entries of ``x`` that lie within ``margin`` of a kink (e.g. 0 for relu/abs) so
    that finite differences with eps ≪ margin never straddle it."""
    x = x.copy()
    for p in points:
        close = np.abs(x - p) < margin
        x[close] = p + np.where(x[close] >= p, margin, -margin) * 2
    return x


def distinct(x: np.ndarray, gap: float = 1e-3) -> np.ndarray:
    """Entries made pairwise distinct (no ties for max/min/sort-like ops) by a tiny ramp."""
    flat = x.ravel().copy()
    order = np.argsort(flat, kind="stable")
    flat[order] += np.arange(flat.size) * gap
    return flat.reshape(x.shape)
