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


# ---------------------------------------------------------------- additions for op tests
def positive(shape, low: float = 0.2, high: float = 3.0):
    """Arrays with entries in [low, high] (log, sqrt, the base of pow)."""
    return values(shape, low, high)


def nonzero(shape, low: float = 0.3, high: float = 2.0):
    """Arrays with |entries| in [low, high] and either sign (divisors)."""
    return st.tuples(values(shape, low, high), hnp.arrays(np.bool_, shape)).map(
        lambda t: np.where(t[1], -t[0], t[0])
    )


@st.composite
def broadcast_shapes(
    draw, num_shapes: int = 2, min_dims: int = 0, max_dims: int = 3, min_side: int = 1
):
    """``num_shapes`` shapes that broadcast together; ``min_side=0`` allows empty axes."""
    shapes = draw(
        hnp.mutually_broadcastable_shapes(
            num_shapes=num_shapes,
            min_dims=min_dims,
            max_dims=max_dims,
            min_side=min_side,
            max_side=4 if min_side else 3,
        )
    )
    return shapes.input_shapes


# (n?,k),(k,m?): 1-D, 2-D and batched products whose batch axes broadcast (``@`` semantics).
matmul_shapes = hnp.mutually_broadcastable_shapes(
    signature=np.matmul.signature, max_dims=2, max_side=3
).map(lambda s: s.input_shapes)


@st.composite
def keepdims_axis(draw, shape):
    """(axis, keepdims) for a reduction over ``shape``: None, int (maybe negative) or tuple."""
    return draw(axis_for(len(shape))), draw(st.booleans())


@st.composite
def bool_mask(draw, shape):
    """A boolean array of ``shape`` (a mask for indexing or masked_fill)."""
    return draw(hnp.arrays(np.bool_, shape))
