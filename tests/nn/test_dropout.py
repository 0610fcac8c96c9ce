"""nn/dropout.py: the keep-mask dropout_mask (values, rate, dtype, seeding), F.dropout as the
product with that mask (values, first and second order, finite differences), and the layer
Dropout (modes, seeding)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nn
import nn.functional as F
import tensorlab as tl
from nn.dropout import dropout_mask
from tensorlab import Tensor
from tests.strategies import check_fused_op, t64, values


# ---------------------------------------------------------------------- the mask
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9])
def test_dropout_mask_values_rate_and_dtype(dtype, p):
    like = np.zeros(1, dtype)
    tl.manual_seed(11)
    m = dropout_mask((400, 250), p, like)
    assert m.shape == (400, 250) and m.dtype == dtype
    assert set(np.unique(m)) <= {0.0, dtype(1.0 / (1.0 - p))}
    assert abs((m == 0).mean() - p) < 0.01  # 100,000 draws: the sd of the rate is ≤ 0.0016
    tl.manual_seed(11)
    np.testing.assert_array_equal(dropout_mask((400, 250), p, like), m)  # seeded
    if p:
        assert not np.array_equal(dropout_mask((400, 250), p, like), m)  # a new draw


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_dropout_of_half_precision_values(half):
    """Under tl.autocast the activations are float16 or bfloat16, whose values the generators
    cannot draw (NumPy's random takes float32 or float64 only): the mask is drawn in float32
    and comes back in the half dtype. Before, F.dropout and a GPT with dropout under autocast
    raised TypeError. The rate test is the float one's (100,000 draws, sd of the rate
    ≤ 0.0016, so 0.01 is over 6 sd); the kept value is 1/(1 - p) rounded to the half dtype."""
    if half == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    dtype = tl.bfloat16 if half == "bfloat16" else np.dtype(np.float16)
    tl.manual_seed(11)
    m = dropout_mask((400, 250), 0.3, np.zeros(1, dtype))
    assert m.dtype == dtype
    assert set(np.unique(m.astype(np.float64))) == {0.0, float(dtype.type(1 / 0.7))}
    assert abs((m == 0).mean() - 0.3) < 0.01
    tl.manual_seed(11)
    same = dropout_mask((400, 250), 0.3, np.zeros(1, np.float32))
    np.testing.assert_array_equal(m == 0, same == 0)  # the float32 draws, the same keep-mask
    x = tl.ones(4, 5, dtype=dtype)
    assert F.dropout(x, 0.5).dtype == dtype


# ---------------------------------------------------------------------- the function
@given(
    shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=4),
    p=st.sampled_from([0.1, 0.5, 0.8]),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_dropout_is_the_product_with_its_mask(shape, p, seed, data):
    """F.dropout has no op of its own: it is x ⊙ M for M = dropout_mask(...), drawn from the
    seeded generator. Against that product written here (the composed form), with the same
    seed, values and derivatives must agree bit for bit (atol 0): the same draws, the same
    multiplications."""
    x = t64(data.draw(values(shape)))

    def fused(x):
        tl.manual_seed(seed)
        return F.dropout(x, p)

    def composed(x):
        tl.manual_seed(seed)
        return x * Tensor._wrap(dropout_mask(x.shape, p, x.data))

    check_fused_op(fused, composed, [x], atol=0.0)


def test_dropout_functional():
    x = tl.ones(1000, 100)
    assert F.dropout(x, 0.3, training=False) is x
    assert F.dropout(x, 0.0) is x
    tl.manual_seed(3)
    y = F.dropout(x, 0.3).numpy()
    assert set(np.unique(y)) <= {0.0, np.float32(1 / 0.7)}
    assert abs(y.mean() - 1.0) < 0.01
    assert abs((y == 0).mean() - 0.3) < 0.01
    with pytest.raises(ValueError):
        F.dropout(x, 1.0)


def test_dropout_gradient_uses_the_same_mask():
    tl.manual_seed(0)
    x = tl.randn(50, 20, dtype=np.float64, requires_grad=True)
    y = F.dropout(x, 0.5)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.data, (y.data != 0) * 2.0)

    def fn(x):
        tl.manual_seed(1)
        return F.dropout(x, 0.4)

    tl.gradcheck(fn, [t64(np.random.default_rng(0).standard_normal((3, 4)))])


# ---------------------------------------------------------------------- the layer
def test_dropout_module():
    drop = nn.Dropout(0.25)
    x = tl.ones(200, 500)
    tl.manual_seed(7)
    y1 = drop(x).data
    tl.manual_seed(7)
    y2 = drop(x).data
    np.testing.assert_array_equal(y1, y2)  # reproducible with manual_seed
    assert abs(y1.mean() - 1.0) < 0.01  # inverted scaling keeps the mean
    assert abs((y1 == 0).mean() - 0.25) < 0.01
    drop.eval()
    assert drop(x) is x
    with pytest.raises(ValueError):
        nn.Dropout(1.0)
