"""tensorlab/cuda_rows.py: a row formula's traced program written as one CUDA kernel, run on
the emulated GPU (tests/fake_cupy.py runs its CUDA on the CPU through tests/cuda_emulator.py)
and giving what NumPy's run of the same formula gives, to the C runner's tolerances
(tests/tensorlab/test_c_runner.py says why they are these). Its NVRTC compile, in every dtype,
is tests/tensorlab/test_fused_compiles.py's; its half arrays' reads and roundings,
tests/tensorlab/test_fused_op.py's."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gpt  # noqa: F401  (imports every module that defines kernels)
import nn  # noqa: F401
from tensorlab.backend import BFLOAT16
from tensorlab.fused_op import fused_functions
from tests.strategies import fused_op_inputs, wide_rows
from tests.tensorlab.test_c_runner import TOL, numpy_run

ROW_OPS = [op for op in fused_functions() if op.rows]


def gpu_run(kernel, fake, *args, reverse=False, **kw):
    """``kernel`` on the emulated GPU's copies of ``args``: (its results on the host, the
    launches it made)."""
    on_device = [fake.module.asarray(a) if isinstance(a, np.ndarray) else a for a in args]
    fake.KERNELS.clear()
    fake.REVERSE_THREADS[0] = reverse
    try:
        out = kernel(*on_device, **kw)
    finally:
        fake.REVERSE_THREADS[0] = False
    outs = out if isinstance(out, tuple) else (out,)
    return tuple(o.get() for o in outs), dict(fake.KERNELS)


# float16 and bfloat16: computed in float32 by both runners, so the float32 results differ by
# the order of a row's sums (about 1e-6 of the largest entry), and the roundings to the half
# type by at most one unit of it (2⁻¹⁰ relative in float16, 2⁻⁷ in bfloat16)
HALF_ULP = {np.dtype(np.float16): 2.0**-10}
if BFLOAT16 is not None:
    HALF_ULP[BFLOAT16] = 2.0**-7


def tolerance(w: np.ndarray) -> dict:
    if w.dtype not in HALF_ULP:
        return TOL[w.dtype]
    finite = np.abs(w[np.isfinite(w)].astype(np.float32))
    return dict(rtol=HALF_ULP[w.dtype], atol=1e-6 * max(1.0, finite.max(initial=0.0)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, "bfloat16"])
@pytest.mark.parametrize("op", ROW_OPS, ids=lambda op: op.__name__)
@given(data=st.data())
def test_on_a_gpu_a_row_kernel_is_one_cuda_kernel_that_agrees_with_numpy(op, dtype, data):
    """A row kernel on CuPy arrays (run_cuda): the C runner's per-row program
    written as CUDA, a thread block per row, run on the CPU by the emulated GPU
    (tests/fake_cupy.py, 8 threads a block, so rows narrower and wider than a block, and not
    a multiple of it, are drawn). One launch each way, NumPy's numbers to the C runner's
    tolerances (the same kinds of difference: the order of a row's sums; on float16 and
    bfloat16 arrays, which the kernel reads and writes itself, one unit of the half type
    more), NaN and ∞ where NumPy has them (in a third of the draws), and the same numbers bit
    for bit with the threads of each block run in reverse order (no race between them)."""
    from tests import fake_cupy

    if dtype == "bfloat16" and BFLOAT16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    dtype = np.dtype(BFLOAT16 if dtype == "bfloat16" else dtype)
    wide = np.dtype(np.float32) if dtype in HALF_ULP else dtype
    inputs, numbers = fused_op_inputs(data.draw, op, away=False, dtype=wide, of_shapes=wide_rows)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    arrays = [t.numpy() for t in inputs]
    arrays = [rng.standard_normal(a.shape).astype(dtype) if a.dtype == wide else a for a in arrays]
    if data.draw(st.integers(0, 2)) == 0 and arrays[0].size >= 3:
        arrays[0].reshape(-1)[:3] = [np.nan, np.inf, -np.inf]
    with pytest.MonkeyPatch.context() as mp, np.errstate(all="ignore"):
        fake_cupy.install(mp)
        for kernel in (op._forward_kernel, op._backward_kernel):
            want, _ = numpy_run(kernel, *arrays, **numbers)
            got, launches = gpu_run(kernel, fake_cupy, *arrays, **numbers)
            assert launches == {f"k_{kernel.__name__}": 1}, launches
            wants = want if isinstance(want, tuple) else (want,)
            for w, g in zip(wants, got):
                assert g.shape == w.shape and g.dtype == w.dtype
                w32, g32 = (x.astype(np.float32) if w.dtype in HALF_ULP else x for x in (w, g))
                np.testing.assert_allclose(g32, w32, **tolerance(w), err_msg=kernel.__name__)
            again, _ = gpu_run(kernel, fake_cupy, *arrays, reverse=True, **numbers)
            for g, a in zip(got, again):  # (bfloat16's NaN is unequal to itself to NumPy)
                np.testing.assert_array_equal(g.astype(np.float64), a.astype(np.float64))
            if kernel is op._forward_kernel:  # the backward's arguments: g, what it saved, inputs
                y, saved = (want[0], want[1:]) if isinstance(want, tuple) else (want, ())
                g = rng.uniform(-3, 3, y.shape).astype(y.dtype)
                arrays = [g, *saved, *arrays]
