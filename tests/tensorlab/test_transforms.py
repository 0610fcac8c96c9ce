"""Functional transforms (``tensorlab/transforms.py``): jacobian, hessian, vjp, jvp, vhp,
hvp. Against central differences (no torch needed) and against
``torch.autograd.functional`` in float64 (skipped without torch), for one and several
inputs and outputs, with create_graph, unused inputs and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given

import tensorlab as tl
from tests.strategies import small_shapes, values


def t64(a, requires_grad=False):
    return tl.tensor(np.array(a, dtype=np.float64), dtype=np.float64, requires_grad=requires_grad)


def numeric_jacobian(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of f: array -> array, shape f(x).shape + x.shape."""
    y0 = np.asarray(f(x))
    jac = np.zeros((y0.size, x.size))
    for i in range(x.size):
        d = np.zeros(x.size)
        d[i] = eps
        d = d.reshape(x.shape)
        jac[:, i] = (np.asarray(f(x + d)) - np.asarray(f(x - d))).ravel() / (2 * eps)
    return jac.reshape(y0.shape + x.shape)


def f1(x):  # R^n -> R^n, not elementwise
    return (x.sin() * x.sum()).tanh() + x.cumsum(-1) if x.ndim else x.sin() * x


@given(x=small_shapes.flatmap(values))
def test_jacobian_and_products_against_finite_differences(x):
    xt = t64(x)
    J = tl.jacobian(f1, xt)
    num = numeric_jacobian(lambda a: f1(t64(a)).numpy(), x)
    np.testing.assert_allclose(J.numpy(), num, atol=1e-6, rtol=1e-5)
    J2 = num.reshape(f1(xt).size, x.size)
    rng = np.random.default_rng(0)
    v, u = rng.standard_normal(f1(xt).shape), rng.standard_normal(x.shape)
    out, vj = tl.vjp(f1, xt, t64(v))
    np.testing.assert_allclose(out.numpy(), f1(xt).numpy())
    np.testing.assert_allclose(vj.numpy().ravel(), v.ravel() @ J2, atol=1e-6, rtol=1e-5)
    _, ju = tl.jvp(f1, xt, t64(u))
    np.testing.assert_allclose(ju.numpy().ravel(), J2 @ u.ravel(), atol=1e-6, rtol=1e-5)


def scalar_fn(x, w):
    return ((x @ w).tanh() ** 2).sum() + (x * x).prod()


def test_hessian_is_the_jacobian_of_the_gradient_and_hvp_its_product():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 3)) * 0.5, rng.standard_normal((3, 2)) * 0.5
    H = tl.hessian(scalar_fn, (t64(x), t64(w)))

    def gradient(a):
        xt = t64(a, True)
        (g,) = tl.grad(scalar_fn(xt, t64(w)), [xt])
        return g.numpy()

    np.testing.assert_allclose(H[0][0].numpy(), numeric_jacobian(gradient, x), atol=1e-6)
    assert H[0][1].shape == (2, 3, 3, 2) and H[1][0].shape == (3, 2, 2, 3)
    np.testing.assert_allclose(
        H[0][1].numpy(), np.moveaxis(H[1][0].numpy(), [0, 1], [2, 3]), atol=1e-12
    )  # symmetric
    u = (rng.standard_normal(x.shape), rng.standard_normal(w.shape))
    _, hv = tl.hvp(scalar_fn, (t64(x), t64(w)), (t64(u[0]), t64(u[1])))
    full = [
        np.tensordot(H[i][0].numpy(), u[0], axes=2) + np.tensordot(H[i][1].numpy(), u[1], axes=2)
        for i in range(2)
    ]
    for a, b in zip(hv, full):
        np.testing.assert_allclose(a.numpy(), b, atol=1e-12)
    _, vh = tl.vhp(scalar_fn, (t64(x), t64(w)), (t64(u[0]), t64(u[1])))
    for a, b in zip(vh, hv):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-12)


def test_create_graph_keeps_results_differentiable_in_the_inputs():
    """d/dx of the Jacobian's trace: with create_graph the transform's result is itself in
    the graph of the caller's x (here: trace J of sin is Σ cos x, its gradient -sin x)."""
    x = t64([0.3, -1.2, 2.0], requires_grad=True)
    J = tl.jacobian(lambda a: a.sin(), x, create_graph=True)
    (J * t64(np.eye(3))).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), -np.sin(x.numpy()), atol=1e-15)
    y = t64([0.5, 1.0], requires_grad=True)
    _, g = tl.vjp(lambda a: (a**3).sum(), y, create_graph=True)
    g.sum().backward()
    np.testing.assert_allclose(y.grad.numpy(), 6 * y.numpy())
    assert x.grad is not None and not tl.jacobian(lambda a: a.sin(), x).requires_grad


def test_transforms_leave_the_callers_graph_alone():
    x = t64([1.0, 2.0], requires_grad=True)
    y = x * 3
    tl.jacobian(lambda a: a.exp(), y)
    tl.hessian(lambda a: (a**3).sum(), y)
    assert x.grad is None
    y.sum().backward()  # the caller's graph was not freed
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


def test_unused_inputs_give_zeros_or_an_error_with_strict():
    x, y = t64([1.0, 2.0]), t64([3.0])
    J = tl.jacobian(lambda a, b: a * 2, (x, y))
    np.testing.assert_array_equal(J[1].numpy(), np.zeros((2, 1)))
    with pytest.raises(RuntimeError, match="jacobian: input 1 .* does not depend"):
        tl.jacobian(lambda a, b: a * 2, (x, y), strict=True)
    _, ju = tl.jvp(lambda a: t64([5.0]), x, t64([1.0, 1.0]))
    np.testing.assert_array_equal(ju.numpy(), [0.0])


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: tl.vjp(lambda a: a * 2, t64([1.0, 2.0])), RuntimeError, "v can be left out"),
        (lambda: tl.jvp(lambda a: a, t64([1.0]), t64([1.0, 2.0])), RuntimeError, "v has shapes"),
        (lambda: tl.hessian(lambda a: a * 2, t64([1.0, 2.0])), RuntimeError, "one entry"),
        (lambda: tl.jacobian(lambda a: a, [1.0]), TypeError, "input 0 is a float"),
        (lambda: tl.jacobian(lambda a: a, tl.tensor([1, 2])), TypeError, "dtype int64"),
    ],
)
def test_errors_are_one_line_and_name_the_transform(call, error, message):
    with pytest.raises(error, match=message):
        call()


# ---------------------------------------------------------------- against PyTorch
CASES = {
    "one_in_one_out": (lambda x: (x * x.sum()).sin(), [(3,)]),
    "matrix": (lambda x: (x @ x.mT).tanh(), [(2, 3)]),
    "two_in": (lambda x, w: (x @ w).exp().sum(0), [(2, 3), (3, 2)]),
    "softmax": (lambda x, w: (x * w).softmax(-1), [(2, 3), (3,)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("create_graph", [False, True])
def test_transforms_match_torch_autograd_functional(name, create_graph):
    torch = pytest.importorskip("torch")
    TF = torch.autograd.functional
    fn, shapes = CASES[name]
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(s) for s in shapes]
    ours_in = tuple(t64(a, create_graph) for a in arrays)
    theirs_in = tuple(torch.tensor(a, requires_grad=create_graph) for a in arrays)
    tol = dict(atol=1e-12, rtol=1e-12)

    def close(a, b):
        if isinstance(a, tuple | list):
            for p, q in zip(a, b):
                close(p, q)
        else:
            np.testing.assert_allclose(a.numpy(), b.detach().numpy(), **tol)

    kw = dict(create_graph=create_graph)
    close(tl.jacobian(fn, ours_in, **kw), TF.jacobian(fn, theirs_in, **kw))
    out_shape = fn(*ours_in).shape
    v = rng.standard_normal(out_shape)
    us = [rng.standard_normal(s) for s in shapes]
    close(
        tl.vjp(fn, ours_in, t64(v), **kw),
        TF.vjp(fn, theirs_in, torch.tensor(v), **kw),
    )
    close(
        tl.jvp(fn, ours_in, tuple(t64(u) for u in us), **kw),
        TF.jvp(fn, theirs_in, tuple(torch.tensor(u) for u in us), **kw),
    )

    def scalar(*xs):
        return (fn(*xs) ** 2).sum()

    close(tl.hessian(scalar, ours_in, **kw), TF.hessian(scalar, theirs_in, **kw))
    for ours, theirs in ((tl.hvp, TF.hvp), (tl.vhp, TF.vhp)):
        close(
            ours(scalar, ours_in, tuple(t64(u) for u in us), **kw),
            theirs(scalar, theirs_in, tuple(torch.tensor(u) for u in us), **kw),
        )
