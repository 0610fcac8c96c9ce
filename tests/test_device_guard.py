"""The CPU-side guard of the GPU path (issue 15): library code does array math through the array
module of its inputs (``xp_of(a).exp(a)``), never through ``np.exp(a)``, which fails on a CuPy
array (``np.asarray`` refuses one) or quietly runs on the host. No GPU is needed to check this:
every module of ``tensorlab/``, ``nn/`` and ``gpt/`` is parsed with ``ast`` and each call of a
NumPy function is looked up in the lists below.

A call passes when
- its name is a dtype, a constant, metadata or CPU-only RNG construction (:data:`ALLOWED`),
- its module works on host arrays only (:data:`HOST_MODULES`, one reason each),
- its line says why it is on the host, with a comment ``# host: <reason>`` (a branch that only
  NumPy arrays reach, Python data turned into an array before it goes to a device), or
- it is a known violation in a file this guard's author does not own (:data:`KNOWN_ELSEWHERE`).

Anything else fails with ``file:line  np.name(...)`` for each call.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

from tests import cupy_api

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tensorlab", "nn", "gpt")
MARK = "# host:"

# NumPy names that never touch an array's memory: dtypes, constants, dtype arithmetic, shape
# metadata (np.shape and np.ndim read ``.shape``/``.ndim`` first, so CuPy arrays pass), and the
# construction of CPU random generators (data order, seeds), which are host-side by design;
# and NumPy's exception classes (CuPy raises the same ones); errstate only silences NumPy's
# floating-point warnings (CuPy gives none).
ALLOWED = frozenset(
    """
    bool_ int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64
    complex64 complex128 dtype ndarray generic integer floating number
    inf nan pi e newaxis iinfo finfo result_type promote_types can_cast shape ndim
    broadcast_shapes errstate
    random.default_rng random.Generator random.SeedSequence exceptions.AxisError
    """.split()
)

# Modules that work on host arrays only; a device array reaches them only after .numpy().
HOST_MODULES = {
    "tensorlab/gradcheck.py": "float64 Jacobians built on host copies (Tensor.numpy())",
    "tensorlab/c_runner.py": "the CPU's compiled kernels: NumPy arrays only (fused.__call__)",
    "tensorlab/draw.py": "graph labels from host copies of values and gradients",
    "tensorlab/trace.py": "gradient norms for a printed trace, from host copies",
    "nn/serialization.py": "files are written from and read into host arrays",
    "nn/distributed.py": "MPI buffers live on the host (gradients are copied there first)",
    "gpt/data.py": "token ids and batches are host int arrays until the step moves them",
    "gpt/token_files.py": "memory-mapped token files on disk",
    "gpt/generate.py": "sampling from one row of logits copied to the host",
    "gpt/generate_seq2seq.py": "beam search bookkeeping on host copies of the logits",
    "gpt/hf/": "Hugging Face checkpoints are converted on the host, then loaded",
    "gpt/plots.py": "matplotlib figures",
    "gpt/circuits/": "interpretability on host copies of cached activations and weights",
    "gpt/tokenizers/": "text in, host int ids out",
}

# Violations in files owned by other engineers (issue 15's guard session may not edit them):
# (file, call) -> what it is. Each should be fixed (xp_of/xp_for) or marked "# host: <reason>"
# there, and its entry removed here.
KNOWN_ELSEWHERE: dict[tuple[str, str], str] = {}


def _dotted(node: ast.AST) -> list[str] | None:
    """``np.random.default_rng`` -> ["np", "random", "default_rng"]; None for other shapes."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def numpy_calls(source: str) -> list[tuple[int, str]]:
    """(line, "np.name") for every call of a NumPy function in ``source`` that is not allowed
    by name or by a ``# host:`` comment on its line; ``from numpy import f`` counts as a call
    of f (the module name is written as the file spells it)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    aliases = {}  # local name -> "numpy"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "numpy" or a.name.startswith("numpy."):
                    aliases[a.asname or "numpy"] = a.asname or "numpy"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "numpy":
            sub = node.module.split(".")[1:]
            for a in node.names:
                name = ".".join([*sub, a.name])
                if name not in ALLOWED:
                    found.append((node.lineno, f"from {node.module} import {a.name}"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        parts = _dotted(node.func)
        if not parts or len(parts) < 2 or parts[0] not in aliases:
            continue
        name = ".".join(parts[1:])
        if name in ALLOWED:
            continue
        end = getattr(node, "end_lineno", node.lineno)
        if any(MARK in lines[i - 1] for i in range(node.lineno, end + 1)):
            continue
        found.append((node.lineno, f"{parts[0]}.{name}"))
    return sorted(found)


def _library_files() -> list[str]:
    return sorted(
        p.relative_to(ROOT).as_posix() for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")
    )


def _host_only(path: str) -> bool:
    return any(path == m or (m.endswith("/") and path.startswith(m)) for m in HOST_MODULES)


def _violations() -> tuple[list[str], set[tuple[str, str]]]:
    bad, known_seen = [], set()
    for path in _library_files():
        if _host_only(path):
            continue
        for line, call in numpy_calls((ROOT / path).read_text(encoding="utf-8")):
            if (path, call) in KNOWN_ELSEWHERE:
                known_seen.add((path, call))
            else:
                bad.append(f"{path}:{line}  {call}(...)")
    return bad, known_seen


def test_library_code_does_no_numpy_math_on_device_arrays():
    bad, _ = _violations()
    assert not bad, (
        "NumPy calls on what may be a CuPy array (use tensorlab.backend.xp_of(array), or mark "
        f"a host-only line '{MARK} <reason>'):\n  " + "\n  ".join(bad)
    )


def test_known_violations_elsewhere_are_still_there():
    """An entry of KNOWN_ELSEWHERE whose call is gone (fixed or marked) must leave the list,
    so the list says what is left."""
    _, seen = _violations()
    stale = sorted(set(KNOWN_ELSEWHERE) - seen)
    assert not stale, f"fixed: remove from KNOWN_ELSEWHERE in {__file__}: {stale}"


def test_host_modules_exist():
    files = _library_files()
    missing = [m for m in HOST_MODULES if not any(_host_only(f) and f.startswith(m) for f in files)]
    assert not missing, f"HOST_MODULES names modules that do not exist: {missing}"


@pytest.mark.parametrize(
    "source, want",
    [
        ("import numpy as np\ny = np.exp(x)", [(2, "np.exp")]),
        ("import numpy\ny = numpy.where(m, a, b)", [(2, "numpy.where")]),
        ("import numpy as xx\nxx.add.at(t, i, 1)", [(2, "xx.add.at")]),
        ("import numpy as np\nz = np.matmul(\n  a, b)", [(2, "np.matmul")]),
        ("from numpy import exp, float32", [(1, "from numpy import exp")]),
        ("from numpy.linalg import norm", [(1, "from numpy.linalg import norm")]),
        # allowed: dtypes, constants, CPU RNG, a marked host line, other modules' functions
        ("import numpy as np\nd = np.dtype(np.float32)\nr = np.random.default_rng(0)", []),
        ("import numpy as np\nf = np.finfo(np.float16).max + np.inf", []),
        ("import numpy as np\na = np.asarray(ids)  # host: Python ids", []),
        ("import numpy as np\na = np.asarray(  # host: Python ids\n  ids)", []),
        ("import math\nimport numpy as np\ny = math.exp(1.0) + xp.exp(a)", []),
    ],
)
def test_the_guard_finds_numpy_math(source, want):
    assert numpy_calls(textwrap.dedent(source)) == want


# ---------------------------------------------------------------- CuPy's API
# The guard above keeps NumPy's functions away from device arrays; this one checks that what
# the library calls on the array module (``xp.name(...)``, ``xp_of(a).name(...)``) and on
# arrays (``a.astype(..., copy=False)``) exists in CuPy with those arguments. NumPy accepts
# more than CuPy does (``indices(..., sparse=True)``, ``add(a, b, where=m)``, ``a.max(initial=0)``),
# and such a call fails only on a GPU. The table of CuPy's API is tests/cupy_api.json, written
# by tests/cupy_api.py from an installed CuPy (no GPU needed).
CUPY = cupy_api.load()
ARRAY_MODULE_CALLS = ("xp_of", "xp_for")  # calls that return the array module
# ``xp.erf`` inside a @fused kernel or a FusedFunction's formula is the kernel namespace's own
# (tensorlab/fused.py)
FUSED_EXTRAS = {"erf"}
# Array methods whose calls are checked: numeric methods of both NumPy's and CuPy's arrays
# (not copy, get, sort, ...: dicts and lists have methods of those names too).
ARRAY_METHODS_CHECKED = frozenset(
    """
    all any argmax argmin argsort astype clip cumsum dot fill max mean min nonzero prod ravel
    repeat reshape squeeze std sum swapaxes take transpose var view
    """.split()
)


def _is_array_module(node: ast.AST) -> bool:
    """``xp`` (the library's name for the array module), ``cupy``, or ``xp_of(a)``."""
    if isinstance(node, ast.Name):
        return node.id in ("xp", "cupy")
    if isinstance(node, ast.Call):
        parts = _dotted(node.func)
        return bool(parts) and parts[-1] in ARRAY_MODULE_CALLS
    return False


def _arguments_fit(entry: dict | None, call: ast.Call) -> str | None:
    """Why ``call``'s arguments do not fit the CuPy parameters ``entry``, or None."""
    if entry is None or any(isinstance(a, ast.Starred) for a in call.args):
        return None
    if any(k.arg is None for k in call.keywords):  # **kwargs: cannot tell statically
        return None
    if len(call.args) > len(entry["positional"]) and not entry["varargs"]:
        return f"{len(call.args)} positional arguments, CuPy takes {len(entry['positional'])}"
    unknown = [k.arg for k in call.keywords if k.arg not in entry["keyword"]]
    if unknown and not entry["varkw"]:
        return f"keyword {', '.join(unknown)} is not CuPy's"
    return None


def cupy_misfits(source: str) -> list[tuple[int, str]]:
    """(line, what) for each call in ``source`` that CuPy would not accept: a function of the
    array module that CuPy lacks or whose arguments it does not take, a ufunc given a keyword
    other than out/dtype/casting, or an array method (a name that both NumPy's and CuPy's
    arrays have) given arguments CuPy's does not take."""
    found = []
    tree = ast.parse(source)
    fused_kernels = [  # @fused / @fused(...) kernels, and a FusedFunction's two formulas
        f
        for f in ast.walk(tree)
        if isinstance(f, ast.FunctionDef)
        and (
            f.name in ("forward_math", "backward_math")
            or any(
                _dotted(d.func if isinstance(d, ast.Call) else d) == ["fused"]
                for d in f.decorator_list
            )
        )
    ]
    in_kernel = {id(n) for f in fused_kernels for n in ast.walk(f)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr, owner = node.func.attr, node.func.value
        if _is_array_module(owner):
            if attr in FUSED_EXTRAS and id(node) in in_kernel:
                continue
            if attr in CUPY["ufuncs"]:
                bad = [k.arg for k in node.keywords if k.arg not in CUPY["ufunc_keywords"]]
                if bad:
                    found.append((node.lineno, f"xp.{attr}: ufunc keyword {', '.join(bad)}"))
            elif attr not in CUPY["functions"]:
                found.append((node.lineno, f"xp.{attr}: CuPy has no such function"))
            else:
                why = _arguments_fit(CUPY["functions"][attr], node)
                if why:
                    found.append((node.lineno, f"xp.{attr}: {why}"))
        elif isinstance(owner, ast.Attribute) and _is_array_module(owner.value):
            if owner.attr in CUPY["modules"]:  # xp.random.default_rng(...)
                table, name = CUPY["modules"][owner.attr], f"xp.{owner.attr}.{attr}"
                if attr not in table:
                    found.append((node.lineno, f"{name}: CuPy has no such function"))
                elif why := _arguments_fit(table[attr], node):
                    found.append((node.lineno, f"{name}: {why}"))
                continue
            # a ufunc method: xp.add.at(...), xp.add.reduceat(...)
            entry = CUPY["ufunc_methods"].get(attr)
            name = f"xp.{owner.attr}.{attr}"
            if owner.attr not in CUPY["ufuncs"] or entry is None:
                found.append((node.lineno, f"{name}: CuPy has no such ufunc method"))
            elif why := _arguments_fit(entry, node):
                found.append((node.lineno, f"{name}: {why}"))
        elif attr in ARRAY_METHODS_CHECKED and not (
            isinstance(owner, ast.Name) and owner.id == "self"  # a Tensor's or a Module's own
        ):
            why = _arguments_fit(CUPY["ndarray_methods"][attr], node)
            if why:
                found.append((node.lineno, f".{attr}(): {why}"))
    return sorted(found)


def test_library_calls_fit_cupy_api():
    bad = [
        f"{path}:{line}  {what}"
        for path in _library_files()
        for line, what in cupy_misfits((ROOT / path).read_text(encoding="utf-8"))
    ]
    assert not bad, (
        f"calls that CuPy {CUPY['cupy_version']} would refuse (they fail on a GPU only):\n  "
        + "\n  ".join(bad)
    )


@pytest.mark.parametrize(
    "source, want",
    [
        # session 8's bug: CuPy's indices has no sparse= (gather, sort and topk on a GPU)
        ("g = xp.indices(shape, sparse=True)", [(1, "xp.indices: keyword sparse is not CuPy's")]),
        ("y = xp.add(a, b, where=m)", [(1, "xp.add: ufunc keyword where")]),
        ("y = xp_of(a).exp(a, order='C')", [(1, "xp.exp: ufunc keyword order")]),
        ("y = a.max(axis=0, initial=0)", [(1, ".max(): keyword initial is not CuPy's")]),
        ("y = xp.erf(a)", [(1, "xp.erf: CuPy has no such function")]),
        ("xp.add.at(o, i, a, 3)", [(1, "xp.add.at: 4 positional arguments, CuPy takes 3")]),
        (
            "r = xp.random.default_rng(0, 1)",
            [(1, "xp.random.default_rng: 2 positional arguments, CuPy takes 1")],
        ),
        (
            "y = xp.take_along_axis(a, i, 1, mode=0)",
            [(1, "xp.take_along_axis: keyword mode is not CuPy's")],
        ),
        # accepted: CuPy's own arguments, a @fused kernel's erf, a Tensor's own methods
        ("y = xp.exp(a, out=o, dtype=d)\nz = a.astype(d, copy=False).reshape(2, -1)", []),
        ("@fused\ndef k(xp, x):\n    return xp.erf(x)", []),
        ("xp.add.reduceat(a, starts, axis=0)\ns = self.argsort(0, descending=True)", []),
    ],
)
def test_the_cupy_check_finds_misfits(source, want):
    assert cupy_misfits(source) == want


def test_cupy_api_reads_signatures():
    """The table's parser, on signatures written the ways CuPy writes them."""
    entry = cupy_api._parse("self, a, b: 'int' = None, *args, c=(1, 2), **kw")
    assert entry == {
        "positional": ["a", "b"],
        "keyword": ["a", "b", "c"],
        "required": 1,
        "varargs": True,
        "varkw": True,
    }
    assert cupy_api._parse("x, /, *, out=None")["positional"] == ["x"]
    assert CUPY["functions"]["indices"]["keyword"] == ["dimensions", "dtype"]
    # Cython signatures give types: "str code" is the parameter code
    assert cupy_api._parse("str code, tuple options=()")["keyword"] == ["code", "options"]
    assert CUPY["functions"]["RawModule"]["keyword"][:3] == ["code", "path", "options"]
    assert CUPY["ndarray_methods"]["swapaxes"]["keyword"] == ["axis1", "axis2"]


def generator_state_reads(source: str) -> list[int]:
    """Lines that read ``generator(...).bit_generator``: a NumPy generator's state attribute,
    which CuPy's generator does not have (its ``bit_generator.state`` is a method returning a
    device pointer). tensorlab's generators are saved and restored through
    ``backend.generator_state``/``set_generator_state``, which know both."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr == "bit_generator"
        and isinstance(node.value, ast.Call)
        and (_dotted(node.value.func) or [""])[-1] == "generator"
    )


def test_generator_state_goes_through_the_backend():
    bad = [
        f"{path}:{line}"
        for path in _library_files()
        if path != "tensorlab/backend.py"
        for line in generator_state_reads((ROOT / path).read_text(encoding="utf-8"))
    ]
    assert not bad, "use tensorlab.backend.generator_state/set_generator_state: " + ", ".join(bad)
    src = "s = tl.backend.generator(d).bit_generator.state\nr = self.rng.bit_generator.state"
    assert generator_state_reads(src) == [1]
