"""The CUDA emulator (tests/cuda_emulator.py): CUDA kernels compiled by g++ and run on the CPU.

These test the emulator itself (indices, barriers, shuffles, the race detector, the half and
bfloat16 conversions, the tensor-core instruction's stand-in, argument checks, the cache) on
small kernels written here.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from tests import cuda_emulator as ce

pytestmark = pytest.mark.skipif(ce.unavailable() is not None, reason=str(ce.unavailable()))

KERNELS = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>

extern "C" __global__ void add(const float* x, const float* y, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    out[i] = x[i] + y[i];
}

// The sum of each block's BLOCK doubles: a tree in shared memory, a barrier per level.
extern "C" __global__ void __launch_bounds__(BLOCK) block_sum(const double* x, double* out) {
  __shared__ double s[BLOCK];
  const unsigned t = threadIdx.x;
  s[t] = x[blockIdx.x * BLOCK + t];
  __syncthreads();
  for (unsigned k = BLOCK / 2; k > 0; k >>= 1) {
    if (t < k) s[t] += s[t + k];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// A race: each thread reads the slot its neighbour writes, with no barrier in between.
extern "C" __global__ void neighbour(int* out) {
  __shared__ int s[33];
  const int t = threadIdx.x;
  s[t] = -1;
  if (t == 0) s[32] = -1;
  __syncthreads();
  s[t] = t;
  out[t] = s[t + 1];
}

// A divergent barrier: the upper half of the block returns, the lower half waits.
extern "C" __global__ void divergent(int* out) {
  if (threadIdx.x < 16) __syncthreads();
  out[threadIdx.x] = 1;
}

extern "C" __global__ void times3_half(const __half* x, __half* out, long long n) {
  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    out[i] = __float2half(__half2float(x[i]) * 3.0f);
}

extern "C" __global__ void times3_bf16(const __nv_bfloat16* x, __nv_bfloat16* out,
                                       long long n) {
  for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x)
    out[i] = __float2bfloat16(__bfloat162float(x[i]) * 3.0f);
}

extern "C" __global__ void narrow(const float* x, __half* h, __nv_bfloat16* b, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    h[i] = __float2half_rn(x[i]);
    b[i] = __float2bfloat16_rn(x[i]);
  }
}

extern "C" __global__ void widen(const __half* h, const __nv_bfloat16* b, float* hf, float* bf,
                                 int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    hf[i] = __half2float(h[i]);
    bf[i] = __bfloat162float(b[i]);
  }
}

// Each thread writes blockIdx, threadIdx, blockDim and gridDim at its global position.
extern "C" __global__ void indices(int* out) {
  const long long block = blockIdx.x + gridDim.x * (blockIdx.y + (long long)gridDim.y * blockIdx.z);
  const long long thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  int* o = out + 12 * (block * blockDim.x * blockDim.y * blockDim.z + thread);
  const unsigned v[12] = {blockIdx.x, blockIdx.y, blockIdx.z, threadIdx.x, threadIdx.y,
                          threadIdx.z, blockDim.x, blockDim.y, blockDim.z,
                          gridDim.x, gridDim.y, gridDim.z};
  for (int k = 0; k < 12; ++k) o[k] = (int)v[k];
}

// Warp sums two ways (butterfly and tree), then the block's sum with an atomic.
extern "C" __global__ void warp_sums(const float* x, float* butterfly, float* tree, float* total) {
  const int t = threadIdx.x;
  float a = x[t], b = x[t];
  for (int offset = 16; offset > 0; offset >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, offset);
    b += __shfl_down_sync(0xffffffffu, b, offset);
  }
  butterfly[t] = a;
  if (t % 32 == 0) {
    tree[t / 32] = b;
    atomicAdd(total, b);
  }
}

// Shuffles in one half of a warp only: the other half has returned.
extern "C" __global__ void half_warp_shuffle(float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffu, 1.0f, 1);
}

// Reads shared memory before any thread of the block has written it.
extern "C" __global__ void unwritten(float* out) {
  __shared__ float s[64];
  out[blockIdx.x * 64 + threadIdx.x] = s[threadIdx.x];
  s[threadIdx.x] = 1.0f;
}

extern "C" __global__ void first_or(const float* p, float* out) { out[0] = p ? p[0] : -1.0f; }

extern "C" __global__ void scalars(double* out, double d, float f, long long q, int i,
                                   unsigned char u, bool b) {
  out[0] = d; out[1] = f; out[2] = (double)q; out[3] = i; out[4] = u; out[5] = b;
  out[6] = min(i, 3); out[7] = max(q, 10LL); out[8] = fmaxf(f, 0.0f); out[9] = rsqrtf(4.0f);
}
"""


@pytest.fixture(scope="module")
def module():
    return ce.Module(KERNELS, options=("-arch=sm_90", "--std=c++17", "-DBLOCK=256"))


@pytest.mark.parametrize(
    "grid, block", [(1, 1), (3, 128), ((2,), (64,)), ((4, 1, 1), (32, 1, 1)), (50, 32)]
)
def test_vector_add(module, grid, block):
    rng = np.random.default_rng(0)
    n = 1000
    x, y = rng.standard_normal(n, dtype=np.float32), rng.standard_normal(n, dtype=np.float32)
    out = np.full(n, np.nan, np.float32)
    module.get_function("add")(grid, block, (x, y, out, np.int32(n)))
    np.testing.assert_array_equal(out, x + y)


def test_arrays_are_passed_as_the_address_of_their_first_element(module):
    class Wrapped:  # as tests/fake_cupy.ndarray: the data in `_a`
        def __init__(self, a):
            self._a = a

    x = np.arange(40, dtype=np.float32).reshape(2, 20)
    out = np.zeros(10, np.float32)
    # views that start inside an array (the kernel reads 10 elements from there), wrapped
    module.get_function("add")(1, 32, (x[0, 3:], Wrapped(x[1, 10:]), out, np.int32(10)))
    np.testing.assert_array_equal(out, np.arange(3, 13) + np.arange(30, 40))


def tree_sum(x: np.ndarray) -> np.ndarray:
    """The block_sum kernel's order of additions, in NumPy (the same doubles, bit for bit)."""
    s = x.copy()
    k = s.shape[1] // 2
    while k:
        s[:, :k] += s[:, k : 2 * k]
        k //= 2
    return s[:, 0]


def test_block_reduction_with_barriers(module):
    x = np.random.default_rng(1).standard_normal((40, 256))
    kernel = module.get_function("block_sum")
    out, out_reversed = np.zeros(40), np.zeros(40)
    kernel((40,), (256,), (x, out))
    kernel((40,), (256,), (x, out_reversed), reverse=True)
    np.testing.assert_array_equal(out, tree_sum(x))
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-12)
    np.testing.assert_array_equal(out_reversed, out)  # barriers in the right places: no race


def test_a_race_gives_different_results_in_reverse_order(module):
    kernel = module.get_function("neighbour")
    forward, backward = np.zeros(32, np.int32), np.zeros(32, np.int32)
    kernel(1, 32, (forward,))
    kernel(1, 32, (backward,), reverse=True)
    # forward: thread t runs before t + 1 writes; reversed: after
    np.testing.assert_array_equal(forward, np.full(32, -1))
    np.testing.assert_array_equal(backward, [*range(1, 32), -1])


def test_a_divergent_barrier_is_an_error(module):
    out = np.zeros(32, np.int32)
    with pytest.raises(RuntimeError, match=r"threadIdx.x 16\.\.31\) returned.*__syncthreads"):
        module.get_function("divergent")(1, 32, (out,))
    # the module is still usable
    module.get_function("neighbour")(1, 32, (out,))
    np.testing.assert_array_equal(out, np.full(32, -1))


def special_floats() -> np.ndarray:
    """float32 values where rounding to float16 and bfloat16 is hard: every tie between
    neighbouring half and bfloat16 values, one float ulp either side of them, subnormals,
    overflow, infinities, NaN, plus random bit patterns."""
    halves = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    bfloats = np.arange(0x7F80, dtype=np.uint32)
    bfloats = (bfloats << 16).view(np.float32).astype(np.float64)
    ties = np.concatenate([(halves[:-1] + halves[1:]) / 2, (bfloats[:-1] + bfloats[1:]) / 2])
    ties = ties.astype(np.float32)  # exact: 12 and 9 significant bits
    near = np.concatenate([np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf)])
    edges = [65504, 65519.99, 65520, 65536, 3.4e38, np.inf, np.nan, 2.0**-24, 2.0**-25, 0.0]
    random = np.random.default_rng(2).integers(0, 2**32, 200_000, dtype=np.uint32)
    x = np.concatenate([ties, near, np.array(edges, np.float32), random.view(np.float32)])
    return np.concatenate([x, -x]).astype(np.float32)


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    """Equal bit patterns, except that any NaN matches any NaN."""
    nan = np.isnan(expected.astype(np.float32))
    np.testing.assert_array_equal(np.isnan(actual.astype(np.float32)), nan)
    np.testing.assert_array_equal(actual.view(np.uint16)[~nan], expected.view(np.uint16)[~nan])


def test_float_to_half_and_bfloat16_round_to_nearest_even(module):
    bfloat16 = pytest.importorskip("ml_dtypes").bfloat16
    x = special_floats()
    h, b = np.empty(x.size, np.float16), np.empty(x.size, bfloat16)
    module.get_function("narrow")(64, 256, (x, h, b, np.int32(x.size)))
    with np.errstate(over="ignore", invalid="ignore"):
        assert_same_bits(h, x.astype(np.float16))
        assert_same_bits(b, x.astype(bfloat16))


def test_half_and_bfloat16_to_float_are_exact(module):
    bfloat16 = pytest.importorskip("ml_dtypes").bfloat16
    bits = np.arange(2**16, dtype=np.uint16)  # every pattern
    h, b = bits.view(np.float16), bits.view(bfloat16)
    hf, bf = np.empty(h.size, np.float32), np.empty(h.size, np.float32)
    module.get_function("widen")(64, 256, (h, b, hf, bf, np.int32(h.size)))
    for actual, expected in ((hf, h.astype(np.float32)), (bf, b.astype(np.float32))):
        nan = np.isnan(expected)
        np.testing.assert_array_equal(np.isnan(actual), nan)
        np.testing.assert_array_equal(actual.view(np.uint32)[~nan], expected.view(np.uint32)[~nan])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_and_bfloat16_arrays_round_trip(module, dtype):
    if dtype == "bfloat16":
        ml_dtypes = pytest.importorskip("ml_dtypes")
        dtype, finfo = ml_dtypes.bfloat16, ml_dtypes.finfo(ml_dtypes.bfloat16)
        kernel = module.get_function("times3_bf16")
    else:
        dtype, finfo = np.float16, np.finfo(np.float16)
        kernel = module.get_function("times3_half")
    # subnormals (3 * tiny is exact, 100 * tiny rounds), max / 3 (rounds), overflow to inf
    tiny, big = float(finfo.smallest_subnormal), float(finfo.max)
    values = [0.0, 1.0, -2.5, tiny, 3 * tiny, 100 * tiny, big, big / 3, np.inf, -np.inf, np.nan]
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [np.array(values), rng.standard_normal(5000) * 10.0 ** rng.integers(-8, 6, 5000)]
    )
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
        expected = (x.astype(np.float32) * np.float32(3)).astype(dtype)
    out = np.empty_like(x)
    kernel(8, 128, (x, out, np.int64(x.size)))
    assert_same_bits(out, expected)


@pytest.mark.parametrize(
    "grid, block", [((3, 2), (4, 8)), ((2, 3, 2), (4, 2, 3)), ((1, 1, 5), (1, 7, 1))]
)
def test_2d_and_3d_indices(module, grid, block):
    g, b = (*grid, 1, 1)[:3], (*block, 1, 1)[:3]
    out = np.full((g[2], g[1], g[0], b[2], b[1], b[0], 12), -1, np.int32)
    module.get_function("indices")(grid, block, (out,))
    bz, by, bx, tz, ty, tx = np.meshgrid(
        *(np.arange(n) for n in (*g[::-1], *b[::-1])), indexing="ij"
    )
    expected = np.stack([bx, by, bz, tx, ty, tz, *(np.full_like(bx, n) for n in (*b, *g))], axis=-1)
    np.testing.assert_array_equal(out, expected)


def test_warp_shuffles_and_atomics(module):
    x = np.arange(128, dtype=np.float32)
    warps = x.reshape(4, 32).sum(axis=1)
    for reverse in (False, True):
        butterfly, tree, total = (
            np.zeros(128, np.float32),
            np.zeros(4, np.float32),
            np.zeros(1, np.float32),
        )
        module.get_function("warp_sums")(1, 128, (x, butterfly, tree, total), reverse=reverse)
        np.testing.assert_array_equal(butterfly, np.repeat(warps, 32))
        np.testing.assert_array_equal(tree, warps)
        np.testing.assert_array_equal(total, [x.sum()])


def test_a_shuffle_without_the_whole_warp_is_an_error(module):
    with pytest.raises(RuntimeError, match="warp function"):
        module.get_function("half_warp_shuffle")(1, 32, (np.zeros(32, np.float32),))


def test_shared_memory_holds_garbage_when_a_block_starts(module):
    out = np.zeros(3 * 64, np.float32)
    module.get_function("unwritten")(3, 64, (out,))
    assert np.isnan(out).all()  # each block, not only the first


def test_scalars_are_passed_by_value_with_their_c_type(module):
    out = np.zeros(10)
    args = (out, np.float64(0.1), np.float32(0.1), np.int64(2**40), np.int32(-7), np.uint8(200))
    module.get_function("scalars")(1, 1, (*args, np.bool_(True)))
    f = np.float32(0.1)
    np.testing.assert_array_equal(out, [0.1, f, 2**40, -7, 200, 1, -7, 2**40, f, 0.5])


def test_an_integer_scalar_for_a_pointer_is_an_address(module):
    out = np.zeros(1, np.float32)
    module.get_function("first_or")(1, 1, (np.uint64(0), out))  # a null pointer
    assert out[0] == -1
    x = np.array([5.0], np.float32)
    module.get_function("first_or")(1, 1, (np.uint64(x.ctypes.data), out))
    assert out[0] == 5


def test_arguments_are_checked(module):
    add = module.get_function("add")
    x, out = np.zeros(4, np.float32), np.zeros(4, np.float32)
    with pytest.raises(TypeError, match=r"'add' takes 4 arguments \(const float\*, .*got 3"):
        add(1, 4, (x, x, out))
    with pytest.raises(TypeError, match=r"'add', argument 1 \(const float\*\): expected an array"):
        add(1, 4, (x, np.float32(1), out, np.int32(4)))
    with pytest.raises(TypeError, match=r"'add', argument 3 \(int\): a Python int is ambiguous"):
        add(1, 4, (x, x, out, 4))
    with pytest.raises(TypeError, match=r"'add', argument 3 \(int\): expected a 4-byte .*int64"):
        add(1, 4, (x, x, out, np.int64(4)))
    with pytest.raises(TypeError, match=r"'add', argument 3 \(int\): expected .*float32"):
        add(1, 4, (x, x, out, np.float32(4)))
    with pytest.raises(TypeError, match=r"'add', argument 2 \(float\*\): an array of float64"):
        add(1, 4, (x, x, out.astype(np.float64), np.int32(4)))
    with pytest.raises(TypeError, match=r"'add', argument 0 .*expected an array, got list"):
        add(1, 4, ([0.0] * 4, x, out, np.int32(4)))
    with pytest.raises(ValueError, match="more than 1024 threads"):
        add(1, (64, 32), (x, x, out, np.int32(4)))


def test_compile_errors_and_defines():
    code = 'extern "C" __global__ void k(int* out) { out[0] = VALUE; }'
    with pytest.raises(ce.CompileError, match="VALUE"):
        ce.Module(code).get_function("k")
    out = np.zeros(1, np.int32)
    ce.Module(code, options=("-DVALUE=42",)).get_function("k")(1, 1, (out,))
    assert out[0] == 42


def test_a_module_is_compiled_once():
    code = f"// {uuid.uuid4()}\n" + 'extern "C" __global__ void k(int* out) { out[0] = 7; }'
    before = ce.STATS["compiles"]
    first = ce.Module(code)
    first.get_function("k")
    assert ce.STATS["compiles"] == before + 1 and first.path.exists()
    second = ce.Module(code)
    second.get_function("k")(1, 1, (out := np.zeros(1, np.int32),))
    assert ce.STATS["compiles"] == before + 1 and second.path == first.path and out[0] == 7
    third = ce.Module(code, options=("-DOTHER",))
    third.get_function("k")
    assert ce.STATS["compiles"] == before + 2 and third.path != first.path


def test_modules_loaded_together_keep_their_own_state(module):
    # another module with shared memory and barriers, launched in turns with the first
    other = ce.Module(
        'extern "C" __global__ void rotate(int* out) {\n'
        "  __shared__ int s[64];\n"
        "  s[threadIdx.x] = blockIdx.x * 100 + threadIdx.x;\n"
        "  __syncthreads();\n"
        "  out[blockIdx.x * blockDim.x + threadIdx.x] = s[(threadIdx.x + 1) % blockDim.x];\n"
        "}\n"
    ).get_function("rotate")
    x = np.random.default_rng(4).standard_normal((3, 256))
    for _ in range(3):
        out = np.zeros(3 * 48, np.int32)
        other(3, 48, (out,))
        sums = np.zeros(3)
        module.get_function("block_sum")(3, 256, (x, sums))
        t = np.arange(48)
        np.testing.assert_array_equal(
            out.reshape(3, 48), np.arange(3)[:, None] * 100 + (t + 1) % 48
        )
        np.testing.assert_array_equal(sums, tree_sum(x))


def test_printf(capfd):
    code = r'extern "C" __global__ void hello() { printf("thread %u\n", threadIdx.x); }'
    ce.Module(code).get_function("hello")(1, 3, ())
    assert capfd.readouterr().out == "thread 0\nthread 1\nthread 2\n"


MMA = r"""
#include <cuda_fp16.h>
// One warp: D = A B + C for A (16, 16) and B (16, 8) in 16-bit values, C and D (16, 8) float,
// each lane loading its registers from row-major arrays as the PTX ISA lays out the
// fragments of mma.m16n8k16 (lane = 4 g + t), then writing its four values of D back.
extern "C" __global__ void mma(const unsigned short* A, const unsigned short* B,
                               const float* C, float* D) {
  const int lane = threadIdx.x, g = lane / 4, t = lane % 4;
  auto two = [](unsigned short lo, unsigned short hi) { return lo | (unsigned)hi << 16; };
  const unsigned a[4] = {two(A[g * 16 + 2 * t], A[g * 16 + 2 * t + 1]),
                         two(A[(g + 8) * 16 + 2 * t], A[(g + 8) * 16 + 2 * t + 1]),
                         two(A[g * 16 + 2 * t + 8], A[g * 16 + 2 * t + 9]),
                         two(A[(g + 8) * 16 + 2 * t + 8], A[(g + 8) * 16 + 2 * t + 9])};
  const unsigned b[2] = {two(B[(2 * t) * 8 + g], B[(2 * t + 1) * 8 + g]),
                         two(B[(2 * t + 8) * 8 + g], B[(2 * t + 9) * 8 + g])};
  float d[4] = {C[g * 8 + 2 * t], C[g * 8 + 2 * t + 1], C[(g + 8) * 8 + 2 * t],
                C[(g + 8) * 8 + 2 * t + 1]};
  emu_mma_16816<MMA_BF16>(d, a, b);
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}
"""


@pytest.mark.parametrize("bf16", [0, 1], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("reverse", [False, True])
def test_the_tensor_core_instruction_multiplies_its_fragments(bf16, reverse):
    """emu_mma_16816 (the stand-in for mma.sync.m16n8k16 that nn/flash_attention.cu uses
    here): the lanes' registers, laid out as the PTX ISA gives, multiply as A B + C in float
    (exact products of 16-bit values, float sums: to float rounding), in either thread order."""
    from tensorlab.backend import BFLOAT16

    if bf16 and BFLOAT16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    dtype = BFLOAT16 if bf16 else np.float16
    rng = np.random.default_rng(bf16)
    A = rng.standard_normal((16, 16)).astype(dtype)
    B = rng.standard_normal((16, 8)).astype(dtype)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    D = np.zeros((16, 8), np.float32)
    kernel = ce.Module(MMA, (f"-DMMA_BF16={bf16}",)).get_function("mma")
    kernel((1,), (32,), (A.view(np.uint16), B.view(np.uint16), C, D), reverse=reverse)
    want = A.astype(np.float64) @ B.astype(np.float64) + C
    np.testing.assert_allclose(D, want, rtol=1e-6, atol=1e-5)
