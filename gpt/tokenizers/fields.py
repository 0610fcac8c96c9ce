"""Reading the fields of a tokenizer file with their types checked.

Nothing in a file from elsewhere is taken on trust: a field that should be ``true``/``false``
and holds ``"no"`` is refused, not read as true. Every reader goes through ``get``, which
returns the value only if it has the expected JSON type, and otherwise raises a one-line
``TokenizerFileError`` naming the file, the field (``model.vocab["hello"]``), the value found
and the type expected.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from .base import TokenizerFileError

#: Components may nest (a ``Sequence`` of normalizers inside a ``Sequence``, ...); a file nested
#: deeper than this is refused rather than walked recursively.
MAX_NESTING = 32

_MISSING = object()

#: JSON type name -> (test, how the error message names it)
_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    "number": (
        lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "a number",
    ),
    "str": (lambda v: isinstance(v, str), "a string"),
    "list": (lambda v: isinstance(v, list), "a list"),
    "object": (lambda v: isinstance(v, dict), "an object"),
    "null": (lambda v: v is None, "null"),
}


def show(value: Any, limit: int = 60) -> str:
    """A value as it appears in an error message: its repr, cut short if long."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def expected(kinds: str) -> str:
    """'str|null' -> 'a string or null'."""
    return " or ".join(_KINDS[k][1] for k in kinds.split("|"))


def check(value: Any, kinds: str, path: str | os.PathLike, where: str) -> Any:
    """``value`` if its JSON type is one of ``kinds`` ("int", "str|null", ...), else a
    TokenizerFileError naming the file, the field ``where``, the value and the expected type."""
    for kind in kinds.split("|"):
        if _KINDS[kind][0](value):
            return value
    raise TokenizerFileError(path, f"field {where} must be {expected(kinds)}, got {show(value)}")


def get(
    obj: dict[str, Any],
    name: str,
    kinds: str,
    path: str | os.PathLike,
    where: str = "",
    default: Any = _MISSING,
) -> Any:
    """``obj[name]`` checked to be of ``kinds``; ``where`` is the JSON path of ``obj`` (for the
    message). A missing field gives ``default``, or an error if there is none. A field holding
    ``null`` counts as missing unless ``kinds`` allows null."""
    field = f"{where}.{name}" if where else name
    value = obj.get(name, _MISSING)
    if value is None and "null" not in kinds.split("|"):
        value = _MISSING
    if value is _MISSING:
        if default is _MISSING:
            raise TokenizerFileError(path, f"field {field} is missing")
        return default
    return check(value, kinds, path, field)


def items(
    obj: dict[str, Any], kinds: str, path: str | os.PathLike, where: str
) -> Iterator[tuple[str, Any]]:
    """The (key, value) pairs of a JSON object, each value checked to be of ``kinds``."""
    for key, value in obj.items():
        yield key, check(value, kinds, path, f"{where}[{show(key, 30)}]")


def entries(values: list[Any], kinds: str, path: str | os.PathLike, where: str) -> Iterator[Any]:
    """The entries of a JSON list, each checked to be of ``kinds``."""
    for k, value in enumerate(values):
        yield check(value, kinds, path, f"{where}[{k}]")


def pair(value: Any, kinds: str, path: str | os.PathLike, where: str) -> tuple[Any, Any]:
    """A JSON list of exactly two entries (a merge, a Unigram piece, ...); ``kinds`` is
    "first,second", e.g. "str,number" for a piece and its score."""
    if not isinstance(value, list) or len(value) != 2:
        raise TokenizerFileError(
            path, f"field {where} must be a list of two entries, got {show(value)}"
        )
    a, b = value
    return check(a, kinds.split(",")[0], path, f"{where}[0]"), check(
        b, kinds.split(",")[-1], path, f"{where}[1]"
    )


class Part:
    """One JSON object of a tokenizer file, at ``where``: ``part(name, kinds, default)`` reads a
    field through ``get``. ``depth`` counts the Sequences it is nested in."""

    def __init__(self, spec: Any, path: str | os.PathLike, where: str, depth: int = 0):
        self.spec, self.path, self.where = check(spec, "object", path, where), path, where
        self.depth = depth

    def __call__(self, name: str, kinds: str, default: Any = _MISSING) -> Any:
        return get(self.spec, name, kinds, self.path, self.where, default)

    def choice(self, name: str, choices: tuple[str, ...], default: Any = _MISSING) -> str:
        """A string field that must be one of ``choices``."""
        value = self(name, "str", default)
        if value not in choices:
            raise self.error(f"field {self.where}.{name} must be one of {choices}, got {value!r}")
        return value

    def char(self, name: str, default: Any = _MISSING) -> str:
        """A string field that must be one character."""
        value = self(name, "str", default)
        if len(value) != 1:
            raise self.error(f"field {self.where}.{name} must be one character, got {value!r}")
        return value

    def error(self, problem: str) -> TokenizerFileError:
        return TokenizerFileError(self.path, problem)

    def steps(self, name: str, build: Callable) -> list:
        """The parts a ``Sequence`` lists in the field ``name``, each built by ``build`` one
        level deeper (parts that build to None left out)."""
        where = f"{self.where}.{name}"
        built = [
            build(s, self.path, f"{where}[{k}]", self.depth + 1)
            for k, s in enumerate(self(name, "list"))
        ]
        return [b for b in built if b is not None]

    def pattern(self) -> dict[str, str]:
        """The ``pattern`` field: ``{"String": ...}`` or ``{"Regex": ...}``."""
        pattern = self("pattern", "object")
        keys = [k for k in ("String", "Regex") if k in pattern]
        if len(keys) != 1 or len(pattern) != 1:
            raise self.error(
                f'field {self.where}.pattern must be {{"String": ...}} or {{"Regex": ...}}'
            )
        check(pattern[keys[0]], "str", self.path, f"{self.where}.pattern.{keys[0]}")
        return pattern


def build_part(
    spec: Any, path: str | os.PathLike, where: str, depth: int, what: str, builders: dict
) -> Any:
    """One part of a tokenizer.json pipeline (a normalizer, pre-tokenizer, post-processor or
    decoder, ``what``) at ``where``: None for null, else ``builders[type](Part)``, an object
    nested at most MAX_NESTING Sequences deep, of a type ``builders`` has (else an error naming
    the types it has)."""
    if spec is None:
        return None
    part = Part(spec, path, where, depth)
    if depth > MAX_NESTING:
        raise part.error(f"{where}: Sequences nested more than {MAX_NESTING} deep")
    kind = part("type", "str")
    if kind not in builders:
        supported = ", ".join(builders)
        raise part.error(f"{where}: unsupported {what} type {kind!r} (supported: {supported})")
    return builders[kind](part)
