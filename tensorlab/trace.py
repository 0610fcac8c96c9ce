"""Watch the chain rule run: print every step of a backward pass.

    with tl.trace_backward():
        loss.backward()

prints one line per op, in the order the engine runs them (reverse topological order): the
op, the shapes of its inputs, the gradient it receives and the gradients it sends to each
input, each as its shape and then its entries, signs and all, when it has at most 6 of them
(``(1,2) [3, -6]``), or its norm otherwise (``(4,3) |2.5|``). The recorded steps are kept in
``.steps``. :func:`summary` is the same description of one array, used by the drawings too.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import numpy as np

from tensorlab.function import Switch

ENTRIES = 6  # a tensor of at most this many entries is shown entry by entry


def _array(a) -> np.ndarray:
    return np.asarray(a.numpy() if hasattr(a, "numpy") else a, dtype=np.float64)


def _norm(t) -> float:
    return float(np.sqrt((np.asarray(t.numpy(), dtype=np.float64) ** 2).sum()))


def _entries(t, entries: int = ENTRIES) -> tuple[float, ...] | None:
    """The entries of ``t`` (flattened), or None when it has none or more than ``entries``."""
    a = _array(t)
    return tuple(a.ravel().tolist()) if 0 < a.size <= entries else None


def _fmt_entries(values) -> str:
    return "[" + ", ".join(f"{v:.3g}" for v in values) + "]"


def summary(a, what: str = "", entries: int = ENTRIES) -> str:
    """``|what| = norm`` of an array or Tensor, followed by its entries when it has at most
    ``entries`` of them (``|grad| = 1.41  [1, -1]``)."""
    a = _array(a)
    norm = float(np.sqrt((a**2).sum()))
    text = f"|{what}| = {norm:.3g}" if what else f"norm {norm:.3g}"
    values = _entries(a, entries)
    return text if values is None else f"{text}  {_fmt_entries(values)}"


def _shape(s) -> str:
    return "(" + ",".join(str(n) for n in s) + ("," if len(s) == 1 else "") + ")"


def _value(shape, norm: float, entries) -> str:
    """``(1,2) [3, -6]`` for a small tensor, ``(4,3) |2.5|`` (the norm) for a larger one."""
    return f"{_shape(shape)} " + (f"|{norm:.3g}|" if entries is None else _fmt_entries(entries))


@dataclass
class Step:
    """One op's backward: what came in and what went out."""

    op: str
    input_shapes: list[tuple[int, ...]]
    grad_shape: tuple[int, ...]
    grad_norm: float
    sent: list[tuple[tuple[int, ...], float] | None]  # per input: (shape, norm) or None
    grad_entries: tuple[float, ...] | None = None  # the gradient's entries, if at most ENTRIES
    sent_entries: list[tuple[float, ...] | None] = field(default_factory=list)  # per input

    def __str__(self) -> str:
        ins = " ".join(_shape(s) for s in self.input_shapes)
        entries = self.sent_entries or [None] * len(self.sent)
        outs = ", ".join(
            "-" if s is None else _value(s[0], s[1], e) for s, e in zip(self.sent, entries)
        )
        received = _value(self.grad_shape, self.grad_norm, self.grad_entries)
        return f"{self.op:<14} inputs {ins:<22} receives {received}  sends {outs}"


class trace_backward(Switch):
    """Print (and keep in ``.steps``) each step of every backward run inside the block (in
    this thread)."""

    switch = "trace"

    def __init__(self, file=None, quiet: bool = False):
        super().__init__(self._record)
        self.file = file
        self.quiet = quiet
        self.steps: list[Step] = []

    def _record(self, node, g, grads) -> None:
        inputs = node.inputs
        # (the engine has already put None where an input needs no gradient)
        sent = [None if gi is None else (tuple(gi.shape), _norm(gi)) for gi in grads]
        step = Step(
            node.name,
            [tuple(t.shape) for t in inputs],
            tuple(g.shape),
            _norm(g),
            sent,
            grad_entries=_entries(g),
            sent_entries=[None if gi is None else _entries(gi) for gi in grads],
        )
        self.steps.append(step)
        if not self.quiet:
            print(f"{len(self.steps):>3}. {step}", file=self.file or sys.stdout)
