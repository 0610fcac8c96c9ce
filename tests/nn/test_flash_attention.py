"""AttentionFn's GPU runner (nn/flash_attention.cu): compiled by NVRTC for an H100 and run,
without a GPU, by the CPU emulation of its threads (tests/cuda_emulator.py through
tests/fake_cupy.py); with ``TENSORLAB_TEST_DEVICE=cuda`` the same comparisons run the kernels
on the GPU. It is held against the CPU runner of the same formula (BLAS products of
blocks of scores, tests/nn/test_attention.py holds that one against the composed form) and
against central differences.

Tolerances: float64 to 1e-12 (the two runners sum the same products in other orders; the
terms are O(1) and there are at most ~100 of them, so the difference is a few hundred ulps of
2.2e-16 at most); float32 to 2e-5 (the same argument with float32's 1.2e-7, the rows' exp
and products adding a few ulps each); float16 and bfloat16 inputs are summed in float32 by
both, so their outputs, rounded once to the input's type, differ by at most one unit in the
last place (2⁻¹⁰ and 2⁻⁷ relative), and so do their gradients (the engine rounds a gradient
to its input's type)."""

from __future__ import annotations

import contextlib
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorlab as tl
from nn import flash_attention
from nn.attention import AttentionFn
from tests import cuda_compile, cuda_emulator, fake_cupy

ON_REAL_GPU = os.environ.get("TENSORLAB_TEST_DEVICE") == "cuda"
NO_EMULATOR = cuda_emulator.unavailable()
# the kernels run: on the GPU (TENSORLAB_TEST_DEVICE=cuda), or here by the emulation
kernels_run = pytest.mark.skipif(
    not ON_REAL_GPU and NO_EMULATOR is not None, reason=str(NO_EMULATOR)
)
# what only the emulation shows (launch counts, threads in reverse order)
emulated = pytest.mark.skipif(
    ON_REAL_GPU or NO_EMULATOR is not None,
    reason=str(NO_EMULATOR or "counts and thread orders of the emulated GPU"),
)


@contextlib.contextmanager
def gpu():
    """The real CuPy on a GPU; elsewhere CuPy emulated on the CPU, the kernels run by the
    thread emulation (undone afterwards)."""
    if ON_REAL_GPU:
        yield tl.backend.cupy
        return
    with pytest.MonkeyPatch.context() as mp:
        fake_cupy.install(mp)
        fake_cupy.KERNELS.clear()
        yield fake_cupy.module


def inputs(rng, B, H, T_q, T_k, d, d_v, *, bias=False, H_kv=None):
    """q, k, v (and a bias): H query heads, H_kv key/value heads (default H)."""
    heads = (H, H_kv or H, H_kv or H)
    shapes = ((T_q, d), (T_k, d), (T_k, d_v))
    arrays = [rng.standard_normal((B, T, h, w)) for h, (T, w) in zip(heads, shapes)]
    if bias:
        arrays.append(rng.standard_normal((H, T_q, T_k)))  # broadcast over the batch
    return arrays


def run(device, arrays, g, dtype, params, runner=AttentionFn.apply):
    """y and the gradients of every input, as float64 host arrays."""
    xp = np if device == "cpu" else tl.backend.cupy
    params = {
        k: (xp.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in params.items()
    }  # fmt: skip
    ins = [tl.tensor(a, device=device).astype(dtype).requires_grad_() for a in arrays]
    y = runner(*ins, **params)
    y.backward(tl.tensor(g, device=device).astype(dtype))
    return [y.numpy().astype(np.float64)] + [t.grad.numpy().astype(np.float64) for t in ins]


@st.composite
def problems(draw, d=4, d_v=3):
    """Shapes across tile edges (the float64 tile is 32 rows), masks, bias, dropout, windows,
    grouped-query heads."""
    B, H = draw(st.integers(1, 2)), draw(st.sampled_from([1, 2, 4]))
    H_kv = draw(st.sampled_from([h for h in (1, 2, 4) if H % h == 0]))
    T_q, T_k = draw(st.integers(0, 70)), draw(st.integers(0, 70))
    causal = draw(st.booleans())
    params = dict(scale=draw(st.sampled_from([0.5, 1.0])), causal=causal, mask=None)
    params["dropout_mask"] = None
    params["window"] = draw(st.sampled_from([None, 1, 5, 40])) if causal else None
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    if draw(st.booleans()):  # a padding-style mask, some rows empty
        params["mask"] = rng.random((B, 1, 1 if draw(st.booleans()) else T_q, T_k)) < 0.8
    if draw(st.booleans()):
        params["dropout_mask"] = (rng.random((B, H, T_q, T_k)) < 0.9) / 0.9
    arrays = inputs(rng, B, H, T_q, T_k, d, d_v, bias=draw(st.booleans()), H_kv=H_kv)
    return arrays, rng.standard_normal((B, T_q, H, d_v)), params


@kernels_run
@settings(deadline=None)
@given(problems())
def test_gpu_runner_matches_the_cpu_runner_in_float64(problem):
    """Values and gradients of q, k, v (and the bias) to 1e-12, on every shape, mask and tile
    edge drawn; a row that sees no key gives 0 on both."""
    arrays, g, params = problem
    cpu = run("cpu", arrays, g, "float64", params)
    with gpu():
        flash = run("cuda", arrays, g, "float64", params)
    for a, b in zip(flash, cpu):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


@kernels_run
@settings(deadline=None, max_examples=15)
@given(problems(d=16, d_v=16))
def test_tensor_core_kernels_match_the_cpu_runner_in_float16(problem):
    """The tensor-core kernels (float16, widths of 16) on drawn shapes, masks, biases, dropout
    and head groups: every output and gradient within two units in float16's last place
    (2⁻⁹) of the array's largest entry or of 16, a bound on the terms the gradients are
    sums of (dA = g · v is a sum of 16 products of standard normal draws, times a key).
    Two, not one: the CPU runner rounds once, these also round the pattern (times the
    dropout scale) and dS to float16 for their products; and a gradient that cancels to 0
    on the CPU (one key: dS = A (dA M - D) = 0) keeps a rounding of its terms here (the
    rounded M inside D = g · y against the exact M in dA M: up to ~1e-2 seen in 600 draws,
    as FlashAttention-2's own rounding of P gives). The deterministic cases above hold one
    unit of the largest entry."""
    arrays, g, params = problem
    cpu = run("cpu", arrays, g, "float16", params)
    with gpu():
        flash = run("cuda", arrays, g, "float16", params)
    for a, b in zip(flash, cpu):
        assert np.isfinite(a).all()
        largest = np.abs(b).max(initial=16.0)
        np.testing.assert_allclose(a, b, rtol=0, atol=2.0**-9 * largest)


CASES = {  # AttentionFn's parameters beside q, k, v (2, T_q, 2, d): T_q = T_k = 37 unless given
    "causal": dict(causal=True),
    "window": dict(causal=True, window=6),
    "mask-bias": dict(mask=True, bias=True),
    "causal-dropout-fewer-keys": dict(causal=True, dropout=True, T_k=20),
    "grouped-query": dict(causal=True, H_kv=1),
    # past the tensor-core forward's blocks of 64 query rows and tiles of 64 keys
    "long-window": dict(causal=True, window=70, T_q=150, T_k=160),
    "long-mask-bias": dict(mask=True, bias=True, T_q=130, T_k=140),
}
TOLERANCE = {"float32": 2e-5, "float16": 2.0**-10, "bfloat16": 2.0**-7}


@kernels_run
@pytest.mark.parametrize("widths", [(8, 8), (32, 16)], ids=["d8", "d32"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_runner_matches_the_cpu_runner(case, dtype, widths):
    """float32 and half inputs: the output and the gradients (summed in float32 by both
    runners, then rounded to the inputs' type) to float32's rounding, or one unit in the half
    type's last place (relative to the array's largest entry near 0)."""
    if dtype == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 on the CPU needs ml_dtypes")
    spec, rng = CASES[case], np.random.default_rng(1)
    T_q, T_k = spec.get("T_q", 37), spec.get("T_k", 37)
    d, d_v = widths
    arrays = inputs(
        rng, 2, 2, T_q, T_k, d, d_v, bias=spec.get("bias", False), H_kv=spec.get("H_kv")
    )
    params = dict(scale=8**-0.5, causal=spec.get("causal", False), window=spec.get("window"))
    params["mask"] = rng.random((2, 1, T_q, T_k)) < 0.7 if spec.get("mask") else None
    drop = (rng.random((2, 2, T_q, T_k)) < 0.8) / 0.8
    params["dropout_mask"] = drop if "dropout" in case else None
    g = rng.standard_normal((2, T_q, 2, d_v))
    cpu = run("cpu", arrays, g, dtype, params)
    with gpu():
        flash = run("cuda", arrays, g, dtype, params)
    tol = TOLERANCE[dtype]
    for a, b in zip(flash, cpu):
        assert np.isfinite(a).all()
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())


@kernels_run
@pytest.mark.parametrize("widths", [(0, 3), (3, 0), (0, 0)])
def test_heads_of_width_zero(widths):
    """A head width of 0 (the kernels are compiled for widths of at least 1: a zero column
    stands in for it): with d = 0 every score is the bias, with d_v = 0 the output is empty;
    values and gradients as on the CPU runner."""
    d, d_v = widths
    rng = np.random.default_rng(6)
    arrays = inputs(rng, 2, 2, 5, 6, d, d_v, bias=True)
    g = rng.standard_normal((2, 5, 2, d_v))
    params = dict(scale=1.0, causal=True, mask=None, dropout_mask=None)
    cpu = run("cpu", arrays, g, "float64", params)
    with gpu():
        flash = run("cuda", arrays, g, "float64", params)
    for a, b in zip(flash, cpu):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="width 0 and 3"):  # what NVRTC would refuse
        flash_attention.options("float32", 0, 3)


@kernels_run
def test_gpu_runner_passes_gradcheck():
    """First derivatives of the kernels' backward against central differences in float64
    (causal with a window, a mask, a bias, dropout and two query heads sharing one key/value
    head at once), and second derivatives, which come from the composed form on the device
    (``create_graph``)."""
    rng = np.random.default_rng(2)
    arrays = inputs(rng, 1, 2, 6, 7, 3, 2, bias=True, H_kv=1)
    keep = rng.random((1, 1, 6, 7)) < 0.8
    drop = (rng.random((1, 2, 6, 7)) < 0.9) / 0.9
    with gpu() as cupy:
        params = dict(scale=0.7, causal=True, window=4, mask=cupy.asarray(keep))
        params["dropout_mask"] = cupy.asarray(drop)
        ins = [tl.tensor(a, device="cuda", requires_grad=True) for a in arrays]
        fn = lambda *a: AttentionFn.apply(*a, **params)  # noqa: E731
        assert tl.gradcheck(fn, ins)
        assert tl.gradgradcheck(fn, ins)


@kernels_run
def test_a_nan_reaches_the_rows_that_read_it():
    """A NaN in a query makes its row NaN on both runners, and a NaN key the rows that may see
    it (causal rows 35 on, wherever the key's tile is). The rows that may not see the key
    never read it on the GPU and keep the values they have without it; on the CPU they are
    NaN too, since its products reach every key before the mask is added (NaN + -∞)."""
    rng = np.random.default_rng(5)
    arrays = inputs(rng, 1, 1, 40, 40, 4, 4)
    params = dict(scale=0.5, causal=True, mask=None, dropout_mask=None)
    clean = AttentionFn.apply(*[tl.tensor(a) for a in arrays], **params).numpy()
    arrays[0][0, 3, 0, 1] = np.nan  # query 3
    arrays[1][0, 35, 0, 2] = np.nan  # key 35, in the second tile
    cpu = AttentionFn.apply(*[tl.tensor(a) for a in arrays], **params).numpy()
    with gpu():
        flash = AttentionFn.apply(*[tl.tensor(a, device="cuda") for a in arrays], **params)
        flash = flash.numpy()
    nan_rows = [3, *range(35, 40)]
    assert np.isnan(flash[0, nan_rows]).all() and np.isnan(cpu[0, nan_rows]).all()
    others = [i for i in range(40) if i not in nan_rows]
    np.testing.assert_allclose(flash[0, others], clean[0, others], rtol=0, atol=1e-12)


@emulated
@pytest.mark.parametrize("dtype, d", [("float32", 8), ("bfloat16", 32)], ids=["cores", "tensor"])
def test_threads_in_reverse_order_give_the_same_numbers(dtype, d):
    """Each block's threads run in reverse order between barriers: a kernel whose threads read
    what another writes in the same phase (a missing ``__syncthreads``) would change. (Both
    forwards: on CUDA cores, and bfloat16 on tensor cores, 70 rows across its blocks of 64.)"""
    if dtype == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 on the CPU needs ml_dtypes")
    rng = np.random.default_rng(3)
    arrays = inputs(rng, 2, 2, 70, 75, d, d, bias=True)
    g = rng.standard_normal((2, 70, 2, d))
    params = dict(scale=0.3, causal=True, window=9, mask=None, dropout_mask=None)
    with gpu():
        forward = run("cuda", arrays, g, dtype, params)
        fake_cupy.REVERSE_THREADS[0] = True
        try:
            backward = run("cuda", arrays, g, dtype, params)
        finally:
            fake_cupy.REVERSE_THREADS[0] = False
        forward_kernel = "attention_forward_mma" if dtype == "bfloat16" else "attention_forward"
        assert fake_cupy.KERNELS[forward_kernel] == 2
    for a, b in zip(forward, backward):
        np.testing.assert_array_equal(a, b)


@emulated
@pytest.mark.parametrize(
    "dtype, d, end", [("float32", 4, ""), ("bfloat16", 4, ""), ("bfloat16", 16, "_mma")]
)
def test_one_launch_forward_two_backward_and_no_scores_kept(dtype, d, end):
    """A causal forward is one kernel and the backward two, for half inputs too (they are
    widened as read and rounded as written: no cast kernels), on CUDA cores or on tensor
    cores (bfloat16, width 16: the ``_mma`` kernels); no array the node keeps has T_q T_k
    entries: memory is O(T) per head."""
    if dtype == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 on the CPU needs ml_dtypes")
    rng = np.random.default_rng(4)
    T = 64
    arrays = inputs(rng, 1, 2, T, T, d, d)
    with gpu():
        ins = [tl.tensor(a, device="cuda").astype(dtype).detach().requires_grad_() for a in arrays]
        g = tl.tensor(np.ones((1, T, 2, d)), device="cuda").astype(dtype)
        params = dict(scale=0.5, causal=True, mask=None, dropout_mask=None)
        fake_cupy.KERNELS.clear()
        y = AttentionFn.apply(*ins, **params)
        forward = dict(fake_cupy.KERNELS)
        kept = [a for a in y.grad_fn.flash.values() if hasattr(a, "size")]
        fake_cupy.KERNELS.clear()
        y.backward(g)
        backward = dict(fake_cupy.KERNELS)
    assert forward == {"attention_forward" + end: 1}  # (half: the output rounded by it)
    assert backward == {"attention_backward_dq" + end: 1, "attention_backward_dkdv" + end: 1}
    assert kept and max(a.size for a in kept) < T * T


@emulated
def test_the_grid_stays_within_cudas_limits():
    """70,000 sequences of 2 heads: the (batch, head) pairs go on the grid's x axis (up to
    2³¹ - 1 blocks), the tiles of rows on y (65,535 at most, 2 million rows): a grid with the
    batch on z would be refused at launch. (The launches are recorded here, not run: the
    kernels' decoding of b and h from x is what the other tests run.)"""
    grids = []
    real = flash_attention.kernels

    def recording(*key):
        record = lambda grid, block, args: grids.append(grid)  # noqa: E731
        return {**real(*key), "forward": record, "dq": record, "dkdv": record}

    with gpu(), pytest.MonkeyPatch.context() as mp:
        mp.setattr(flash_attention, "kernels", recording)
        ins = [tl.zeros((70_000, 3, 2, 4), device="cuda", requires_grad=True) for _ in range(3)]
        y = AttentionFn.apply(*ins, scale=1.0, causal=True, mask=None, dropout_mask=None)
        y.backward(tl.zeros(y.shape, device="cuda"))
    assert grids == [(140_000, 1)] * 3


def test_tile_fits_shared_memory():
    """The backward's largest block (TILE rows of k and v padded, of q and g, three numbers a
    row) fits in 48 KiB for every head width up to 256, with 32 threads where it can."""
    for d in (1, 8, 32, 64, 95, 96, 100, 128, 256):  # (95, 96: the edge of 32 rows in float32)
        for itemsize in (4, 8):
            tile = flash_attention.tile_rows(d, d, itemsize)
            assert tile * (4 * d + 5) * itemsize <= flash_attention.SHARED_BYTES
            assert tile == 32 or 2 * tile * (4 * d + 5) * itemsize > flash_attention.SHARED_BYTES
    assert flash_attention.tile_rows(64, 64, 4) == 32


def test_tensor_core_tiles_fit_shared_memory():
    """The tensor-core kernels run for float16 and bfloat16 with widths that are multiples of
    16, with the largest tiles whose blocks fit in 48 KiB (the forward's 64 q rows and a tile
    of k and v rows, the backward's 64 rows of its side and a tile of the other, rows padded by
    8 values, three floats a row); the CUDA-core kernels run elsewhere."""
    for d, d_v in [(16, 16), (32, 16), (64, 64), (96, 96), (128, 128), (128, 64)]:
        keys, tile = flash_attention.mma_tiles("bfloat16", d, d_v)
        assert (64 * (d + 8) + keys * (d + d_v + 16)) * 2 <= flash_attention.SHARED_BYTES
        assert (64 + tile) * (d + d_v + 16) * 2 + 12 * tile <= flash_attention.SHARED_BYTES
    assert flash_attention.mma_tiles("float16", 64, 64) == (64, 64)
    assert flash_attention.mma_tiles("bfloat16", 128, 128) == (32, 16)
    for dtype, d, d_v in [("float32", 64, 64), ("float64", 64, 64), ("bfloat16", 8, 8),
                          ("bfloat16", 64, 40), ("float16", 256, 256)]:  # fmt: skip
        assert flash_attention.mma_tiles(dtype, d, d_v) is None


NVRTC = None if not cuda_compile.unavailable() else cuda_compile.unavailable()


@pytest.mark.skipif(
    NVRTC is not None or os.environ.get("TENSORLAB_TEST_DEVICE") == "fake-cuda",
    reason=str(NVRTC or "the emulated GPU's cupy module is not CuPy"),
)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("widths", [(64, 64), (96, 96), (128, 128), (8, 4), (3, 5)])
def test_kernels_compile_for_an_h100(dtype, widths):
    """NVRTC compiles the three kernels for sm_90 with the options the runner passes (the
    tile chosen for the widths): types, shared memory within the limit (ptxas refuses more;
    at width 96 in float32 the tile of 32 rows would need 49,792 bytes of 49,152)."""
    options = flash_attention.options(dtype, *widths)
    cubin = cuda_compile.compile_cubin(flash_attention.SOURCE, "flash_attention", options=options)
    for name in ("attention_forward", "attention_backward_dq", "attention_backward_dkdv"):
        assert name.encode() in cubin
