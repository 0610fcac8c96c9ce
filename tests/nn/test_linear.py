"""nn/linear.py: the op LinearFn against its composed form (values, first and second order,
finite differences), the function F.linear and the layer Linear."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nn
import nn.functional as F
import tensorlab as tl
from nn.linear import LinearFn
from tests.strategies import assert_same, check_fused_op, lead_shapes, rand64, t64, values


def randomize(module, seed=0):
    """Give every parameter random values (gains and biases start at 1 and 0)."""
    rng = np.random.default_rng(seed)
    with tl.no_grad():
        for p in module.parameters():
            p.copy_(rng.standard_normal(p.shape))
    return module


# ---------------------------------------------------------------------- the op
@given(lead_shapes, st.integers(1, 4), st.integers(1, 4), st.booleans(), st.data())
def test_linear_fn_matches_composed(lead, d_in, d_out, bias, data):
    """LinearFn (one GEMM on the rows, db a gemv) against LinearFn.composed (x @ W + b in
    engine ops), with and without the bias. Tolerance 1e-10 absolute: both compute the same
    products of entries |x|, |W|, |b| ≤ 2 summed over d_in ≤ 4 terms, only in another order,
    so they differ by rounding (≲ 1e-14), while a wrong term would be off by ≳ 1e-3."""
    x = t64(data.draw(values(lead + (d_in,))))
    W = t64(data.draw(values((d_in, d_out))))
    inputs = [x, W] + ([t64(data.draw(values((d_out,))))] if bias else [])
    check_fused_op(LinearFn.apply, LinearFn.composed, inputs)


@given(st.data())
def test_linear_gradcheck(data):
    lead = data.draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    d_in, d_out = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    x = data.draw(values(lead + (d_in,))).astype(np.float64)
    rng = np.random.default_rng(0)
    x, W, b = t64(x), rand64(rng, d_in, d_out), rand64(rng, d_out)
    tl.gradcheck(lambda x, W, b: F.linear(x, W, b), [x, W, b])
    tl.gradcheck(lambda x, W: F.linear(x, W), [x, W])
    assert_same(lambda x, W, b: F.linear(x, W, b), lambda x, W, b: x @ W + b, [x, W, b])


def test_linear_gradgradcheck():
    rng = np.random.default_rng(0)
    x, W, b = rand64(rng, 2, 3, 4), rand64(rng, 4, 2), rand64(rng, 2)
    tl.gradgradcheck(lambda x, W, b: F.linear(x, W, b), [x, W, b])


def test_linear_only_differentiates_what_requires_grad():
    """The array backward skips inputs that need no gradient (and W alone gets xᵀ g)."""
    rng = np.random.default_rng(0)
    x, W, b = rand64(rng, 3, 4, requires_grad=False), rand64(rng, 4, 2), rand64(rng, 2)
    g = rng.standard_normal((3, 2))
    dW, db = tl.grad(F.linear(x, W, b), [W, b], grad_outputs=t64(g, False))
    np.testing.assert_allclose(dW.numpy(), x.numpy().T @ g, atol=1e-12)
    np.testing.assert_allclose(db.numpy(), g.sum(0), atol=1e-12)


# ---------------------------------------------------------------------- the layer
layer_lead_shapes = hnp.array_shapes(min_dims=1, max_dims=2, max_side=3)


@given(layer_lead_shapes, st.integers(1, 4), st.integers(1, 4), st.booleans(), st.data())
def test_linear(lead, d_in, d_out, bias, data):
    layer = randomize(nn.Linear(d_in, d_out, bias=bias, dtype=np.float64))
    assert layer.W.shape == (d_in, d_out)
    assert (layer.b is None) == (not bias)
    x = t64(data.draw(values(lead + (d_in,))))
    y = layer(x)
    expect = x.data @ layer.W.data + (layer.b.data if bias else 0)
    np.testing.assert_allclose(y.data, expect, atol=1e-12)
    tl.gradcheck(lambda x, *ps: layer(x), [x, *layer.parameters()])


def test_linear_defaults():
    tl.manual_seed(0)
    layer = nn.Linear(64, 8)
    assert layer.W.dtype == np.float32 and np.abs(layer.W.data).max() <= 1 / 8
    assert (layer.b.data == 0).all()
    assert [n for n, _ in layer.named_parameters()] == ["W", "b"]
    tl.manual_seed(0)
    np.testing.assert_array_equal(nn.Linear(64, 8).W.data, layer.W.data)


@pytest.mark.parametrize("sizes", [(0, 3), (3, 0), (-1, 3), (2.5, 3), (True, 3)], ids=repr)
def test_linear_refuses_sizes_that_are_not_counts(sizes):
    """Linear(0, 3) used to fail with 'float division by zero' inside the init, Linear(-1, 3)
    with 'math domain error': now one line naming the size."""
    name, value = ("d_in", sizes[0]) if sizes[1] == 3 else ("d_out", sizes[1])
    with pytest.raises(
        ValueError, match=re.escape(f"Linear: {name}={value!r}: must be an integer ≥ 1")
    ):
        nn.Linear(*sizes)
    assert nn.Linear(np.int64(3), 2).W.shape == (3, 2)


@pytest.mark.parametrize(
    "x_shape, w_shape", [((3, 0), (0, 4)), ((2, 3, 0), (0, 4)), ((0, 3), (3, 4))]
)
def test_linear_with_zero_features_or_rows_is_pytorchs(x_shape, w_shape):
    """0 input features: y = b in every row and db counts the rows (PyTorch's answer; the
    folded (rows, d_in) view could not be made with -1 for a size of 0). 0 rows: an empty y.
    The create_graph path (the composed form) gives the same gradients."""
    x = tl.tensor(np.zeros(x_shape), requires_grad=True)
    W = tl.tensor(np.ones(w_shape), requires_grad=True)
    b = tl.tensor(np.arange(4.0), requires_grad=True)
    y = F.linear(x, W, b)
    assert y.shape == x_shape[:-1] + (4,)
    np.testing.assert_array_equal(y.numpy(), np.broadcast_to(np.arange(4.0), y.shape))
    for create_graph in (False, True):
        gx, gW, gb = tl.grad(y.sum(), [x, W, b], create_graph=create_graph, retain_graph=True)
        assert gx.shape == x_shape and gW.shape == w_shape
        np.testing.assert_array_equal(gb.numpy(), np.full(4, np.prod(x_shape[:-1])))


@pytest.mark.parametrize("autocast", [None, "bfloat16", "float16"])
@pytest.mark.parametrize("in_dims", [1, 2])
def test_on_a_gpu_a_linear_step_launches_its_products_and_nothing_else(
    autocast, in_dims, monkeypatch
):
    """On CuPy emulated by NumPy (tests/fake_cupy.py counts launches): the forward is one
    product and one bias add, inside tl.autocast two roundings more (x and W, by LinearFn
    itself: no Cast nodes); the backward is dx, dW and db, one launch each, also inside
    autocast (float32 gradients come out of cuBLAS as float32: no widening launch). Storing
    the gradients copies nothing: dW is written in W's own shape (in_dims = 2 too), db is a
    fresh array (a reshaped one is a view, which the engine copies before keeping it)."""
    if autocast is not None and tl.bfloat16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    rng = np.random.default_rng(0)
    w_shape = (3, 4, 5) if in_dims == 2 else (12, 5)
    x, W, b = (
        tl.tensor(rng.standard_normal(s).astype(np.float32), device="cuda", requires_grad=True)
        for s in ((2, 6, *w_shape[:in_dims]), w_shape, (5,))
    )
    for _ in range(2):  # (the second step: db's vector of ones is made on the first)
        for t in (x, W, b):
            t.grad = None
        fake_cupy.KERNELS.clear()
        with tl.autocast(autocast):
            y = F.linear(x, W, b, in_dims=in_dims)
        forward = dict(fake_cupy.KERNELS)
        g = tl.tensor(np.ones(y.shape, y.dtype), device="cuda")
        fake_cupy.KERNELS.clear()
        y.backward(g)
        backward = dict(fake_cupy.KERNELS)
    if autocast is None:
        assert forward == {"matmul": 1, "iadd": 1}
        assert backward == {"matmul": 3}
    else:
        assert forward == {"ndarray.astype": 2, "matmul": 1, "iadd": 1}
        assert backward == {"cublas.gemmStridedBatchedEx": 3}
    assert all(t.grad.dtype == np.float32 and t.grad.shape == t.shape for t in (x, W, b))
