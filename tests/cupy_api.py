"""CuPy's API as data: the names and parameters of its functions, ufuncs and array methods.

``tests/test_device_guard.py`` checks every ``xp.name(...)`` call and every array method call
of the library against this table, so that a NumPy-only function or keyword (``indices(...,
sparse=True)``, ``add(a, b, where=m)``) is caught on a machine with no GPU, where the CuPy
path never runs. The table lives in ``cupy_api.json`` beside this file; CI reads it and needs
no CuPy. To write it again from an installed CuPy (a GPU is not needed; CuPy imports without
one)::

    pip install --target /tmp/cupy cupy-cuda12x fastrlock cuda-pathfinder --no-deps
    PYTHONPATH=/tmp/cupy python tests/cupy_api.py

Submodules (``random``, ``linalg``, ``fft``, ``cuda``) and the methods of
``cupy.random.Generator`` have tables of their own. Each entry is
``{"positional": [...], "keyword": [...], "required": n, "varargs": bool, "varkw": bool}``:
the parameters that may be given by position, those that may be given by name, how many
positional ones have no default, and whether ``*args``/``**kwargs`` are taken.
A callable whose parameters cannot be read (a class, a Cython function without an embedded
signature) is ``null``: only its name is checked.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

FILE = Path(__file__).with_name("cupy_api.json")
# cupy.ufunc.__call__ takes its inputs by position and only these by name (any other keyword
# is "TypeError: Wrong arguments"; NumPy's where=, order=, subok= among them).
UFUNC_KEYWORDS = ["out", "dtype", "casting"]
UFUNC_METHODS = ("at", "reduce", "reduceat", "accumulate", "outer")
# the library may call xp.random.default_rng(...), xp.cuda.get_cublas_handle(), ...
SUBMODULES = ("random", "linalg", "fft", "cuda")


def _parse(params: str) -> dict:
    """The entry for a parameter list written as in a signature: ``a, b=None, *, c=1``."""
    pieces, depth, cur = [], 0, ""
    for ch in params:  # split at the commas outside brackets (defaults may hold some)
        depth += ch in "([{<"
        depth -= ch in ")]}>"
        if ch == "," and depth == 0:
            pieces.append(cur)
            cur = ""
        else:
            cur += ch
    pieces.append(cur)
    entry = {"positional": [], "keyword": [], "required": 0, "varargs": False, "varkw": False}
    keyword_only = False
    for piece in (p.strip() for p in pieces):
        name = re.split(r"[:=]", piece)[0].strip()
        name = name.split()[-1] if name else name  # Cython's typed "str code": its name
        if not name or name in ("self", "/"):
            continue
        if name == "*":
            keyword_only = True
        elif name.startswith("**"):
            entry["varkw"] = True
        elif name.startswith("*"):
            entry["varargs"], keyword_only = True, True
        else:
            if not keyword_only:
                entry["positional"].append(name)
                entry["required"] += "=" not in piece
            entry["keyword"].append(name)
    return entry


def _entry(obj) -> dict | None:
    """The parameters of ``obj``: from the signature its docstring starts with, where there is
    one (Cython functions, and functions that take ``*args, **kwargs`` and say what they
    read from them, as ``einsum(subscripts, *operands, dtype=None, optimize=False)``), else
    from ``inspect.signature``; None if neither says."""
    first = (getattr(obj, "__doc__", None) or "").strip().splitlines()[:1]
    name = getattr(obj, "__name__", None)
    m = re.match(r"([\w.]+)\((.*)\)", first[0]) if first else None
    if m and name and m.group(1).split(".")[-1] == name:
        return _parse(m.group(2).replace("\\", ""))  # reST escapes: \*\*kwargs
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    return _parse(str(sig)[1:].rsplit(")", 1)[0])


def snapshot() -> dict:
    """The table, read from the installed CuPy."""
    import cupy

    ufunc = type(cupy.exp)
    functions, ufuncs = {}, []
    for name in sorted(dir(cupy)):
        obj = getattr(cupy, name)
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        if isinstance(obj, ufunc):
            ufuncs.append(name)
        elif callable(obj):
            functions[name] = _entry(obj)
    methods = {
        name: _entry(getattr(cupy.ndarray, name))
        for name in sorted(dir(cupy.ndarray))
        if not name.startswith("_") and callable(getattr(cupy.ndarray, name))
    }
    ufunc_methods = {m: _entry(getattr(cupy.add, m)) for m in UFUNC_METHODS}
    modules = {
        mod: {
            name: _entry(getattr(getattr(cupy, mod), name))
            for name in sorted(dir(getattr(cupy, mod)))
            if not name.startswith("_") and callable(getattr(getattr(cupy, mod), name))
        }
        for mod in SUBMODULES
    }
    generator = cupy.random.Generator
    generator_methods = {
        name: _entry(getattr(generator, name))
        for name in sorted(dir(generator))
        if not name.startswith("_") and callable(getattr(generator, name))
    }
    return {
        "cupy_version": cupy.__version__,
        "generator_methods": generator_methods,
        "functions": functions,
        "ufuncs": ufuncs,
        "ufunc_keywords": UFUNC_KEYWORDS,
        "ufunc_methods": ufunc_methods,
        "ndarray_methods": methods,
        "ndarray_attributes": [
            name
            for name in sorted(dir(cupy.ndarray))
            if not name.startswith("_") and not callable(getattr(cupy.ndarray, name))
        ],
        "modules": modules,
    }


def load() -> dict:
    return json.loads(FILE.read_text(encoding="utf-8"))


def _dumps(table: dict) -> str:
    """JSON with one function per line (a new CuPy version's changes read well in a diff)."""

    def block(value) -> str:
        if not isinstance(value, dict):
            return json.dumps(value)
        rows = [f"  {json.dumps(k)}: {json.dumps(value[k], sort_keys=True)}" for k in sorted(value)]
        return "{\n" + ",\n".join(rows) + "\n }"

    return (
        "{\n" + ",\n".join(f"{json.dumps(k)}: {block(table[k])}" for k in sorted(table)) + "\n}\n"
    )


if __name__ == "__main__":
    table = snapshot()
    FILE.write_text(_dumps(table), encoding="utf-8")
    print(
        f"{FILE}: CuPy {table['cupy_version']}, {len(table['functions'])} functions, "
        f"{len(table['ufuncs'])} ufuncs, {len(table['ndarray_methods'])} array methods"
    )
