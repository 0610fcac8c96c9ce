"""Post-processors of a ``tokenizer.json`` pipeline: special tokens around encoded text.

BERT wants ``[CLS] text [SEP]`` (and ``[CLS] a [SEP] b [SEP]`` for a pair of texts), RoBERTa
``<s> text </s>`` (``<s> a </s></s> b </s>``). A post-processor adds them after the model ran,
and only when asked (``add_special_tokens=True``). The types ``build`` reads:

* ``TemplateProcessing``: a template for one text and one for a pair, e.g.
  ``["[CLS]", "$A", "[SEP]"]`` as JSON items ``{"SpecialToken": {"id": "[CLS]"}}`` and
  ``{"Sequence": {"id": "A"}}``; each special token's ids are listed in ``special_tokens``.
* ``BertProcessing`` and ``RobertaProcessing``: the two fixed templates above, with the
  ``cls`` and ``sep`` tokens given as ``[token, id]``.
* ``ByteLevel``: only adjusts character offsets; the ids are unchanged.
* ``Sequence``: the listed post-processors, of which at most one may add tokens.

A post-processor here is a ``Template``: ``template(ids, pair_ids or None) -> ids``.
"""

from __future__ import annotations

import os
from typing import Any

from .base import TokenizerFileError
from .fields import check, entries, get, pair, part_type


class Template:
    """A post-processor: a template for one text and one for a pair, each a list of items:
    "A" and "B" stand for the two texts' ids, a list of ints is inserted as it is."""

    def __init__(self, single: list, pair_: list):
        self.single, self.pair = single, pair_

    def __call__(self, a: list[int], b: list[int] | None = None) -> list[int]:
        out: list[int] = []
        for item in self.single if b is None else self.pair:
            if item == "A":
                out.extend(a)
            elif item == "B":
                out.extend(b or [])
            else:
                out.extend(item)
        return out

    def n_added(self, pair_: bool) -> int:
        """How many ids the template adds (truncation leaves room for them)."""
        items = self.pair if pair_ else self.single
        return sum(len(item) for item in items if isinstance(item, list))


PostProcessor = Template


def _template_items(
    spec: dict, name: str, specials: dict[str, list[int]], path, where: str
) -> list:
    items = []
    for k, item in enumerate(get(spec, name, "list", path, where)):
        at = f"{where}.{name}[{k}]"
        check(item, "object", path, at)
        if "Sequence" in item:
            seq = get(
                get(item, "Sequence", "object", path, at), "id", "str", path, at + ".Sequence"
            )
            if seq not in ("A", "B"):
                raise TokenizerFileError(
                    path, f"field {at}.Sequence.id must be A or B, got {seq!r}"
                )
            items.append(seq)
        elif "SpecialToken" in item:
            token = get(
                get(item, "SpecialToken", "object", path, at),
                "id",
                "str",
                path,
                at + ".SpecialToken",
            )
            if token not in specials:
                raise TokenizerFileError(
                    path, f"{at}: special token {token!r} is not in {where}.special_tokens"
                )
            items.append(specials[token])
        else:
            raise TokenizerFileError(path, f"{at}: expected a Sequence or a SpecialToken item")
    return items


def build(
    spec: dict[str, Any] | None,
    path: str | os.PathLike,
    where: str = "post_processor",
    depth: int = 0,
) -> PostProcessor | None:
    """The post-processor a file describes at ``where`` (None: ids are left as they are)."""
    if spec is None:
        return None
    kind = part_type(spec, path, where, depth)
    if kind == "TemplateProcessing":
        specials: dict[str, list[int]] = {}
        for name, entry in get(spec, "special_tokens", "object", path, where).items():
            at = f"{where}.special_tokens[{name!r}]"
            check(entry, "object", path, at)
            specials[name] = list(entries(get(entry, "ids", "list", path, at), "int", path, at))
        single = _template_items(spec, "single", specials, path, where)
        both = _template_items(spec, "pair", specials, path, where)
        return Template(single, both)
    if kind in ("BertProcessing", "RobertaProcessing"):
        _, sep = pair(get(spec, "sep", "list", path, where), "str,int", path, f"{where}.sep")
        _, cls = pair(get(spec, "cls", "list", path, where), "str,int", path, f"{where}.cls")
        if kind == "BertProcessing":
            return Template([[cls], "A", [sep]], [[cls], "A", [sep], "B", [sep]])
        return Template([[cls], "A", [sep]], [[cls], "A", [sep, sep], "B", [sep]])
    if kind == "ByteLevel":
        return None  # it only adjusts offsets
    if kind == "Sequence":
        steps = get(spec, "processors", "list", path, where)
        parts = [build(s, path, f"{where}.processors[{k}]", depth + 1) for k, s in enumerate(steps)]
        parts = [p for p in parts if p is not None]
        if len(parts) > 1:
            raise TokenizerFileError(
                path, f"{where}: more than one processor that adds tokens is not supported"
            )
        return parts[0] if parts else None
    raise TokenizerFileError(
        path,
        f"{where}: unsupported post-processor type {kind!r} (supported: TemplateProcessing, "
        "BertProcessing, RobertaProcessing, ByteLevel, Sequence)",
    )
