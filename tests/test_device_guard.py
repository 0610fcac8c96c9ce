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

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tensorlab", "nn", "gpt")
MARK = "# host:"

# NumPy names that never touch an array's memory: dtypes, constants, dtype arithmetic, shape
# metadata (np.shape and np.ndim read ``.shape``/``.ndim`` first, so CuPy arrays pass), and the
# construction of CPU random generators (data order, seeds), which are host-side by design;
# and NumPy's exception classes (CuPy raises the same ones).
ALLOWED = frozenset(
    """
    bool_ int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64
    complex64 complex128 dtype ndarray generic integer floating number
    inf nan pi e newaxis iinfo finfo result_type promote_types can_cast shape ndim
    random.default_rng random.Generator random.SeedSequence exceptions.AxisError
    """.split()
)

# Modules that work on host arrays only; a device array reaches them only after .numpy().
HOST_MODULES = {
    "tensorlab/gradcheck.py": "float64 Jacobians built on host copies (Tensor.numpy())",
    "tensorlab/draw.py": "graph labels from host copies of values and gradients",
    "tensorlab/trace.py": "gradient norms for a printed trace, from host copies",
    "nn/serialization.py": "files are written from and read into host arrays",
    "nn/distributed.py": "MPI buffers live on the host (gradients are copied there first)",
    "nn/exercises.py": "the course's grader compares host float64 arrays",
    "gpt/data.py": "token ids and batches are host int arrays until the step moves them",
    "gpt/token_files.py": "memory-mapped token files on disk",
    "gpt/generate.py": "sampling from one row of logits copied to the host",
    "gpt/generate_seq2seq.py": "beam search bookkeeping on host copies of the logits",
    "gpt/hf.py": "Hugging Face checkpoints are converted on the host, then loaded",
    "gpt/hf_llama.py": "as gpt/hf.py, for Llama-family checkpoints",
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
