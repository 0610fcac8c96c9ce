"""tensorlab/fused.py and backend.erf_exact: a kernel's function runs as written on NumPy
arrays (with ``xp.erf``), returns one array or a tuple, updates its arguments in place; with
TENSORLAB_TEST_DEVICE=cuda the same calls run the compiled kernel and must give the same
numbers. The kernels of the ops are checked against their CPU forms in tests/nn."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorlab as tl
from tensorlab.backend import erf_exact, to_device
from tensorlab.fused import CHUNK, NUMPY, fused, pointer_table
from tests.strategies import values


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


# ------------------------------------------------------------------ many tensors, one launch
@fused
def halve_plus(xp, x, y):
    """Not in place: .each refuses it (what it returns would be lost)."""
    return 0.5 * x + y


def rows_of_momentum(seed: int):
    """Buffers and gradients of sizes around CHUNK (a GPU block covers CHUNK elements: tensors
    of one block, of several and of a partial last one, and an empty one) in two dtypes."""
    rng = np.random.default_rng(seed)
    shapes = [(3,), (CHUNK,), (2, CHUNK // 2 + 3), (0, 4), (3 * CHUNK - 7,), (5, 1)]
    dtypes = ["float32", "float64", "float32", "float32", "float64", "float64"]
    bufs = [rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]
    grads = [rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]
    return bufs, grads


def test_each_is_the_kernel_on_every_row_of_the_lists():
    """On the test device (a GPU: one launch per dtype) against the function run by NumPy on
    each row in turn: the same numbers, bit for bit on NumPy and on the emulated GPU (and on a
    GPU, where each element is the same arithmetic in the same order)."""
    bufs, grads = rows_of_momentum(0)
    want = [b.copy() for b in bufs]
    for w, g in zip(want, grads):
        momentum.math(NUMPY, w, g, 0.5)
    on_device = [tl.tensor(b.copy()).data for b in bufs]
    momentum.each((on_device, [tl.tensor(g).data for g in grads]), 0.5)
    for got, w in zip(on_device, want):
        np.testing.assert_array_equal(to_device(got, "cpu"), w)


def test_on_a_gpu_each_is_one_launch_per_dtype(monkeypatch):
    """On CuPy emulated by NumPy, which runs the kernel as the CUDA code does (each block reads
    its tensor and first element from the table and works on the memory at the addresses)."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    bufs, grads = rows_of_momentum(1)
    on_gpu = [tl.tensor(b.copy(), device="cuda").data for b in bufs]
    grads_on_gpu = [tl.tensor(g, device="cuda").data for g in grads]
    fake_cupy.KERNELS.clear()
    momentum.each((on_gpu, grads_on_gpu), 0.5)
    assert fake_cupy.KERNELS == {"fused each momentum": 2, "asarray": 2}  # kernel, table
    for got, b, g in zip(on_gpu, bufs, grads):
        np.testing.assert_array_equal(got.get(), b * 0.5 + g)


def test_the_table_gives_each_block_its_tensor_and_first_element(monkeypatch):
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    rows = [(tl.zeros(n, device="cuda").data,) for n in (5, 0, 2 * CHUNK + 1, CHUNK)]
    table, blocks = pointer_table(rows)
    k = len(rows)
    assert list(table[:k]) == [row[0].data.ptr for row in rows]
    assert list(table[k : 2 * k]) == [5, 0, 2 * CHUNK + 1, CHUNK]
    assert blocks == 1 + 3 + 1
    assert list(table[2 * k :]) == [0, 2, 2, 2, 3] + [0, 0, CHUNK, 2 * CHUNK, 0]


def test_on_a_gpu_a_row_with_a_strided_array_is_a_launch_of_its_own(monkeypatch):
    """The table holds a tensor's first address and its size, so only contiguous arrays can go
    in it; a row with a strided one runs through the kernel itself (which follows strides)."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    rng = np.random.default_rng(2)
    base = [rng.standard_normal((4, 6)).astype(np.float32) for _ in range(3)]
    g = rng.standard_normal((4, 6)).astype(np.float32)
    bufs = [tl.tensor(b.copy(), device="cuda").data for b in base]
    strided = tl.tensor(base[2].T.copy(), device="cuda").data.T  # (4, 6), not C-contiguous
    grads = [tl.tensor(g, device="cuda").data for _ in range(3)]
    fake_cupy.KERNELS.clear()
    momentum.each(([bufs[0], bufs[1], strided], grads), 0.5)
    assert fake_cupy.KERNELS == {"fused each momentum": 1, "asarray": 1, "fused momentum": 1}
    for got, b in zip((bufs[0], bufs[1], strided), base):
        np.testing.assert_array_equal(got.get(), b * np.float32(0.5) + g)


def test_on_a_gpu_only_empty_tensors_launch_nothing(monkeypatch):
    """A set of dtypes whose tensors are all empty has no thread block: no launch (CUDA refuses
    a grid of none; the emulation too), while the other dtypes still get theirs."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    empty = [tl.zeros((0, 3), device="cuda").data, tl.zeros(0, device="cuda").data]
    full, grad = (tl.ones(5, dtype="float64", device="cuda").data for _ in range(2))
    fake_cupy.KERNELS.clear()
    momentum.each(([*empty, full], [*empty, grad]), 0.5)
    assert fake_cupy.KERNELS == {"fused each momentum": 1, "asarray": 1}
    np.testing.assert_array_equal(full.get(), np.full(5, 1.5))


def test_each_refuses_what_it_cannot_do(monkeypatch):
    x = tl.tensor(np.ones((2, 3))).data
    with pytest.raises(ValueError, match=r"momentum.each: the lists differ in length: \[2, 1\]"):
        momentum.each(([x, x], [x]), 0.5)
    with pytest.raises(TypeError, match="halve_plus.each needs a kernel that returns nothing"):
        halve_plus.each(([x], [x]))
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    a = tl.ones((4, 6), device="cuda").data
    with pytest.raises(ValueError, match=r"momentum.each: row 0 needs arrays of one size, not "):
        momentum.each(([a], [a[:2]]), 0.5)
    with pytest.raises(TypeError, match="halve_plus.each needs a kernel that returns nothing"):
        halve_plus.each(([a], [a]))


def test_each_runs_bfloat16_rows_on_a_gpu(monkeypatch):
    """Rows are grouped by their dtypes themselves: bfloat16's ``dtype.str`` is a bare "<V2",
    which once turned a bfloat16 launch into one on raw 2-byte records."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    base = np.arange(-3, 4, dtype=np.float32).astype("bfloat16")
    buf = tl.tensor(base.copy(), device="cuda").data
    momentum.each(([buf], [tl.tensor(base.copy(), device="cuda").data]), 0.5)
    assert buf.dtype == np.dtype("bfloat16")
    np.testing.assert_array_equal(buf.get().astype(np.float32), 1.5 * np.arange(-3, 4))


@fused
def weighted_square(xp, x, w, a):
    """One value per element, in float64: a·w·x²."""
    x = x.astype(xp.float64)
    return a * w * x * x


def test_each_sum_is_the_float64_sum_of_the_kernel_on_every_row():
    """On the test device (a GPU: one launch per dtype, each block summing its chunk) against
    the function run by NumPy on each row and summed in float64: equal to 1e-13 relative (the
    same float64 terms, added in another order)."""
    bufs, grads = rows_of_momentum(3)
    want = sum(weighted_square.math(NUMPY, x, w, 0.5).sum() for x, w in zip(bufs, grads))
    got = weighted_square.each_sum(
        ([tl.tensor(b).data for b in bufs], [tl.tensor(g).data for g in grads]), 0.5
    )
    assert got.shape == () and got.dtype == np.float64
    assert float(to_device(got, "cpu")) == pytest.approx(want, rel=1e-13)


def test_on_a_gpu_each_sum_is_one_launch_and_one_sum_per_dtype(monkeypatch):
    """On CuPy emulated by NumPy (each block reads its tensor from the table and writes its
    chunk's sum): per dtype the table's copy, the kernel and the sum of the partial sums, and
    one addition of the two dtypes' totals. A strided row is summed by the kernel on its own."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    bufs, grads = rows_of_momentum(4)
    want = sum(weighted_square.math(NUMPY, x, w, 2.0).sum() for x, w in zip(bufs, grads))
    xs = [tl.tensor(b, device="cuda").data for b in bufs]
    ws = [tl.tensor(g, device="cuda").data for g in grads]
    fake_cupy.KERNELS.clear()
    got = weighted_square.each_sum((xs, ws), 2.0)
    assert fake_cupy.KERNELS == {
        "fused each_sum weighted_square": 2,
        "asarray": 2,
        "ndarray.sum": 2,
        "add": 1,
    }
    assert float(got.get()) == pytest.approx(want, rel=1e-13)
    xs[1] = tl.tensor(bufs[1][::-1].copy(), device="cuda").data[::-1]  # strided, same values
    fake_cupy.KERNELS.clear()
    assert float(weighted_square.each_sum((xs, ws), 2.0).get()) == pytest.approx(want, rel=1e-13)
    assert fake_cupy.KERNELS["fused weighted_square"] == 1


def test_each_sum_of_empty_tensors_is_zero(monkeypatch):
    """Only empty tensors: no launch (CUDA refuses an empty grid) and a total of 0."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    empty = [tl.zeros((0, 3), device="cuda").data, tl.zeros(0, device="cuda").data]
    fake_cupy.KERNELS.clear()
    total = weighted_square.each_sum((empty, empty), 1.0)
    assert float(total.get()) == 0.0 and total.dtype == np.float64
    assert "fused each_sum weighted_square" not in fake_cupy.KERNELS


def test_each_sum_refuses_what_it_cannot_do(monkeypatch):
    x = tl.tensor(np.ones((2, 3))).data
    with pytest.raises(ValueError, match=r"weighted_square.each_sum: the lists differ in len"):
        weighted_square.each_sum(([x, x], [x]), 1.0)
    with pytest.raises(ValueError, match="weighted_square.each_sum: no arrays to sum over"):
        weighted_square.each_sum(([], []), 1.0)
    with pytest.raises(TypeError, match="momentum.each_sum needs a kernel that returns one arr"):
        momentum.each_sum(([x], [x]), 0.5)
    with pytest.raises(TypeError, match="scaled_erf_and_square.each_sum needs a kernel that "):
        scaled_erf_and_square.each_sum(([x],), 0.5)
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    a = tl.ones((4, 6), device="cuda").data
    with pytest.raises(ValueError, match=r"weighted_square.each_sum: row 0 needs arrays of one "):
        weighted_square.each_sum(([a], [a[:2]]), 1.0)
    with pytest.raises(TypeError, match="momentum.each_sum needs a kernel that returns one arr"):
        momentum.each_sum(([a], [a]), 0.5)


# ---------------------------------------------------------------------- the NumPy runner
@fused(widen=True)
def _tanh_and_square(xp, x, w):
    """An elementwise kernel of two outputs, with a number."""
    return xp.tanh(x) * w, x * x


@fused(rows=True, widen=True)
def _row_centred(xp, x, b):
    """A kernel that reduces over the last axis, with a per-feature vector."""
    return x - xp.mean(x, axis=-1, keepdims=True) + b


@pytest.mark.parametrize("dtype", ["float64", "float32", "float16"])
def test_blocks_give_what_the_whole_array_gives(dtype, monkeypatch, numpy_kernels):
    """Inputs of many blocks (several rows a block, a short last block, a transposed input)
    run block by block equal the formula on the whole array (bitwise:
    the same operations on the same numbers); half inputs come back in their own dtype."""
    import tensorlab.fused as fu

    monkeypatch.setattr(fu, "BLOCK", 4096)  # small blocks: many of them, quickly
    rng = np.random.default_rng(0)
    rows = 3 * fu.BLOCK // 50 + 7  # rows of 50: three blocks and a bit
    x = rng.standard_normal((rows, 50)).astype(dtype)
    xt = rng.standard_normal((50, rows)).astype(dtype).T  # not contiguous: run whole
    b = rng.standard_normal(50).astype(dtype)
    wide = lambda a: a.astype(np.float32) if dtype == "float16" else a  # noqa: E731
    for a in (x, xt):
        y, sq = _tanh_and_square(a, 0.5)
        want_y, want_sq = _tanh_and_square.math(NUMPY, wide(a), 0.5)
        assert y.dtype == sq.dtype == np.dtype(dtype) and y.shape == a.shape
        np.testing.assert_array_equal(y, want_y.astype(dtype))
        np.testing.assert_array_equal(sq, want_sq.astype(dtype))
        r = _row_centred(a, b)
        np.testing.assert_array_equal(r, _row_centred.math(NUMPY, wide(a), wide(b)).astype(dtype))


# ---------------------------------------------------------------------- the namespace's sums
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, max_side=5), data=st.data())
def test_reductions_are_sums_and_means(dtype, shape, data):
    """The kernels' namespace takes sums and means over the last axis (kept as length 1 here)
    and the sum of a matrix's rows (the rows of every axis but the last, folded) as
    matrix-vector products; same dtype as the input. Compared with the exact sums (float64
    sums of the same values): any order of n additions is off by at most n·u·Σ|a| (u = 2⁻²⁴
    for float32, 2⁻⁵³ for float64), plus half a unit of the result for the mean's division;
    the row sum adds up to 25 rows (not 5), so in float32 a sum near 50 may round by several
    1e-6 (a fixed atol 1e-5 failed for 20 equal rows of 1.866, where NumPy's own axis-0 sum is
    the one 3 ulp off the exact 37.3218352)."""
    a = data.draw(values(shape)).astype(dtype)
    exact = a.astype(np.float64)
    u = np.finfo(dtype).eps / 2
    # (float64: the reference rounds as much as the sums tested, hence the factor 2 below)
    for got, expect, n, abs_sum in (
        (
            NUMPY.sum(a, axis=-1, keepdims=True),
            exact.sum(-1, keepdims=True),
            shape[-1],
            np.abs(exact).sum(-1, keepdims=True),
        ),
        (
            NUMPY.mean(a, axis=-1, keepdims=True),
            exact.mean(-1, keepdims=True),
            shape[-1],
            np.abs(exact).mean(-1, keepdims=True),
        ),
        (
            NUMPY.sum(a.reshape(-1, shape[-1]), axis=0),
            exact.reshape(-1, shape[-1]).sum(0),
            int(np.prod(shape[:-1])),
            np.abs(exact).reshape(-1, shape[-1]).sum(0),
        ),
    ):
        assert got.dtype == dtype and got.shape == expect.shape
        bound = 2 * (n + 1) * u * abs_sum + np.finfo(dtype).tiny
        assert (np.abs(got - expect) <= bound).all(), (got, expect, bound)


@fused(widen=True)
def outer_sum(xp, a, b):
    """Two arrays that broadcast against each other: a (n, 1) and b (1, m)."""
    return a + b, a * b


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_on_a_gpu_half_arrays_broadcast_and_round_as_on_the_cpu(half, monkeypatch, numpy_kernels):
    """A widening kernel on half arrays that broadcast against each other: on the GPU's half
    runner (one launch, tensorlab/fused.py: _run_half) the arrays are brought to the common
    shape first, and an output is rounded to the half type when it has the shape of the
    largest input, as on the CPU (the NumPy runner): here a + b and a b, of shape (3, 4), not
    b's (1, 4), stay float32 on both. The same numbers and dtypes on CuPy emulated by NumPy as
    on NumPy."""
    if half == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    from tests import fake_cupy

    a = (np.arange(3.0).reshape(3, 1) / 3).astype(half)
    b = (np.arange(4.0).reshape(1, 4) / 7).astype(half)
    cpu = outer_sum(a, b)
    fake_cupy.install(monkeypatch)
    gpu = outer_sum(tl.tensor(a, device="cuda").data, tl.tensor(b, device="cuda").data)
    for c, g in zip(cpu, gpu):
        assert g.dtype == c.dtype and g.shape == (3, 4)
        np.testing.assert_array_equal(g.get(), c)
    assert cpu[0].dtype == np.float32  # (no output has the largest input's shape)
    same = outer_sum(tl.tensor(a, device="cuda").data, tl.tensor(a.T, device="cuda").data.T)
    assert same[0].dtype == np.dtype(half)  # (a (3, 1) with a (3, 1): rounded)
