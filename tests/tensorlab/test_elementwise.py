"""Elementwise ops: forward against NumPy, first and second derivatives against finite
differences (tolerances and their justification: see ``opcheck.py``), Python and NumPy
operators on both sides, ``sum_to`` and ``Cast``.

Inputs are drawn over small shapes (0-d, size-1 axes, and empty axes where the op allows),
binary ops over every pair of broadcastable shapes, and non-smooth ops away from their kinks.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorlab as tl
from tests.strategies import (
    away_from,
    broadcast_shapes,
    distinct,
    nonzero,
    positive,
    shapes_with_empty,
    small_shapes,
    values,
)

from .opcheck import check_op, leaf

any_shape = st.one_of(small_shapes, shapes_with_empty)
gg_shapes = hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=3)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# name: (tensor fn, numpy fn, array strategy for a shape)
UNARY = {
    "neg": (lambda x: -x, np.negative, values),
    "exp": (lambda x: x.exp(), np.exp, values),
    "log": (lambda x: x.log(), np.log, positive),
    "sqrt": (lambda x: x.sqrt(), np.sqrt, positive),
    "abs": (lambda x: x.abs(), np.abs, lambda s: values(s).map(lambda a: away_from(a, [0.0]))),
    "tanh": (lambda x: x.tanh(), np.tanh, values),
    "sin": (lambda x: x.sin(), np.sin, values),
    "cos": (lambda x: tl.cos(x), np.cos, values),
    "sigmoid": (lambda x: x.sigmoid(), _sigmoid, lambda s: values(s, -6, 6)),
    "relu": (
        lambda x: x.relu(),
        lambda a: np.maximum(a, 0),
        lambda s: values(s).map(lambda a: away_from(a, [0.0])),
    ),
    "clip": (
        lambda x: x.clip(-0.5, 0.7),
        lambda a: np.clip(a, -0.5, 0.7),
        lambda s: values(s).map(lambda a: away_from(a, [-0.5, 0.7])),
    ),
    "clip_min": (
        lambda x: x.clip(min=0.25),
        lambda a: np.maximum(a, 0.25),
        lambda s: values(s).map(lambda a: away_from(a, [0.25])),
    ),
    "clip_max": (
        lambda x: x.clip(max=-0.25),
        lambda a: np.minimum(a, -0.25),
        lambda s: values(s).map(lambda a: away_from(a, [-0.25])),
    ),
    "square": (lambda x: x**2, np.square, values),
    "cube": (lambda x: x**3, lambda a: a**3, values),
    "pow_0": (lambda x: x**0, lambda a: a**0, values),
    "pow_1": (lambda x: x**1, lambda a: a**1, values),
    "pow_half": (lambda x: x**0.5, np.sqrt, positive),
    "pow_neg1": (lambda x: x**-1, np.reciprocal, positive),
    "pow_1.5": (lambda x: x**1.5, lambda a: a**1.5, positive),
    "pow_method": (lambda x: x.pow(-2.5), lambda a: a**-2.5, positive),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=st.data())
def test_unary(name, data):
    fn, np_fn, strategy = UNARY[name]
    x = data.draw(any_shape.flatmap(strategy), label="x")
    check_op(fn, np_fn, x)


@pytest.mark.parametrize("name", sorted(UNARY))
@given(data=st.data())
def test_unary_second_order(name, data):
    fn, np_fn, strategy = UNARY[name]
    x = data.draw(gg_shapes.flatmap(strategy), label="x")
    check_op(fn, np_fn, x, gradgrad=True)


def test_module_level_functions_match_methods():
    x = leaf(np.linspace(-1.5, 1.5, 7))
    for f in ("exp", "tanh", "sigmoid", "relu", "sin", "cos"):
        np.testing.assert_array_equal(getattr(tl, f)(x).numpy(), getattr(x, f)().numpy())
    np.testing.assert_array_equal(tl.log(x.abs() + 1).numpy(), np.log(np.abs(x.numpy()) + 1))


def test_sigmoid_saturates_without_an_overflow_error():
    """e^1000 overflows to ∞ inside, on purpose (1/∞ = 0 is the limit): no error or warning
    reaches the caller, even one who asks NumPy to raise on overflow."""
    with np.errstate(over="raise"):
        y = leaf([-1000.0, 1000.0]).sigmoid()
    np.testing.assert_array_equal(y.numpy(), [0.0, 1.0])


def _sigmoid_reference(a):
    """sigmoid in float64 from the side where nothing cancels: 1/(1 + e^(-a)) for a ≥ 0 and
    e^a/(1 + e^a) for a < 0 (each a few ulps from the true value)."""
    a = np.asarray(a, np.float64)
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1 / (1 + e), e / (1 + e))


@pytest.mark.parametrize("dtype, tol", [(np.float64, 1e-15), (np.float32, 3e-7)])
def test_sigmoid_is_accurate_far_out_on_the_negative_side(dtype, tol):
    """sigmoid(a) for a ≪ 0 is about e^a, tiny but a normal number: it must keep its digits.
    ½(1 + tanh(a/2)) subtracts two numbers near 1 there and lost them (float32: 7e-4 relative
    error at a = -10, 100% from a ≈ -17; float64: 5e-4 at -30). Within a few ulps of the
    float64 reference (tol: float64 1e-15 ≈ 5 ulps; float32 3e-7 ≈ 3 ulps) wherever the
    value is a normal number of the dtype."""
    lo = {np.float64: -700.0, np.float32: -85.0}[dtype]
    a = np.linspace(lo, 40.0, 20001).astype(dtype)
    y = tl.tensor(a).sigmoid().numpy()
    assert y.dtype == dtype
    np.testing.assert_allclose(y, _sigmoid_reference(a), rtol=tol, atol=0)


# name: (tensor fn, numpy fn, strategies of a and b for their shapes)
BINARY = {
    "add": (lambda a, b: a + b, np.add, values, values),
    "sub": (lambda a, b: a - b, np.subtract, values, values),
    "mul": (lambda a, b: a * b, np.multiply, values, values),
    "div": (lambda a, b: a / b, np.divide, values, nonzero),
    "pow": (lambda a, b: a**b, np.power, positive, values),
}


def _draw_binary(data, name, min_side=1, max_dims=3):
    _, _, sa, sb = BINARY[name]
    shape_a, shape_b = data.draw(
        broadcast_shapes(min_side=min_side, max_dims=max_dims), label="shapes"
    )
    return data.draw(sa(shape_a), label="a"), data.draw(sb(shape_b), label="b")


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data(), empty=st.booleans())
def test_binary_broadcast(name, data, empty):
    fn, np_fn, _, _ = BINARY[name]
    a, b = _draw_binary(data, name, min_side=0 if empty else 1)
    check_op(fn, np_fn, a, b)


@pytest.mark.parametrize("name", sorted(BINARY))
@given(data=st.data())
def test_binary_second_order(name, data):
    fn, np_fn, _, _ = BINARY[name]
    a, b = _draw_binary(data, name, max_dims=2)
    check_op(fn, np_fn, a, b, gradgrad=True)


@st.composite
def untied_pair(draw, max_dims=3):
    """Two broadcastable arrays with no value in common (no ties for maximum/minimum)."""
    shape_a, shape_b = draw(broadcast_shapes(max_dims=max_dims))
    both = draw(values((int(np.prod(shape_a)) + int(np.prod(shape_b)),)))
    both = distinct(both)
    n = int(np.prod(shape_a))
    return both[:n].reshape(shape_a), both[n:].reshape(shape_b)


@pytest.mark.parametrize(
    "fn, np_fn",
    [(lambda a, b: a.maximum(b), np.maximum), (lambda a, b: tl.minimum(a, b), np.minimum)],
    ids=["maximum", "minimum"],
)
@given(pair=untied_pair())
def test_maximum_minimum(fn, np_fn, pair):
    check_op(fn, np_fn, *pair)


@pytest.mark.parametrize(
    "fn, np_fn",
    [(lambda a, b: tl.maximum(a, b), np.maximum), (lambda a, b: a.minimum(b), np.minimum)],
    ids=["maximum", "minimum"],
)
@given(pair=untied_pair(max_dims=2))
def test_maximum_minimum_second_order(fn, np_fn, pair):
    check_op(fn, np_fn, *pair, gradgrad=True)


def test_maximum_tie_splits_the_gradient():
    a, b = leaf([1.0, 2.0, 3.0]), leaf([1.0, 5.0, 0.0])
    a.maximum(b).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(b.grad.numpy(), [0.5, 1.0, 0.0])


INF = np.inf


@pytest.mark.parametrize(
    "f, inputs, grads",
    [
        (lambda x: x.relu().sqrt(), [[-1.0, 0.0, 2.0]], [[0.0, 0.0, 0.5**1.5]]),
        (lambda x: x.clip(0.0, 1.0).sqrt(), [[-1.0, 0.25, 2.0]], [[0.0, 1.0, 0.0]]),
        (lambda x: x.clip(min=0.0).sqrt(), [[-1.0, 0.25]], [[0.0, 1.0]]),
        (lambda x: x.clip(max=0.0).abs().sqrt(), [[-0.25, 1.0]], [[-1.0, 0.0]]),
        (
            lambda a, b: a.maximum(b).sqrt(),
            [[0.0, 4.0, 0.0], [-1.0, 9.0, 0.0]],
            [[INF, 0.0, INF], [0.0, 1 / 6, INF]],
        ),
        (lambda a, b: a.minimum(b).sqrt(), [[0.0, 4.0], [1.0, 1.0]], [[INF, 0.0], [0.0, 0.5]]),
        (lambda x: x.max(axis=1).sqrt(), [[[0.0, -1.0], [4.0, 1.0]]], [[[INF, 0.0], [0.25, 0]]]),
        (lambda x: x.max().sqrt(), [[0.0, -1.0]], [[INF, 0.0]]),
        (lambda x: x.min(axis=0, keepdims=True).sqrt(), [[0.0, 3.0]], [[INF, 0.0]]),
        (lambda x: (x**0 - 1.0).sqrt(), [[2.0, 3.0]], [[0.0, 0.0]]),
        (lambda a, b: (a**b - 1.0).sqrt(), [[2.0, INF], [0.0, 0.0]], [[0.0, 0.0], [INF, INF]]),
    ],
    ids=["relu", "clip", "clip-min", "clip-max", "maximum", "minimum", "max-axis", "max", "min",
         "pow-0", "pow-b-0"],
)  # fmt: skip
def test_masked_backwards_give_zero_not_nan_where_an_infinite_gradient_is_masked(f, inputs, grads):
    """x.relu().sqrt() at x = 0 sends an infinite gradient into relu's masked entry: 0 there
    (PyTorch's answer), where multiplying by a 0/1 mask gave 0 · inf = NaN."""
    xs = [leaf(x) for x in inputs]
    with np.errstate(divide="ignore"):
        f(*xs).sum().backward()
    for x, want in zip(xs, grads):
        np.testing.assert_allclose(x.grad.numpy(), want)


def test_relu_and_abs_at_nan_follow_pytorch():
    """Found by the differential fuzzer: PyTorch's ReLU backward zeroes only where a <= 0, so
    a NaN input passes g; its sign(NaN) is 0, so abs sends 0 there (NumPy's sign is NaN)."""
    x = leaf([np.nan, -1.0, 2.0])
    with np.errstate(invalid="ignore"):
        x.relu().sum().backward()
    assert x.grad.numpy().tolist() == [1.0, 0.0, 1.0]
    x = leaf([np.nan, -1.0, 0.0])
    x.abs().sum().backward()
    assert x.grad.numpy().tolist() == [0.0, -1.0, 0.0]


def test_clip_without_bounds_is_refused_as_pytorch():
    with pytest.raises(ValueError, match=r"clip: min and max are both None \(shape \(3,\)\)"):
        tl.zeros(3).clamp(None, None)
    with pytest.raises(ValueError, match="clip: min and max are both None"):
        tl.clamp(tl.zeros(3))


def test_maximum_and_minimum_with_a_nan_send_the_gradient_to_both_as_pytorch():
    for op in ("maximum", "minimum"):
        a, b = leaf([np.nan, 1.0]), leaf([1.0, 2.0])
        getattr(a, op)(b).sum().backward()
        assert a.grad.numpy()[0] == 1.0 and b.grad.numpy()[0] == 1.0


@given(shapes=broadcast_shapes(num_shapes=3), data=st.data())
def test_where(shapes, data):
    shape_c, shape_a, shape_b = shapes
    cond = data.draw(hnp.arrays(np.bool_, shape_c), label="cond")
    a = data.draw(values(shape_a), label="a")
    b = data.draw(values(shape_b), label="b")
    check_op(lambda x, y: tl.where(cond, x, y), lambda x, y: np.where(cond, x, y), a, b)
    check_op(
        lambda x, y: tl.where(tl.tensor(cond), x, y),
        lambda x, y: np.where(cond, x, y),
        a,
        b,
        gradgrad=True,
    )


@given(shapes=broadcast_shapes(), data=st.data())
def test_where_with_a_scalar_branch(shapes, data):
    shape_c, shape_a = shapes
    cond = data.draw(hnp.arrays(np.bool_, shape_c), label="cond")
    a = data.draw(values(shape_a), label="a")
    check_op(lambda x: tl.where(cond, 0.5, x), lambda x: np.where(cond, 0.5, x), a)
    check_op(lambda x: tl.where(cond, x, -1.0), lambda x: np.where(cond, x, -1.0), a)


# ---------------------------------------------------------------- Python / NumPy operators
C = np.array([[0.5, -1.5, 2.0], [1.25, 3.0, -0.75]])  # a NumPy constant of shape (2, 3)

OPERATORS = {
    "x + 2": (lambda x: x + 2, lambda a: a + 2),
    "2 + x": (lambda x: 2 + x, lambda a: 2 + a),
    "x - 2.5": (lambda x: x - 2.5, lambda a: a - 2.5),
    "2 - x": (lambda x: 2 - x, lambda a: 2 - a),
    "3 * x": (lambda x: 3 * x, lambda a: 3 * a),
    "x / 4": (lambda x: x / 4, lambda a: a / 4),
    "2 / x": (lambda x: 2 / x, lambda a: 2 / a),
    "x ** 2": (lambda x: x**2, lambda a: a**2),
    "2 ** x": (lambda x: 2**x, lambda a: 2**a),
    "1.5 ** x": (lambda x: 1.5**x, lambda a: 1.5**a),
    "-x": (lambda x: -x, lambda a: -a),
    "+x": (lambda x: +x, lambda a: +a),
    "C * x": (lambda x: C * x, lambda a: C * a),
    "x * C": (lambda x: x * C, lambda a: a * C),
    "C + x": (lambda x: C + x, lambda a: C + a),
    "C - x": (lambda x: C - x, lambda a: C - a),
    "C / x": (lambda x: C / x, lambda a: C / a),
    "x / C": (lambda x: x / C, lambda a: a / C),
    "C ** x": (lambda x: np.abs(C) ** x, lambda a: np.abs(C) ** a),
    "C[0] * x": (lambda x: C[0] * x, lambda a: C[0] * a),
    "x @ C.T": (lambda x: x @ C.T, lambda a: a @ C.T),
    "C.T @ x": (lambda x: C.T @ x, lambda a: C.T @ a),
    "np.float64 * x": (lambda x: np.float64(1.5) * x, lambda a: 1.5 * a),
    "x ** np.float64": (lambda x: x ** np.float64(1.5), lambda a: a**1.5),
    # one exponent per entry (its backward used to fail: "truth value of an array is ambiguous")
    "x ** C": (lambda x: x**C, lambda a: a**C),
    "x ** list": (lambda x: x ** [0.0, 1.0, 2.0], lambda a: a ** np.array([0.0, 1.0, 2.0])),
}


@pytest.mark.parametrize("expr", sorted(OPERATORS))
@given(x=positive((2, 3), 0.5, 2.0))
def test_operators_with_constants(expr, x):
    fn, np_fn = OPERATORS[expr]
    check_op(fn, np_fn, x)


def test_operators_keep_float32():
    x = tl.ones(2, 3)
    c32 = np.ones((2, 3), dtype=np.float64)
    for y in (x + 2, 2 - x, x * 2.5, 2.5 / x, x**2, 2**x, c32 * x, x - c32, x ** np.float64(2)):
        assert isinstance(y, tl.Tensor)
        assert y.dtype == np.float32


def test_operator_gradients_of_reflected_ops():
    x = leaf([0.5, 1.0, 2.0])
    (2 - x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [-1.0, -1.0, -1.0])
    x.grad = None
    (2 / x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), -2 / x.numpy() ** 2, rtol=1e-15)
    x.grad = None
    (2**x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.log(2) * 2 ** x.numpy(), rtol=1e-15)


# ---------------------------------------------------------------- sum_to and Cast
@st.composite
def sum_to_case(draw):
    target, other = draw(broadcast_shapes())
    big = np.broadcast_shapes(target, other)
    return draw(values(big)), target


@given(case=sum_to_case())
def test_sum_to(case):
    """sum_to is the adjoint of broadcasting: as a matrix it is the transpose of the map
    y ↦ broadcast_to(y, x.shape). The reference builds that matrix column by column from
    NumPy's own broadcast_to, so it shares no axis rule with the code under test."""
    x, target = case
    size = int(np.prod(target))

    def np_sum_to(a):
        basis = np.eye(size).reshape((size, *target))
        broadcast = np.stack([np.broadcast_to(e, a.shape).ravel() for e in basis], axis=1)
        return (broadcast.T @ a.ravel()).reshape(target)

    out = check_op(lambda t: t.sum_to(target), np_sum_to, x, gradgrad=True)
    assert out.shape == target


def test_sum_to_same_shape_is_identity():
    x = leaf(np.ones((2, 3)))
    assert x.sum_to((2, 3)) is x


@pytest.mark.parametrize("src, dst", [(np.float64, np.float32), (np.float32, np.float64)])
def test_cast_value_dtype_and_gradient(src, dst):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((3, 4))
    w = rng.standard_normal((3, 4)).astype(dst)
    x = tl.tensor(data.astype(src), requires_grad=True)
    y = x.to(dst)
    assert y.dtype == dst
    np.testing.assert_array_equal(y.numpy(), data.astype(src).astype(dst))
    (y * tl.tensor(w)).sum().backward()
    assert x.grad.dtype == src  # the gradient comes back in the input's dtype
    np.testing.assert_array_equal(x.grad.numpy(), w.astype(src))


def test_cast_helpers():
    x = tl.tensor(np.arange(3.0), requires_grad=True)  # float64
    assert x.float().dtype == np.float32
    assert x.float().double().dtype == np.float64
    assert x.astype("float32").dtype == np.float32
    assert x.to(np.float64) is x
    x.float().double().sum().backward()
    assert x.grad.dtype == np.float64
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(3))


def test_gradients_at_the_kinks_follow_pytorch():
    """At a kink the derivative is a convention; PyTorch's: ReLU'(0) = 0, and clamp passes the
    gradient at x == lo and x == hi (1 on the closed interval [lo, hi], 0 outside it)."""
    x = tl.tensor([-1.0, 0.0, 2.0], dtype="float64", requires_grad=True)
    x.relu().sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0, 1.0])
    x = tl.tensor([-2.0, -1.0, 0.0, 1.0, 2.0], dtype="float64", requires_grad=True)
    x.clip(-1.0, 1.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 1.0, 1.0, 1.0, 0.0])


def test_integer_inputs_are_not_truncated_back_to_integers():
    """sigmoid of an int64 tensor used to come back int64 (all zeros), and clip of one to
    float bounds truncated the bounds (clip([1, 2, -3], 0.5, 1.5) gave [1, 1, 0]). Integer
    inputs now give floats as NumPy computes them (float64; PyTorch's float32 is its default
    dtype), and clip to integer bounds stays an integer."""
    i = np.array([1, 2, -3])
    y = tl.tensor(i).sigmoid()
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), 1 / (1 + np.exp(-i)), rtol=1e-15)
    c = tl.tensor(i).clip(0.5, 1.5)
    assert c.dtype == np.float64
    np.testing.assert_array_equal(c.numpy(), [1.0, 1.5, 0.5])
    c = tl.clamp(tl.tensor(i), 0, 1)
    assert c.dtype == np.int64
    np.testing.assert_array_equal(c.numpy(), [1, 1, 0])
    if tl.bfloat16 is not None:  # (floats keep their dtype, bfloat16 among them)
        assert tl.tensor([0.5], dtype="bfloat16").clip(0.0, 0.25).dtype == tl.bfloat16


def test_a_python_int_beside_a_boolean_tensor_counts():
    """mask + 1 lifted 1 to a boolean (True + True = True): [True, False] + 1 was
    [True, True]. NumPy and PyTorch give the int64 [2, 1]."""
    m = tl.tensor([True, False])
    for y, want in ((m + 1, [2, 1]), (2 * m, [2, 0]), (m - 1, [0, -1])):
        assert y.dtype == np.int64
        np.testing.assert_array_equal(y.numpy(), want)
    assert (m + True).dtype == np.bool_  # (a bool beside a bool stays one)
    assert (m * 1.5).dtype == np.float32
