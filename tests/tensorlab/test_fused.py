"""tensorlab/fused.py and backend.erf_exact: a kernel's function runs as written on NumPy
arrays (with ``xp.erf``), returns one array or a tuple, updates its arguments in place; with
TENSORLAB_TEST_DEVICE=cuda the same calls run the compiled kernel and must give the same
numbers. The kernels of the ops are checked against their CPU forms in tests/nn."""

import math

import numpy as np
import pytest

import tensorlab as tl
from tensorlab.backend import erf_exact
from tensorlab.fused import fused


@fused
def scaled_erf_and_square(xp, x, a):
    """A tuple out: (a·erf(x), x²)."""
    return a * xp.erf(x), x * x


@fused
def momentum(xp, buf, g, mu):
    """In place, nothing returned: buf ← μ·buf + g."""
    buf *= mu
    buf += g


def test_a_kernel_keeps_its_name_and_function():
    assert scaled_erf_and_square.__name__ == "scaled_erf_and_square"
    assert "tuple out" in scaled_erf_and_square.__doc__
    assert scaled_erf_and_square.math.__name__ == "scaled_erf_and_square"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_kernel_returns_a_tuple_in_its_inputs_dtype(dtype):
    """Against math.erf entry by entry. erf_exact is math.erf on the CPU and CUDA's erf on the
    GPU, which the CUDA programming guide bounds by 2 ulps in float64 and float32: 5e-16 and
    2.5e-7 relative (float32's rounding of math.erf is within that too)."""
    x = np.linspace(-3, 3, 13).astype(dtype)
    y, sq = scaled_erf_and_square(tl.tensor(x).data, 0.5)
    assert y.dtype == sq.dtype == np.dtype(dtype)
    want = 0.5 * np.array([math.erf(v) for v in x.astype(np.float64)])
    tol = 5e-16 if dtype == "float64" else 2.5e-7
    np.testing.assert_allclose(y, want, rtol=tol, atol=tol)
    np.testing.assert_array_equal(sq, x * x)


def test_a_kernel_updates_its_arguments_in_place():
    buf = tl.tensor(np.array([1.0, 2.0, -4.0])).data
    out = momentum(buf, tl.tensor(np.array([0.5, 0.5, 0.5])).data, 0.5)
    assert out is None
    np.testing.assert_array_equal(buf, [1.0, 1.5, -1.5])


def test_erf_exact_is_math_erf_in_the_arrays_dtype():
    x = np.array([[-2.5, -0.1], [0.0, 1e-3]])
    np.testing.assert_array_equal(erf_exact(x), np.vectorize(math.erf)(x))
    assert erf_exact(x.astype(np.float32)).dtype == np.float32
    assert erf_exact(np.zeros((0, 3))).shape == (0, 3)
