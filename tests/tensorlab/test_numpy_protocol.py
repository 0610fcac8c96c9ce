"""NumPy calls on Tensors (``tensorlab/numpy_protocol.py``): every ufunc either runs the
engine op (a Tensor in the graph, with the right gradient) or raises a TypeError naming it;
none returns a plain array that has silently lost the graph. ``np.asarray`` still reads
values, and ``array * tensor`` is still the engine's multiply."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlab as tl
from tensorlab.numpy_protocol import FUNCTIONS, UFUNCS

ALL_UFUNCS = sorted(
    {getattr(np, n) for n in dir(np) if isinstance(getattr(np, n), np.ufunc)},
    key=lambda u: u.__name__,
)


def _x():
    return tl.tensor(np.array([0.3, 0.6, 0.9]), requires_grad=True)


@pytest.mark.parametrize("ufunc", ALL_UFUNCS, ids=lambda u: u.__name__)
def test_no_ufunc_silently_returns_a_plain_array(ufunc):
    """Each NumPy ufunc, called with tensors that require grad in every input position:
    a Tensor comes back (in the graph when the result is differentiable), or a TypeError
    that names the ufunc."""
    args = [_x() for _ in range(ufunc.nin)]
    try:
        out = ufunc(*args)
    except TypeError as err:
        assert ufunc.__name__ in str(err)
        assert ufunc not in UFUNCS
        return
    outs = out if isinstance(out, tuple) else (out,)
    for o in outs:
        assert isinstance(o, tl.Tensor), f"np.{ufunc.__name__} returned {type(o).__name__}"
        if o.dtype.kind == "f" and ufunc.__name__ not in "floor ceil trunc rint sign":
            assert o.requires_grad, f"np.{ufunc.__name__} dropped the graph"


@pytest.mark.parametrize("ufunc", ALL_UFUNCS, ids=lambda u: u.__name__)
def test_ufuncs_with_an_array_beside_the_tensor(ufunc):
    """The tensor in one position only (the other inputs arrays): the same rule."""
    if ufunc.nin < 2:
        return
    for pos in range(ufunc.nin):
        args = [np.array([0.3, 0.6, 0.9])] * ufunc.nin
        args[pos] = _x()
        try:
            out = ufunc(*args)
        except TypeError as err:
            assert ufunc.__name__ in str(err)
            continue
        assert all(isinstance(o, tl.Tensor) for o in (out if isinstance(out, tuple) else (out,)))


@pytest.mark.parametrize(
    "np_call, tl_call",
    [
        (np.sin, lambda x: x.sin()),
        (np.cos, lambda x: x.cos()),
        (np.exp, lambda x: x.exp()),
        (np.square, lambda x: x * x),
        (lambda x: np.multiply(np.arange(3.0), x), lambda x: x * tl.arange(3.0)),
        (lambda x: np.power(x, 3), lambda x: x**3),
        (lambda x: np.maximum(0.5, x), lambda x: x.maximum(0.5)),
        (lambda x: np.sum(x), lambda x: x.sum()),
        (lambda x: np.mean(x * x), lambda x: (x * x).mean()),
        (lambda x: np.std(x, ddof=1), lambda x: x.std(ddof=1)),
        (lambda x: np.cumsum(x), lambda x: x.cumsum()),
        (lambda x: np.prod(x), lambda x: x.prod()),
        (lambda x: np.concatenate([x, np.ones(2)]), lambda x: tl.cat([x, tl.ones(2)])),
        (lambda x: np.flip(x), lambda x: x.flip()),
        (lambda x: np.roll(x, 1), lambda x: x.roll(1)),
        (lambda x: np.sort(-x), lambda x: (-x).sort().values),
        (
            lambda x: np.where(np.array([1, 0, 1], bool), x, 0.0),
            lambda x: tl.where([1, 0, 1], x, 0.0),
        ),
        (lambda x: np.clip(x, 0.4, 0.8), lambda x: x.clip(0.4, 0.8)),
        (lambda x: np.add.reduce(x), lambda x: x.sum(0)),
        (lambda x: np.dot(x, x), lambda x: x @ x),
        (lambda x: np.einsum("i,i->", x, x), lambda x: (x * x).sum()),
    ],
)
def test_numpy_calls_dispatch_with_gradients(np_call, tl_call):
    x, y = _x(), _x()
    a, b = np_call(x), tl_call(y)
    assert isinstance(a, tl.Tensor) and a.requires_grad
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    a.sum().backward()
    b.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), y.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("ufunc", [np.add, np.multiply, np.maximum, np.minimum])
def test_ufunc_reduce_takes_numpys_default_axis(ufunc):
    """np.<ufunc>.reduce(x) reduces axis 0 only (NumPy's default), not every axis; the
    result is the engine op's, in the graph."""
    a = np.random.default_rng(1).standard_normal((3, 4))
    x = tl.tensor(a, requires_grad=True)
    for kw in ({}, {"axis": 1}, {"axis": 0, "keepdims": True}):
        got = ufunc.reduce(x, **kw)
        assert isinstance(got, tl.Tensor) and got.requires_grad
        np.testing.assert_allclose(got.numpy(), ufunc.reduce(a, **kw), rtol=1e-12)


def test_asarray_still_reads_the_values():
    x = _x()
    a = np.asarray(x)
    assert type(a) is np.ndarray and a.dtype == np.float64
    np.testing.assert_array_equal(a, [0.3, 0.6, 0.9])
    np.testing.assert_array_equal(np.array(x, dtype=np.float32), np.float32([0.3, 0.6, 0.9]))


def test_arrays_on_either_side_of_an_operator_are_the_engine_op():
    x = _x()
    a = np.array([1.0, 2.0, 3.0])
    for y in (a * x, x * a, a + x, a - x, a / x, a @ x, np.float64(2.0) * x):
        assert isinstance(y, tl.Tensor) and y.requires_grad
    np.testing.assert_allclose((a - x).numpy(), a - x.numpy())
    (a / x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), -a / x.numpy() ** 2)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda x: np.arctan(x), r"numpy\.arctan has no tensorlab op"),
        (lambda x: np.allclose(x, x), r"numpy\.allclose has no tensorlab form"),
        (lambda x: np.exp(x, out=np.empty(3)), r"numpy\.exp\(\.\.\., out=\.\.\.\)"),
        (lambda x: np.exp(x, dtype=np.float32), r"numpy\.exp on a Tensor takes no keyword"),
        (lambda x: np.add.outer(x, x), r"numpy\.add\.outer has no tensorlab op"),
        (lambda x: np.sum(x, dtype=np.float32), r"numpy\.sum on a Tensor: .*dtype"),
    ],
)
def test_unsupported_calls_name_the_function(call, message):
    with pytest.raises(TypeError, match=message):
        call(_x())


def test_an_inplace_numpy_update_of_an_array_by_a_tensor_is_refused():
    a = np.zeros(3)
    with pytest.raises(TypeError, match="out="):
        a += _x()


def test_every_dispatched_function_is_a_numpy_function():
    for f in FUNCTIONS:
        assert getattr(np, f.__name__) is f
