"""Matrix products: ``@`` in every NumPy form (1-D·1-D, 1-D·N-D, N-D·1-D, 2-D, batched with
broadcast batch axes) and ``einsum``; forward against NumPy, first and second derivatives
against finite differences (tolerances: see ``opcheck.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tensorlab as tl
from tests.strategies import matmul_shapes, values

from .opcheck import check_op, leaf


@st.composite
def matmul_pair(draw):
    shape_a, shape_b = draw(matmul_shapes)
    return draw(values(shape_a)), draw(values(shape_b))


@given(pair=matmul_pair())
def test_matmul(pair):
    check_op(lambda a, b: a @ b, np.matmul, *pair)


@given(pair=matmul_pair())
def test_matmul_second_order(pair):
    check_op(lambda a, b: tl.matmul(a, b), np.matmul, *pair, gradgrad=True)


@pytest.mark.parametrize(
    "shape_a, shape_b",
    [
        ((3,), (3,)),  # dot product
        ((3,), (2, 3, 4)),  # 1-D · batched
        ((2, 3, 4), (4,)),  # batched · 1-D
        ((2, 1, 3, 4), (5, 4, 2)),  # batch axes broadcast both ways
        ((2, 3, 4), (4, 2)),  # batched · matrix (the folded GEMM path)
        ((3, 4), (2, 4, 2)),  # matrix · batched
        ((2, 0, 3), (3, 2)),  # empty batch rows
        ((2, 0), (0, 3)),  # empty contraction: a zero matrix
        ((2, 3, 0), (0, 4)),  # batched, empty contraction, folded GEMM (crashed: -1 of 0)
        ((2, 3, 3), (3, 0)),  # batched, no output columns, folded GEMM (crashed)
        ((0, 3, 2), (2, 4)),  # an empty batch, folded GEMM
        ((0, 3), (3,)),  # matrix · vector with no rows
        ((0, 2, 3), (3,)),  # empty batch · vector
        ((3,), (0, 3, 2)),  # vector · empty batch
        ((2, 0, 3), (2, 3, 0)),  # batched, empty on both outer sides
    ],
)
def test_matmul_fixed_forms(shape_a, shape_b):
    rng = np.random.default_rng(1)
    check_op(
        lambda a, b: a @ b,
        np.matmul,
        rng.standard_normal(shape_a),
        rng.standard_normal(shape_b),
        gradgrad=True,
    )


def test_matmul_gradient_formula():
    # da = g bᵀ, db = aᵀ g, written out for one example.
    rng = np.random.default_rng(2)
    a_np, b_np = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    g_np = rng.standard_normal((2, 4))
    a, b = leaf(a_np), leaf(b_np)
    (a @ b).backward(tl.tensor(g_np))
    np.testing.assert_allclose(a.grad.numpy(), g_np @ b_np.T, rtol=1e-12)
    np.testing.assert_allclose(b.grad.numpy(), a_np.T @ g_np, rtol=1e-12)


def test_a_constant_on_the_left_of_at():
    """``list @ x`` reaches ``Tensor.__rmatmul__`` (a list has no ``@``): the constant stays
    on the left, and the gradient of x is Cᵀ g."""
    c = [[1.0, 2.0, 0.0], [-1.0, 0.5, 3.0]]
    x_np = np.arange(12.0).reshape(3, 4) / 5
    x = leaf(x_np)
    y = c @ x
    np.testing.assert_allclose(y.numpy(), np.array(c) @ x_np, rtol=1e-12)
    g = np.ones((2, 4))
    y.backward(tl.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), np.array(c).T @ g, rtol=1e-12)


def test_matmul_shape_mismatch_names_the_op():
    with pytest.raises(ValueError, match=r"MatMul.*\(2, 3\).*\(4, 2\)"):
        tl.ones(2, 3) @ tl.ones(4, 2)


EINSUM_SPECS = {
    "ij,jk->ik": [(2, 3), (3, 4)],
    "bij,bjk->bik": [(2, 2, 3), (2, 3, 2)],
    "i,j->ij": [(3,), (2,)],
    "ij->ji": [(2, 3)],
    "ij->": [(2, 3)],
    "ij,j->i": [(2, 3), (3,)],
    "ijk->ik": [(2, 3, 2)],
    "ij,ij->": [(2, 3), (2, 3)],
    "ij,jk,kl->il": [(2, 3), (3, 2), (2, 2)],
    "bhqd,bhkd->bhqk": [(1, 2, 3, 2), (1, 2, 2, 2)],
    "ij,kl->": [(2, 2), (3, 1)],  # an operand summed on its own
    "ij,jk": [(2, 3), (3, 2)],  # implicit output: letters used once, sorted
}


@pytest.mark.parametrize("spec", sorted(EINSUM_SPECS))
@given(data=st.data())
def test_einsum(spec, data):
    arrays = [data.draw(values(s), label=f"operand {i}") for i, s in enumerate(EINSUM_SPECS[spec])]
    check_op(
        lambda *ts: tl.einsum(spec, *ts),
        lambda *arrs: np.einsum(spec, *arrs),
        *arrays,
        gradgrad=len(arrays) <= 2,
    )


def test_einsum_with_a_constant_operand():
    rng = np.random.default_rng(3)
    w = tl.tensor(rng.standard_normal((3, 4)))  # does not require grad
    check_op(
        lambda x: tl.einsum("ij,jk->ik", x, w),
        lambda x: x @ w.numpy(),
        rng.standard_normal((2, 3)),
        gradgrad=True,
    )


@pytest.mark.parametrize("spec", ["ii->i", "...ij->...ji"])
def test_einsum_unsupported_specs_raise(spec):
    with pytest.raises(ValueError, match="einsum"):
        tl.einsum(spec, tl.ones(2, 2))


def test_einsum_operand_count_mismatch():
    with pytest.raises(ValueError, match="operands"):
        tl.einsum("ij,jk->ik", tl.ones(2, 2))


def test_autocast_leaves_float64_products_alone_as_pytorch():
    """tl.autocast("bfloat16") cast float64 operands to bfloat16 too; PyTorch's autocast only
    casts lower-precision float types, so float64 asked for on purpose stays float64."""
    a = tl.tensor(np.eye(2), requires_grad=True)  # float64
    b = tl.tensor(np.array([[1.0, 2.0], [3.0, 4.0]]))
    with tl.autocast("float16"):
        y = a @ b
        z = tl.einsum("ij,jk->ik", a, b)
        half = tl.ones(2, 2) @ tl.ones(2, 2)  # float32 is still cast
    assert y.dtype == np.float64 and z.dtype == np.float64 and half.dtype == np.float16
    y.sum().backward()
    assert a.grad.dtype == np.float64
