"""tensorlab/c_runner.py: a kernel's formula traced, written as C, compiled, and giving what
NumPy's run of the same formula gives.

Every fused op's two kernels (found by enumerating the FusedFunction subclasses) and every other
kernel of the library (tensorlab.fused.KERNELS, each with an example call here: a new kernel
without one fails :func:`test_every_library_kernel_has_an_example`) are run by both runners on
hypothesis-drawn shapes and values, and must

- compile (no signature the library uses may fall back to NumPy unnoticed: that is a silent
  loss of speed), and
- agree with NumPy's run: float64 to 1e-12 (absolute and relative: the two differ by the
  order of a row's sum, fused multiply-adds and glibc's vector exp/erf/tanh, ≤ 4 ulps each,
  through a few dozen operations on values up to ~50: errors ~1e-14); float32 to 4e-6
  absolute and 1e-5 relative (NumPy's float32 erf is Abramowitz-Stegun, within 6.1e-7 of the
  true erf, C's erff within 2 ulps; times |x| ≤ 4 in GELU: 3e-6; the rest is float32
  rounding, 1.2e-7 relative per operation). NaN and ∞ where NumPy has them.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gpt  # noqa: F401  (imports every module that defines kernels)
import nn  # noqa: F401
from nn.optim import adam_kernel, scale_kernel, square_kernel
from tensorlab import c_runner
from tensorlab.fused import KERNELS, NUMPY, fused, run_numpy
from tensorlab.fused_op import fused_functions
from tests.strategies import fused_op_inputs, wide_rows

needs_cc = pytest.mark.skipif(
    not c_runner.available(), reason="no C compiler here (or TENSORLAB_CPU_KERNELS=numpy)"
)
TOL = {np.dtype(np.float64): dict(rtol=1e-12, atol=1e-12), np.dtype(np.float32): {}}
TOL[np.dtype(np.float32)] = dict(rtol=1e-5, atol=4e-6)


def numpy_run(kernel, *args, **kw):
    """The kernel on NumPy, on copies (an in-place kernel's result is its updated arguments)."""
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    out = run_numpy(kernel.math, kernel.rows, kernel.widen, tuple(copies), kw, kernel.keep)
    return out, copies


def assert_runners_agree(kernel, *args, **kw):
    """The C run of ``kernel`` equals NumPy's (results, and arguments updated in place), and
    this signature was compiled, not handed to NumPy."""
    want, want_args = numpy_run(kernel, *args, **kw)
    got = kernel(*args, **kw)
    refused = [key for key, v in kernel._c_traces.items() if v == c_runner.NOT_COMPILED]
    assert not refused, (kernel.__name__, refused)
    pairs = list(zip(want, got)) if isinstance(want, tuple) else [(want, got)]
    assert isinstance(got, tuple) == isinstance(want, tuple)
    pairs += [(w, a) for w, a in zip(want_args, args) if isinstance(a, np.ndarray)]
    for w, g in pairs:
        if w is None:
            assert g is None
            continue
        assert g.shape == w.shape and g.dtype == w.dtype, (kernel.__name__, g.shape, w.shape)
        np.testing.assert_allclose(g, w, **TOL.get(w.dtype, {}), err_msg=kernel.__name__)
    return got


OPS = fused_functions()


@needs_cc
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__)
@given(data=st.data())
def test_every_fused_op_compiles_and_agrees_with_numpy(op, dtype, data):
    inputs, numbers = fused_op_inputs(data.draw, op, away=False, dtype=dtype)
    arrays = [t.numpy() for t in inputs]  # on the host (the C runner's arrays)
    out = assert_runners_agree(op._forward_kernel, *arrays, **numbers)
    y, saved = (out[0], out[1:]) if isinstance(out, tuple) else (out, ())
    g = data.draw(hnp.arrays(y.dtype, y.shape, elements=st.floats(-3, 3, width=32)))
    assert_runners_agree(op._backward_kernel, g, *saved, *arrays, **numbers)


@needs_cc
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__)
@given(data=st.data())
def test_rows_of_any_width_agree_with_numpy(op, dtype, data):
    """Rows shorter than the vector of 16, of whole vectors, and of whole vectors and a tail
    (the tail runs as one more vector with the columns already done masked off). The values
    are normal draws: kinks and ties are the other tests' (a constant row of 15 in float32
    makes layer norm amplify the last bit of its mean by 1/√ε = 316, which the tolerance
    here is not for)."""
    inputs, numbers = fused_op_inputs(data.draw, op, away=False, dtype=dtype, of_shapes=wide_rows)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    arrays = [t.numpy() for t in inputs]
    arrays = [rng.standard_normal(a.shape).astype(dtype) if a.dtype == dtype else a for a in arrays]
    out = assert_runners_agree(op._forward_kernel, *arrays, **numbers)
    y, saved = (out[0], out[1:]) if isinstance(out, tuple) else (out, ())
    g = data.draw(hnp.arrays(y.dtype, y.shape, elements=st.floats(-3, 3, width=32)))
    assert_runners_agree(op._backward_kernel, g, *saved, *arrays, **numbers)


@needs_cc
@pytest.mark.parametrize("op", OPS, ids=lambda op: op.__name__)
@given(data=st.data())
def test_nan_and_infinity_come_out_where_numpy_has_them(op, data):
    inputs, numbers = fused_op_inputs(data.draw, op, away=False)
    arrays = [t.numpy().copy() for t in inputs]
    x = arrays[0]
    x.reshape(-1)[: min(3, x.size)] = [np.nan, np.inf, -np.inf][: min(3, x.size)]
    with np.errstate(all="ignore"):
        assert_runners_agree(op._forward_kernel, *arrays, **numbers)


# The library's other kernels, each with a call of the shapes it gets: (…, T) scores with
# (…, 1) row values; parameters with their optimizer's numbers.
def _examples(rng, dtype):
    def a(*shape):
        return rng.uniform(-2, 2, shape).astype(dtype)

    S, L = a(2, 3, 5, 5), a(2, 5, 37)  # (and rows wider than the C runner's vector of 16)
    adam = (0.9, 0.1, 0.99, 0.01, 1e-3, 0.5, 1e-8, 0.999, 0.0)
    return {
        "erf_kernel": [(a(4, 7),), (a(3, 21),)],
        "row_max": [(S,), (np.where(S > 1.5, np.nan, S),), (L,), (np.where(L > 1.9, np.nan, L),)],
        "exp_shifted_in_place": [(S, S.max(-1, keepdims=True)), (L, L.max(-1, keepdims=True))],
        "softmax_grad_in_place": [
            (a(2, 3, 5, 5), a(2, 3, 5, 1), np.abs(S), a(2, 3, 5, 1)),
            (a(2, 5, 37), a(2, 5, 1), np.abs(L), a(2, 5, 1)),
        ],
        "adam_kernel": [(a(6, n), a(6, n), a(6, n), np.abs(a(6, n)), *adam) for n in (4, 16, 19)],
        "square_kernel": [(a(3, 5),), (a(3, 18),)],
        "scale_kernel": [(a(3, 5), 0.25), (a(2, 40), 0.25)],
    }


def test_every_library_kernel_has_an_example():
    library = ("tensorlab", "nn", "gpt")  # (not the kernels tests and docs define)
    named = {k.__name__ for k in KERNELS if k.math.__module__.split(".")[0] in library}
    named -= {k.__name__ for op in OPS for k in (op._forward_kernel, op._backward_kernel)}
    assert named == set(_examples(np.random.default_rng(0), np.float64))


@needs_cc
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_library_kernels_compile_and_agree_with_numpy(dtype):
    rng = np.random.default_rng(0)
    by_name = {k.__name__: k for k in KERNELS}
    for name, calls in _examples(rng, dtype).items():
        for args in calls:
            assert_runners_agree(by_name[name], *args)


# ---------------------------------------------------------------- the runner's own rules
@fused
def _affine(xp, x, a, b):
    return a * x + b


@fused(rows=True)
def _centred(xp, x, shift=0.0):
    return x - xp.mean(x, axis=-1, keepdims=True) + shift, xp.max(x, axis=-1)


@fused
def _momentum(xp, buf, g, mu):
    buf *= mu
    buf += g


@fused
def _cumulative(xp, x):
    return xp.cumsum(x, axis=-1)  # not something the C runner writes


@fused
def _transposed(xp, x):
    return x.T * 2.0  # nor this


@needs_cc
@given(
    shapes=st.sampled_from(
        [((3, 1), (1, 4), ()), ((4,), (2, 3, 4), (3, 1)), ((0, 3), (3,), ()), ((2, 0), (), ())]
    )
)
def test_broadcasting_partners_are_numpys(shapes):
    """Arguments that broadcast (a row, a column, a number, nothing at all) as in NumPy."""
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s) for s in shapes]
    assert_runners_agree(_affine, *args)


@needs_cc
def test_a_row_kernel_sees_whole_rows_and_one_number_per_row():
    x = np.random.default_rng(2).standard_normal((3, 4, 6)).astype(np.float32)
    centred, top = assert_runners_agree(_centred, x, shift=0.5)
    assert top.shape == (3, 4)
    assert assert_runners_agree(_centred, x[..., ::2])[0].shape == (3, 4, 3)  # column-strided
    assert assert_runners_agree(_centred, x.transpose(1, 0, 2))[0].shape == (4, 3, 6)

    # rows come from the largest array, never from a 0-d one (a summed loss's gradient),
    # even where every other array is empty: (0, 6) rows, the (0,) array one number per row
    shapes = (np.ones(()), np.ones((0, 6)), np.ones((0,)))
    assert c_runner.full_shape(shapes, rows=True) == (0, 6)


@needs_cc
def test_one_number_broadcast_to_every_row_is_read_once_per_row():
    """A per-row argument that is one number broadcast (a summed loss's gradient, expanded to
    every row: stride 0) is read at that one number for every row, not as if it held one
    number per row (which would read past it): cross-entropy's backward with g broadcast
    equals the one with g written out."""
    from nn.loss import CrossEntropyFn

    rng = np.random.default_rng(5)
    z = rng.standard_normal((6, 9)).astype(np.float32)
    t = rng.integers(0, 9, 6)
    _, e, s = CrossEntropyFn._forward_kernel(z, t)
    spread = np.broadcast_to(np.float32(0.7), (6,))
    assert not any(spread.strides)
    full = CrossEntropyFn._backward_kernel(np.full(6, 0.7, np.float32), e, s, z, t)
    np.testing.assert_array_equal(CrossEntropyFn._backward_kernel(spread, e, s, z, t), full)
    refused = [k for k, v in CrossEntropyFn._backward_kernel._c_traces.items() if not v]
    assert not refused  # (both compiled)


@needs_cc
def test_in_place_updates_reach_the_callers_array_even_through_a_copy():
    buf = np.arange(12.0).reshape(3, 4)
    strided = buf.T  # not rows of contiguous numbers: the runner works on a copy
    assert _momentum(strided, np.ones((4, 3)), 0.5) is None
    np.testing.assert_array_equal(buf, np.arange(12.0).reshape(3, 4) * 0.5 + 1.0)


@needs_cc
def test_each_updates_every_tensor_in_one_call_as_numpy_would():
    """``kernel.each`` on NumPy arrays: one compiled call per group of rows with the same
    dtypes (float32 and float64 parameters side by side; sizes around the vector of 16),
    leaving in every array what NumPy's run of the formula, row by row, leaves."""
    rng = np.random.default_rng(5)
    sizes = [(1,), (5,), (16,), (17,), (4, 10)]
    rows = [
        tuple(np.abs(rng.standard_normal(shape)).astype(dtype) for _ in range(4))
        for dtype in (np.float32, np.float64)
        for shape in sizes
    ]
    scalars = (0.9, 0.1, 0.99, 0.01, 1e-3, 0.5, 1e-8, 0.999, 0.01)
    want = [tuple(a.copy() for a in row) for row in rows]
    for row in want:
        adam_kernel.math(NUMPY, *row, *scalars)
    adam_kernel.each(tuple(zip(*rows)), *scalars)
    for got_row, want_row in zip(rows, want):
        for g, w in zip(got_row, want_row):
            np.testing.assert_allclose(g, w, **TOL[g.dtype])
    assert len(adam_kernel._c_each) >= 2
    assert c_runner.NOT_COMPILED not in adam_kernel._c_each.values()


@needs_cc
def test_each_sum_adds_every_tensor_in_one_call():
    """``kernel.each_sum`` on NumPy arrays: Σ g² over tensors of float32 and float64 and of
    sizes below, at and beyond the 1024 numbers the C function sums at a time, equal to
    NumPy's float64 sum (to 1e-12: only the order of the additions differs); an ∞ or a NaN
    anywhere makes it ∞ or NaN (clipping reads that as "not finite")."""
    rng = np.random.default_rng(6)
    grads = [
        rng.standard_normal(shape).astype(dtype)
        for dtype in (np.float32, np.float64)
        for shape in [(0,), (17,), (1024,), (3, 700), (2500,)]  # (an empty one adds nothing)
    ]
    want = sum(float(np.sum(g.astype(np.float64) ** 2)) for g in grads)
    got = square_kernel.each_sum((grads,))
    assert got.dtype == np.float64
    np.testing.assert_allclose(float(got), want, rtol=1e-12)
    assert c_runner.NOT_COMPILED not in square_kernel._c_each.values()
    grads[-2][1, 650] = np.inf
    assert float(square_kernel.each_sum((grads,))) == np.inf
    grads[1][3] = np.nan
    assert np.isnan(float(square_kernel.each_sum((grads,))))


@needs_cc
def test_a_read_only_array_is_refused_not_written():
    """An in-place kernel on a read-only array gets NumPy's error, on both the single call and
    ``.each``, and the array keeps its numbers."""
    a = np.ones(20)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        _momentum(a, np.ones(20), 0.5)
    with pytest.raises(ValueError, match="read-only"):
        scale_kernel.each(([np.ones(20), a],), 0.5)
    np.testing.assert_array_equal(a, 1.0)


@needs_cc
def test_numbers_are_arguments_and_branches_on_them_are_guards():
    """A new value of a number compiles nothing; a branch taken the other way (cross-entropy's
    ``if label_smoothing``) is a second trace of the same signature."""
    x = np.random.default_rng(3).standard_normal((5, 7))
    before = sum(len(v) for v in _centred._c_traces.values())
    for shift in (0.0, 1.5, -2.0):
        assert_runners_agree(_centred, x, shift=shift)
    assert sum(len(v) for v in _centred._c_traces.values()) == before + 1
    kernel = nn.loss.CrossEntropyFn._forward_kernel
    z, t = x.astype(np.float32), np.array([0, 6, -100, 3, 2])
    before = sum(len(v) for v in kernel._c_traces.values())
    for smoothing in (0.0, 0.1, 0.2, 0.0):
        assert_runners_agree(kernel, z, t, ignore_index=-100, label_smoothing=smoothing)
    assert sum(len(v) for v in kernel._c_traces.values()) - before <= 2


@needs_cc
def test_what_it_cannot_write_runs_on_numpy():
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(_cumulative(x), np.cumsum(x, axis=-1))
    assert list(_cumulative._c_traces.values()) == [c_runner.NOT_COMPILED]
    np.testing.assert_array_equal(_transposed(x), 2.0 * x.T)
    assert list(_transposed._c_traces.values()) == [c_runner.NOT_COMPILED]
    half = np.ones(3, np.float16)  # an in-place kernel's float16 argument: NumPy's
    _momentum(half, np.ones(3, np.float16), 0.5)
    np.testing.assert_array_equal(half, [1.5, 1.5, 1.5])


@fused
def _exp(xp, x):
    return xp.exp(x)


@needs_cc
def test_exp_far_below_zero_is_zero_and_keeps_nan_and_infinity():
    """float32 e^x below -87 is 0 (tl_expf: the vector expf's slow lanes are never called;
    NumPy gives at most 1.7e-38 there), and -inf, +inf, NaN, -NaN and the ordinary range are
    NumPy's, in the rows' whole vectors and in their tails."""
    special = [-np.inf, -1e4, -104.0, -88.0, -87.5, -87.0, -86.9, -10.0, 0.0, 1.0, 80.0, 88.0]
    special += [88.72283, 88.72284, 88.73, 89.0, np.inf, np.nan, -np.nan]  # (128 ln 2 = 88.722839)
    x = np.array(special * 3, np.float32).reshape(3, -1)
    x[1] = x[1, ::-1]
    with np.errstate(over="ignore"):
        got, want = _exp(x), np.exp(x)
    low = x < -87.0
    assert (got[low] == 0).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(x))
    np.testing.assert_allclose(got[~low], want[~low], rtol=4e-7)  # (two ulps of 1.2e-7 apart)
    assert np.abs(want[low]).max() < 1.7e-38


@needs_cc
def test_exp_is_within_about_an_ulp_over_its_whole_range():
    """tl_expf (a polynomial of our own) against the float64 exponential rounded to float32,
    over 2^20 evenly spread floats of [-87, 88.72] (up to just below float32's largest),
    the ends themselves and numbers where 2^k is 2^-126 or 2^128. The bound: 1.01 ulp is the
    largest error over every float in the range (an exhaustive C check, session 27); 1.5
    leaves room for neither a wrong coefficient nor a wrong exponent (both are whole ulps
    or worse)."""
    x = np.linspace(-87.0, 88.72, 1 << 20, dtype=np.float32)
    ends = [-87.0, -86.99, -86.65, 88.0, 88.37, 88.38, 88.5, 88.7, 88.72, 88.7228]
    x = np.concatenate([x, np.resize(np.array(ends, np.float32), 64)]).reshape(-1, 64)
    want = np.exp(x.astype(np.float64))
    got = _exp(x)
    ulp = np.spacing(want.astype(np.float32)).astype(np.float64)
    assert np.isfinite(got).all()
    assert (np.abs(got - want) / ulp).max() <= 1.5


@needs_cc
def test_an_index_outside_the_row_is_an_error_not_a_read_of_other_memory():
    z, t = np.zeros((3, 4), np.float32), np.array([0, 9, 1])
    with pytest.raises(IndexError, match=r"CrossEntropyFn_forward.*outside 0\.\.3"):
        nn.loss.CrossEntropyFn._forward_kernel(z, t)


@needs_cc
def test_a_compiled_kernel_is_cached_on_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLAB_CACHE", str(tmp_path))
    source = c_runner._PRELUDE + "double twice(double x) { return 2 * x; }\n"
    path = c_runner._build(source, [])
    assert path.parent == tmp_path / "kernels" and path.suffix == ".so"

    def no_compiler(*args, **kw):
        raise AssertionError("compiled again")

    monkeypatch.setattr(subprocess, "run", no_compiler)
    assert c_runner._build(source, []) == path  # found, not compiled
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary left


def test_without_a_c_compiler_every_kernel_runs_on_numpy(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLAB_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    assert c_runner._link.__wrapped__() is None
    if c_runner.available():  # a probe compiled before, in the usual cache, is no compiler
        monkeypatch.delenv("TENSORLAB_CACHE")
        assert c_runner._link.__wrapped__() is None


def test_a_compiler_error_names_the_command(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORLAB_CACHE", str(tmp_path))
    if not c_runner.available():
        pytest.skip("no C compiler here")
    with pytest.raises(RuntimeError, match="C runner: .* failed"):
        c_runner._build("this is not C", [])


def test_the_setting_is_checked(monkeypatch):
    monkeypatch.setenv("TENSORLAB_CPU_KERNELS", "fast")
    with pytest.raises(ValueError, match="TENSORLAB_CPU_KERNELS must be 'compiled' or 'numpy'"):
        c_runner._choice.__wrapped__()
    monkeypatch.setenv("TENSORLAB_CPU_KERNELS", "numpy")
    assert c_runner._choice.__wrapped__() is False
