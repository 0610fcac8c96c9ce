"""Indexing ops: ``__getitem__`` with ints, slices (negative steps too), None, ``...``, integer
arrays (repeats accumulate: the backward is a scatter-add) and boolean masks; ``gather``
along an axis; ``masked_fill``; ``tril``/``triu``. Forward against NumPy, first and second
derivatives against finite differences (tolerances: see ``opcheck.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorlab as tl
from tests.strategies import (
    bool_mask,
    distinct,
    nonscalar_shapes,
    shapes_with_empty,
    small_shapes,
    values,
)

from .opcheck import check_op, leaf

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


@pytest.mark.parametrize("op", ["tril", "triu"])
@pytest.mark.parametrize("shape", [(5,), ()])
def test_tril_triu_refuse_fewer_than_two_axes_as_pytorch(op, shape):
    """np.tril of a 1-D array broadcasts it to a matrix; PyTorch refuses, and so do we."""
    with pytest.raises(
        ValueError, match=f"{op}: needs a matrix .* got shape {re.escape(str(shape))}"
    ):
        getattr(tl.zeros(*shape), op)()
    with pytest.raises(ValueError, match=f"{op}: needs a matrix"):
        getattr(tl, op)(tl.zeros(*shape))


def test_an_empty_index_list_selects_nothing():
    x = tl.tensor(np.arange(6.0).reshape(3, 2), requires_grad=True)
    y = x[[]]
    assert y.shape == (0, 2) and x[:, []].shape == (3, 0) and x[[], 0].shape == (0,)
    (y.sum() + x[[]].sum()).backward()
    assert x.grad.numpy().tolist() == [[0.0, 0.0]] * 3


def test_mixed_advanced_indexing_follows_numpy_and_the_docs_say_so():
    """x[0, :, [0, 1]]: advanced indices split by a slice put the advanced axis first (NumPy),
    (2, 3); PyTorch gives (3, 2). Kept, and stated in the differences-from-PyTorch table."""
    a = np.arange(24.0).reshape(2, 3, 4)
    y = tl.tensor(a)[0, :, [0, 1]]
    assert y.shape == (2, 3) == a[0, :, [0, 1]].shape
    np.testing.assert_array_equal(y.numpy(), a[0, :, [0, 1]])
    table = (Path(__file__).parents[2] / "docs" / "derivations_nn.md").read_text()
    row = next((r for r in table.splitlines() if "x[0, :, [0, 1]]" in r), "")
    assert "(2, 3)" in row and "(3, 2)" in row, "the table row for mixed advanced indexing"


# ---------------------------------------------------------------- sort, argsort, topk
sort_shapes = st.one_of(nonscalar_shapes, shapes_with_empty)


@st.composite
def sort_case(draw, shapes=sort_shapes):
    shape = draw(shapes)
    x = distinct(draw(values(shape)))  # no ties: sort is smooth there
    return x, draw(st.integers(-x.ndim, x.ndim - 1)), draw(st.booleans())


@given(case=sort_case(), gg=st.booleans())
def test_sort(case, gg):
    x, axis, descending = case

    def np_sort(a):
        s = np.sort(a, axis=axis)
        return np.flip(s, axis) if descending else s

    check_op(lambda t: t.sort(axis, descending).values, np_sort, x, gradgrad=gg)
    t = leaf(x)
    idx = tl.argsort(t, axis, descending)
    assert idx.dtype == np.int64 and not idx.requires_grad
    np.testing.assert_array_equal(np.take_along_axis(x, idx.numpy(), axis), np_sort(x))


@given(case=sort_case(), data=st.data(), gg=st.booleans())
def test_topk(case, data, gg):
    x, axis, largest = case
    k = data.draw(st.integers(0, x.shape[axis]), label="k")

    def np_topk(a):
        s = np.sort(a, axis=axis)
        s = np.flip(s, axis) if largest else s
        return np.take(s, np.arange(k), axis=axis)

    check_op(lambda t: t.topk(k, axis, largest).values, np_topk, x, gradgrad=gg)


def test_sort_ties_keep_input_order_and_each_value_its_own_gradient():
    """The tie rule: a stable sort, in both directions (equal entries keep their input
    order), and each output position sends its gradient to the one entry placed there."""
    x = leaf([2.0, 1.0, 2.0, 1.0])
    values, idx = x.sort()
    np.testing.assert_array_equal(idx.numpy(), [1, 3, 0, 2])
    np.testing.assert_array_equal(x.sort(descending=True).indices.numpy(), [0, 2, 1, 3])
    np.testing.assert_array_equal(x.topk(3).indices.numpy(), [0, 2, 1])
    values.backward(tl.tensor([10.0, 20.0, 30.0, 40.0], dtype=np.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [30.0, 10.0, 40.0, 20.0])


def test_topk_refuses_k_out_of_range():
    with pytest.raises(
        ValueError, match=r"topk: k=4 is out of range for axis -1 of shape \(2, 3\)"
    ):
        tl.zeros(2, 3).topk(4)


def test_sort_of_a_0d_tensor_and_of_an_empty_axis():
    assert tl.tensor(3.0).sort().values.item() == 3.0
    v, i = tl.zeros(2, 0).sort()
    assert v.shape == i.shape == (2, 0)


# ---------------------------------------------------------------- scatter_add, index_add
@st.composite
def scatter_case(draw):
    shape = draw(nonscalar_shapes)
    x = draw(values(shape))
    axis = draw(st.integers(-x.ndim, x.ndim - 1))
    index_shape = tuple(
        draw(st.integers(1, 4)) if i == axis % x.ndim else draw(st.integers(1, n))
        for i, n in enumerate(shape)
    )
    index = draw(hnp.arrays(np.int64, index_shape, elements=st.integers(0, shape[axis] - 1)))
    src_shape = tuple(k + draw(st.integers(0, 1)) for k in index_shape)  # maybe larger
    return x, axis, index, draw(values(src_shape))


def _np_scatter_add(a, axis, index, src):
    out = a.copy()
    src = src[tuple(slice(0, n) for n in index.shape)]
    grids = list(np.indices(index.shape, sparse=True))
    grids[axis % a.ndim] = index
    np.add.at(out, tuple(grids), src)
    return out


@given(case=scatter_case(), gg=st.booleans())
def test_scatter_add(case, gg):
    x, axis, index, src = case
    check_op(
        lambda t, s: t.scatter_add(axis, index, s),
        lambda a, s: _np_scatter_add(a, axis, index, s),
        x,
        src,
        gradgrad=gg,
    )


@st.composite
def index_add_case(draw):
    shape = draw(nonscalar_shapes)
    x = draw(values(shape))
    axis = draw(st.integers(-x.ndim, x.ndim - 1))
    index = draw(st.lists(st.integers(0, shape[axis] - 1), min_size=0, max_size=5))
    src_shape = list(shape)
    src_shape[axis] = len(index)
    return x, axis, np.array(index, dtype=np.int64), draw(values(tuple(src_shape)))


@given(case=index_add_case(), alpha=st.sampled_from([1.0, -0.5]), gg=st.booleans())
def test_index_add(case, alpha, gg):
    x, axis, index, src = case

    def np_index_add(a, s):
        out = np.moveaxis(a.copy(), axis, 0)
        np.add.at(out, index, alpha * np.moveaxis(s, axis, 0))
        return np.moveaxis(out, 0, axis)

    check_op(
        lambda t, s: tl.index_add(t, axis, index, s, alpha=alpha),
        np_index_add,
        x,
        src,
        gradgrad=gg,
    )


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda x: x.scatter_add(1, [[0, 3]], tl.ones(1, 2)),
            r"index 3 is out of range for axis 1 of size 3",
        ),
        (lambda x: x.scatter_add(1, [[-1, 0]], tl.ones(1, 2)), r"index -1 is out of range"),
        (lambda x: x.scatter_add(1, [[0, 1]], tl.ones(1, 1)), r"index of shape \(1, 2\), source"),
        (
            lambda x: x.index_add(0, [0, 2], tl.ones(2, 3)),
            r"index 2 is out of range for axis 0 of size 2",
        ),
        (lambda x: x.index_add(0, [0], tl.ones(1, 2)), r"index_add: index of shape \(1,\)"),
        (lambda x: x.index_add(0, [0.5], tl.ones(1, 3)), r"index must hold integers"),
    ],
)
def test_scatter_errors_name_the_op_and_the_range(call, message):
    with pytest.raises((ValueError, IndexError, TypeError), match=message):
        call(tl.zeros(2, 3))


@given(x=arrays, data=st.data())
def test_a_tuple_of_indices_inside_the_key_accumulates_repeats(x, data):
    """``x[(0, 0),]`` is NumPy's integer-array indexing written with a nested tuple (row 0
    twice). The backward took it for a basic index and assigned instead of adding, so a
    repeated row got the gradient of only one of its reads."""
    n = x.shape[0]
    idx = data.draw(st.lists(st.integers(-n, n - 1), min_size=1, max_size=5), label="idx")
    check_op(lambda t: t[tuple(idx),], lambda a: a[np.array(idx)], x)
    t = leaf(x)
    t[(0, 0),].sum().backward()
    assert (t.grad.numpy()[0] == 2).all()


@st.composite
def gather_corner_case(draw):
    """An index no larger than the input on the other axes (PyTorch's rule), maybe smaller."""
    shape = draw(nonscalar_shapes)
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    ishape = [draw(st.integers(1, n)) for n in shape]
    ishape[axis] = draw(st.integers(0, 5))
    index = draw(hnp.arrays(np.int64, tuple(ishape), elements=st.integers(0, shape[axis] - 1)))
    return draw(values(shape)), axis, index


@given(case=gather_corner_case(), gg=st.booleans())
def test_gather_with_a_smaller_index_reads_the_corner(case, gg):
    """The result has the index's shape, read from the corner of the input it covers, as
    PyTorch's gather. NumPy's take_along_axis broadcast a (1, 4) index over every row of a
    (3, 4) input instead (a (3, 4) result), and its backward then failed."""
    x, axis, index = case
    corner = tuple(slice(0, n) for n in index.shape)
    corner = corner[: axis % x.ndim] + (slice(None),) + corner[axis % x.ndim + 1 :]
    check_op(
        lambda t: t.gather(axis, index),
        lambda a: np.take_along_axis(a[corner], index, axis=axis),
        x,
        gradgrad=gg,
    )


@pytest.mark.parametrize(
    "index, error, message",
    [
        (np.zeros((2, 4), dtype=np.int64), ValueError, r"gather: index of shape \(2, 4\)"),
        (np.zeros(3, dtype=np.int64), ValueError, r"need the same rank"),
        (np.zeros((2, 1)), TypeError, r"gather: index must hold integers, not float64"),
    ],
)
def test_gather_refuses_an_index_larger_than_the_input_or_not_integer(index, error, message):
    with pytest.raises(error, match=message):
        tl.zeros(1, 3).gather(1, index)
