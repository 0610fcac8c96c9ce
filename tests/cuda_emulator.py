"""CUDA C++ kernels run on the CPU: hand-written kernels tested numerically without a GPU.

The project's hand-written CUDA kernels are compiled by NVRTC and launched through
``cupy.RawModule``. Without a GPU none of them ever ran. This module compiles the same source
with g++ and runs it on the CPU, with the interface of ``cupy.RawModule``::

    module = Module(code, options=("-DBLOCK=256",))
    kernel = module.get_function("add")
    kernel((blocks,), (256,), (x, y, out, np.int32(n)))  # NumPy arrays, NumPy scalars
    kernel((blocks,), (256,), args, reverse=True)  # the threads of a block in reverse order

How: g++ force-includes ``cuda_emulator/cuda_emulator.h``, which turns the CUDA dialect into
C++, and ``cuda_emulator/include`` stands in for ``<cuda_fp16.h>`` and ``<cuda_bf16.h>``. For
each kernel (``extern "C" __global__ void NAME(...)``) a wrapper is appended that unpacks an
array of argument addresses into the kernel's parameters (their types come from template
deduction, so no signature is parsed), and a description of the parameters against which
the arguments are checked. The scheduler (``cuda_emulator/runtime.cpp``) runs the blocks one
after another and each thread of a block as a fiber; a fiber runs until it reaches a barrier
(``__syncthreads``, a warp shuffle) or returns. Built modules are cached on disk, keyed by the
source, the options and the emulator's own files.

What it shows: the kernel's arithmetic on real data (indexing, bounds, reductions, the
float16/bfloat16 conversions, rounding to nearest even included), that barriers are reached
by every thread (a divergent ``__syncthreads`` is an error, not a hang), reads of shared
memory the block has not written (shared memory is filled with NaN bytes when a block
starts), and races between the threads of a block: ``reverse=True`` runs them in the other
order between barriers, so a kernel whose result depends on which thread goes first (a
missing ``__syncthreads``, or code that assumes a warp runs in lockstep) gives a different
answer. A correct kernel gives the same result both ways.

The tensor cores' ``mma.sync.m16n8k16`` (inline PTX in a kernel, which g++ cannot compile)
has a stand-in, ``emu_mma_16816`` in ``cuda_emulator.h``: a kernel calls it where the header
defines ``TL_EMULATED_MMA``. It takes each lane's registers in the PTX ISA's fragment layout
and computes what the instruction computes, so a kernel's use of that layout is checked here;
whether a GPU lays them out the same way only a GPU can say.

What it cannot show: speed, occupancy, memory coalescing, bank conflicts, real warp
scheduling (threads never interleave within a phase here), races between blocks (blocks run
one at a time), out-of-bounds accesses (no memory checker: a wild write may corrupt the
process or crash it; use compute-sanitizer on a GPU), and the GPU's float rounding where it
differs from the CPU's: nvcc/NVRTC contract ``a*b+c`` into fused multiply-adds, while this
compiles with ``-ffp-contract=off`` (every operation rounded once, reproducibly), and the math
functions (``expf``, ``logf``, ``__expf``, ...) are glibc's, not CUDA's, so results agree
with a GPU's to a few ulps, not bit for bit. Not supported: dynamic shared memory (``extern
__shared__``, ``shared_mem`` > 0), warp functions with partial masks (every thread of the warp
must take part), ``__half2``/``__nv_bfloat162``, cooperative groups, textures, and streams.
A kernel that loops forever hangs the caller.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import operator
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import numpy as np

DIRECTORY = Path(__file__).resolve().parent / "cuda_emulator"
HEADER = DIRECTORY / "cuda_emulator.h"
RUNTIME = DIRECTORY / "runtime.cpp"
INCLUDE = DIRECTORY / "include"
# built objects, shared by the processes of this machine (TENSORLAB_CUDA_EMULATOR_CACHE moves it)
CACHE = Path(
    os.environ.get("TENSORLAB_CUDA_EMULATOR_CACHE")
    or Path(tempfile.gettempdir()) / "tensorlab_cuda_emulator"
)
CXX = "g++"
# -ffp-contract=off: no fused multiply-adds, so results do not depend on the compiler's mood;
# -fno-strict-aliasing: kernels reinterpret pointers (float4 loads from a float array, ...).
FLAGS = (
    "-std=c++17",
    "-O1",
    "-fPIC",
    "-fvisibility=hidden",
    "-ffp-contract=off",
    "-fno-strict-aliasing",
)
# g++ runs of this process for kernel modules (the tests check that the cache works)
STATS = {"compiles": 0}

_KERNEL = re.compile(
    r'extern\s+"C"\s+__global__\s+'
    r"(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?void\s+"
    r"(?:__launch_bounds__\s*\((?:[^()]|\([^()]*\))*\)\s*)?(\w+)\s*\("
)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_DYNAMIC_SHARED = re.compile(r"extern\s+__shared__")
_LAUNCH = threading.Lock()  # one launch at a time: a module's scheduler state is global
_LIBRARIES: dict[Path, ctypes.CDLL] = {}
_MAX_PARAMETERS = 256


class CompileError(RuntimeError):
    """g++ refused the source; ``stderr`` holds its messages."""

    def __init__(self, what: str, stderr: str):
        super().__init__(f"g++ could not compile {what}:\n{stderr}")
        self.stderr = stderr


def unavailable() -> str | None:
    """Why kernels cannot be emulated here (a reason to skip), or None when they can."""
    return _unavailable()


@functools.cache
def _unavailable() -> str | None:
    if shutil.which(CXX) is None:
        return f"the CUDA emulator needs {CXX} (a C++17 compiler), which is not installed"
    try:
        _runtime_object()
    except (CompileError, OSError, subprocess.SubprocessError) as e:
        return f"the CUDA emulator's runtime does not build here: {e}"
    return None


class Module:
    """CUDA source compiled for the CPU, as ``cupy.RawModule(code=..., options=...)``.

    ``options`` are NVRTC's: ``-DNAME`` and ``-DNAME=VALUE`` (or ``--define-macro=...``) are
    honoured, the others (``-arch=sm_90``, ``--std=c++17``, ...) ignored. The source is compiled
    on the first :meth:`get_function`, with a wrapper for every ``extern "C" __global__``
    kernel it declares; a compile error raises :class:`CompileError` with g++'s messages.
    """

    def __init__(self, code: str, options: tuple[str, ...] = ()):
        if _DYNAMIC_SHARED.search(_COMMENT.sub("", code)):
            raise NotImplementedError(
                "the CUDA emulator supports statically sized __shared__ arrays only, "
                "not dynamic shared memory (extern __shared__)"
            )
        self.code = code
        self.options = tuple(options)
        self.defines = _defines(self.options)
        self.kernels = _declared_kernels(code, self.defines)
        self.path: Path | None = None  # the shared object, once built
        self._library: ctypes.CDLL | None = None
        self._built_for: tuple[str, ...] = ()

    def get_function(self, name: str) -> Function:
        """The kernel ``name`` (declared ``extern "C" __global__ void name(...)``)."""
        if not re.fullmatch(r"[A-Za-z_]\w*", name):
            raise ValueError(f"{name!r} is not a C identifier")
        if self._library is None or name not in self._built_for:
            names = tuple(dict.fromkeys((*self.kernels, *self._built_for, name)))
            self.path = _build(self.code, self.defines, names)
            self._library = _load(self.path)
            self._built_for = names
        return Function(self._library, name)


class Function:
    """One kernel of a :class:`Module`, called as a CuPy ``RawKernel``."""

    def __init__(self, library: ctypes.CDLL, name: str):
        self.name = name
        self._library = library  # kept loaded while the function lives
        self._wrapper = ctypes.cast(getattr(library, f"emu_wrap_{name}"), ctypes.c_void_p).value
        self.parameters = _describe(getattr(library, f"emu_arity_{name}"))
        self._launch = library.emu_launch

    def __repr__(self) -> str:
        types = ", ".join(p.type for p in self.parameters)
        return f"<emulated CUDA kernel {self.name}({types})>"

    def __call__(self, grid, block, args, shared_mem: int = 0, *, reverse: bool = False) -> None:
        """Runs the kernel on ``grid`` blocks of ``block`` threads (each an int or 1-3 ints).

        ``args``: a tuple of arrays (NumPy arrays, objects with ``__array_interface__``, or
        tests/fake_cupy arrays), passed as the address of their first element, and NumPy
        scalars, passed by value (an 8-byte integer scalar given for a pointer is an address:
        ``numpy.uint64(0)`` is a null pointer). Each is checked against the kernel's parameter:
        their number, an array for a pointer (of a matching element type: a float64 array for a
        ``float*`` is refused), a scalar of the parameter's size and kind for a value (a Python
        int or float is refused: its C type would be a guess). ``reverse`` runs the threads of
        each block in reverse order between barriers.
        """
        grid = _dimensions(grid, "grid", (2**31 - 1, 65535, 65535))
        block = _dimensions(block, "block", (1024, 1024, 64))
        if block[0] * block[1] * block[2] > 1024:
            raise ValueError(f"block {block} has more than 1024 threads")
        if shared_mem:
            raise NotImplementedError(
                "the CUDA emulator has no dynamic shared memory (shared_mem must be 0)"
            )
        if not isinstance(args, (tuple, list)):
            raise TypeError(f"kernel {self.name!r}: args must be a tuple, not {type(args)}")
        if len(args) != len(self.parameters):
            raise TypeError(
                f"kernel {self.name!r} takes {len(self.parameters)} arguments "
                f"({', '.join(p.type for p in self.parameters)}), got {len(args)}"
            )
        values = [p.value(self.name, i, a) for i, (p, a) in enumerate(zip(self.parameters, args))]
        addresses = (ctypes.c_void_p * max(1, len(values)))(*(v.ctypes.data for v in values))
        error = ctypes.create_string_buffer(2048)
        with _LAUNCH:
            failed = self._launch(
                self._wrapper, addresses, *grid, *block, int(bool(reverse)), error, len(error)
            )
        del values  # kept alive (with the arrays in args) until the launch has returned
        if failed:
            raise RuntimeError(f"kernel {self.name!r}: {error.value.decode(errors='replace')}")


class Parameter:
    """A kernel parameter as g++ sees it: its C type, size, kind and, for a pointer, the
    size and kind of what it points to. Kinds: 'p' pointer, 'f' floating point, 'i'/'u'
    signed/unsigned integer, 'b' bool, 'v' void, 'o' other (a struct: __half, float4)."""

    def __init__(self, type_: str, size: int, kind: str, pointee_size: int, pointee_kind: str):
        self.type = type_
        self.size = size
        self.kind = kind
        self.pointee_size = pointee_size
        self.pointee_kind = pointee_kind

    def value(self, kernel: str, index: int, arg) -> np.ndarray:
        """``arg`` as a NumPy scalar or pointer whose bytes are the parameter's value."""
        where = f"kernel {kernel!r}, argument {index} ({self.type})"
        array = _array(arg)
        if self.kind == "p":
            if _is_address(arg, self.size):  # numpy.uint64(0): a null pointer, as CuPy passes it
                return np.array(arg)
            if array is None:
                raise TypeError(f"{where}: expected an array, got {_name(arg)}")
            dtype, address = array
            if not self._points_to(dtype):
                raise TypeError(f"{where}: an array of {dtype} does not match the pointer type")
            return np.array(address, dtype=np.uintp)
        if array is not None:
            raise TypeError(f"{where}: expected a scalar, got an array ({array[0]})")
        if isinstance(arg, np.generic):
            if arg.dtype.itemsize == self.size and self._holds(arg.dtype):
                return np.array(arg)
            raise TypeError(f"{where}: expected {self._scalar()}, got numpy.{arg.dtype}")
        if isinstance(arg, (bool, int, float, complex)):
            raise TypeError(
                f"{where}: a Python {type(arg).__name__} is ambiguous (CuPy picks its C type "
                f"by value); pass {self._scalar()}"
            )
        raise TypeError(f"{where}: expected {self._scalar()}, got {_name(arg)}")

    def _holds(self, dtype: np.dtype) -> bool:
        if self.kind == "f":
            return dtype.kind == "f"
        if self.kind in "iub":
            return dtype.kind in "iub"
        return True  # a struct: any scalar of its size (numpy.float16 for __half)

    def _points_to(self, dtype: np.dtype) -> bool:
        kind, size = self.pointee_kind, self.pointee_size
        if kind == "v":
            return True
        if kind == "o":  # a struct: float4 over float32, __half over float16, ...
            return size % dtype.itemsize == 0
        if kind == "p":  # a table of addresses
            return dtype.kind in "iu" and dtype.itemsize == size
        if kind in "iub" and size == 1:  # bytes
            return True
        if dtype.itemsize != size:
            return False
        return dtype.kind == "f" if kind == "f" else dtype.kind in "iub"

    def _scalar(self) -> str:
        kinds = {"f": "float", "i": "int", "u": "uint", "b": "bool"}
        if self.kind == "b":
            return "a numpy.bool_"
        if self.kind in kinds:
            return f"a {self.size}-byte scalar such as numpy.{kinds[self.kind]}{8 * self.size}"
        return f"a {self.size}-byte NumPy scalar"


def _describe(arity) -> tuple[Parameter, ...]:
    capacity = _MAX_PARAMETERS
    sizes = (ctypes.c_int * capacity)()
    kinds = ctypes.create_string_buffer(capacity)
    pointee_sizes = (ctypes.c_int * capacity)()
    pointee_kinds = ctypes.create_string_buffer(capacity)
    names = (ctypes.c_char_p * capacity)()
    arity.restype = ctypes.c_int
    n = arity(sizes, kinds, pointee_sizes, pointee_kinds, names, capacity)
    if n > capacity:
        raise TypeError(f"a kernel with {n} parameters: the emulator takes {capacity} at most")
    parameters = []
    for i in range(n):
        # g++'s __PRETTY_FUNCTION__: "const char* emu_type_name() [with T = const float*]"
        pretty = names[i].decode()
        type_ = pretty[pretty.index("T = ") + 4 : pretty.rindex("]")]
        parameters.append(
            Parameter(
                type_,
                sizes[i],
                kinds.raw[i : i + 1].decode(),
                pointee_sizes[i],
                pointee_kinds.raw[i : i + 1].decode(),
            )
        )
    return tuple(parameters)


def _array(arg) -> tuple[np.dtype, int] | None:
    """(dtype, address of the first element) of an array argument, else None."""
    inner = getattr(arg, "_a", None)  # tests/fake_cupy.ndarray keeps its data there
    if isinstance(inner, np.ndarray):
        arg = inner
    if isinstance(arg, np.ndarray):
        return arg.dtype, arg.__array_interface__["data"][0]
    interface = getattr(arg, "__array_interface__", None)
    if isinstance(interface, dict) and not isinstance(arg, np.generic):
        return np.dtype(interface.get("descr", interface["typestr"])), interface["data"][0]
    return None


def _is_address(arg, size: int) -> bool:
    """An integer NumPy scalar of a pointer's size: an address, passed as is."""
    return isinstance(arg, np.generic) and arg.dtype.kind in "iu" and arg.dtype.itemsize == size


def _name(arg) -> str:
    return f"numpy.{arg.dtype}" if isinstance(arg, np.generic) else type(arg).__name__


def _dimensions(value, what: str, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,)
    if not 1 <= len(items) <= 3:
        raise ValueError(f"{what} must be an int or 1 to 3 ints, got {value!r}")
    dims = [operator.index(v) for v in items] + [1] * (3 - len(items))
    for d, limit in zip(dims, limits):
        if not 1 <= d <= limit:
            raise ValueError(f"{what} {tuple(dims)}: each size must be in 1..{limits}")
    return dims[0], dims[1], dims[2]


def _defines(options: tuple[str, ...]) -> tuple[str, ...]:
    """The -D options of an NVRTC option list, as g++ options."""
    defines = []
    items = iter(options)
    for option in items:
        if option == "-D":
            defines.append("-D" + next(items, ""))
        elif option.startswith("-D"):
            defines.append(option)
        elif option.startswith("--define-macro="):
            defines.append("-D" + option.split("=", 1)[1])
    return tuple(defines)


@functools.cache
def _declared_kernels(code: str, defines: tuple[str, ...]) -> tuple[str, ...]:
    """The kernels the source declares once preprocessed with these definitions (a kernel
    inside ``#if`` whose condition is false is not one: no wrapper may name it)."""
    command = [CXX, "-E", "-P", "-x", "c++", "-I", str(INCLUDE), *defines, "-"]
    done = subprocess.run(command, input=code, capture_output=True, text=True)
    if done.returncode != 0:
        raise CompileError("the kernel source (preprocessing it)", done.stderr)
    return tuple(dict.fromkeys(_KERNEL.findall(_COMMENT.sub("", done.stdout))))


def _wrappers(names: tuple[str, ...]) -> str:
    lines = ['\n#line 1 "<cuda emulator wrappers>"']
    for name in names:
        # (parameter names that no kernel's name can shadow)
        lines.append(
            f"EMU_EXPORT void emu_wrap_{name}(void** emu_a) {{ emu_call(&{name}, emu_a); }}"
        )
        lines.append(
            f"EMU_EXPORT int emu_arity_{name}(int* emu_s, char* emu_k, int* emu_ps, char* emu_pk, "
            f"const char** emu_n, int emu_c) "
            f"{{ return emu_describe(&{name}, emu_s, emu_k, emu_ps, emu_pk, emu_n, emu_c); }}"
        )
    return "\n".join(lines) + "\n"


@functools.cache
def _toolchain() -> str:
    """What the cache key needs of the compiler and of the emulator's own files."""
    version = subprocess.run([CXX, "--version"], capture_output=True, text=True, check=True)
    digest = hashlib.sha256(version.stdout.encode())
    for path in sorted([HEADER, RUNTIME, *INCLUDE.iterdir()]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(repr(FLAGS).encode())
    return digest.hexdigest()


def _compile(command: list[str], output: Path, what: str) -> None:
    """Runs g++ into a temporary file and moves it to ``output`` (atomically: processes
    sharing the cache never load a half-written file)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as scratch:
        partial = Path(scratch) / output.name
        result = subprocess.run([*command, "-o", str(partial)], capture_output=True, text=True)
        if result.returncode != 0:
            raise CompileError(what, result.stderr)
        os.replace(partial, output)


@functools.cache
def _runtime_object() -> Path:
    """runtime.cpp compiled once: linked into every module."""
    output = CACHE / f"runtime-{_toolchain()[:24]}.o"
    if not output.exists():
        command = [CXX, *FLAGS, "-c", "-I", str(DIRECTORY), str(RUNTIME)]
        _compile(command, output, "the CUDA emulator's runtime")
    return output


def _build(code: str, defines: tuple[str, ...], names: tuple[str, ...]) -> Path:
    """The shared object for this source (from the cache, or compiled into it)."""
    runtime = _runtime_object()
    key = hashlib.sha256(repr((code, defines, names, _toolchain())).encode()).hexdigest()
    output = CACHE / f"module-{key[:32]}.so"
    if output.exists():
        return output
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "kernel.cpp"
        source.write_text('#line 1 "kernel.cu"\n' + code + "\n" + _wrappers(names))
        # -fno-weak: the __shared__ variables of inline functions and templates must not be
        # COMDAT, or g++ refuses to put them in one section with the others.
        command = [CXX, *FLAGS, "-fno-weak", "-shared", "-include", str(HEADER)]
        command += ["-I", str(INCLUDE), *defines, str(source), str(runtime)]
        STATS["compiles"] += 1
        _compile(command, output, "the kernel source")
    return output


def _load(path: Path) -> ctypes.CDLL:
    if path not in _LIBRARIES:
        library = ctypes.CDLL(str(path))  # RTLD_LOCAL: modules do not see each other
        # emu_launch(kernel, args, gx, gy, gz, bx, by, bz, reverse, error, error_size)
        library.emu_launch.restype = ctypes.c_int
        library.emu_launch.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            *[ctypes.c_uint] * 6,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_size_t,
        ]
        _LIBRARIES[path] = library
    return _LIBRARIES[path]
