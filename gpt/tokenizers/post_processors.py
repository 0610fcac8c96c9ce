"""Post-processors of a ``tokenizer.json`` pipeline: special tokens around encoded text.

BERT wants ``[CLS] text [SEP]`` (``[CLS] a [SEP] b [SEP]`` for a pair of texts), RoBERTa
``<s> text </s>`` (``<s> a </s></s> b </s>``), added only when asked
(``add_special_tokens=True``). Every type ``build`` reads (``TemplateProcessing``, with its
items ``{"SpecialToken": {"id": "[CLS]"}}`` and ``{"Sequence": {"id": "A"}}``; the fixed
``BertProcessing`` and ``RobertaProcessing``; ``ByteLevel``, which only adjusts offsets; a
``Sequence`` of which at most one adds tokens) becomes a ``Template``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from .fields import Part, build_part, entries, pair


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


def _template_items(p: Part, name: str, specials: dict[str, list[int]]) -> list:
    items = []
    for k, spec in enumerate(p(name, "list")):
        item = Part(spec, p.path, f"{p.where}.{name}[{k}]")
        if "Sequence" in spec:
            seq = Part(item("Sequence", "object"), p.path, f"{item.where}.Sequence")
            items.append(seq.choice("id", ("A", "B")))
        elif "SpecialToken" in spec:
            token = Part(item("SpecialToken", "object"), p.path, f"{item.where}.SpecialToken")
            content = token("id", "str")
            if content not in specials:
                where = f"{p.where}.special_tokens"
                raise p.error(f"{item.where}: special token {content!r} is not in {where}")
            items.append(specials[content])
        else:
            raise p.error(f"{item.where}: expected a Sequence or a SpecialToken item")
    return items


def build(
    spec: dict[str, Any] | None,
    path: str | os.PathLike,
    where: str = "post_processor",
    depth: int = 0,
) -> PostProcessor | None:
    """The post-processor a file describes at ``where`` (None: ids are left as they are)."""
    return build_part(spec, path, where, depth, "post-processor", BUILDERS)


def _template(p: Part) -> Template:
    specials: dict[str, list[int]] = {}
    for name, entry in p("special_tokens", "object").items():
        at = f"{p.where}.special_tokens[{name!r}]"
        specials[name] = list(entries(Part(entry, p.path, at)("ids", "list"), "int", p.path, at))
    return Template(_template_items(p, "single", specials), _template_items(p, "pair", specials))


def _bert_or_roberta(p: Part) -> Template:
    _, sep = pair(p("sep", "list"), "str,int", p.path, f"{p.where}.sep")
    _, cls = pair(p("cls", "list"), "str,int", p.path, f"{p.where}.cls")
    if p("type", "str") == "BertProcessing":
        return Template([[cls], "A", [sep]], [[cls], "A", [sep], "B", [sep]])
    return Template([[cls], "A", [sep]], [[cls], "A", [sep, sep], "B", [sep]])


def _sequence(p: Part) -> PostProcessor | None:
    steps = p.steps("processors", build)
    if len(steps) > 1:
        raise p.error(f"{p.where}: more than one processor that adds tokens is not supported")
    return steps[0] if steps else None


BUILDERS: dict[str, Callable[[Part], PostProcessor | None]] = {
    "TemplateProcessing": _template,
    "BertProcessing": _bert_or_roberta,
    "RobertaProcessing": _bert_or_roberta,
    "ByteLevel": lambda p: None,  # it only adjusts offsets
    "Sequence": _sequence,
}
