"""Activation checkpointing: ``y = tl.checkpoint(fn, *args)`` is ``fn(*args)`` that keeps none
of the arrays ``fn``'s ops save for backward, and recomputes them when the gradient arrives.
Wrap each block of a deep network (``x = tl.checkpoint(block, x)``) and only one block's
activations are alive at a time, for one more forward per step (docs/autograd.md, section 11).

It is one node of the graph (:class:`Checkpoint`). ``fn`` runs once with the graph recorded,
inside a ``named_scope`` of its own, to find the tensors it reads from outside that require
grad (a module's parameters, earlier results): with the tensor arguments they become the
node's inputs, and that graph is dropped. The backward runs ``fn`` again on the inputs, with
the random generators put back where they were (dropout draws the same mask), and
backpropagates ``g`` to the inputs (``autograd.grads_at_inputs``, as the fused ops do under
``create_graph``); under ``create_graph=True`` the engine differentiates the same
recomputation (``composed``). ``fn`` must return one Tensor, must not change its inputs in
place, and must draw random numbers from tensorlab's generators; its side effects (hooks, an
activation cache) happen twice.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable

from tensorlab import autograd, backend
from tensorlab.function import Function, named_scope
from tensorlab.tensor import Tensor

_serial = itertools.count()


class Checkpoint(Function):
    """y = fn(*args), with no saved arrays but the inputs;  d(input) = the gradient of
    g · fn(*args) at each input, from ``fn`` recomputed in backward.

    ``apply(*inputs, fn=..., args=..., rng=..., value=[y array])``: ``inputs`` are the tensor
    arguments and the outside tensors ``fn`` reads; ``args`` is the argument list with
    ``_Slot(i)`` where ``inputs[i]`` goes; ``rng`` the generators' states before the forward."""

    def forward(ctx, *arrays, fn, args, rng, value):
        return value.pop()  # computed by checkpoint() already; not kept in ctx.params

    def backward(ctx, g):
        with autograd.enable_grad():
            y = Checkpoint.composed(*ctx.inputs, **ctx.params)
        return tuple(autograd.grads_at_inputs(y, g, ctx.inputs, create_graph=False))

    @staticmethod
    def composed(*inputs, fn, args, rng, value):
        """fn(*args) again on ``inputs``, the random generators as they were at the forward."""
        with _generators_at(rng):
            return fn(*[inputs[a.i] if isinstance(a, _Slot) else a for a in args])


class _Slot:
    """Where input ``i`` of the node goes in the argument list."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def checkpoint(fn: Callable[..., Tensor], *args) -> Tensor:
    """``fn(*args)``, recomputed in backward instead of keeping its activations (module
    docstring). Outside a graph (``no_grad``, or nothing requiring grad) it is ``fn(*args)``."""
    if not autograd.is_grad_enabled():
        return fn(*args)
    rng = _generator_states()
    inputs: list[Tensor] = []
    slots: dict[int, _Slot] = {}

    def slot(t: Tensor) -> _Slot:  # t's place among the node's inputs (added once)
        if id(t) not in slots:
            slots[id(t)] = _Slot(len(inputs))
            inputs.append(t)
        return slots[id(t)]

    spec = [slot(a) if isinstance(a, Tensor) else a for a in args]
    scope = f"checkpoint{next(_serial)}"
    with named_scope(scope):
        y = fn(*args)
    if not isinstance(y, Tensor):
        raise TypeError(f"checkpoint: fn must return one Tensor, not {type(y).__name__}")
    if not y.requires_grad:
        return y
    for t in _outside_tensors(y, scope, set(slots)):
        slot(t)
    value = [y.data]
    del y  # the graph fn recorded, and every array its ops saved, go here
    return Checkpoint.apply(*inputs, fn=fn, args=spec, rng=rng, value=value)


def _outside_tensors(y: Tensor, scope: str, args: set[int]) -> list[Tensor]:
    """The tensors that require grad, reached from ``y`` back through the nodes recorded in
    ``scope``, that were not made there: leaves (parameters) and earlier results."""
    found, seen, stack = [], set(), [y]
    while stack:
        t = stack.pop()
        if id(t) in seen or not t.requires_grad:
            continue
        seen.add(id(t))
        ctx = t._ctx
        if id(t) in args or ctx is None or scope not in (ctx.scope or "").split("."):
            if id(t) not in args:
                found.append(t)
            continue
        stack.extend(ctx.inputs)
    return found


def _generator_states() -> dict[str, object]:
    """A copy of the state of each device's random generator (backend.generator_state)."""
    return {
        device: backend.generator_state(device)
        for device in backend.DEVICES
        if device == "cpu" or backend.cuda_available()
    }


@contextlib.contextmanager
def _generators_at(states: dict[str, object]):
    """Inside the block the generators are in the saved states; afterwards they continue from
    where they were before it (the recomputation draws the same numbers and consumes none)."""
    before = _generator_states()
    for device, state in states.items():
        backend.set_generator_state(state, device)
    try:
        yield
    finally:
        for device, state in before.items():
            backend.set_generator_state(state, device)
