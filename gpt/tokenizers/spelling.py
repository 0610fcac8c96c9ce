"""How a tokenizer file's tokens spell the text they stand for, as far as offsets need to know.

``offsets.encode_with_offsets`` finds each token's text in the input, so it must know how a
``tokenizer.json`` spells it: in GPT-2's printable byte alphabet ("Ġ" for a space), with a
character standing for a space ("▁"), with a prefix on word-continuing pieces ("##") or a
suffix on word-final ones ("</w>"); and whether the post-processor trims spaces off offsets.
``Spelling.of`` reads this from a parsed file; ``hf_format`` gives it to every tokenizer it
reads (our own classes need only the trimming).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Spelling:
    """How a file's tokens spell the text they stand for (see the module docstring). The
    default, all off, is right for our own classes read from our format."""

    byte_level: bool = False
    space: str = ""
    prefix: str = ""
    suffix: str = ""
    #: the post-processor trims spaces off offsets (ByteLevel, RobertaProcessing
    #: ``trim_offsets``), except the one it added before the first token (``add_prefix_space``)
    trim_offsets: bool = False
    added_prefix_space: bool = False

    @classmethod
    def of(cls, data: dict[str, Any]) -> Spelling:
        pre = json.dumps(data.get("pre_tokenizer"))
        model = data.get("model") or {}
        space = ""
        if '"Metaspace"' in pre:
            space = _find_key(data.get("pre_tokenizer"), "replacement") or "\u2581"
        post = data.get("post_processor")
        steps = (post.get("processors") or []) if _type(post) == "Sequence" else [post]
        trimming = [
            s
            for s in steps
            if _type(s) in ("ByteLevel", "RobertaProcessing")
            and s.get("trim_offsets", True) is True
        ]
        return cls(
            byte_level='"ByteLevel"' in pre,
            space=space,
            prefix=model.get("continuing_subword_prefix") or "",
            suffix=model.get("end_of_word_suffix") or "",
            trim_offsets=bool(trimming),
            added_prefix_space=any(s.get("add_prefix_space", True) is True for s in trimming),
        )


def _type(spec: Any) -> Any:
    return spec.get("type") if isinstance(spec, dict) else None


def _find_key(spec: Any, key: str, depth: int = 0) -> Any:
    """The first value of ``key`` in a JSON value, looking at most 64 levels deep."""
    if depth > 64:
        return None
    if isinstance(spec, dict):
        if key in spec:
            return spec[key]
        spec = list(spec.values())
    if isinstance(spec, list):
        for value in spec:
            found = _find_key(value, key, depth + 1)
            if found is not None:
                return found
    return None
