"""Saving and loading model and optimizer state, without pickle.

``save(state, path)`` writes a nested structure of dicts, lists, numbers, strings and arrays;
``load(path)`` gives it back. The format follows the file extension:

- ``.safetensors`` (https://huggingface.co/docs/safetensors): ::

      [8 bytes: N, little-endian uint64][N bytes: JSON header][raw little-endian array bytes]

  The header maps each tensor name to ``{"dtype": "F32", "shape": [...], "data_offsets":
  [begin, end]}`` (offsets into the byte buffer after the header), plus ``"__metadata__"``, a
  ``{str: str}`` dict. The ``safetensors`` package writes and checks these files (no gaps
  between tensors, no trailing bytes); this module also refuses a name twice in one header
  (the package would keep the last). bfloat16 arrays need ``ml_dtypes``. Each tensor's CRC-32
  is stored in the metadata as ``"checksum.<name>"`` and checked on load (a file without
  checksums, older or another program's, loads unchecked).
- ``.npz`` (NumPy's zip of ``.npy`` files), read back with ``allow_pickle=False``; the zip
  format keeps a CRC-32 per member, which reading checks.

How a nested state becomes a flat file: every array is stored as a tensor named by its path,
joined with dots (``optimizer.state.0.m``; a flat model state dict keeps its own keys, so a
saved ``model.state_dict()`` is an ordinary safetensors file that any reader understands). The
structure itself, with each array replaced by ``{"__tensor__": name}``, is stored as JSON in the
metadata entry ``"tensorlab.tree"`` (in ``.npz``: a 0-d string array ``__tensorlab_tree__``).
Dicts whose keys are not all strings (an optimizer's state, keyed by parameter index) are
written as ``{"__items__": [[key, value], ...]}`` so that integer keys come back as integers.
Tuples come back as lists. A file without a tree (written by another program) loads as a flat
``{name: array}`` dict.

Writes are atomic (:func:`atomic_write`): a crash mid-write leaves the old file (or nothing)
at the target path, never half a file. Reading a damaged file raises
:class:`SerializationError`, one line naming the file and, where it can be told, the tensor or
the place in the structure that is wrong.
"""

from __future__ import annotations

import functools
import json
import math
import os
import secrets
import struct
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import IO

import numpy as np
import safetensors.numpy
from safetensors import SafetensorError, safe_open

from tensorlab import Tensor
from tensorlab.backend import to_device

TREE_KEY = "tensorlab.tree"  # metadata entry holding the structure (safetensors)
CHECKSUM_KEY = "checksum."  # + a tensor's name: the CRC-32 of its bytes (safetensors)
NPZ_TREE_KEY = "__tensorlab_tree__"  # array holding the structure (npz)

# bytes per element of each safetensors dtype, to say which tensor a rejected file gets wrong
_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
             "F8_E4M3FNUZ": 1, "F8_E5M2FNUZ": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
             "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8, "C64": 8}  # fmt: skip
_MAX_HEADER = 100_000_000  # the package's limit too: a longer header means a corrupt file


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


def _unflatten(tree, arrays: dict[str, np.ndarray], path, where: tuple[str, ...] = ()):
    """Inverse of :func:`_flatten`; a structure it could not have written is a
    :class:`SerializationError` naming the place in the structure."""

    def damaged(what: str) -> SerializationError:
        return _error(path, f"the {TREE_KEY!r} entry at {'.'.join(where) or 'the top'!r} {what}")

    if isinstance(tree, list):
        return [_unflatten(v, arrays, path, (*where, str(i))) for i, v in enumerate(tree)]
    if not isinstance(tree, dict):
        return tree
    if "__tensor__" in tree:
        name = tree["__tensor__"]
        if len(tree) != 1 or not isinstance(name, str):
            raise damaged('should be {"__tensor__": name}')
        if name not in arrays:
            raise _error(path, f"the structure refers to a tensor {name!r} the file lacks")
        return arrays[name]
    if "__items__" in tree:
        items = tree["__items__"]
        if len(tree) != 1 or not isinstance(items, list):
            raise damaged('should be {"__items__": [[key, value], ...]}')
        out = {}
        for pair in items:
            if not (
                isinstance(pair, list) and len(pair) == 2 and not isinstance(pair[0], list | dict)
            ):
                raise damaged(f"holds {json.dumps(pair)[:80]}, not a [key, value] pair")
            out[pair[0]] = _unflatten(pair[1], arrays, path, (*where, str(pair[0])))
        return out
    return {k: _unflatten(v, arrays, path, (*where, k)) for k, v in tree.items()}


# ------------------------------------------------------------------ atomic write
def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], None]) -> None:
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
# The format is the safetensors package's: it writes the files and decides which ones are valid.
# This module adds what the package leaves out: names refused twice in one header, the
# tensor named in an error, and NumPy dtypes made little-endian and contiguous before writing.
@functools.cache
def _storable(dtype: np.dtype) -> bool:
    """Whether safetensors has a dtype for ``dtype`` (asked of the package, with an empty array)."""
    try:
        safetensors.numpy.save({"probe": np.empty(0, dtype)})
    except (SafetensorError, TypeError, ValueError, KeyError):
        return False
    return True


def _crc32(a: np.ndarray) -> str:
    """The CRC-32 of an array's raw bytes (C order, as stored), as 8 hex digits."""
    return f"{zlib.crc32(np.ascontiguousarray(a).reshape(-1).view(np.uint8)):08x}"


def _write_safetensors(f: IO[bytes], arrays: dict[str, np.ndarray], metadata: dict) -> None:
    """Write ``arrays`` with ``metadata``, adding a ``checksum.<name>`` entry per tensor: the
    CRC-32 of its bytes, which :func:`load` checks (other readers ignore it)."""
    ready, sums = {}, {}
    for name, a in arrays.items():
        dtype = a.dtype.newbyteorder("<") if a.dtype.itemsize > 1 else a.dtype
        if not _storable(dtype):
            raise TypeError(f"save: array {name!r} has dtype {a.dtype}, which safetensors lacks")
        ready[name] = np.asarray(a, dtype=dtype, order="C")  # the package reads raw memory
        sums[CHECKSUM_KEY + name] = _crc32(ready[name])
    f.write(safetensors.numpy.save(ready, metadata={**metadata, **sums}))


def _verify(path, arrays: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """Refuse a tensor whose bytes differ from the checksum written beside it. Files without
    checksums (written before they existed, or by another program) load unchecked."""
    for name, a in arrays.items():
        want = metadata.get(CHECKSUM_KEY + name)
        if want is not None and _crc32(a) != want:
            raise _error(
                path,
                f"tensor {name!r} fails its checksum (CRC-32 {_crc32(a)}, the file says {want}): "
                "its bytes were changed or damaged after saving",
            )


class _Twice(Exception):
    """A JSON object with the same key twice (raised from ``json.loads``)."""


def _no_duplicates(pairs: list) -> dict:
    seen = {}
    for k, v in pairs:
        if k in seen:
            raise _Twice(k)
        seen[k] = v
    return seen


def _header(path) -> tuple[dict | str, int]:
    """The parsed header, or in words why it cannot be parsed; and the data bytes after it.

    Read here for two things only: the package keeps the last of two entries with one name
    without a word, and its errors do not always say which tensor is wrong."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        start = f.read(8)
        if len(start) < 8:
            return f"the file is {size} bytes, too short for the header's length", 0
        (n,) = struct.unpack("<Q", start)
        if n > min(size - 8, _MAX_HEADER):
            return f"the header's length says {n} bytes; {size - 8} follow", 0
        text = f.read(n)
    try:
        header = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Twice as e:
        raise _error(path, f"the header names {e.args[0]!r} twice") from None
    except (ValueError, RecursionError):  # not UTF-8 or not JSON: the package says why
        return "", 0
    if not isinstance(header, dict):
        return f"the header is a JSON {type(header).__name__}, not an object", 0
    return header, size - 8 - n


def _first_wrong_entry(header: dict, data_len: int) -> str | None:
    """Which entry of a header the package refused, in words (for the error message only)."""
    meta = header.get("__metadata__")
    if meta is not None and not (
        isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())
    ):
        return "'__metadata__' must map strings to strings"
    entries = {k: v for k, v in header.items() if k != "__metadata__"}
    for name, info in entries.items():
        if isinstance(info, dict) and info.get("dtype") not in _ITEMSIZE:
            return f"tensor {name!r} has dtype {info.get('dtype')!r}"
        ok = isinstance(info, dict) and isinstance(info.get("shape"), list)
        ok = ok and all(type(s) is int and s >= 0 for s in info["shape"])
        offsets = info.get("data_offsets") if ok else None
        ok = ok and isinstance(offsets, list) and len(offsets) == 2
        if not (ok and all(type(o) is int for o in offsets) and 0 <= offsets[0] <= offsets[1]):
            return f"tensor {name!r} needs a known dtype, a shape of sizes and [begin, end] offsets"
    end = 0  # where the next tensor must start: the data is packed with no gap
    for name, info in sorted(entries.items(), key=lambda kv: kv[1]["data_offsets"]):
        begin, stop = info["data_offsets"]
        need = math.prod(info["shape"]) * _ITEMSIZE[info["dtype"]]
        if begin != end:
            return f"tensor {name!r} starts at data byte {begin}, not {end} (a gap or an overlap)"
        if stop - begin != need:
            return (
                f"tensor {name!r} has {stop - begin} bytes for shape {info['shape']} "
                f"of {info['dtype']}, which needs {need}"
            )
        end = stop
    if end > data_len:
        return f"the tensors need {end} data bytes but {data_len} follow the header (truncated?)"
    if end < data_len:
        return f"{data_len - end} bytes trail the last tensor"
    return None


def _read_safetensors(path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    header, data_len = _header(path)
    try:
        with safe_open(os.fspath(path), framework="numpy") as f:
            metadata = f.metadata() or {}
            arrays = {name: _get_tensor(path, f, name) for name in f.keys()}
    except SafetensorError as e:
        reason = str(e).split(": ", 1)[-1].split(", expected one of")[0]  # without the preamble
        reason = " ".join(reason.split())  # on one line
        where = _first_wrong_entry(header, data_len) if isinstance(header, dict) else header
        detail = f"rejected by safetensors ({reason})" + (f": {where}" if where else "")
        raise _error(path, detail) from None
    _verify(path, arrays, metadata)
    return arrays, metadata


def _get_tensor(path, f, name: str) -> np.ndarray:
    try:
        return f.get_tensor(name)
    except TypeError:  # a dtype NumPy knows only once ml_dtypes is imported (BF16, F8_*)
        dtype = f.get_slice(name).get_dtype()
        try:
            import ml_dtypes  # noqa: F401  (registers bfloat16 and the float8 types with NumPy)
        except ImportError:
            raise _error(
                path, f"tensor {name!r} is {dtype}; NumPy reads it with `pip install ml_dtypes`"
            ) from None
        return f.get_tensor(name)


# ------------------------------------------------------------------ npz
def _write_npz(f: IO[bytes], arrays: dict[str, np.ndarray], tree_json: str) -> None:
    """What ``np.savez`` does (a zip of ``name.npy`` files), minus its keyword-name clashes.
    A dtype the .npy header cannot name (ml_dtypes' bfloat16 is written as raw 2-byte
    records, ``<V2``, and would load as bytes) is refused."""
    for name, a in arrays.items():
        descr = np.lib.format.dtype_to_descr(a.dtype)
        if np.lib.format.descr_to_dtype(descr) != a.dtype:
            raise TypeError(
                f"save: array {name!r} has dtype {a.dtype}, which .npz cannot hold (it would "
                f"load as raw {descr!r} records); save it as .safetensors"
            )
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
        atomic_write(path, lambda f: _write_safetensors(f, arrays, {TREE_KEY: tree}))
    else:
        if NPZ_TREE_KEY in arrays:
            raise ValueError(f"save: {NPZ_TREE_KEY!r} is a reserved name in .npz files")
        atomic_write(path, lambda f: _write_npz(f, arrays, tree))


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
        return _unflatten(json.loads(tree_json), arrays, path)
    except json.JSONDecodeError as e:
        raise _error(path, f"the {TREE_KEY!r} entry is not valid JSON ({e})") from None
    except RecursionError:
        raise _error(path, f"the {TREE_KEY!r} entry is nested too deeply") from None


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
    :class:`SerializationError` if the file is not a checkpoint, or does not fit the model
    (naming the missing, unexpected and mismatched keys) or the optimizer.
    """
    state = load(path)
    if not isinstance(state, dict) or "model" not in state:
        raise _error(path, "not a checkpoint (no 'model' entry); use load() for plain states")
    weights, extra = state["model"], state.get("extra", {})
    if not isinstance(weights, dict) or not all(_is_array(v) for v in weights.values()):
        raise _error(path, "the 'model' entry is not a {name: array} dict")
    if not isinstance(extra, dict):
        raise _error(path, "the 'extra' entry is not a dict")
    if optimizer is not None and not isinstance(state.get("optimizer"), dict):
        raise _error(path, "the checkpoint holds no optimizer state")
    if model is not None:
        try:
            model.load_state_dict(weights)
        except (KeyError, ValueError) as e:  # said again with every wrong key and the file
            raise _error(path, _misfit(model.state_dict(), weights) or _one_line(e)) from None
    if optimizer is not None:
        try:
            optimizer.load_state_dict(state["optimizer"])
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise _error(path, f"the optimizer state does not fit: {_one_line(e)}") from None
    return extra


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    if isinstance(e, KeyError) and e.args:  # KeyError's str quotes its argument
        text = str(e.args[0]) if " " in str(e.args[0]) else f"no entry {e.args[0]!r}"
    return text


def _misfit(own: dict, saved: dict, most: int = 6) -> str:
    """What keeps ``saved`` from loading into a model whose state dict is ``own``."""

    def listed(keys: list[str]) -> str:
        more = f" and {len(keys) - most} more" if len(keys) > most else ""
        return ", ".join(keys[:most]) + more

    missing = [k for k in own if k not in saved]
    unexpected = [k for k in saved if k not in own]
    shapes = [
        f"{k} {tuple(saved[k].shape)} in the file, {tuple(own[k].shape)} in the model"
        for k in own
        if k in saved and tuple(saved[k].shape) != tuple(own[k].shape)
    ]
    parts = [
        f"{what}: {listed(keys)}"
        for what, keys in [
            ("missing from the file", missing),
            ("not in the model", unexpected),
            ("shapes differ", shapes),
        ]
        if keys
    ]
    return "the checkpoint does not fit the model; " + "; ".join(parts) if parts else ""
