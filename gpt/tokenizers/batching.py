"""Truncation and padding: making encoded texts fit a length, and a batch rectangular.

As the ``tokenizers`` library does it, whose ``tokenizer.json`` may carry both settings
(``"truncation"``, ``"padding"``). Truncation keeps ``max_length`` ids, counting the special
tokens the post-processor will add; with a pair of texts ``longest_first`` shortens the longer
one first (when both must be cut they end up with half each), ``only_first`` / ``only_second``
cut just one; ``direction`` "right" drops the end, "left" the beginning. Padding appends (or,
``direction="left"``, prepends) ``pad_id`` up to ``length``, or to the longest encoding of the
batch if ``length`` is None, rounded up to a multiple of ``multiple_of``; the attention mask is
1 for real tokens and 0 for padding.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .base import TokenizerError
from .fields import Part, check

#: the truncation strategies, and their names in a tokenizer.json
STRATEGIES = {
    "longest_first": "LongestFirst",
    "only_first": "OnlyFirst",
    "only_second": "OnlySecond",
}
DIRECTIONS = ("right", "left")


@dataclass(frozen=True)
class Truncation:
    max_length: int
    strategy: str = "longest_first"
    direction: str = "right"

    def __post_init__(self) -> None:
        if isinstance(self.max_length, bool) or not isinstance(self.max_length, int):
            raise TokenizerError(f"truncation max_length must be an integer: {self.max_length!r}")
        if self.max_length < 0:
            raise TokenizerError(f"truncation max_length must be >= 0, got {self.max_length}")
        if self.strategy not in STRATEGIES:
            raise TokenizerError(f"truncation strategy must be one of {tuple(STRATEGIES)}")
        if self.direction not in DIRECTIONS:
            raise TokenizerError(f"truncation direction must be one of {DIRECTIONS}")


@dataclass(frozen=True)
class Padding:
    pad_id: int
    length: int | None = None
    direction: str = "right"
    multiple_of: int | None = None

    def __post_init__(self) -> None:
        if self.length is not None and self.length < 0:
            raise TokenizerError(f"padding length must be >= 0 or None, got {self.length}")
        if self.multiple_of is not None and self.multiple_of < 1:
            raise TokenizerError(f"padding multiple_of must be >= 1, got {self.multiple_of}")
        if self.direction not in DIRECTIONS:
            raise TokenizerError(f"padding direction must be one of {DIRECTIONS}")


def _cut(ids: list[int], n: int, direction: str) -> list[int]:
    if len(ids) <= n:
        return ids
    return ids[:n] if direction == "right" else ids[len(ids) - n :]


def truncate(
    ids: list[int], pair: list[int] | None, params: Truncation, n_added: int = 0
) -> tuple[list[int], list[int] | None]:
    """Cut ``ids`` (and ``pair``) so that, with ``n_added`` special tokens, they fit.

    As in the library: with more special tokens than ``max_length`` nothing is cut (it subtracts
    them in unsigned arithmetic, which wraps around); with room for none but them, everything
    is, whatever the strategy; ``only_first`` / ``only_second`` must leave their text at least
    one id."""
    if n_added > params.max_length:
        return ids, pair
    limit = params.max_length - n_added
    if limit == 0:
        return [], None if pair is None else []
    total = len(ids) + (len(pair) if pair is not None else 0)
    if total <= limit:
        return ids, pair
    if pair is None or params.strategy != "longest_first":
        if pair is None and params.strategy == "only_second":
            raise TokenizerError("truncation only_second needs a pair of texts")
        first = params.strategy != "only_second"
        target = ids if first else pair
        keep = len(target) - (total - limit)
        if keep <= 0:
            raise TokenizerError(
                f"truncation {params.strategy}: that text has {len(target)} ids, "
                f"{total - limit} would have to go"
            )
        cut = _cut(target, keep, params.direction)
        return (cut, pair) if first else (ids, cut)
    # longest_first: the shorter text keeps what it has if the longer one can absorb the cut
    n1, n2 = len(ids), len(pair)
    short = min(n1, n2)
    long_keep = short if short > limit else max(short, limit - short)
    short_keep = short
    if short_keep + long_keep > limit:
        short_keep = limit // 2
        long_keep = short_keep + limit % 2
    keep1, keep2 = (short_keep, long_keep) if n1 <= n2 else (long_keep, short_keep)
    return _cut(ids, keep1, params.direction), _cut(pair, keep2, params.direction)


def pad(batch: list[list[int]], params: Padding) -> tuple[list[list[int]], list[list[int]]]:
    """The batch padded (see the module docstring), and its attention masks."""
    length = params.length
    if length is None:
        length = max((len(ids) for ids in batch), default=0)
    if params.multiple_of and length % params.multiple_of:
        length += params.multiple_of - length % params.multiple_of
    out, masks = [], []
    for ids in batch:
        n = max(length - len(ids), 0)
        if params.direction == "right":
            out.append(ids + [params.pad_id] * n)
            masks.append([1] * len(ids) + [0] * n)
        else:
            out.append([params.pad_id] * n + ids)
            masks.append([0] * n + [1] * len(ids))
    return out, masks


def _direction(p: Part) -> str:
    return p.choice("direction", ("Right", "Left"), "Right").lower()


def read_truncation(spec: Any, path: str | os.PathLike) -> Truncation | None:
    """The ``"truncation"`` entry of a tokenizer.json."""
    if spec is None:
        return None
    p = Part(spec, path, "truncation")
    strategy = p.choice("strategy", tuple(STRATEGIES.values()), "LongestFirst")
    max_length = p("max_length", "int")
    if max_length < 0:
        raise p.error(f"field truncation.max_length must be >= 0: {max_length}")
    ours = {name: our for our, name in STRATEGIES.items()}[strategy]
    return Truncation(max_length, ours, _direction(p))


def read_padding(spec: Any, path: str | os.PathLike) -> Padding | None:
    """The ``"padding"`` entry of a tokenizer.json."""
    if spec is None:
        return None
    p = Part(spec, path, "padding")
    strategy = spec.get("strategy", "BatchLongest")
    if strategy == "BatchLongest":
        length = None
    elif isinstance(strategy, dict) and list(strategy) == ["Fixed"]:
        length = check(strategy["Fixed"], "int", path, "padding.strategy.Fixed")
    else:
        raise p.error(
            f'field padding.strategy must be "BatchLongest" or {{"Fixed": n}}: {strategy!r}'
        )
    multiple = p("pad_to_multiple_of", "int|null", None) or None
    return Padding(p("pad_id", "int", 0), length, _direction(p), multiple)


def truncation_json(params: Truncation | None) -> dict[str, Any] | None:
    """``params`` as a tokenizer.json ``"truncation"`` entry."""
    if params is None:
        return None
    return {
        "direction": params.direction.capitalize(),
        "max_length": params.max_length,
        "strategy": STRATEGIES[params.strategy],
        "stride": 0,
    }


def padding_json(params: Padding | None, pad_token: str) -> dict[str, Any] | None:
    """``params`` as a tokenizer.json ``"padding"`` entry."""
    if params is None:
        return None
    return {
        "strategy": "BatchLongest" if params.length is None else {"Fixed": params.length},
        "direction": params.direction.capitalize(),
        "pad_to_multiple_of": params.multiple_of,
        "pad_id": params.pad_id,
        "pad_type_id": 0,
        "pad_token": pad_token,
    }
