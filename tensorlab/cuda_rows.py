"""Row formulas on a GPU: the C runner's per-row program written as one CUDA kernel.

A row formula (layer norm, RMS norm, cross-entropy: :class:`tensorlab.fused.fused` with
``rows=True``) reduces over the last axis, and ``cupy.fuse`` cannot fuse work that follows a
reduction: as CuPy's operations one by one, a layer norm was 12 launches forward and 13
backward. The C runner (:mod:`tensorlab.c_runner`) already traces such a formula into one
program per row: each reduction a loop over the row, the per-row values computed once, a
last loop that computes and writes the outputs. This module writes the same traced program
as CUDA (:class:`_CudaWriter`, a subclass of the C writer) and launches it through CuPy
(compiled by NVRTC at the first launch, once per source): one thread block per row, each loop
over the row's columns strided over the block's threads, each reduction finished by the
block in shared memory. One launch each way, from the one Python function.

A fused op's float16/bfloat16 arrays are read as float in the kernel and its float32 outputs
along the rows written rounded to nearest even (but what a forward saves, float32 for the
backward, and one number per row, a loss): no cast launched on either side.
"""

from __future__ import annotations

import functools

import numpy as np

from tensorlab import backend
from tensorlab.c_runner import (
    _C,
    NOT_COMPILED,
    Node,
    _is_array,
    _kw_key,
    _results,
    _rows_view,
    _signature,
    _strong,
    _Writer,
)

# float16 and bfloat16 arrays: (the CUDA type, how a number is read as float, how a float is
# written rounded to nearest even)
_HALF = {np.dtype(np.float16): ("__half", "__half2float", "__float2half_rn")}
if backend.BFLOAT16 is not None:
    _HALF[backend.BFLOAT16] = ("__nv_bfloat16", "__bfloat162float", "__float2bfloat16_rn")
_HALF_TYPES = {ctype: (read, write) for ctype, read, write in _HALF.values()}

# The per-row program as CUDA: one thread block per row, THREADS threads. Each loop over the
# row's columns is strided over the block's threads (column j by thread j mod THREADS), and
# each reduction adds its threads' partial sums (or maxima) in shared memory, in a tree whose
# order does not depend on timing, so every thread gets the row's value. What is per row
# (1/σ, a gathered logit) is computed by every thread from those values; thread 0 writes the
# per-row outputs.
THREADS = 128  # threads per block (a power of two: the reductions halve it; read when a
# kernel's source is written: tests/fake_cupy.py's emulation takes 8, fewer fibers to run)

_PRELUDE = """#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
/* The block's sum (or maximum) of each thread's v, in every thread. The partial values sit
   in shared memory; the last barrier lets the next reduction reuse it. */
template <typename T> __device__ T tl_block_sum(T v) {
  __shared__ T part[TL_THREADS];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int s = TL_THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  const T total = part[0];
  __syncthreads();
  return total;
}
template <typename T> __device__ T tl_block_max(T v) {
  __shared__ T part[TL_THREADS];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int s = TL_THREADS / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s && part[threadIdx.x + s] > part[threadIdx.x])
      part[threadIdx.x] = part[threadIdx.x + s];
    __syncthreads();
  }
  const T top = part[0];
  __syncthreads();
  return top;
}
"""


class _CudaWriter(_Writer):
    """CUDA source of one traced signature (see above): the C writer's program, with each
    loop over the columns strided over the block's threads and each reduction finished by the
    block. The block size is the one THREADS held when the source was written."""

    EXPF = "expf"  # CUDA's
    HALF = _HALF

    def __init__(self, *args):
        super().__init__(*args)
        self.threads = THREADS

    def loop(self, pragma, body) -> None:
        self.lines.append("    for (long long j = threadIdx.x; j < d; j += blockDim.x) {")
        body(None)
        self.lines.append("    }")

    def outside_row(self, value: str, ctype: str) -> str:
        """An index outside the row gives NaN (no error without a host wait; the callers,
        cross-entropy, check their indices first)."""
        return f"{value} = ({ctype})NAN;"

    def read(self, ctype: str, element: str) -> str:
        """A float16/bfloat16 element read as float (the kernel computes in float32)."""
        half = _HALF_TYPES.get(ctype)
        return element if half is None else f"{half[0]}({element})"

    def written(self, ctype: str, value: str) -> str:
        """A float written to a float16/bfloat16 output rounded to nearest even."""
        half = _HALF_TYPES.get(ctype)
        return value if half is None else f"{half[1]}({value})"

    def row_node(self, node: Node) -> None:
        out, t = self.lines, _C[_strong(node.t)]
        if node.op not in ("sum", "mean", "max"):
            return super().row_node(node)
        (x,) = node.args
        acc, top = f"a{node.n}", node.op == "max"
        out.append(f"    {t} {acc} = {'-INFINITY' if top else '0'};")
        if top:  # and how many NaN the thread saw: NaN wins, as in NumPy
            out.append(f"    int nan{node.n} = 0;")

        def accumulate(keep):
            self.store_outputs(self.elementwise([x], "j", "      "), "      ")
            value = self.use(x, node.t, "j")
            if top:
                out.append(f"      const {t} v = {value};")
                out.append(f"      {acc} = v > {acc} ? v : {acc};")
                out.append(f"      nan{node.n} += v != v;")
            else:
                out.append(f"      {acc} += {value};")

        self.loop(None, accumulate)
        if top:
            out.append(f"    {acc} = tl_block_max({acc});")
            out.append(f"    const {t} r{node.n} = tl_block_sum(nan{node.n}) ? ({t})NAN : {acc};")
        else:
            scale = f" * ({t})(1.0 / (double)d)" if node.op == "mean" else ""
            out.append(f"    const {t} r{node.n} = tl_block_sum({acc}){scale};")

    def opening(self, name: str, params: str) -> list[str]:
        return [
            f'extern "C" __global__ void {name}({params}) {{',
            "  for (long long r = blockIdx.x; r < R; r += gridDim.x) {",
        ]

    def closing(self, writes: list[str]) -> list[str]:
        wait = []
        if any(self.arrays[k][2] for k, _ in self.stores):  # (a per-row argument updated)
            wait = ["    __syncthreads();  // (every thread has read the row's old values)"]
        body = [f"      {w}" for w in writes]
        return [*wait, "    if (threadIdx.x == 0) {", *body, "    }\n  }\n}\n"]

    def prelude(self) -> str:
        types = {ctype for _, ctype, _ in self.arrays} | set(self.out_ctypes)
        headers = "#include <cuda_fp16.h>\n" if "__half" in types else ""
        headers += "#include <cuda_bf16.h>\n" if "__nv_bfloat16" in types else ""
        return f"{headers}#define TL_THREADS {self.threads}\n" + _PRELUDE


_PARAM_TYPES = {"b": np.uint8, "i": np.int64, "f": np.float32, "d": np.float64}


@functools.cache
def _cuda_kernel(source: str, name: str):  # pragma: no cover - needs a GPU (or its emulation)
    """The kernel ``name`` of ``source``, compiled by CuPy (NVRTC) once per source."""
    return backend.cupy.RawModule(code=source).get_function(name)


def run_cuda(kernel, args: tuple, kw: dict, half=None):
    """``kernel.math`` on CuPy arrays as one CUDA kernel, the C runner's row program written
    for a GPU (:class:`_CudaWriter`: a thread block per row), or :data:`NOT_COMPILED` where
    this signature cannot be traced. An index outside the row
    (cross-entropy's targets, which its caller checks) gives NaN, not an error: no host wait.
    A fused op's kernel (``kernel.widen``) reads float16/bfloat16 arrays itself, as float,
    and writes its float32 outputs along the rows in ``half`` (None: float32), but the last
    ``kernel.keep``: no cast before or after it."""
    cupy = backend.cupy
    shapes = tuple([(a.shape, a.dtype) if _is_array(a) else type(a) for a in args])
    found = _signature(kernel, args, kw, ("cuda", shapes, _kw_key(kw)), _CudaWriter, half)
    if found is NOT_COMPILED:
        return NOT_COMPILED
    compiled, numbers, full, R, d = found
    call, views = [np.int64(R), np.int64(d)], []
    for a, lay in zip(args, compiled.layout):
        if lay is not None:
            view, stride = _rows_view(a, lay[1], full, R, d)
            call += (view, np.int64(stride))
            views.append((a, view))
    if any(views[k][1] is not views[k][0] for k, _ in compiled.stores):
        return NOT_COMPILED  # (an argument updated in place through a copy: CuPy's operations)
    outs = [cupy.empty(shape, dtype) for shape, dtype in compiled.out_shapes(full)]
    call += outs
    call += [_PARAM_TYPES[t](v) for t, v in zip(compiled.param_types, numbers)]
    if R:
        launch = _cuda_kernel(compiled.source, compiled.name)
        launch((min(R, 2**31 - 1),), (compiled.form.threads,), tuple(call))
    return _results(compiled, outs, views)
