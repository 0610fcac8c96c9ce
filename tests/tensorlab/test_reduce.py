"""Reductions (sum, mean, max, min, var, logsumexp) over None, int, negative and tuple axes,
with and without keepdims: forward against NumPy, first and second derivatives against
finite differences (tolerances: see ``opcheck.py``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorlab as tl
from tests.strategies import axis_for, distinct, shapes_with_empty, small_shapes, values

from .opcheck import check_op, leaf

gg_shapes = hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3)


def _np_logsumexp(a, axis=None, keepdims=False):
    m = np.max(a, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    if keepdims:
        return out
    return np.squeeze(out, axis=axis) if axis is not None else out.reshape(())


def _count(shape, axis) -> int:
    if axis is None:
        return int(np.prod(shape))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return int(np.prod([shape[a] for a in axes]))


@st.composite
def reduction_case(draw, shapes=small_shapes, prep=None):
    shape = draw(shapes)
    x = draw(values(shape))
    if prep is not None:
        x = prep(x)
    return x, draw(axis_for(len(shape))), draw(st.booleans())


REDUCTIONS = {
    "sum": (lambda t, ax, kd: t.sum(ax, kd), lambda a, ax, kd: a.sum(axis=ax, keepdims=kd)),
    "mean": (lambda t, ax, kd: t.mean(ax, kd), lambda a, ax, kd: a.mean(axis=ax, keepdims=kd)),
    "logsumexp": (lambda t, ax, kd: t.logsumexp(ax, kd), _np_logsumexp),
    "var0": (lambda t, ax, kd: t.var(ax, kd), lambda a, ax, kd: a.var(axis=ax, keepdims=kd)),
    "var1": (
        lambda t, ax, kd: t.var(ax, kd, ddof=1),
        lambda a, ax, kd: a.var(axis=ax, keepdims=kd, ddof=1),
    ),
}


def _check_reduction(name, case, gradgrad=False):
    fn, np_fn = REDUCTIONS[name]
    x, axis, keepdims = case
    if name == "var1":
        assume(_count(x.shape, axis) > 1)  # ddof=1 needs at least two entries
    check_op(
        lambda t: fn(t, axis, keepdims),
        lambda a: np_fn(a, axis, keepdims),
        x,
        gradgrad=gradgrad,
    )


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@given(case=reduction_case())
def test_reduction(name, case):
    _check_reduction(name, case)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@given(case=reduction_case(shapes=gg_shapes))
def test_reduction_second_order(name, case):
    _check_reduction(name, case, gradgrad=True)


@given(case=reduction_case(shapes=shapes_with_empty))
def test_sum_with_empty_axes(case):
    _check_reduction("sum", case)


@pytest.mark.parametrize(
    "fn, np_fn",
    [
        (lambda t, ax, kd: t.max(ax, kd), lambda a, ax, kd: a.max(axis=ax, keepdims=kd)),
        (lambda t, ax, kd: t.min(ax, kd), lambda a, ax, kd: a.min(axis=ax, keepdims=kd)),
    ],
    ids=["max", "min"],
)
@given(case=reduction_case(prep=distinct), gg=st.booleans())
def test_max_min_distinct(fn, np_fn, case, gg):
    x, axis, keepdims = case
    check_op(lambda t: fn(t, axis, keepdims), lambda a: np_fn(a, axis, keepdims), x, gradgrad=gg)


def test_list_axis_means_tuple():
    x = leaf(np.arange(24.0).reshape(2, 3, 4))
    np.testing.assert_array_equal(x.sum([0, -1]).numpy(), x.numpy().sum(axis=(0, 2)))


def test_a_numpy_integer_axis_is_an_axis():
    """x.sum(np.int64(1)) (an axis read from an array) used to fail: 'numpy.int64' object is
    not iterable."""
    x = leaf(np.arange(24.0).reshape(2, 3, 4))
    for name in AXIS_OPS:
        np.testing.assert_array_equal(
            AXIS_OPS[name](x, np.int64(-2)).numpy(), AXIS_OPS[name](x, -2).numpy()
        )
    np.testing.assert_array_equal(x.flip(np.int64(1)).numpy(), x.numpy()[:, ::-1])


def test_max_ties_share_the_gradient():
    x = leaf([[1.0, 3.0, 3.0], [2.0, 0.0, -1.0]])
    x.max(axis=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0.5, 0.5], [1, 0, 0]])


def test_reductions_of_large_inputs_are_stable():
    x = leaf([[1000.0, 1000.0], [-1000.0, 0.0]])
    y = x.logsumexp(axis=-1)
    np.testing.assert_allclose(y.numpy(), [1000 + np.log(2), np.log1p(np.exp(-1000.0))])
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0.5, 0.5], [0.0, 1.0]], atol=1e-300)
    assert np.isfinite(x.grad.numpy()).all()


def test_logsumexp_of_minus_infinity():
    x = leaf([-np.inf, -np.inf])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # log 0 = -inf is the answer: no divide-by-zero warning
        assert x.logsumexp().item() == -np.inf
    z = leaf([-np.inf, 0.0])
    assert z.logsumexp().item() == 0.0


def test_reductions_keep_float32():
    x = tl.ones(3, 4)
    for y in (x.sum(), x.mean(0), x.max(1), x.var(), x.logsumexp(-1)):
        assert y.dtype == np.float32


# ---------------------------------------------------------------- prod, std, cumsum
@st.composite
def signed_magnitudes(draw, shapes=small_shapes, low=0.5, high=1.5):
    """Entries of either sign with |x| in [low, high]: products of up to 64 of them stay
    within [0.5⁶⁴, 1.5⁶⁴] ≈ [5e-20, 2e11], where central differences keep their accuracy."""
    shape = draw(shapes)
    mag = draw(values(shape, low, high))
    return np.where(draw(hnp.arrays(np.bool_, shape)), -mag, mag)


@given(data=st.data(), gg=st.booleans())
def test_prod(data, gg):
    shapes = gg_shapes if gg else st.one_of(small_shapes, shapes_with_empty)
    x = data.draw(signed_magnitudes(shapes), label="x")
    axis, keepdims = data.draw(axis_for(x.ndim)), data.draw(st.booleans())
    check_op(
        lambda t: t.prod(axis, keepdims),
        lambda a: a.prod(axis=axis, keepdims=keepdims),
        x,
        gradgrad=gg,
    )


@pytest.mark.parametrize(
    "x", [[2.0, 0.0, 3.0], [0.0, 0.0, 3.0], [[1.5, 0.0], [2.0, -1.0]], 0.0], ids=str
)
def test_prod_with_zeros(x):
    """With zeros, y / a_i is 0/0: the backward forms the leave-one-out products instead.
    A product is a polynomial, so finite differences are exact here too."""
    check_op(lambda t: t.prod(-1 if np.ndim(x) else None), lambda a: a.prod(axis=-1), x)
    check_op(lambda t: tl.prod(t), np.prod, x, gradgrad=True)
    t = leaf(x)
    t.prod().backward()
    a = np.array(x, dtype=np.float64).ravel()
    others = [np.prod(np.delete(a, i)) for i in range(a.size)]
    np.testing.assert_array_equal(t.grad.numpy().ravel(), others)


@given(data=st.data(), gg=st.booleans())
def test_prod_with_zeros_over_any_axes(data, gg):
    """Zeros anywhere and any axes: the leave-one-out products move the reduced axes last and
    must put them back (a trailing axis alone would not notice)."""
    x = data.draw(signed_magnitudes(gg_shapes if gg else small_shapes), label="x")
    x = np.where(data.draw(hnp.arrays(np.bool_, x.shape), label="zeros"), 0.0, x)
    axis, keepdims = data.draw(axis_for(x.ndim)), data.draw(st.booleans())
    check_op(
        lambda t: t.prod(axis, keepdims),
        lambda a: a.prod(axis=axis, keepdims=keepdims),
        x,
        gradgrad=gg,
    )


@given(
    case=reduction_case(prep=lambda a: distinct(a, gap=0.1)),
    ddof=st.sampled_from([0, 1]),
    gg=st.booleans(),
)
def test_std(case, ddof, gg):
    """Entries kept 0.1 apart, so σ is bounded away from 0 (where √ has its kink)."""
    x, axis, keepdims = case
    assume(_count(x.shape, axis) > ddof)
    check_op(
        lambda t: t.std(axis, keepdims, ddof=ddof),
        lambda a: a.std(axis=axis, keepdims=keepdims, ddof=ddof),
        x,
        gradgrad=gg and x.size <= 9,
    )


def test_std_of_a_constant_slice_has_zero_gradient():
    """σ = 0: the derivative of √ does not exist; 0 is taken (PyTorch's choice)."""
    x = leaf([[1.0, 1.0, 1.0], [1.0, 2.0, 3.0]])
    x.std(axis=1, ddof=1).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [[0, 0, 0], [-0.5, 0, 0.5]])


@given(x=st.one_of(small_shapes, shapes_with_empty).flatmap(values), data=st.data())
def test_cumsum(x, data):
    axis = data.draw(st.none() | st.integers(-x.ndim, x.ndim - 1) if x.ndim else st.none())
    check_op(lambda t: t.cumsum(axis), lambda a: np.cumsum(a, axis=axis), x, gradgrad=x.size < 10)


def test_cumsum_gradient_is_the_reverse_running_sum():
    x = leaf([1.0, 2.0, 3.0, 4.0])
    x.cumsum(0).backward(tl.tensor([1.0, 10.0, 100.0, 1000.0], dtype=np.float64))
    np.testing.assert_array_equal(x.grad.numpy(), [1111.0, 1110.0, 1100.0, 1000.0])


# ---------------------------------------------------------------- reductions over empty axes
@pytest.mark.parametrize("shape, axis", [((2, 0), -1), ((0, 3), -1), ((0, 3), 0), ((0,), None)])
def test_reductions_over_empty_axes_follow_numpy_and_do_not_raise(shape, axis):
    """var/std of no entries and logsumexp of none: NaN and -inf, as NumPy and PyTorch (the
    torch comparison is in test_torch_parity.py); gradients have the input's (empty) shape."""
    x = leaf(np.zeros(shape))
    count = int(np.prod([shape[a] for a in ([axis] if axis is not None else range(len(shape)))]))
    for y, value in [
        (x.var(axis), np.nan),
        (x.var(axis, ddof=1), np.nan),
        (x.std(axis), np.nan),
        (x.logsumexp(axis), -np.inf),
        (x.softmax(-1), None),
        (x.log_softmax(-1), None),
    ]:
        if value is not None and count == 0:
            assert np.all(y.numpy() == value) or np.all(np.isnan(y.numpy()) == np.isnan(value))
        x.grad = None
        y.sum().backward()
        assert x.grad.shape == shape


def test_var_without_degrees_of_freedom_is_nan_not_an_error():
    x = leaf([3.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NaN without NumPy's "degrees of freedom" warning
        y = x.var(ddof=1)
    assert np.isnan(y.item())
    y.backward()
    assert np.isnan(x.grad.numpy()).all()


def test_prod_of_a_0d_tensor_passes_the_gradient_also_at_infinity():
    """Found by the differential fuzzer: the product of no other entries is 1, so d(prod a)/da
    is 1 for a 0-d a (PyTorch's answer); g * y / a gave inf / inf = NaN at a = inf."""
    for value in (np.inf, 0.0, -2.0):
        x = leaf(value)
        with np.errstate(invalid="ignore"):
            (x.prod() * 3.0).backward()
        assert x.grad.item() == 3.0


def test_var_and_std_with_ddof_past_the_count_divide_by_zero_as_pytorch():
    """PyTorch divides by max(N - correction, 0): torch.tensor([1., 2.]).var(correction=3) is
    inf (NaN before here), and NaN only where the sum of squares is 0 too."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and without NumPy's warnings
        for ddof in (2, 3):
            assert tl.tensor([1.0, 2.0]).var(ddof=ddof).item() == np.inf
            assert tl.tensor([1.0, 2.0]).std(ddof=ddof).item() == np.inf
            assert np.isnan(tl.tensor([1.0, 1.0]).var(ddof=ddof).item())
        rows = tl.tensor([[1.0, 2.0], [3.0, 3.0]]).var(axis=1, ddof=5)
        assert rows.numpy()[0] == np.inf and np.isnan(rows.numpy()[1])
    x = leaf([1.0, 2.0, 2.0])
    with np.errstate(invalid="ignore"):
        x.var(axis=0, ddof=3).backward()  # 2 (a - ā) / 0: -inf, +inf, +inf
    assert x.grad.numpy().tolist() == [-np.inf, np.inf, np.inf]
    x = leaf([1.0, 2.0])
    with np.errstate(invalid="ignore"):
        x.std(ddof=2).backward()
    assert np.isnan(x.grad.numpy()).all()  # PyTorch's too


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "var", "std", "prod", "logsumexp"])
@pytest.mark.parametrize("shape", [(0, 3), (2, 3)])
def test_a_repeated_axis_is_refused_also_on_empty_tensors(name, shape):
    with pytest.raises(ValueError, match=f"{name}: axis \\(0, -2\\) names an axis twice"):
        getattr(tl.zeros(*shape), name)(axis=(0, -2))


@pytest.mark.parametrize("axis", ["0", 0.0, (0, "1"), [None]])
def test_an_axis_that_is_not_an_integer_is_a_clear_error(axis):
    with pytest.raises(TypeError, match="sum: axis must be an integer .*, got"):
        tl.zeros(2, 3).sum(axis=axis)


# ---------------------------------------------------------------- axes out of range, integers
AXIS_OPS = {
    "sum": lambda t, ax: t.sum(ax),
    "mean": lambda t, ax: t.mean(ax, keepdims=True),
    "max": lambda t, ax: t.max(ax),
    "min": lambda t, ax: t.min(ax),
    "var": lambda t, ax: t.var(ax, ddof=1),
    "std": lambda t, ax: t.std(ax),
    "prod": lambda t, ax: t.prod(ax),
    "logsumexp": lambda t, ax: t.logsumexp(ax),
}


@pytest.mark.parametrize("name", sorted(AXIS_OPS))
@given(shape=small_shapes, data=st.data())
def test_an_axis_out_of_range_is_refused_not_wrapped_around(name, shape, data):
    """sum(5) of a matrix used to be sum(5 % 2) = sum(1), silently; NumPy and PyTorch refuse
    it. The error is an AxisError (a ValueError and an IndexError) naming the axis."""
    n = len(shape)
    axis = data.draw(st.one_of(st.integers(n, n + 3), st.integers(-n - 3, -n - 1)), label="axis")
    if n and data.draw(st.booleans(), label="in a tuple"):
        axis = (0, axis)
    bad = axis[1] if isinstance(axis, tuple) else axis
    with pytest.raises(np.exceptions.AxisError, match=f"axis {bad} is out of range"):
        AXIS_OPS[name](tl.zeros(*shape), axis)


@given(shape=small_shapes, data=st.data())
def test_cumsum_refuses_an_axis_out_of_range(shape, data):
    n = len(shape)
    axis = data.draw(st.one_of(st.integers(max(n, 1), n + 3), st.integers(-n - 3, -max(n, 1) - 1)))
    with pytest.raises(np.exceptions.AxisError, match=f"cumsum: axis {axis} is out of range"):
        tl.zeros(*shape).cumsum(axis)


def test_logsumexp_of_integers_is_not_truncated_to_an_integer():
    """It used to cast log(e¹ + e² + e⁻³) = 2.318 back to the input's int64: 2."""
    x = np.array([1, 2, -3])
    y = tl.tensor(x).logsumexp()
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.item(), np.log(np.exp(x).sum()), rtol=1e-12)
    np.testing.assert_array_equal(tl.tensor(x).max(0).numpy(), 2)  # (max stays an integer)
