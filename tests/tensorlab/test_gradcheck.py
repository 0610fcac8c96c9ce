"""gradcheck and gradgradcheck themselves: they accept correct custom ops, reject wrong ones
with a report that locates the error, and refuse inputs they cannot check."""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorlab as tl
from tensorlab.tensor import Tensor

from .opcheck import leaf


class Cube(tl.Function):
    """y = a³;  da = g · 3a²  (backward in Tensor ops: differentiable again)."""

    def forward(ctx, a):
        return a**3

    def backward(ctx, g):
        (a,) = ctx.inputs
        return g * 3.0 * a * a


class ScaledSum(tl.Function):
    """y = a · b (elementwise);  backward uses the saved output: da = g·y/a, db = g·y/b."""

    def forward(ctx, a, b):
        return a * b

    def backward(ctx, g):
        a, b = ctx.inputs
        y = ctx.output
        return g * y / a, g * y / b


class CubeWrongAt(tl.Function):
    """Cube whose backward is off by +1 at flat index 4 only (a deliberate bug)."""

    def forward(ctx, a):
        return a**3

    def backward(ctx, g):
        (a,) = ctx.inputs
        bump = np.zeros(a.shape)
        bump.reshape(-1)[4] = 1.0
        return g * 3.0 * a * a + g * Tensor(bump, device=a.device)


class MulWrongB(tl.Function):
    """y = a · b with db wrong by a factor 2."""

    def forward(ctx, a, b):
        return a * b

    def backward(ctx, g):
        a, b = ctx.inputs
        return g * b, g * a * 2.0


class SquareRawBackward(tl.Function):
    """y = a²;  da = g · 2a, but 2a is computed on raw arrays: right first derivative, and no
    graph from a to the gradient, so the second derivative w.r.t. a comes out 0 instead of 2g."""

    def forward(ctx, a):
        return a * a

    def backward(ctx, g):
        return g * Tensor._wrap(2.0 * ctx.inputs[0].data)


X = np.array([[0.5, -1.0, 1.5], [2.0, 1.0, -0.5]])


def test_gradcheck_passes_on_a_correct_custom_op():
    assert tl.gradcheck(Cube.apply, [leaf(X)])
    assert tl.gradcheck(lambda a: Cube.apply(a).sum(), leaf(X))
    assert tl.gradcheck(ScaledSum.apply, [leaf(X), leaf(X[::-1] + 3.0)])


def test_custom_op_gradient_value():
    x = leaf(X)
    Cube.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * X**2, rtol=1e-15)


def test_gradcheck_reports_where_and_by_how_much():
    with pytest.raises(tl.GradcheckError) as err:
        tl.gradcheck(CubeWrongAt.apply, [leaf(X)])
    msg = str(err.value)
    # flat index 4 of shape (2, 3) is (1, 1), where x = 1: analytic 3·1² + 1 = 4, numeric 3
    assert "input 0" in msg
    assert "input index (1, 1)" in msg
    assert "output entry 4" in msg
    assert "analytic 4," in msg
    assert "numeric 3," in msg
    assert "1 of 36 Jacobian entries differ" in msg


def test_gradcheck_reports_the_right_input():
    a, b = leaf(X), leaf(X + 1.0)
    with pytest.raises(tl.GradcheckError) as err:
        tl.gradcheck(MulWrongB.apply, [a, b])
    msg = str(err.value)
    assert "input 1 (shape (2, 3))" in msg
    assert "input 0" not in msg
    worst = np.unravel_index(np.argmax(np.abs(X)), X.shape)  # db error is |a| (2a - a)
    assert f"input index {tuple(int(i) for i in worst)}" in msg
    m = re.search(r"analytic (\S+), numeric (\S+),", msg)
    assert float(m.group(1)) == pytest.approx(2 * X[worst], rel=1e-5)
    assert float(m.group(2)) == pytest.approx(X[worst], rel=1e-5)


def test_gradcheck_can_return_false():
    assert tl.gradcheck(CubeWrongAt.apply, [leaf(X)], raise_exception=False) is False
    assert isinstance(tl.GradcheckError("x"), AssertionError)


def test_gradcheck_catches_a_nan_gradient():
    class NaNBackward(tl.Function):
        def forward(ctx, a):
            return a * 2

        def backward(ctx, g):
            return g * float("nan")

    with pytest.raises(tl.GradcheckError, match="analytic nan"):
        tl.gradcheck(NaNBackward.apply, [leaf([1.0, 2.0])])


def test_gradcheck_skips_inputs_without_grad():
    const = tl.tensor(X)
    assert tl.gradcheck(lambda a, c: MulWrongB.apply(a, c), [leaf(X), const])


def test_gradcheck_refuses_float32():
    x = tl.tensor(X.astype(np.float32), requires_grad=True)
    with pytest.raises(ValueError, match="float32.*float64"):
        tl.gradcheck(Cube.apply, [x])


def test_gradcheck_needs_an_input_that_requires_grad():
    with pytest.raises(ValueError, match="nothing to check"):
        tl.gradcheck(Cube.apply, [tl.tensor(X)])


def test_gradcheck_with_several_outputs():
    def two(a):
        return a.exp(), (a * a).sum(0)

    assert tl.gradcheck(two, [leaf(X)])

    def two_wrong(a):
        return a.exp(), CubeWrongAt.apply(a)

    with pytest.raises(tl.GradcheckError, match="output entry 10"):  # 6 exp entries + 4
        tl.gradcheck(two_wrong, [leaf(X)])


def test_gradcheck_leaves_inputs_unchanged():
    x = leaf(X)
    tl.gradcheck(Cube.apply, [x])
    np.testing.assert_array_equal(x.numpy(), X)


def test_gradgradcheck_passes_on_tanh_and_custom_op():
    assert tl.gradgradcheck(lambda a: a.tanh(), [leaf(X)])
    assert tl.gradgradcheck(Cube.apply, [leaf(X)])
    assert tl.gradgradcheck(ScaledSum.apply, [leaf(X), leaf(X + 3.0)])


def test_gradgradcheck_catches_a_backward_without_graph():
    x = leaf(X)
    assert tl.gradcheck(SquareRawBackward.apply, [x])  # the first derivative is right
    with pytest.raises(tl.GradcheckError) as err:
        tl.gradgradcheck(SquareRawBackward.apply, [x])
    msg = str(err.value)
    assert "input 0" in msg and "analytic 0," in msg  # d/da of (g·2a) seen as 0


def test_gradgradcheck_with_given_grad_outputs():
    assert tl.gradgradcheck(Cube.apply, [leaf(X)], grad_outputs=[leaf(np.full(X.shape, 0.5))])
    # d/da (v · 2a) = 2v = 3 at v = 1.5; the raw-array backward makes it 0
    with pytest.raises(tl.GradcheckError, match=r"analytic 0, numeric 3,"):
        tl.gradgradcheck(SquareRawBackward.apply, [leaf([[1.0]])], grad_outputs=[leaf([[1.5]])])


def test_numeric_vjp_is_g_times_the_jacobian():
    """numeric_vjp of y = (x₁², x₁x₂) against g: gᵀJ = (2x₁g₁ + x₂g₂, x₁g₂) per entry, to the
    central difference's truncation (ε² f''' = 0 here: f is quadratic) and rounding (~1e-10)."""
    from tensorlab.gradcheck import numeric_vjp

    rng = np.random.default_rng(0)
    a, b, g = rng.standard_normal((3, 4, 5))
    x1, x2 = tl.tensor(a), tl.tensor(b)
    got = numeric_vjp(lambda u, v: tl.stack([u * u, u * v]), [x1, x2], np.stack([g, g * 2]))
    np.testing.assert_allclose(got[0], 2 * a * g + b * 2 * g, atol=1e-8)
    np.testing.assert_allclose(got[1], a * 2 * g, atol=1e-8)
    np.testing.assert_array_equal(x1.numpy(), a)  # the inputs are left as they were
