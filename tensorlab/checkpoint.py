"""Activation checkpointing: ``y = tl.checkpoint(fn, *args)`` is ``fn(*args)`` that keeps none
of the arrays ``fn``'s ops save for backward, and recomputes them when the gradient arrives.

A training step holds, until its backward, every array the forward's ops saved: for a
transformer, a few activations of every layer. Wrapping each block in ``checkpoint`` keeps
only the block's inputs; the backward runs the block's forward once more (about a third more
compute for the step) to rebuild its graph, backpropagates through it, and drops it again.
So at most one block's activations are alive at a time.

How it is one node of the graph (:class:`Checkpoint`):

1. ``fn`` runs once with the graph recorded, inside a ``named_scope`` of its own, to find the
   tensors it reads from outside that require grad (a module's parameters, or any tensor
   computed earlier): these and the tensor arguments become the node's inputs, so the engine
   sends their gradients on like any op's. The recorded graph is then dropped: only the
   output's array is kept.
2. The node's backward runs ``fn`` again on the same inputs (with the random generators put
   back where they were, so dropout draws the same mask) and backpropagates ``g`` through the
   new graph, stopping at the inputs (``autograd.grads_at_inputs``, the mechanism the fused ops
   use under ``create_graph``); the graph is freed as soon as that returns.

Under ``create_graph=True`` the engine differentiates the node's ``composed`` form, which is
the same recomputation, so higher derivatives work too. The gradients are those of
``fn(*args)`` without checkpointing, bit for bit where the recomputation is deterministic.
``fn`` must return one Tensor, must not change its inputs in place, and, if it is random,
must draw from tensorlab's generators (``tensorlab.backend.generator``). It runs twice per
step, so its side effects (a module's forward hooks, an activation cache) happen twice.

Wiring it into a model is one line per block, e.g. in a GPT's loop over blocks::

    x = tl.checkpoint(block, x) if checkpointing else block(x)
"""

from __future__ import annotations

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
    spec = []
    for a in args:
        if isinstance(a, Tensor):
            if id(a) not in slots:
                slots[id(a)] = _Slot(len(inputs))
                inputs.append(a)
            spec.append(slots[id(a)])
        else:
            spec.append(a)
    scope = f"checkpoint{next(_serial)}"
    with named_scope(scope):
        y = fn(*args)
    if not isinstance(y, Tensor):
        raise TypeError(f"checkpoint: fn must return one Tensor, not {type(y).__name__}")
    if not y.requires_grad:
        return y
    for t in _outside_tensors(y, scope, set(slots)):
        if id(t) not in slots:
            slots[id(t)] = _Slot(len(inputs))
            inputs.append(t)
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


class _generators_at:
    """Inside the block the generators are in the saved states; afterwards they continue from
    where they were before it (the recomputation draws the same numbers and consumes none)."""

    def __init__(self, states: dict[str, object]):
        self.states = states

    def __enter__(self):
        self.before = _generator_states()
        for device, state in self.states.items():
            backend.set_generator_state(state, device)

    def __exit__(self, *exc):
        for device, state in self.before.items():
            backend.set_generator_state(state, device)
        return False
