"""Reductions (sum, mean, max, min, var, logsumexp) over None, int, negative and tuple axes,
with and without keepdims: forward against NumPy, first and second derivatives against
finite differences (tolerances: see ``opcheck.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from opcheck import check_op, leaf
from strategies import axis_for, distinct, shapes_with_empty, small_shapes, values

import tensorlab as tl

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
    assert x.logsumexp().item() == -np.inf
    z = leaf([-np.inf, 0.0])
    assert z.logsumexp().item() == 0.0


def test_reductions_keep_float32():
    x = tl.ones(3, 4)
    for y in (x.sum(), x.mean(0), x.max(1), x.var(), x.logsumexp(-1)):
        assert y.dtype == np.float32
