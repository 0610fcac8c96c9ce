"""Shape ops (reshape, permute/transpose, .T/.mT, broadcast_to/expand, squeeze/unsqueeze,
flatten, concatenate, stack, split/chunk): forward against NumPy, first and second
derivatives against finite differences (tolerances: see ``opcheck.py``)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorlab as tl
from tests.strategies import nonscalar_shapes, shapes_with_empty, small_shapes, values

from .opcheck import check_op, leaf

arrays = small_shapes.flatmap(values)


@st.composite
def reshape_case(draw):
    x = draw(st.one_of(arrays, shapes_with_empty.flatmap(values)))
    dims = list(x.shape)
    new = draw(st.permutations(dims)) if dims else []
    new = list(new)
    for _ in range(draw(st.integers(0, 2))):  # insert size-1 axes
        new.insert(draw(st.integers(0, len(new))), 1)
    if new and x.size and draw(st.booleans()):  # let one axis be inferred
        new[draw(st.integers(0, len(new) - 1))] = -1
    return x, tuple(new)


@given(case=reshape_case(), gg=st.booleans())
def test_reshape(case, gg):
    x, shape = case
    check_op(lambda t: t.reshape(shape), lambda a: a.reshape(shape), x, gradgrad=gg)
    check_op(lambda t: t.reshape(*shape), lambda a: a.reshape(shape), x)


@given(x=arrays, data=st.data())
def test_permute(x, data):
    axes = data.draw(st.permutations(range(x.ndim)), label="axes")
    axes = tuple(a - x.ndim if data.draw(st.booleans()) else a for a in axes)  # some negative
    check_op(lambda t: t.permute(axes), lambda a: a.transpose(axes), x, gradgrad=True)
    if axes:
        check_op(lambda t: t.permute(*axes), lambda a: a.transpose(axes), x)


@given(x=nonscalar_shapes.filter(lambda s: len(s) >= 2).flatmap(values), data=st.data())
def test_transpose_and_mT(x, data):
    i = data.draw(st.integers(-x.ndim, x.ndim - 1), label="axis0")
    j = data.draw(st.integers(-x.ndim, x.ndim - 1), label="axis1")
    check_op(lambda t: t.transpose(i, j), lambda a: np.swapaxes(a, i, j), x)
    check_op(lambda t: t.mT, lambda a: np.swapaxes(a, -2, -1), x, gradgrad=True)


@given(x=arrays)
def test_T(x):
    check_op(lambda t: t.T, lambda a: a.T, x)


@st.composite
def broadcast_case(draw):
    shape = draw(small_shapes)
    # a target shape that ``shape`` broadcasts to: new leading axes, size-1 axes stretched
    lead = draw(st.lists(st.integers(1, 3), max_size=2))
    tail = [draw(st.integers(1, 3)) if n == 1 else n for n in shape]
    return draw(values(shape)), tuple(lead + tail)


@given(case=broadcast_case(), gg=st.booleans())
def test_broadcast_to_and_expand(case, gg):
    x, target = case
    check_op(lambda t: t.broadcast_to(target), lambda a: np.broadcast_to(a, target), x, gradgrad=gg)
    # expand with -1 keeps an existing axis's size
    lead = len(target) - x.ndim
    spec = tuple(-1 if i >= lead and x.shape[i - lead] == n else n for i, n in enumerate(target))
    check_op(lambda t: t.expand(*spec), lambda a: np.broadcast_to(a, target), x)


def test_broadcast_gradient_sums_copies():
    x = leaf([[1.0], [2.0]])
    x.expand(2, 5).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[5.0], [5.0]])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_on_a_gpu_a_broadcast_gradient_is_kept_without_a_copy(dtype, monkeypatch):
    """A bias broadcast over rows gets its gradient as one sum over the rows (a gemv); kept as
    its .grad as it comes, with no copy launched (a sum reshaped to its own shape would be a
    view, which the engine copies before keeping). On CuPy emulated by NumPy, which counts
    launches (tests/fake_cupy.py)."""
    if dtype == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    b = tl.tensor(np.arange(4.0), device="cuda").astype(dtype).requires_grad_()
    x = tl.tensor(np.ones((3, 4)), device="cuda").astype(dtype)
    for _ in range(2):  # counted the second time: the first makes the gemv's vector of ones
        b.grad = None
        y, g = x + b, tl.ones(3, 4, device="cuda").astype(dtype)
        fake_cupy.KERNELS.clear()
        y.backward(g)
    assert dict(fake_cupy.KERNELS) == {"matmul": 1}
    np.testing.assert_array_equal(b.grad.numpy().astype(np.float32), [3.0] * 4)


@given(x=small_shapes.flatmap(values), data=st.data())
def test_squeeze_unsqueeze(x, data):
    ones = [i for i, n in enumerate(x.shape) if n == 1]
    check_op(lambda t: t.squeeze(), np.squeeze, x)
    if ones:
        ax = data.draw(st.sampled_from(ones), label="axis")
        ax = ax - x.ndim if data.draw(st.booleans()) else ax
        check_op(lambda t: t.squeeze(ax), lambda a: np.squeeze(a, ax), x)
        check_op(lambda t: t.squeeze((ax,)), lambda a: np.squeeze(a, (ax,)), x)
    ax = data.draw(st.integers(-x.ndim - 1, x.ndim), label="new axis")
    check_op(lambda t: t.unsqueeze(ax), lambda a: np.expand_dims(a, ax), x, gradgrad=True)


def test_squeeze_of_a_non_unit_axis_raises():
    with pytest.raises(ValueError, match="size 3"):
        tl.ones(2, 3).squeeze(1)


@given(x=nonscalar_shapes.flatmap(values))
def test_flatten(x):
    check_op(lambda t: t.flatten(), lambda a: a.reshape(-1), x)
    if x.ndim >= 2:
        check_op(lambda t: t.flatten(1), lambda a: a.reshape(a.shape[0], -1), x)


def test_flatten_of_zero_size_tensors_keeps_the_other_axes():
    """zeros(5, 0).flatten(0, -2) crashed: reshape((-1, 0)) cannot tell what -1 stands for."""
    x = tl.zeros(5, 0, requires_grad=True)
    y = x.flatten(0, -2)
    assert y.shape == (5, 0)
    assert tl.zeros(2, 0, 3).flatten(1).shape == (2, 0)
    assert tl.zeros(0, 4, 3).flatten(1, 2).shape == (0, 12)
    y.sum().backward()
    assert x.grad.shape == (5, 0)


def test_flatten_refuses_a_start_after_the_end():
    with pytest.raises(
        ValueError, match=r"flatten: start axis 2 comes after end axis 1 .*\(2, 3, 4\)"
    ):
        tl.zeros(2, 3, 4).flatten(2, 1)
    with pytest.raises(ValueError, match="flatten: start axis 1 comes after end axis 0"):
        tl.zeros(2, 3).flatten(-1, 0)


@pytest.mark.parametrize("join", [tl.cat, tl.concatenate, tl.stack])
def test_joining_nothing_or_a_non_tensor_is_a_clear_error(join):
    name = "stack" if join is tl.stack else "concatenate"
    with pytest.raises(ValueError, match=f"{name}: needs at least one tensor, got an empty list"):
        join([])
    with pytest.raises(TypeError, match=f"{name}: element 1 is 3 of type int, not a Tensor"):
        join([tl.zeros(3), 3])
    with pytest.raises(TypeError, match=f"{name}: takes a list of tensors, got one tensor"):
        join(tl.zeros(2, 3))


@st.composite
def join_case(draw, new_axis: bool):
    base = draw(nonscalar_shapes)
    ndim = len(base)
    n = draw(st.integers(1, 3))
    if new_axis:
        axis = draw(st.integers(-ndim - 1, ndim))
        shapes = [base] * n
    else:
        axis = draw(st.integers(-ndim, ndim - 1))
        ax = axis % ndim
        shapes = [
            base[:ax] + (draw(st.integers(0, 3)),) + base[ax + 1 :] for _ in range(n)
        ]  # sizes along the axis differ (and may be 0)
    return [draw(values(s)) for s in shapes], axis


@given(case=join_case(new_axis=False), gg=st.booleans())
def test_concatenate(case, gg):
    parts, axis = case
    check_op(
        lambda *ts: tl.concatenate(list(ts), axis=axis),
        lambda *arrs: np.concatenate(arrs, axis=axis),
        *parts,
        gradgrad=gg,
    )
    out = tl.cat([tl.tensor(p) for p in parts], axis)
    np.testing.assert_array_equal(out.numpy(), np.concatenate(parts, axis))


@given(case=join_case(new_axis=True), gg=st.booleans())
def test_stack(case, gg):
    parts, axis = case
    check_op(
        lambda *ts: tl.stack(ts, axis=axis),
        lambda *arrs: np.stack(arrs, axis=axis),
        *parts,
        gradgrad=gg,
    )


def test_concatenate_and_stack_join_along_the_first_axis_by_default():
    a, b = np.arange(6.0).reshape(2, 3), np.arange(6.0, 12.0).reshape(2, 3)
    ts = [tl.tensor(a), tl.tensor(b)]
    for join, ref in (
        (tl.concatenate, np.concatenate),
        (tl.cat, np.concatenate),
        (tl.stack, np.stack),
    ):
        np.testing.assert_array_equal(join(ts).numpy(), ref([a, b]))


def test_concatenate_with_a_constant_part():
    c = tl.ones(2, 1)
    check_op(
        lambda x: tl.concatenate([c, x, c], axis=1),
        lambda a: np.concatenate([np.ones((2, 1)), a, np.ones((2, 1))], axis=1),
        np.arange(6.0).reshape(2, 3),
    )


@given(x=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5).flatmap(values))
def test_split_and_chunk(x):
    ndim = x.ndim
    for axis in range(-ndim, ndim):
        n = x.shape[axis]
        for size in range(1, n + 1):
            expected = np.split(x, range(size, n, size), axis=axis)
            for pieces in (tl.split(leaf(x), size, axis), leaf(x).split(size, axis)):
                assert len(pieces) == len(expected)
                for p, e in zip(pieces, expected):
                    np.testing.assert_array_equal(p.numpy(), e)
        chunks = leaf(x).chunk(2, axis)
        expected = np.array_split(x, 2, axis=axis) if n % 2 == 0 else None
        if expected is not None:
            for p, e in zip(chunks, expected):
                np.testing.assert_array_equal(p.numpy(), e)
        assert sum(c.shape[axis] for c in chunks) == n

    sizes = [1, x.shape[0] - 1] if x.shape[0] > 1 else [1]

    def weighted_pieces(t):  # each piece scaled differently, so a misplaced gradient shows
        return tl.concatenate(
            [p * (i + 1.0) for i, p in enumerate(tl.split(t, sizes, 0))] + [t.chunk(2)[0]], 0
        )

    def np_weighted(a):
        pieces = np.split(a, np.cumsum(sizes)[:-1], 0)
        first_chunk = a[: -(-a.shape[0] // 2)]
        return np.concatenate([p * (i + 1.0) for i, p in enumerate(pieces)] + [first_chunk], 0)

    check_op(weighted_pieces, np_weighted, x, gradgrad=True)


def test_split_sizes_must_add_up():
    with pytest.raises(ValueError, match="add up"):
        tl.split(tl.ones(5), [2, 2])


# ---------------------------------------------------------------- flip, roll, tile, repeat
any_arrays = st.one_of(arrays, shapes_with_empty.flatmap(values))


@st.composite
def axes_of(draw, ndim: int):
    """None, one axis (maybe negative) or a tuple of distinct axes of an ``ndim``-d array."""
    if ndim == 0:
        return None
    return draw(
        st.none()
        | st.integers(-ndim, ndim - 1)
        | st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(tuple)
    )


@given(x=any_arrays, data=st.data(), gg=st.booleans())
def test_flip(x, data, gg):
    axis = data.draw(axes_of(x.ndim), label="axis")
    check_op(lambda t: t.flip(axis), lambda a: np.flip(a, axis), x, gradgrad=gg)
    check_op(lambda t: tl.flip(t, axis), lambda a: np.flip(a, axis), x)


@given(x=any_arrays, data=st.data(), gg=st.booleans())
def test_roll(x, data, gg):
    axis = data.draw(axes_of(x.ndim), label="axis")
    if isinstance(axis, tuple):
        shifts = data.draw(st.tuples(*[st.integers(-5, 5) for _ in axis]), label="shifts")
    else:
        shifts = data.draw(st.integers(-5, 5), label="shifts")
    check_op(lambda t: t.roll(shifts, axis), lambda a: np.roll(a, shifts, axis), x, gradgrad=gg)


@given(x=any_arrays, reps=st.lists(st.integers(0, 3), min_size=0, max_size=4), gg=st.booleans())
def test_tile(x, reps, gg):
    reps = tuple(reps)
    check_op(lambda t: t.tile(reps), lambda a: np.tile(a, reps), x, gradgrad=gg)


@given(x=any_arrays, data=st.data())
def test_repeat_is_pytorchs_tile(x, data):
    sizes = tuple(data.draw(st.lists(st.integers(0, 3), min_size=x.ndim, max_size=x.ndim + 2)))
    check_op(lambda t: t.repeat(*sizes) if sizes else t.repeat(()), lambda a: np.tile(a, sizes), x)


def test_repeat_needs_a_size_per_axis():
    with pytest.raises(ValueError, match=r"repeat: 1 sizes for a tensor of shape \(2, 3\)"):
        tl.zeros(2, 3).repeat(2)


@given(x=arrays.filter(lambda a: a.ndim > 0), data=st.data(), gg=st.booleans())
def test_repeat_interleave(x, data, gg):
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1), label="axis")
    n = x.size if axis is None else x.shape[axis]
    repeats = data.draw(
        st.integers(0, 3) | st.lists(st.integers(0, 3), min_size=n, max_size=n).map(np.array),
        label="repeats",
    )
    check_op(
        lambda t: t.repeat_interleave(repeats, axis),
        lambda a: np.repeat(a, repeats, axis),
        x,
        gradgrad=gg,
    )


def test_repeat_interleave_gradient_adds_the_copies():
    x = leaf([1.0, 2.0, 3.0])
    x.repeat_interleave(np.array([2, 0, 3])).backward(tl.tensor(np.arange(5.0)))
    np.testing.assert_array_equal(x.grad.numpy(), [0 + 1, 0, 2 + 3 + 4])


# ---------------------------------------------------------------- axes out of range, iteration
# op name (as the error names it) -> call with one axis; ``extra`` axes are valid beyond ndim
# (unsqueeze and stack insert a new axis: ndim + 1 positions).
AXIS_SHAPE_OPS = {
    "flip": (lambda t, ax: t.flip(ax), 0),
    "squeeze": (lambda t, ax: t.squeeze(ax), 0),
    "unsqueeze": (lambda t, ax: t.unsqueeze(ax), 1),
    "flatten": (lambda t, ax: t.flatten(ax), 0),
    "transpose": (lambda t, ax: t.transpose(0, ax), 0),
    "concatenate": (lambda t, ax: tl.concatenate([t, t], ax), 0),
    "stack": (lambda t, ax: tl.stack([t, t], ax), 1),
    "split": (lambda t, ax: t.split(1, ax), 0),
    "chunk": (lambda t, ax: t.chunk(2, ax), 0),
    "repeat_interleave": (lambda t, ax: t.repeat_interleave(2, ax), 0),
    "sort": (lambda t, ax: t.sort(ax), 0),
    "topk": (lambda t, ax: t.topk(1, ax), 0),
}


@pytest.mark.parametrize("name", sorted(AXIS_SHAPE_OPS))
@given(shape=nonscalar_shapes, data=st.data())
def test_an_axis_out_of_range_is_refused_not_wrapped_around(name, shape, data):
    """flip(2) of a matrix used to flip axis 0, unsqueeze(5) to append an axis, cat(axis=2)
    to join along axis 0: each axis was taken modulo ndim. Now an AxisError (a ValueError
    and an IndexError) names the op and the axis, as NumPy and PyTorch refuse them."""
    fn, extra = AXIS_SHAPE_OPS[name]
    n = len(shape) + extra
    axis = data.draw(st.one_of(st.integers(n, n + 3), st.integers(-n - 3, -n - 1)), label="axis")
    with pytest.raises(np.exceptions.AxisError, match=f"{name}: axis {axis} is out of range"):
        fn(tl.ones(*shape), axis)


def test_a_0d_tensor_has_no_axis_to_join_along():
    """It used to fail with 'integer modulo by zero' (axis % 0)."""
    with pytest.raises(np.exceptions.AxisError, match="a 0-d tensor has none"):
        tl.concatenate([tl.tensor(1.0), tl.tensor(2.0)])
    assert tl.stack([tl.tensor(1.0), tl.tensor(2.0)]).shape == (2,)  # a new axis: fine
    assert tl.tensor(1.0).flatten(-1).shape == (1,)  # axes 0 and -1 name the one entry


@given(x=nonscalar_shapes.flatmap(values))
def test_iterating_gives_the_rows_and_stops(x):
    """``for row in x`` and unpacking used to end in a ValueError: iteration stops at an
    IndexError, and indexing past the end raised ValueError. Each row keeps its gradient."""
    t = leaf(x)
    rows = list(t)
    assert len(rows) == x.shape[0]
    for r, e in zip(rows, x):
        np.testing.assert_array_equal(r.numpy(), e)
    sum((r * (i + 1.0)).sum() for i, r in enumerate(rows)).backward()
    weights = np.arange(1.0, x.shape[0] + 1).reshape((-1,) + (1,) * (x.ndim - 1))
    np.testing.assert_array_equal(t.grad.numpy(), np.broadcast_to(weights, x.shape))
    with pytest.raises(IndexError, match="GetItem"):
        t[x.shape[0]]


def test_unpacking_and_0d_iteration():
    a, b = tl.tensor([1.0, 2.0])
    assert (a.item(), b.item()) == (1.0, 2.0)
    with pytest.raises(TypeError, match="0-d"):
        iter(tl.tensor(1.0))


def test_split_and_chunk_of_an_empty_axis_and_bad_sizes():
    """As PyTorch: split of an empty axis gives one empty piece, chunk gives ``chunks`` empty
    pieces (chunk used to fail with 'range() arg 3 must not be zero'); a size below 1 is
    refused by name."""
    x = tl.zeros(0, 3, requires_grad=True)
    assert [p.shape for p in x.split(2)] == [(0, 3)]
    assert [p.shape for p in x.chunk(2)] == [(0, 3), (0, 3)]
    assert [p.shape for p in x.chunk(2, 1)] == [(0, 2), (0, 1)]
    with pytest.raises(ValueError, match="split: the size of a piece must be at least 1"):
        tl.ones(3).split(0)
    with pytest.raises(ValueError, match="chunk: chunks must be an integer of at least 1"):
        tl.ones(3).chunk(0)


@pytest.mark.parametrize("sizes", [[2, -1, 2], [4, -1], [1.0, 2.0], [1, True, 1], "12"], ids=repr)
def test_split_refuses_sizes_that_are_not_counts(sizes):
    """Sizes that add up to the axis but are not integers ≥ 0 are refused by name: [2, -1, 2]
    used to give pieces of 2, 0 and 2 columns out of 3, the last overlapping the first."""
    with pytest.raises(ValueError, match=re.escape("split: sizes [")):
        tl.ones(2, 3).split(sizes, 1)


@pytest.mark.parametrize("bad", [1.5, True, None], ids=repr)
def test_split_and_chunk_refuse_a_count_that_is_not_an_integer(bad):
    with pytest.raises(TypeError, match="split: split_size_or_sections must be an integer"):
        tl.ones(3).split(bad)
    with pytest.raises(ValueError, match="chunk: chunks must be an integer of at least 1"):
        tl.ones(3).chunk(bad)


@pytest.mark.parametrize("sizes", [np.int64(2), np.array([1, 2]), (0, 3), [np.int32(3)]], ids=repr)
def test_split_takes_numpy_integers_and_empty_pieces(sizes):
    """NumPy integers and arrays of them are counts too, and a piece may be empty."""
    x = tl.tensor(np.arange(3.0), requires_grad=True)
    pieces = x.split(sizes)
    np.testing.assert_array_equal(np.concatenate([p.numpy() for p in pieces]), np.arange(3.0))
    sum(((i + 1.0) * p).sum() for i, p in enumerate(pieces)).backward()
    expected = np.concatenate([np.full(p.shape, i + 1.0) for i, p in enumerate(pieces)])
    np.testing.assert_array_equal(x.grad.numpy(), expected)
