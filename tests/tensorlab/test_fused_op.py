"""Every fused op (tensorlab/fused_op.py: FusedFunction), found by enumerating the subclasses,
not listed by hand: its two formulas hold against each other on every runner.

In float64, on hypothesis-drawn shapes whose values include the kinks and ties (x = 0 exactly,
repeated entries):
(a) the array run of the forward formula (NumPy, or CuPy on the test device) equals the
    Tensor run (the composed graph);
(b) the backward formula equals autograd of the composed graph, and the create_graph first
    derivative (which differentiates the composed graph) equals the plain backward;
(c) gradcheck and gradgradcheck against central differences, away from the kinks (x = 0: a
    one-sided slope is no derivative), with their default tolerances (atol 1e-5, rtol 1e-3);
(d) Hessian- and Jacobian-vector products through the op equal those through its graph.
Tolerance of (a), (b), (d): 1e-10 absolute, float64 rounding through a few dozen operations
on values of size ~10 (errors are ~1e-14), yet far below any wrong term.

An op's inputs are read from its ``forward_math`` signature: positional parameters are arrays
(the first of the drawn shape; ``w``, ``b`` and ``gain`` are per-feature vectors of the last
axis, ``t`` one class index per row), parameters with defaults are numbers, passed as their
defaults.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpt  # noqa: F401  (imports every module that defines fused ops)
import nn  # noqa: F401
import tensorlab as tl
from tensorlab import c_runner
from tensorlab.fused_op import fused_functions
from tests.strategies import (
    CLASSES,
    PER_FEATURE,
    check_fused_op,
    cpu_runner,
    fused_op_inputs,
    signature,
)

OPS = fused_functions()


def test_the_fused_ops_are_found():
    names = {op.__name__ for op in OPS}
    assert {"GELUFn", "GELUTanhFn", "SiLUFn", "ELUFn", "LayerNormFn", "RMSNormFn"} <= names


@pytest.mark.parametrize("cpu", ["compiled", "numpy"])
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__)
@given(data=st.data())
def test_runners_agree_and_the_gradients_are_right(op, cpu, data):
    """On the CPU both array runners: the C runner (tensorlab/c_runner.py) and NumPy's."""
    if cpu == "compiled" and not c_runner.available():
        pytest.skip("no C compiler here: the C runner is off (tensorlab/c_runner.py)")
    with cpu_runner(cpu):
        check_runners_and_gradients(op, data)


def check_runners_and_gradients(op, data):
    inputs, numbers = fused_op_inputs(data.draw, op, away=False)
    fused = lambda *xs: op.apply(*xs, **numbers)
    composed = lambda *xs: op.composed(*xs, **numbers)
    # (a) the op (its array runner: NumPy, or CuPy on a GPU) against the Tensor run, and (b),
    # (d) at the kinks: everything but the finite differences
    check_fused_op(fused, composed, inputs, atol=1e-10, finite_differences=False)
    # (c) finite differences away from the kinks
    smooth, _ = fused_op_inputs(data.draw, op, away=True)
    tl.gradcheck(fused, smooth)
    tl.gradgradcheck(fused, smooth)


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__)
def test_half_inputs_are_computed_in_float32_and_rounded_back(op):
    """float16 in, float16 out, equal to the float32 result rounded once."""
    arrays, numbers = signature(op)
    rng = np.random.default_rng(0)
    shapes = {a: (8,) if a in PER_FEATURE else (5,) if a in CLASSES else (5, 8) for a in arrays}
    x16 = [
        rng.integers(0, 8, shapes[a]) if a in CLASSES else rng.uniform(-3, 3, shapes[a])
        for a in arrays
    ]
    x16 = [a if a.dtype.kind == "i" else a.astype(np.float16) for a in x16]
    x32 = [a if a.dtype.kind == "i" else a.astype(np.float32) for a in x16]
    y16 = op.apply(*[tl.tensor(a) for a in x16], **numbers).data
    y32 = op.apply(*[tl.tensor(a) for a in x32], **numbers).data
    if y16.shape == x16[0].shape:  # the input's kind of array: in its dtype
        assert y16.dtype == np.float16
        np.testing.assert_array_equal(y16, y32.astype(np.float16))
    else:  # one number per row (a loss): float32, as computed
        assert y16.dtype == np.float32
        np.testing.assert_array_equal(y16, y32)


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__)
def test_on_a_gpu_a_fused_op_on_half_arrays_is_one_launch_each_way(
    op, half, monkeypatch, numpy_kernels
):
    """On CuPy, a fused op on half arrays reads each half input as float and writes each
    result rounded inside its kernel: an elementwise op by its half runner (tensorlab/fused.py:
    half_source), a row op (norms, cross-entropy) by its CUDA form (tensorlab/cuda_rows.py:
    run_cuda). So the forward and the backward are one launch each, with no cast launched on
    either side (cupy.fuse has no bfloat16 cast), and what the forward saves stays float32.
    On CuPy emulated by NumPy (tests/fake_cupy.py counts launches), an elementwise op's values
    and gradients equal those of the CPU's NumPy runner bit for bit (both compute in float32
    and round once). A row op's block sums run in another order than NumPy's, which moves the
    float32 result by about 1e-6 of the row's largest entry before the rounding: there, and
    on a real GPU (TENSORLAB_TEST_DEVICE=cuda, whose erf, exp and tanh may differ from NumPy's
    by float32 ulps), they agree to one unit of the half type (2⁻⁷ relative in bfloat16, 2⁻¹⁰
    in float16) plus 1e-6 of the largest entry, and launches are counted only on the
    emulation."""
    if half == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    from tests import fake_cupy

    arrays, numbers = signature(op)
    rng = np.random.default_rng(0)
    shapes = {a: (8,) if a in PER_FEATURE else (5,) if a in CLASSES else (5, 8) for a in arrays}
    values = [
        rng.integers(0, 8, shapes[a])
        if a in CLASSES
        else rng.uniform(-3, 3, shapes[a]).astype(half)
        for a in arrays
    ]
    g = {shape: rng.uniform(-1, 1, shape) for shape in [(5, 8), (5,)]}  # (5,): a loss's

    def run(device):
        ins = [tl.tensor(a, device=device, requires_grad=a.dtype.kind not in "iu") for a in values]
        fake_cupy.KERNELS.clear()
        y = op.apply(*ins, **numbers)
        forward = dict(fake_cupy.KERNELS)
        saved = y.grad_fn.saved if op.saves else ()
        grad = tl.tensor(g[y.shape].astype(y.dtype), device=device)  # (a loss is float32)
        fake_cupy.KERNELS.clear()
        y.backward(grad)
        backward = dict(fake_cupy.KERNELS)
        assert all(s.dtype == np.float32 for s in saved)
        return [y.numpy()] + [t.grad.numpy() for t in ins if t.requires_grad], (forward, backward)

    cpu, _ = run("cpu")
    real = os.environ.get("TENSORLAB_TEST_DEVICE") == "cuda"
    if not real:
        fake_cupy.install(monkeypatch)
    run("cuda")  # (the second step counted: the first makes the row sums' vector of ones)
    gpu, (forward, backward) = run("cuda")
    if not real:
        kernel = f"k_{op.__name__}" if op.rows else f"fused half {op.__name__}"
        assert forward == {f"{kernel}_forward": 1}
        # (and the engine sums a per-feature input's gradient over the rows: one product 1ᵀ g)
        assert backward.pop("matmul", 0) == sum(a in PER_FEATURE for a in arrays)
        assert backward == {f"{kernel}_backward": 1}
    ulp = 2.0**-7 if half == "bfloat16" else 2.0**-10
    for a, b in zip(gpu, cpu):
        assert a.dtype == b.dtype
        if real or op.rows:
            a, b = a.astype(np.float32), b.astype(np.float32)
            np.testing.assert_allclose(a, b, rtol=ulp, atol=1e-6 * np.abs(b).max())
        else:
            np.testing.assert_array_equal(a, b)
