"""float16 (and bfloat16, through ml_dtypes) through every op, and integer tensors that never
require grad. (test_op_in_float16 keeps its name, which docs/autograd.md cites; it runs both.)

Every op keeps float16 in and float16 out, gradients included, and agrees with the same
computation in float64 (on the same float16-rounded inputs) to float16's precision: relative
error below 5e-3 for values and 1e-2 for gradients (float16 keeps 11 significant bits,
relative spacing 9.8e-4; an op and its backward round a few times). Sums, means, variances,
products, running sums, log-sum-exp, softmax and matrix products accumulate in float32 and
round once at the end, where NumPy's float16 arithmetic would lose the small addends."""

from __future__ import annotations

import os

import numpy as np
import pytest

import nn.functional as F
import tensorlab as tl
from tensorlab.ops.special import Erf

RNG = np.random.default_rng(0)
A = RNG.uniform(0.5, 1.5, (3, 4)) * RNG.choice([-1, 1], (3, 4))
B = RNG.uniform(0.5, 1.5, (3, 4))
W = RNG.standard_normal((4, 2))
IDX = np.array([[0, 2, 1, 0], [1, 1, 0, 2], [2, 0, 0, 1]])

OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "neg": lambda a, b: -a,
    "pow_scalar": lambda a, b: a**2,
    "pow": lambda a, b: b**a,
    "exp": lambda a, b: a.exp(),
    "log": lambda a, b: b.log(),
    "sqrt": lambda a, b: b.sqrt(),
    "abs": lambda a, b: a.abs(),
    "tanh": lambda a, b: a.tanh(),
    "sigmoid": lambda a, b: a.sigmoid(),
    "relu": lambda a, b: a.relu(),
    "sin": lambda a, b: a.sin(),
    "cos": lambda a, b: a.cos(),
    "maximum": lambda a, b: a.maximum(b),
    "minimum": lambda a, b: a.minimum(b),
    "clip": lambda a, b: a.clip(-0.8, 0.8),
    "where": lambda a, b: tl.where(A > 0, a, b),
    "sum": lambda a, b: a.sum(1),
    "mean": lambda a, b: a.mean(),
    "max": lambda a, b: a.max(0),
    "min": lambda a, b: a.min(1),
    "var": lambda a, b: a.var(1),
    "std": lambda a, b: a.std(0, ddof=1),
    "prod": lambda a, b: a.prod(1),
    "logsumexp": lambda a, b: a.logsumexp(1),
    "cumsum": lambda a, b: a.cumsum(1),
    "softmax": lambda a, b: a.softmax(-1),
    "log_softmax": lambda a, b: a.log_softmax(0),
    "matmul": lambda a, b: a @ b.T,
    "einsum": lambda a, b: tl.einsum("ij,kj->ik", a, b),
    "reshape": lambda a, b: a.reshape(4, 3),
    "permute": lambda a, b: a.T,
    "expand": lambda a, b: a.expand(2, 3, 4),
    "concatenate": lambda a, b: tl.cat([a, b], 1),
    "stack": lambda a, b: tl.stack([a, b]),
    "getitem": lambda a, b: a[1:, [0, 0, 2]],
    "gather": lambda a, b: a.gather(1, IDX),
    "flip": lambda a, b: a.flip(0),
    "roll": lambda a, b: a.roll(1, 1),
    "tile": lambda a, b: a.tile(2, 1),
    "repeat_interleave": lambda a, b: a.repeat_interleave(2, 0),
    "sort": lambda a, b: a.sort(1).values,
    "topk": lambda a, b: a.topk(2).values,
    "scatter_add": lambda a, b: a.scatter_add(1, IDX, b),
    "index_add": lambda a, b: a.index_add(0, [2, 2, 0], b),
    "tril": lambda a, b: a.tril(),
    "triu": lambda a, b: a.triu(1),
    "layer_norm": lambda a, b: F.layer_norm(a, b[0], b[1]),
    "rms_norm": lambda a, b: F.rms_norm(a, b[0]),
    "gelu": lambda a, b: F.gelu(a),
    "gelu_tanh": lambda a, b: F.gelu(a, "tanh"),
    "silu": lambda a, b: F.silu(a),
    "elu": lambda a, b: F.elu(a),
    "erf": lambda a, b: Erf.apply(a),
    "linear": lambda a, b: F.linear(a, tl.tensor(W.astype(a.dtype))),
    "cross_entropy": lambda a, b: F.cross_entropy(a, np.array([0, 3, 1])),
}


# (dtype, value tolerance, gradient tolerance), relative to the largest float64 entry: about
# five times the dtype's relative spacing (float16 2⁻¹⁰ = 9.8e-4, bfloat16 2⁻⁷ = 7.8e-3) for
# values and ten times for gradients, which round a few more times.
HALVES = [pytest.param(np.float16, 5e-3, 1e-2, id="float16")]
if tl.bfloat16 is not None:
    HALVES.append(pytest.param(tl.bfloat16, 4e-2, 8e-2, id="bfloat16"))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("half, tol, gtol", HALVES)
@pytest.mark.parametrize("name", sorted(OPS))
def test_op_in_float16(name, half, tol, gtol):
    fn = OPS[name]
    x16, y16 = (tl.tensor(v.astype(half), requires_grad=True) for v in (A, B))
    x64, y64 = (tl.tensor(v.astype(half).astype(np.float64), requires_grad=True) for v in (A, B))
    out16, out64 = fn(x16, y16), fn(x64, y64)
    # the loss is float32 (a scaled float16 loss could overflow); every other op keeps its dtype
    assert out16.dtype == (np.float32 if name == "cross_entropy" else half)
    g = RNG.standard_normal(out16.shape)
    out16.backward(tl.tensor(g.astype(out16.dtype)))
    out64.backward(tl.tensor(g))
    scale = max(1.0, np.abs(out64.numpy()).max())
    assert np.abs(out16.numpy().astype(np.float64) - out64.numpy()).max() / scale < tol
    for t16, t64 in ((x16, x64), (y16, y64)):
        if t64.grad is None:
            assert t16.grad is None
            continue
        assert t16.grad.dtype == half
        gscale = max(1.0, np.abs(t64.grad.numpy()).max())
        assert np.abs(t16.grad.numpy().astype(np.float64) - t64.grad.numpy()).max() / gscale < gtol


def test_float16_sums_accumulate_in_float32():
    """5000 × 0.1: a float16 running sum stalls at 256 (0.1 is below half the spacing there);
    accumulated in float32 and rounded once it is 500, like every other reduction here."""
    x = tl.tensor(np.full(5000, 0.1, np.float16), requires_grad=True)
    assert np.cumsum(x.numpy())[-1] == 256.0  # what NumPy's float16 arithmetic gives
    assert x.cumsum()[-1].item() == 500.0
    assert x.sum().item() == 500.0
    assert abs(x.mean().item() - 0.1) < 1e-4
    tenth = float(np.float16(0.1))  # 0.0999755859375
    assert (x.reshape(1, -1) @ x.reshape(-1, 1)).item() == np.float16(tenth * tenth * 5000)
    assert abs(x.logsumexp().item() - (np.log(5000) + 0.1)) < 1e-2
    assert x.softmax(0).sum().item() == 1.0
    y = tl.tensor(np.full((2, 4000), 0.1, np.float16))
    expect = float(np.float16(tenth * tenth * 4000))
    assert tl.einsum("ij,ij->i", y, y).numpy().tolist() == [expect, expect]
    x.sum().backward()
    assert x.grad.dtype == np.float16


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_half_scatter_adds_accumulate_in_float32(half):
    """5000 gradient entries of 1 added into one slot (the backward of a read that repeats an
    index, of gather, and index_add itself): a running sum in float16 stalls at 2048 and one in
    bfloat16 at 256; summed in float32 and rounded once it is 5000 (bfloat16: 4992, the nearest
    it holds). CuPy's add.at has no bfloat16 at all, so there both go through float32."""
    if half == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 on the CPU needs ml_dtypes")
    want = float(np.array(5000.0, np.float32).astype(half))
    x = tl.tensor(np.ones(3), dtype=half, requires_grad=True)
    x[np.zeros(5000, np.int64)].sum().backward()  # GetItem's backward: ScatterAdd
    assert x.grad.dtype == x.dtype and x.grad.numpy().astype(float).tolist() == [want, 0.0, 0.0]
    x.grad = None
    x.reshape(1, 3).gather(1, np.zeros((1, 5000), np.int64)).sum().backward()  # ScatterAlongAxis
    assert x.grad.numpy().astype(float).tolist() == [want, 0.0, 0.0]
    ones = tl.tensor(np.ones(5000), dtype=half)
    added = tl.tensor(np.zeros(3), dtype=half).index_add(0, np.zeros(5000, np.int64), ones)
    assert added.dtype == x.dtype and added.numpy().astype(float).tolist() == [want, 0.0, 0.0]


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "shapes",
    [((2, 3, 4000), (4000, 2)), ((2, 3, 4000), (2, 4000, 2)), ((2, 1, 3, 4000), (5, 4000, 2))],
)
def test_batched_half_products_on_a_gpu_sum_in_float32(half, shapes, monkeypatch):
    """Matrix products with more than two axes on CuPy emulated by NumPy, which refuses what
    CuPy 14 gets wrong: a bfloat16 product with more than two axes goes to its integer kernel,
    summing in bfloat16 (tests/fake_cupy.py). backend.matmul takes a stack times a matrix as one
    two-axis product and widens the others, so every entry is 4000 × 0.1² summed in float32 and
    rounded once, as on the CPU (bitwise), gradients included."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    dtype = tl.backend.as_dtype(half)
    tenth = float(np.array(0.1, dtype).astype(np.float64))
    want = np.array(tenth * tenth * 4000, np.float64).astype(dtype)
    a, b = (tl.full(s, 0.1, dtype=half, device="cuda", requires_grad=True) for s in shapes)
    y = a @ b
    assert y.dtype == dtype and (y.data.get() == want).all()
    y.float().sum().backward()
    cpu = [tl.full(s, 0.1, dtype=half, device="cpu", requires_grad=True) for s in shapes]
    (cpu[0] @ cpu[1]).float().sum().backward()
    for t, c in zip((a, b), cpu):
        assert t.grad.dtype == dtype
        np.testing.assert_array_equal(t.grad.data.get(), c.grad.numpy())


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "shapes",
    [
        ((2, 3, 5), (2, 5, 4)),  # stack times stack
        ((2, 1, 3, 5), (4, 5, 2)),  # broadcast batch axes (copied out)
        ((3, 5), (2, 5, 4)),  # one matrix times a stack (read with stride 0)
        ((1, 3, 5), (2, 5, 4)),  # a stack of one, the same
        ((2, 3, 0), (2, 0, 4)),  # nothing to sum: zeros
        ((2, 0, 5), (2, 5, 4)),  # no rows
    ],
)
def test_batched_half_products_on_a_gpu_are_cublas_calls_in_float32(half, shapes, monkeypatch):
    """Stacks of half matrices on (emulated) CuPy go to cuBLAS in one strided batched call
    (tensorlab/backend.py: _half_cublas; tests/fake_cupy.py emulates cuBLAS from its manual:
    matrices stored by columns, so the arguments' order and leading dimensions matter). On
    random values, against the CPU's product in float32 rounded once: both sum the same
    float32 products, perhaps in another order, so they may differ by one rounding of the
    half result (one ulp: at most 2⁻⁷ relative in bfloat16, 2⁻¹⁰ in float16); a wrong order,
    stride or leading dimension gives other numbers altogether. Gradients too: their products
    are stacks times stacks, one of them transposed (not contiguous, so copied first). With
    TENSORLAB_TEST_DEVICE=cuda this runs on the GPU, against the real cuBLAS."""
    from tests import fake_cupy

    if os.environ.get("TENSORLAB_TEST_DEVICE") != "cuda":
        fake_cupy.install(monkeypatch)
    dtype = tl.backend.as_dtype(half)
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-2, 2, s).astype(dtype) for s in shapes]
    gpu = [tl.tensor(a, device="cuda", requires_grad=True) for a in arrays]
    cpu = [tl.tensor(a, device="cpu", requires_grad=True) for a in arrays]
    y, want = gpu[0] @ gpu[1], cpu[0] @ cpu[1]
    assert y.dtype == dtype and y.shape == want.shape
    rtol = 2.0**-7 if half == "bfloat16" else 2.0**-10  # one ulp at most
    close = dict(rtol=rtol, atol=1e-6)
    np.testing.assert_allclose(
        y.data.get().astype(np.float32), want.numpy().astype(np.float32), **close
    )
    g = rng.uniform(-1, 1, want.shape).astype(dtype)
    y.backward(tl.tensor(g, device="cuda"))
    want.backward(tl.tensor(g, device="cpu"))
    for t, c in zip(gpu, cpu):
        assert t.grad.dtype == dtype
        np.testing.assert_allclose(
            t.grad.data.get().astype(np.float32), c.grad.numpy().astype(np.float32), **close
        )


def test_integer_tensors_never_require_grad():
    with pytest.raises(TypeError, match="only floating-point tensors can require gradients"):
        tl.tensor([1, 2], requires_grad=True)
    with pytest.raises(TypeError, match="only floating-point tensors can require gradients"):
        tl.tensor([1, 2]).requires_grad_()
    x = tl.tensor([1.5, -2.0], requires_grad=True)
    for t in (
        x.to(np.int64),
        x.astype("int32"),
        x.to(bool),
        x.argmax(),
        x.argsort(),
        x.sort().indices,
        x.topk(1).indices,
        x > 0,
        np.isnan(x),
        tl.tensor([1, 2]) * 3,
    ):
        assert t.dtype.kind in "iub" and not t.requires_grad and t.grad_fn is None
    y = x * tl.tensor([2, 3])  # an integer operand: no gradient for it, x's is float
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 3.0])


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize(
    "shapes, order",
    [
        (((3, 5), (5, 4)), "CC"),  # two matrices
        (((3, 5), (5, 4)), "TC"),  # a stored by columns (a backward's xᵀ g): cuBLAS's flag
        (((3, 5), (5, 4)), "CT"),  # b stored by columns (g Wᵀ)
        (((2, 3, 5), (2, 5, 4)), "CC"),  # stack times stack
        (((2, 3, 5), (5, 4)), "CC"),  # a stack of rows times one matrix: folded into one GEMM
        (((5,), (5, 4)), "CC"),  # a row vector (a bias's gradient 1ᵀ g)
        (((3, 5), (5,)), "CC"),  # a column vector
    ],
)
def test_half_products_summed_into_float32_on_a_gpu(half, shapes, order, monkeypatch):
    """``backend.matmul(a, b, dtype=float32)`` on half arrays: the float32 sums themselves,
    not rounded to the half type (the gradients tl.autocast sends to float32 parameters). On
    (emulated) CuPy each is one cuBLAS call with a float32 result, a matrix stored by columns
    read in place with the transpose flag (no copy launched). Against NumPy's float32 product
    of the same half values: both sum the same exact products (a product of two halves is
    exact in float32), perhaps in another order, so they agree to float32 rounding: k·2⁻²⁴ of
    Σ|a||b| (k ≤ 5 terms here); a result rounded to the half type misses by up to 2⁻⁹."""
    from tests import fake_cupy

    if os.environ.get("TENSORLAB_TEST_DEVICE") != "cuda":
        fake_cupy.install(monkeypatch)
    cupy = tl.backend.cupy
    dtype = tl.backend.as_dtype(half)
    rng = np.random.default_rng(1)
    stored = [
        rng.uniform(-2, 2, s[::-1] if o == "T" else s).astype(dtype) for s, o in zip(shapes, order)
    ]
    host = [x.T if o == "T" else x for x, o in zip(stored, order)]
    a, b = (cupy.asarray(x).T if o == "T" else cupy.asarray(x) for x, o in zip(stored, order))
    assert [x.flags.c_contiguous for x in (a, b)] == [o == "C" for o in order]
    fake_cupy.KERNELS.clear()
    y = tl.backend.matmul(a, b, dtype=np.float32)
    if tl.backend.cupy is fake_cupy.module:
        assert dict(fake_cupy.KERNELS) == {"cublas.gemmStridedBatchedEx": 1}  # nothing copied
    wide = [x.astype(np.float32) for x in host]
    want = np.matmul(*wide)
    assert y.dtype == np.float32 and y.shape == want.shape
    bound = 5 * 2.0**-24 * np.matmul(*[np.abs(x) for x in wide])
    assert np.all(np.abs(y.get() - want) <= bound)
    assert not np.array_equal(want, want.astype(dtype).astype(np.float32))  # (the test can tell)
