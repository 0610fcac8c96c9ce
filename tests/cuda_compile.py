"""The library's fused GPU kernels traced by CuPy and compiled by NVRTC, on a machine with no GPU.

``tensorlab/fused.py`` hands each kernel's Python function to ``cupy.fuse``, which traces it into
CUDA code and compiles that with NVRTC on first use. Without a GPU neither step ever ran: a
kernel that CuPy cannot trace, or whose CUDA code does not compile, would fail on the first GPU
it met. Neither step needs a GPU, only CuPy and NVRTC (both libraries import without a driver),
so this module runs them here:

1. :func:`trace` runs CuPy's fusion, the one ``cupy.fuse`` tries first (``_FusionHistory``),
   on arrays that have a shape, a dtype and an address but no memory (:func:`placeholder`);
   tracing reads only their dtypes and numbers of axes. The result is CuPy's
   ``ElementwiseKernel``: its parameters (dtypes; ``is_const`` false for an array the kernel
   updates), its operation and its preamble, the CUDA code of each ufunc used.
2. :func:`source` wraps that operation in a ``__global__`` function that binds element ``i`` of
   each array parameter by reference, as CuPy's ``ElementwiseKernel`` does, with CuPy's headers.
3. :func:`compile_cubin` compiles it with NVRTC for a given GPU architecture (sm_90, the H100).

What this cannot show: the numbers the kernel computes (the NumPy run of the same function,
``TENSORLAB_TEST_DEVICE=fake-cuda``, checks the arithmetic) and launch-time errors.

Needs ``pip install -e ".[cuda-compile]"`` (CuPy, NVRTC and the CUDA runtime headers, about
230 MB; no GPU and no driver). ``tests/tensorlab/test_fused_compiles.py`` skips without it.
"""

from __future__ import annotations

import numpy as np

ARCH = "90"  # NVIDIA H100 (the GPU this project's GPU sessions get)
_ADDRESS = 0x10000  # never dereferenced: no kernel is launched


def unavailable() -> str | None:
    """Why kernels cannot be compiled here (a reason to skip), or None when they can."""
    try:
        import cupy  # noqa: F401
        from cupy.cuda import nvrtc

        nvrtc.getVersion()
    except Exception as e:  # not installed, or NVRTC's library not found
        return f"CuPy with NVRTC is needed (pip install -e '.[cuda-compile]'): {e}"
    return None


def placeholder(shape: tuple[int, ...], dtype) -> object:
    """A ``cupy.ndarray`` of this shape and dtype on memory that is never read or written."""
    import cupy
    from cupy.cuda import memory

    dtype = np.dtype(dtype)
    size = max(1, int(np.prod(shape)) * dtype.itemsize)
    mem = memory.UnownedMemory(_ADDRESS, size, None, device_id=0)
    return cupy.ndarray(shape, dtype, memptr=memory.MemoryPointer(mem, 0))


def trace(kernel, args: tuple):
    """CuPy's ``ElementwiseKernel`` for ``kernel`` (a :class:`tensorlab.fused.fused`) called
    with ``args``: what ``cupy.fuse`` builds on the first call (:func:`tensorlab.fused.trace`).
    Raises what CuPy's fusion raises when it cannot trace the function."""
    from tensorlab.fused import trace

    return trace(kernel.math, args, kernel.__name__)


def source(elementwise, args: tuple) -> str:
    """A CUDA source file for a traced kernel: CuPy's headers, the ufuncs' code, and a grid-
    stride loop that binds element ``i`` of each array argument and runs the operation."""
    import cupy
    from cupy._core import core

    params, binds = [], []
    for p, a in zip(elementwise.in_params, args):
        const = "const " if p.is_const else ""
        if isinstance(a, cupy.ndarray):
            params.append(f"{const}{p.ctype}* _raw_{p.name}")
            binds.append(f"    {const}{p.ctype} &{p.name} = _raw_{p.name}[i];")
        else:  # a Python number: passed by value
            params.append(f"{p.ctype} {p.name}")
    for p in elementwise.out_params:
        params.append(f"{p.ctype}* _raw_{p.name}")
        binds.append(f"    {p.ctype} &{p.name} = _raw_{p.name}[i];")
    headers = "".join(f"#include <{h}>\n" for h in core._cupy_header_list)
    loop = (
        "  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;\n"
        "       i += (long long)blockDim.x * gridDim.x) {\n"
    )
    return (
        f"{headers}{elementwise.preamble}\n"
        f'extern "C" __global__ void {elementwise.name}({", ".join(params)}, long long n) {{\n'
        f"{loop}" + "\n".join(binds) + f"\n{elementwise.operation}\n  }}\n}}\n"
    )


def compile_cubin(code: str, name: str, arch: str = ARCH, options: tuple = ()) -> bytes:
    """NVRTC's cubin for ``code``, with the options CuPy compiles its kernels with and
    ``options`` (a ``RawModule``'s, such as ``-D`` definitions). Raises CuPy's
    ``CompileException`` (NVRTC's log) when the code does not compile."""
    from cupy._core import core
    from cupy.cuda import compiler

    options = core.assemble_cupy_compiler_options(tuple(options)) + (f"-arch=sm_{arch}",)
    program = compiler._NVRTCProgram(code, f"{name}.cu", (), (), method="cubin")
    return program.compile(options)[0]
