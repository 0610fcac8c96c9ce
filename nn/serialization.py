"""Saving and loading model and optimizer state, without pickle.

``save(state, path)`` writes a nested structure of dicts, lists, numbers, strings and arrays;
``load(path)`` gives it back. The format follows the file extension:

- ``.safetensors`` (https://huggingface.co/docs/safetensors): ::

      [8 bytes: N, little-endian uint64][N bytes: JSON header][raw little-endian array bytes]

  The header maps each tensor name to ``{"dtype": "F32", "shape": [...], "data_offsets":
  [begin, end]}`` (offsets into the byte buffer after the header), plus ``"__metadata__"``, a
  ``{str: str}`` dict.
- ``.npz`` (NumPy's zip of ``.npy`` files), read back with ``allow_pickle=False``.

How a nested state becomes a flat file: every array is stored as a tensor named by its path,
joined with dots (``optimizer.state.0.m``; a flat model state dict keeps its own keys, so a
saved ``model.state_dict()`` is an ordinary safetensors file that any reader understands). The
structure itself, with each array replaced by ``{"__tensor__": name}``, is stored as JSON in the
metadata entry ``"tensorlab.tree"`` (in ``.npz``: a 0-d string array ``__tensorlab_tree__``).
Dicts whose keys are not all strings (an optimizer's state, keyed by parameter index) are
written as ``{"__items__": [[key, value], ...]}`` so that integer keys come back as integers.
Tuples come back as lists. A file without a tree (written by another program) loads as a flat
``{name: array}`` dict.

Writes are atomic: the bytes go to a temporary file in the target's directory, which is flushed,
fsync'ed and then renamed over the target (``os.replace``). A crash mid-write leaves the old
file (or nothing) at the target path, never half a file. Reading a damaged file raises
:class:`SerializationError` naming the file and what is wrong.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from tensorlab import Tensor
from tensorlab.backend import to_device

TREE_KEY = "tensorlab.tree"  # metadata entry holding the structure (safetensors)
NPZ_TREE_KEY = "__tensorlab_tree__"  # array holding the structure (npz)

# safetensors dtype names <-> NumPy dtypes (always little-endian on disk)
_DTYPES = {
    "BOOL": np.dtype("bool"),
    "U8": np.dtype("<u1"),
    "I8": np.dtype("<i1"),
    "U16": np.dtype("<u2"),
    "I16": np.dtype("<i2"),
    "F16": np.dtype("<f2"),
    "U32": np.dtype("<u4"),
    "I32": np.dtype("<i4"),
    "F32": np.dtype("<f4"),
    "U64": np.dtype("<u8"),
    "I64": np.dtype("<i8"),
    "F64": np.dtype("<f8"),
}
_NAMES = {dt: name for name, dt in _DTYPES.items()}
_MAX_HEADER = 100_000_000  # the official reader's limit: a larger length means a corrupt file


class SerializationError(ValueError):
    """A file that cannot be read as a saved state: truncated, corrupt, or not this format."""


def _error(path, what: str) -> SerializationError:
    return SerializationError(f"{os.fspath(path)}: {what}")


# ------------------------------------------------------------------ nested state <-> flat arrays
def _is_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not isinstance(x, np.generic)


def _flatten(obj, path: tuple[str, ...], arrays: dict[str, np.ndarray]):
    """The JSON-able tree of ``obj``; its arrays are moved into ``arrays`` by dotted path."""
    if isinstance(obj, Tensor):
        obj = obj.data
    if _is_array(obj):
        name = ".".join(path) if path else "tensor"
        if name in arrays:
            raise ValueError(f"save: two arrays would both be stored as {name!r}; rename a key")
        arrays[name] = to_device(obj, "cpu")
        return {"__tensor__": name}
    if isinstance(obj, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in obj):
            return {k: _flatten(v, (*path, k), arrays) for k, v in obj.items()}
        items = []
        for k, v in obj.items():
            if not isinstance(k, str | int | float | bool) and k is not None:
                raise TypeError(f"save: dict key {k!r} at {'.'.join(path)!r} is not a str or int")
            items.append([k, _flatten(v, (*path, str(k)), arrays)])
        return {"__items__": items}
    if isinstance(obj, list | tuple):
        return [_flatten(v, (*path, str(i)), arrays) for i, v in enumerate(obj)]
    if isinstance(obj, np.generic):
        return obj.item()
    if obj is None or isinstance(obj, str | int | float | bool):
        return obj
    where = ".".join(path) or "the top level"
    raise TypeError(f"save: cannot store a {type(obj).__name__} (at {where!r}) without pickle")


def _unflatten(tree, arrays: dict[str, np.ndarray], path):
    """Inverse of :func:`_flatten`."""
    if isinstance(tree, dict):
        if "__tensor__" in tree:
            name = tree["__tensor__"]
            if name not in arrays:
                raise _error(path, f"the structure refers to a tensor {name!r} the file lacks")
            return arrays[name]
        if "__items__" in tree:
            return {k: _unflatten(v, arrays, path) for k, v in tree["__items__"]}
        return {k: _unflatten(v, arrays, path) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_unflatten(v, arrays, path) for v in tree]
    return tree


# ------------------------------------------------------------------ atomic write
def _atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
    """Run ``write(file)`` on a temporary file next to ``path``, then rename it to ``path``."""
    path = os.fspath(path)
    tmp = f"{path}.{secrets.token_hex(4)}.tmp"
    try:
        with open(tmp, "xb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())  # the bytes are on disk before the name points at them
        os.replace(tmp, path)  # atomic: readers see the old file or the new one
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    try:  # make the rename itself durable (POSIX; not possible on every platform)
        fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


# ------------------------------------------------------------------ safetensors
def _write_safetensors(f: IO[bytes], arrays: dict[str, np.ndarray], metadata: dict) -> None:
    header: dict[str, Any] = {"__metadata__": metadata}
    blobs, offset = [], 0
    for name, a in arrays.items():
        dtype = np.dtype(a.dtype).newbyteorder("<") if a.dtype.itemsize > 1 else a.dtype
        if dtype not in _NAMES:
            raise TypeError(f"save: array {name!r} has dtype {a.dtype}, which safetensors lacks")
        blob = np.ascontiguousarray(a, dtype=dtype).tobytes()
        header[name] = {
            "dtype": _NAMES[dtype],
            "shape": list(a.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # pad so the data starts 8-byte aligned
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for blob in blobs:
        f.write(blob)


def _read_safetensors(path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    raw = Path(path).read_bytes()
    if len(raw) < 8:
        raise _error(path, f"file is {len(raw)} bytes, too short for the 8-byte header length")
    (n,) = struct.unpack("<Q", raw[:8])
    if n > _MAX_HEADER:
        raise _error(path, f"header length {n} is implausibly large (corrupt, or not safetensors)")
    if 8 + n > len(raw):
        raise _error(path, f"header length says {n} bytes but only {len(raw) - 8} follow")
    try:
        header = json.loads(raw[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _error(path, f"header is not valid JSON ({e})") from None
    if not isinstance(header, dict):
        raise _error(path, f"header is a JSON {type(header).__name__}, not an object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise _error(path, "__metadata__ must map strings to strings")
    data = memoryview(raw)[8 + n :]
    arrays = {}
    for name, info in header.items():
        arrays[name] = _read_tensor(path, name, info, data)
    return arrays, metadata


def _read_tensor(path, name: str, info, data: memoryview) -> np.ndarray:
    """One tensor from the data buffer, after checking its header entry."""
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= info.keys():
        raise _error(path, f"tensor {name!r}: entry needs dtype, shape and data_offsets")
    dtype = _DTYPES.get(info["dtype"]) if isinstance(info["dtype"], str) else None
    if dtype is None:
        raise _error(path, f"tensor {name!r}: unknown or unsupported dtype {info['dtype']!r}")
    shape, offsets = info["shape"], info["data_offsets"]
    if not isinstance(shape, list) or not all(type(s) is int and s >= 0 for s in shape):
        raise _error(path, f"tensor {name!r}: shape {shape!r} is not a list of sizes")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(type(o) is int for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise _error(path, f"tensor {name!r}: data_offsets {offsets!r} is not [begin, end]")
    begin, end = offsets
    if end > len(data):
        raise _error(
            path,
            f"tensor {name!r}: data_offsets [{begin}, {end}] run past the end of the data "
            f"({len(data)} bytes; the file is truncated or corrupt)",
        )
    expected = math.prod(shape) * dtype.itemsize
    if end - begin != expected:
        raise _error(
            path,
            f"tensor {name!r}: {end - begin} bytes for shape {shape} of {info['dtype']}, "
            f"which needs {expected}",
        )
    array = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=True)  # native order, writable, owned


# ------------------------------------------------------------------ npz
def _write_npz(f: IO[bytes], arrays: dict[str, np.ndarray], tree_json: str) -> None:
    """What ``np.savez`` does (a zip of ``name.npy`` files), minus its keyword-name clashes."""
    entries = {**arrays, NPZ_TREE_KEY: np.array(tree_json)}
    with zipfile.ZipFile(f, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, a in entries.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.asarray(a), allow_pickle=False)


def _read_npz(path) -> tuple[dict[str, np.ndarray], str | None]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
            arrays = {k: a.astype(a.dtype.newbyteorder("="), copy=False) for k, a in arrays.items()}
    except FileNotFoundError:
        raise
    except Exception as e:  # zipfile.BadZipFile, EOFError, ValueError, OSError, ...
        raise _error(path, f"not a readable .npz file ({type(e).__name__}: {e})") from None
    tree = arrays.pop(NPZ_TREE_KEY, None)
    return arrays, (None if tree is None else str(tree))


# ------------------------------------------------------------------ public API
def _format(path) -> str:
    suffix = Path(path).suffix.lower()
    if suffix not in (".safetensors", ".npz"):
        raise ValueError(
            f"{os.fspath(path)}: unknown extension {suffix!r}; use .safetensors or .npz"
        )
    return suffix[1:]


def save(state, path: str | os.PathLike) -> None:
    """Write ``state`` (nested dicts/lists of arrays, numbers and strings) to ``path``
    atomically, as safetensors or npz according to the extension."""
    fmt = _format(path)
    arrays: dict[str, np.ndarray] = {}
    tree = json.dumps(_flatten(state, (), arrays))
    if fmt == "safetensors":
        _atomic_write(path, lambda f: _write_safetensors(f, arrays, {TREE_KEY: tree}))
    else:
        if NPZ_TREE_KEY in arrays:
            raise ValueError(f"save: {NPZ_TREE_KEY!r} is a reserved name in .npz files")
        _atomic_write(path, lambda f: _write_npz(f, arrays, tree))


def load(path: str | os.PathLike):
    """Read what :func:`save` wrote (arrays come back as NumPy arrays on the CPU).

    A file without tensorlab's structure entry loads as a flat ``{name: array}`` dict.
    """
    fmt = _format(path)
    if fmt == "safetensors":
        arrays, metadata = _read_safetensors(path)
        tree_json = metadata.get(TREE_KEY)
    else:
        arrays, tree_json = _read_npz(path)
    if tree_json is None:
        return arrays
    try:
        tree = json.loads(tree_json)
    except json.JSONDecodeError as e:
        raise _error(path, f"the {TREE_KEY!r} entry is not valid JSON ({e})") from None
    return _unflatten(tree, arrays, path)


def save_checkpoint(path: str | os.PathLike, model, optimizer=None, **extra) -> None:
    """Save ``model.state_dict()``, ``optimizer.state_dict()`` and ``extra`` in one file.

    ``extra`` holds anything JSON-like or array-like: the iteration, a config dict, a scheduler's
    ``state_dict()``, the best validation loss.
    """
    state = {"model": model.state_dict(), "extra": extra}
    if optimizer is not None:
        state["optimizer"] = optimizer.state_dict()
    save(state, path)


def load_checkpoint(path: str | os.PathLike, model=None, optimizer=None) -> dict:
    """Load a file written by :func:`save_checkpoint` into ``model`` (and ``optimizer``).

    Returns the ``extra`` dict. With ``model=None`` nothing is loaded: a cheap way to read the
    extras first (for example the config to build the model from). Raises
    :class:`SerializationError` if the file is not a checkpoint, and the modules' own errors
    for missing keys or mismatched shapes.
    """
    state = load(path)
    if not isinstance(state, dict) or "model" not in state:
        raise _error(path, "not a checkpoint (no 'model' entry); use load() for plain states")
    if optimizer is not None and "optimizer" not in state:
        raise _error(path, "the checkpoint holds no optimizer state")
    if model is not None:
        model.load_state_dict(state["model"])
    if optimizer is not None:
        optimizer.load_state_dict(state["optimizer"])
    return state.get("extra", {})


__all__ = ["SerializationError", "save", "load", "save_checkpoint", "load_checkpoint"]
