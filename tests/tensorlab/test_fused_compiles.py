"""Every fused GPU kernel of the library is traced by CuPy and compiled for an H100 by NVRTC,
on this machine, without a GPU (tests/cuda_compile.py says how).

The NumPy runs of the same functions check their arithmetic (tests/nn, and the whole suite under
``TENSORLAB_TEST_DEVICE=fake-cuda``); this checks what only CuPy and NVRTC can: that CuPy's
fusion accepts the function, that the kernel keeps its inputs' dtype, that it writes exactly the
arguments the NumPy run updates in place, and that its CUDA code compiles. Skipped without
``pip install -e ".[cuda-compile]"`` (CI installs it), and on the emulated GPU, whose ``cupy``
module is not CuPy.
"""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil

import numpy as np
import pytest

import gpt
import nn
import tensorlab
import tensorlab as tl
from tensorlab.fused import NUMPY, each_source, fused
from tensorlab.fused_op import fused_functions
from tests import cuda_compile

WHY_NOT = (
    "the emulated GPU's cupy module is not CuPy"
    if os.environ.get("TENSORLAB_TEST_DEVICE") == "fake-cuda"
    else cuda_compile.unavailable()
)
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT))

# The forms each kernel is called in, one letter per argument after xp: "a" an array, "s" a
# Python number (the ops pass constants such as Adam's betas, and μ = 0 or γ = 1 for the norms
# without centring or gain, as numbers). CuPy compiles one kernel per form.
FORMS = {
    "erf_kernel": ["a"],
    "GELUFn_forward": ["a"],
    "GELUFn_backward": ["aaa"],
    "GELUTanhFn_forward": ["a"],
    "GELUTanhFn_backward": ["aaa"],
    "SiLUFn_forward": ["a"],
    "SiLUFn_backward": ["aaa"],
    "ELUFn_forward": ["as"],
    "ELUFn_backward": ["aas"],
    "adam_kernel": ["aaaa" + "s" * 9],
    "scale_kernel": ["as"],  # clipping, the loss scaler
    "square_kernel": ["a"],  # their sum of squares
    "exp_shifted_in_place": ["aa"],  # attention's pattern
    "softmax_grad_in_place": ["aaaa"],
}
CASES = [(name, form) for name, forms in sorted(FORMS.items()) for form in forms]
WIDENS = {"square_kernel": "float64"}  # kernels whose output is not in their inputs' dtype


def library_kernels() -> dict[str, fused]:
    """Every :class:`fused` kernel defined at module level in tensorlab/, nn/ and gpt/, and
    the two of every fused op (``GELUFn_forward``, ``GELUFn_backward``, ...)."""
    found = {}
    for package in (tensorlab, nn, gpt):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for value in vars(module).values():
                if isinstance(value, fused) and value.math.__module__ == info.name:
                    if not value.rows:  # a row kernel runs as CuPy's operations, as below
                        found[value.__name__] = value
    for op in fused_functions():
        if op.rows:  # a row formula runs as CuPy's operations (tensorlab/fused.py: _on_gpu)
            continue
        for kernel in (op._forward_kernel, op._backward_kernel):
            found[kernel.__name__] = kernel
    return found


KERNELS = library_kernels()


def test_every_kernel_of_the_library_is_checked_here():
    assert set(KERNELS) == set(FORMS), "add a new fused kernel's forms to FORMS"
    for name, forms in FORMS.items():
        n_args = len(inspect.signature(KERNELS[name].math).parameters) - 1  # less xp
        assert all(len(form) == n_args for form in forms), name


def call_args(form: str, dtype: str, device: bool) -> tuple:
    """Arguments in ``form``: (4, 8) arrays of ``dtype`` (placeholders on the device, or NumPy
    arrays of values in (0, 1)) and Python numbers in (0, 1)."""
    rng = np.random.default_rng(0)
    array = (
        (lambda: cuda_compile.placeholder((4, 8), dtype))
        if device
        else (lambda: rng.random((4, 8)).astype(dtype))
    )
    return tuple(array() if kind == "a" else 0.1 * (i + 1) for i, kind in enumerate(form))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("name", "form"), CASES)
def test_kernel_traces_keeps_its_dtype_and_compiles(name, form, dtype):
    kernel = KERNELS[name]
    args = call_args(form, dtype, device=True)
    elementwise = cuda_compile.trace(kernel, args)  # raises if CuPy's fusion cannot trace it
    assert type(elementwise).__name__ == "ElementwiseKernel"

    arrays = [p for p, kind in zip(elementwise.in_params, form) if kind == "a"]
    assert [p.dtype for p in arrays] == [np.dtype(dtype)] * len(arrays)
    out = np.dtype(WIDENS.get(name, dtype))
    assert all(p.dtype == out for p in elementwise.out_params), (
        f"{name} returns {[p.dtype for p in elementwise.out_params]} for {dtype} inputs"
    )

    # The arrays CuPy's kernel writes (not const) are the ones the NumPy run changes in place.
    host = call_args(form, dtype, device=False)
    before = [a.copy() for a in host if isinstance(a, np.ndarray)]
    kernel.math(NUMPY, *host)
    after = [a for a in host if isinstance(a, np.ndarray)]
    assert [not p.is_const for p in arrays] == [
        not np.array_equal(a, b) for a, b in zip(after, before)
    ]

    cubin = cuda_compile.compile_cubin(cuda_compile.source(elementwise, args), name)
    assert cubin[:4] == b"\x7fELF"  # a cubin is an ELF file of GPU code


# The kernels a fused op runs on half arrays (widen=True): their half runner's source.
HALF_RUNS = [(name, form) for name, form in CASES if KERNELS[name].widen]


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
@pytest.mark.parametrize(("name", "form"), HALF_RUNS)
def test_a_kernel_on_half_arrays_compiles_with_its_casts_inside(name, form, half):
    """A fused op's kernel on float16 or bfloat16 arrays (tensorlab/fused.py: half_source):
    traced on float32, then each half array read through a pointer to CuPy's half type and
    converted to float, each float32 output but the saved ones written converted to the half
    type, in one grid-stride loop. Compiled by NVRTC for the H100: CuPy's half classes convert
    to and from float (bfloat16 needs its header)."""
    from tensorlab.fused import half_dtypes, half_source

    kernel = KERNELS[name]
    half = tl.backend.as_dtype(half)
    kinds = tuple(half if kind == "a" else float for kind in form)
    wide = call_args(form, "float32", device=True)
    elementwise = cuda_compile.trace(kernel, wide)
    outs = half_dtypes([p.dtype for p in elementwise.out_params], half, kernel.keep)
    assert outs[: len(outs) - kernel.keep] == [half] * (len(outs) - kernel.keep)
    assert outs[len(outs) - kernel.keep :] == [np.dtype(np.float32)] * kernel.keep
    code = half_source(elementwise, kinds, outs)
    reads = code.count("* _in_v")
    assert reads == form.count("a") and code.count("(float)_in_v") == reads
    cubin = cuda_compile.compile_cubin(code, f"{name}_half")
    assert cubin[:4] == b"\x7fELF"


# The kernels the library runs over lists of tensors with .each (one launch for all of them) or
# .each_sum: name: (how many of its arguments are arrays, summed).
EACH = {"adam_kernel": (4, False), "scale_kernel": (1, False), "square_kernel": (1, True)}


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("name", sorted(EACH))
def test_a_kernel_over_many_tensors_compiles(name, dtype):
    """A ``.each`` kernel: the traced function's code inside a loop over this block's chunk of
    its tensor, whose addresses come from the table (tensorlab/fused.py: each_source); for
    ``.each_sum``, each thread's double sum and the block's sum of them. Half dtypes too (a
    model in float16 or bfloat16 has gradients in them): bfloat16 needs CuPy's header for it."""
    n_arrays, total = EACH[name]
    (form,) = FORMS[name]
    assert form == "a" * n_arrays + "s" * (len(form) - n_arrays)  # arrays first, then numbers
    elementwise = cuda_compile.trace(KERNELS[name], call_args(form, dtype, device=True))
    code = each_source(elementwise, n_arrays, total)
    assert f"_address[{n_arrays - 1}]" in code and f"_address[{n_arrays}]" not in code
    assert ("_partial[blockIdx.x] = _sums[0]" in code) is total
    cubin = cuda_compile.compile_cubin(code, f"{name}_each")
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.parametrize(
    "math",
    [
        lambda xp, x: x if x > 0 else -x,  # Python control flow on an array
        lambda xp, x: x - xp.sum(x),  # a reduction inside an elementwise kernel
        lambda xp, x: x @ x,  # not elementwise
    ],
    ids=["python-if", "reduction", "matmul"],
)
def test_a_kernel_cupy_cannot_trace_is_refused(math):
    math.__name__ = "untraceable"
    with pytest.raises(Exception):  # noqa: B017 - CuPy raises several types here
        cuda_compile.trace(fused(math), (cuda_compile.placeholder((4, 8), "float32"),))


def test_cuda_code_that_does_not_compile_is_refused():
    from cupy.cuda.compiler import CompileException

    code = 'extern "C" __global__ void broken(float* x) { x[0] = undeclared; }'
    with pytest.raises(CompileException, match="undeclared"):
        cuda_compile.compile_cubin(code, "broken")


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize(
    "op", [op for op in fused_functions() if op.rows], ids=lambda op: op.__name__
)
def test_a_row_kernel_written_as_cuda_compiles(op, dtype):
    """A row formula's CUDA form (tensorlab/cuda_rows.py: _CudaWriter, what run_cuda launches:
    a thread block per row, reductions in shared memory), for the forward and the backward of
    every row op, with its arrays in the layouts the op calls it with (per-feature weights
    broadcast along the rows, one target per row), compiled by NVRTC for the H100. On half
    arrays the kernel reads them as float and writes its outputs along the rows rounded (but
    what the forward saves: float32, as the backward then reads it)."""
    from tensorlab import c_runner, cuda_rows
    from tests.strategies import CLASSES, PER_FEATURE, signature

    if dtype == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    half = np.dtype(tl.bfloat16 if dtype == "bfloat16" else dtype)
    wide = np.float32 if dtype in ("float16", "bfloat16") else half
    arrays, numbers = signature(op)
    rng = np.random.default_rng(0)
    args = [
        rng.integers(0, 8, (4,))
        if a in CLASSES
        else rng.random((8,) if a in PER_FEATURE else (4, 8))
        for a in arrays
    ]
    y = op._forward_kernel.math(
        NUMPY, *[a if a.dtype.kind == "i" else a.astype(wide) for a in args], **numbers
    )
    args = [a if a.dtype.kind == "i" else a.astype(half) for a in args]
    y0 = y[0] if isinstance(y, tuple) else y
    g = np.ones_like(y0, dtype=half if y0.shape == args[0].shape else y0.dtype)
    saved = y[1:] if isinstance(y, tuple) else ()
    to = half if wide != half else None  # the outputs' half type (but the forward's saved ones)
    for kernel, call in ((op._forward_kernel, args), (op._backward_kernel, [g, *saved, *args])):
        full = c_runner.full_shape(tuple(call), True)
        layout = tuple(c_runner._layout(a, True, full) for a in call)
        compiled = c_runner._trace(
            kernel, tuple(call), numbers, layout, full, cuda_rows._CudaWriter, to
        )
        assert compiled is not None, f"{kernel.__name__} cannot be written as CUDA"
        code = compiled.source[compiled.source.index('extern "C"') :]
        assert "r += gridDim.x" in code  # a thread block per row
        if kernel is op._forward_kernel:  # (a row formula's forward reduces over the row)
            assert "tl_block_sum(" in code or "tl_block_max(" in code
        if wide != half:  # read as float; the rows' outputs (not what is saved) rounded
            read, write = (
                ("__half2float(", "__float2half_rn(")
                if dtype == "float16"
                else ("__bfloat162float(", "__float2bfloat16_rn(")
            )
            halves = [
                f"a{k}r["
                for k, (_, ctype, _) in enumerate(compiled.arrays)
                if ctype in ("__half", "__nv_bfloat16")
            ]
            assert halves and all(code.count(a) == code.count(read + a) for a in halves)
            rounded = [k for k, (shape, t) in enumerate(compiled.out_shapes(full)) if t == half]
            assert (write in code) == bool(rounded)
            n = len(compiled.kinds) - (op.saves if kernel is op._forward_kernel else 0)
            assert rounded == [k for k, kind in enumerate(compiled.kinds[:n]) if kind == "E"]
        cubin = cuda_compile.compile_cubin(compiled.source, kernel.__name__)
        assert cubin[:4] == b"\x7fELF"
