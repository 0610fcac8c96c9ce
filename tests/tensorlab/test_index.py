"""Indexing ops: ``__getitem__`` with ints, slices (negative steps too), None, ``...``, integer
arrays (repeats accumulate: the backward is a scatter-add) and boolean masks; ``gather``
along an axis; ``masked_fill``; ``tril``/``triu``. Forward against NumPy, first and second
derivatives against finite differences (tolerances: see ``opcheck.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from opcheck import check_op, leaf
from strategies import bool_mask, nonscalar_shapes, small_shapes, values

import tensorlab as tl

arrays = nonscalar_shapes.flatmap(values)


@given(x=arrays, data=st.data(), gg=st.booleans())
def test_basic_indexing(x, data, gg):
    key = data.draw(
        hnp.basic_indices(x.shape, allow_newaxis=True, allow_ellipsis=True), label="key"
    )
    check_op(lambda t: t[key], lambda a: a[key], x, gradgrad=gg)


@pytest.mark.parametrize(
    "key",
    [
        np.s_[::-1],
        np.s_[::-2, 1],
        np.s_[3:0:-1, ::-1],
        np.s_[-1],
        np.s_[..., -2::-2],
        np.s_[None, 1:, ..., None],
        np.s_[1, None, :],
    ],
    ids=str,
)
def test_slices_with_negative_steps(key):
    check_op(lambda t: t[key], lambda a: a[key], np.arange(20.0).reshape(4, 5) / 7)


@given(x=arrays, data=st.data(), gg=st.booleans())
def test_integer_array_indexing(x, data, gg):
    # one integer array per leading axis, repeats and negative indices allowed
    key = data.draw(hnp.integer_array_indices(x.shape), label="key")
    check_op(lambda t: t[key], lambda a: a[key], x, gradgrad=gg)


@given(x=arrays, data=st.data())
def test_integer_array_on_one_axis(x, data):
    axis = data.draw(st.integers(0, x.ndim - 1), label="axis")
    n = x.shape[axis]
    idx = data.draw(
        hnp.arrays(np.int64, st.integers(0, 5), elements=st.integers(-n, n - 1)), label="idx"
    )
    key = (slice(None),) * axis + (idx,)
    check_op(lambda t: t[key], lambda a: a[key], x)
    check_op(lambda t: t[(slice(None),) * axis + (tl.tensor(idx),)], lambda a: a[key], x)


def test_repeated_indices_accumulate():
    x = leaf([10.0, 20.0, 30.0, 40.0])
    y = x[[0, 2, 0, 0, -1]]
    np.testing.assert_array_equal(y.numpy(), [10, 30, 10, 10, 40])
    y.backward(tl.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=np.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [1 + 3 + 4, 0, 2, 5])


def test_repeated_rows_accumulate_in_2d():
    x = leaf(np.zeros((3, 2)))
    x[np.array([[1, 1], [2, 1]])].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0], [3, 3], [1, 1]])


@given(x=arrays, data=st.data(), gg=st.booleans())
def test_boolean_mask(x, data, gg):
    k = data.draw(st.integers(1, x.ndim), label="mask ndim")
    mask = data.draw(bool_mask(x.shape[:k]), label="mask")
    check_op(lambda t: t[mask], lambda a: a[mask], x, gradgrad=gg)
    check_op(lambda t: t[tl.tensor(mask)], lambda a: a[mask], x)


def test_mask_from_a_comparison():
    x = leaf([-1.0, 2.0, -3.0, 4.0])
    y = x[x > 0]
    np.testing.assert_array_equal(y.numpy(), [2.0, 4.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 1, 0, 1])


@st.composite
def gather_case(draw):
    shape = draw(nonscalar_shapes)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    ishape = list(shape)
    ishape[axis] = draw(st.integers(0, 5))  # may read fewer or more entries than there are
    index = draw(hnp.arrays(np.int64, tuple(ishape), elements=st.integers(0, shape[axis] - 1)))
    return draw(values(shape)), axis, index


@given(case=gather_case(), gg=st.booleans())
def test_gather(case, gg):
    x, axis, index = case
    check_op(
        lambda t: t.gather(axis, index),
        lambda a: np.take_along_axis(a, index, axis=axis),
        x,
        gradgrad=gg,
    )
    check_op(
        lambda t: t.gather(axis, tl.tensor(index)),
        lambda a: np.take_along_axis(a, index, axis=axis),
        x,
    )


def test_gather_repeats_accumulate():
    x = leaf([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    y = x.gather(1, np.array([[2, 2], [0, 1]]))
    np.testing.assert_array_equal(y.numpy(), [[3, 3], [4, 5]])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 2], [1, 1, 0]])


@given(x=small_shapes.flatmap(values), data=st.data())
def test_masked_fill(x, data):
    k = data.draw(st.integers(0, x.ndim), label="mask ndim")
    mask = data.draw(bool_mask(x.shape[x.ndim - k :]), label="mask")  # broadcasts from the right
    check_op(
        lambda t: t.masked_fill(mask, -1e9),
        lambda a: np.where(mask, -1e9, a),
        x,
        gradgrad=True,
    )
    check_op(
        lambda t: t.masked_fill(tl.tensor(mask), 0.5),
        lambda a: np.where(mask, 0.5, a),
        x,
    )


@given(
    x=hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=4).flatmap(values),
    k=st.integers(-3, 3),
    gg=st.booleans(),
)
def test_tril_triu(x, k, gg):
    check_op(lambda t: t.tril(k), lambda a: np.tril(a, k), x, gradgrad=gg)
    check_op(lambda t: tl.triu(t, k), lambda a: np.triu(a, k), x, gradgrad=gg)
    check_op(lambda t: tl.tril(t), np.tril, x)
