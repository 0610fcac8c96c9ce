"""Mutants made by machine: every operator, comparison and number of one file flipped in turn.

``tests/mutants.py`` holds mutations a person wrote, each a plausible bug. A sweep adds
the ones nobody thought of: it walks the file's syntax tree and, one node at a time,

    a + b -> a - b, a * b -> a / b, a ** b -> a * b (and back; also in ``x += y``),
    a < b -> a <= b, a == b -> a != b, x is None -> x is not None, in -> not in (and back),
    p and q -> p or q (and back), -x -> x, not p -> p, 3 -> 4, 0.5 -> 1.5, True -> False.

Each becomes a :class:`benchmarks.mutation.Mutant` anchored to its line (the line's text, and
the same line with the one node changed), run against the file's stages in
``mutants.TESTS`` like any other. Docstrings, f-strings, type annotations and ``raise``
statements are left alone (a changed error message is not a bug the tests should catch).

Expect equivalent mutants among the survivors: a flip that changes nothing observable (a
``<`` that only decides whether a check that finds nothing runs at all, a default no test
relies on, an axis of -1 written as 1 on a 2-D array). Each survivor needs a look: a test
where it is a gap, a line in ``mutants.py`` (``MUTANTS``, with a test that kills it) so the
gap stays closed, nothing where it is equivalent.
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

BINARY = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "/"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "/"),
    ast.Mod: ("%", "//"),
    ast.Pow: ("**", "*"),
}
COMPARE = {
    ast.Lt: ("<", "<="),
    ast.LtE: ("<=", "<"),
    ast.Gt: (">", ">="),
    ast.GtE: (">=", ">"),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
}
BOOLEAN = {ast.And: ("and", "or"), ast.Or: ("or", "and")}


def _untouched(tree: ast.AST) -> set[int]:
    """ids of the nodes a sweep leaves alone: docstrings, f-strings, annotations, raises."""
    skip: set[int] = set()

    def cover(node):
        skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr | ast.Raise):
            cover(node)
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            if isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                cover(body[0])
        for name in ("annotation", "returns"):
            if isinstance(getattr(node, name, None), ast.AST):
                cover(getattr(node, name))
    return skip


def _gap_edit(line: bytes, start: int, end: int, old: str, new: str):
    """The operator ``old`` found alone in ``line[start:end]`` (the gap between two operands,
    which holds only spaces, brackets and the operator), as the edit that writes ``new``.
    Offsets are in bytes of UTF-8, as ``ast`` gives them."""
    gap = line[start:end].decode()
    words = gap.replace("(", " ").replace(")", " ").split()
    if " ".join(words) != old:
        return None
    first, last = old.split()[0], old.split()[-1]
    at = start + len(gap[: gap.index(first)].encode())
    stop = start + len(gap[: gap.rindex(last) + len(last)].encode())
    return at, stop, new


def _edit(node: ast.AST, line: bytes) -> tuple[int, int, str, str] | None:
    """(start, end, new text, what) of the one-node change on ``line`` (UTF-8 bytes, byte
    offsets), or None."""
    end_of = lambda n: n.end_col_offset  # noqa: E731
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        old, new = BINARY[type(node.op)]
        found = _gap_edit(line, end_of(node.left), node.right.col_offset, old, new)
    elif isinstance(node, ast.AugAssign) and type(node.op) in BINARY:
        old, new = (s + "=" for s in BINARY[type(node.op)])
        found = _gap_edit(line, end_of(node.target), node.value.col_offset, old, new)
    elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARE:
        old, new = COMPARE[type(node.ops[0])]
        found = _gap_edit(line, end_of(node.left), node.comparators[0].col_offset, old, new)
    elif isinstance(node, ast.BoolOp):
        old, new = BOOLEAN[type(node.op)]
        found = _gap_edit(line, end_of(node.values[0]), node.values[1].col_offset, old, new)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Not):
        old, new = ("-" if isinstance(node.op, ast.USub) else "not"), ""
        found = node.col_offset, node.operand.col_offset, new
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        old, new = str(node.value), str(not node.value)
        found = node.col_offset, end_of(node), new
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        old, new = line[node.col_offset : end_of(node)].decode(), repr(node.value + 1)
        found = node.col_offset, end_of(node), new
    else:
        return None
    if found is None:
        return None
    start, stop, text = found
    return start, stop, text, f"{old} -> {new or '(dropped)'}"


def sweep(file: str, source: str, stages: list[str], lines: range | None = None) -> list:
    """The mutants of ``source`` (the text of ``file``), one per changeable node, on the
    lines in ``lines`` (all when None)."""
    from benchmarks.mutation import Mutant

    tree = ast.parse(source)
    text = source.split("\n")
    skip = _untouched(tree)
    out, seen, per_line = [], set(), Counter()
    for node in ast.walk(tree):
        first = getattr(node, "lineno", None)
        if first is None or id(node) in skip or first != getattr(node, "end_lineno", None):
            continue  # a node over several lines is left out (its edit would span them)
        if lines is not None and first not in lines:
            continue
        raw = text[first - 1].encode()  # ast's offsets count bytes of UTF-8
        found = _edit(node, raw)
        if found is None:
            continue
        start, stop, new, what = found
        line, mutated = text[first - 1], (raw[:start] + new.encode() + raw[stop:]).decode()
        if mutated == line or (first, mutated) in seen:
            continue
        seen.add((first, mutated))
        per_line[first] += 1
        name = f"{Path(file).stem}.sweep-L{first}-{per_line[first]}"
        m = Mutant(name, file, line, mutated, what, stages)
        m.at_line = first
        out.append(m)
    return sorted(out, key=lambda m: (m.at_line, m.id))
