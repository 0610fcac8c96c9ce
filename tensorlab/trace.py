"""Watch the chain rule run: print every step of a backward pass.

    with tl.trace_backward():
        loss.backward()

prints one line per op, in the order the engine runs them (reverse topological order): the
op, the shapes of its inputs, the gradient it receives (shape and norm) and the gradients it
sends to each input (shape and norm). The recorded steps are kept in ``.steps``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from tensorlab.function import Switch


def _norm(t) -> float:
    return float(np.sqrt((np.asarray(t.numpy(), dtype=np.float64) ** 2).sum()))


def _shape(s) -> str:
    return "(" + ",".join(str(n) for n in s) + ("," if len(s) == 1 else "") + ")"


@dataclass
class Step:
    """One op's backward: what came in and what went out."""

    op: str
    input_shapes: list[tuple[int, ...]]
    grad_shape: tuple[int, ...]
    grad_norm: float
    sent: list[tuple[tuple[int, ...], float] | None]  # per input: (shape, norm) or None

    def __str__(self) -> str:
        ins = " ".join(_shape(s) for s in self.input_shapes)
        outs = ", ".join("-" if s is None else f"{_shape(s[0])} |{s[1]:.3g}|" for s in self.sent)
        return (
            f"{self.op:<14} inputs {ins:<22} receives {_shape(self.grad_shape)} "
            f"|{self.grad_norm:.3g}|  sends {outs}"
        )


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
        step = Step(node.name, [tuple(t.shape) for t in inputs], tuple(g.shape), _norm(g), sent)
        self.steps.append(step)
        if not self.quiet:
            print(f"{len(self.steps):>3}. {step}", file=self.file or sys.stdout)
