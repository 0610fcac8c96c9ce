"""Softmax and log-softmax along any axis: forward against NumPy, first and second
derivatives against finite differences (tolerances: see ``opcheck.py``), and numerical
stability for inputs far outside exp's range."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorlab as tl
from tests.strategies import nonscalar_shapes, values

from .opcheck import check_op, leaf


def _np_softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _np_log_softmax(a, axis):
    s = a - a.max(axis=axis, keepdims=True)
    return s - np.log(np.exp(s).sum(axis=axis, keepdims=True))


OPS = {
    "softmax": (lambda t, ax: t.softmax(ax), _np_softmax),
    "log_softmax": (lambda t, ax: t.log_softmax(ax), _np_log_softmax),
    "tl.softmax": (lambda t, ax: tl.softmax(t, ax), _np_softmax),
    "tl.log_softmax": (lambda t, ax: tl.log_softmax(t, axis=ax), _np_log_softmax),
}


@st.composite
def case(draw, shapes=nonscalar_shapes):
    shape = draw(shapes)
    return draw(values(shape, -3, 3)), draw(st.integers(-len(shape), len(shape) - 1))


@pytest.mark.parametrize("name", sorted(OPS))
@given(c=case())
def test_softmax_family(name, c):
    fn, np_fn = OPS[name]
    x, axis = c
    check_op(lambda t: fn(t, axis), lambda a: np_fn(a, axis), x)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
@given(c=case(hnp.array_shapes(min_dims=1, max_dims=2, min_side=1, max_side=3)))
def test_softmax_family_second_order(name, c):
    fn, np_fn = OPS[name]
    x, axis = c
    check_op(lambda t: fn(t, axis), lambda a: np_fn(a, axis), x, gradgrad=True)


def test_default_axis_is_last():
    x = leaf(np.arange(6.0).reshape(2, 3))
    np.testing.assert_allclose(x.softmax().numpy(), _np_softmax(x.numpy(), -1), rtol=1e-14)
    np.testing.assert_allclose(x.log_softmax().numpy(), _np_log_softmax(x.numpy(), -1))


@given(c=case())
def test_softmax_is_a_distribution(c):
    x, axis = c
    p = leaf(x).softmax(axis).numpy()
    assert (p > 0).all()
    np.testing.assert_allclose(p.sum(axis=axis), 1.0, rtol=1e-12)
    np.testing.assert_allclose(
        np.exp(leaf(x).log_softmax(axis).numpy()), p, rtol=1e-12, atol=1e-300
    )


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_large_inputs_are_stable(dtype):
    with np.errstate(over="raise", invalid="raise", divide="ignore"):
        x = tl.tensor(np.array([[1000.0, 1000.0, -1000.0], [0.0, 1000.0, 999.0]], dtype=dtype))
        x.requires_grad_()
        p = x.softmax(-1)
        lp = x.log_softmax(-1)
        (p * tl.tensor(np.array([1.0, 2.0, 3.0], dtype=dtype))).sum().backward()
        g_soft = x.grad.numpy().copy()
        x.grad = None
        lp[:, 0].sum().backward()
    assert p.dtype == dtype and lp.dtype == dtype
    assert np.isfinite(p.numpy()).all() and np.isfinite(lp.numpy()).all()
    np.testing.assert_allclose(p.numpy()[0], [0.5, 0.5, 0.0], atol=1e-6)
    np.testing.assert_allclose(lp.numpy()[0, :2], [-np.log(2), -np.log(2)], rtol=1e-6)
    np.testing.assert_allclose(lp.numpy()[0, 2], -2000 - np.log(2), rtol=1e-6)
    e = 1 / (1 + np.e)
    np.testing.assert_allclose(p.numpy()[1], [0.0, 1 - e, e], rtol=1e-5, atol=1e-6)
    assert np.isfinite(g_soft).all() and np.isfinite(x.grad.numpy()).all()
    # d(log p_0)/dx = onehot(0) - p
    np.testing.assert_allclose(x.grad.numpy(), [[1, 0, 0], [1, 0, 0]] - p.numpy(), atol=1e-6)


def test_softmax_gradient_rows_sum_to_zero():
    # softmax is invariant to adding a constant along the axis, so every input gradient
    # sums to zero along it
    rng = np.random.default_rng(0)
    x = leaf(rng.standard_normal((3, 5)))
    (x.softmax(-1) * tl.tensor(rng.standard_normal((3, 5)))).sum().backward()
    np.testing.assert_allclose(x.grad.numpy().sum(-1), 0.0, atol=1e-15)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_of_a_0d_tensor_is_of_its_one_entry(name):
    """A 0-d tensor is one entry along its axis (as in PyTorch): softmax 1 and log_softmax 0,
    gradient 0 to every order (the output does not depend on x)."""
    x = tl.tensor(np.array(0.7), requires_grad=True)
    y = getattr(x, name)(axis=-1)
    assert y.shape == () and y.item() == (1.0 if name == "softmax" else 0.0)
    (g,) = tl.grad(y, [x], create_graph=True)
    assert g.item() == 0.0
    tl.gradcheck(lambda x: getattr(x, name)(axis=-1), [x])
    tl.gradgradcheck(lambda x: getattr(x, name)(axis=-1), [x])
