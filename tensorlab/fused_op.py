"""FusedFunction: an op written as two formulas, run by every backend.

A fused op is one graph node for what would be many engine ops (GELU is about twenty). It is
written as exactly two functions of an array namespace ``xp``::

    class SiLUFn(FusedFunction):
        # y = x s, s = sigmoid(x);  dx = g s (1 + x (1 - s))
        saves = 1

        @staticmethod
        def forward_math(xp, x):
            s = 1.0 / (1.0 + xp.exp(-x))
            return x * s, s              # y, then what the backward reads

        @staticmethod
        def backward_math(xp, g, s, x):  # g, what the forward saved, the inputs
            return g * s * (1.0 + x * (1.0 - s))

``backward_math`` takes the incoming gradient, the arrays the forward saved (``saves`` of
them, returned after y: PyTorch's ``ctx.save_for_backward``), the op's inputs and its keyword
parameters, and returns one gradient per input (in the inputs' shapes or broadcast against
them: the engine sums a broadcast gradient back to its input's shape, which is how a norm's
gain gets its column sum). A forward that saves nothing returns y alone.
Four runners run the same two functions:

- C, on the CPU: :mod:`tensorlab.c_runner` traces each into one C loop over rows, compiled
  once (where a C compiler works).
- NumPy, on the CPU otherwise: :func:`tensorlab.fused.run_numpy`, block by block (cache-sized
  blocks of whole rows).
- CuPy: ``cupy.fuse`` compiles each into one GPU kernel (:class:`tensorlab.fused.fused`).
- Tensors: ``forward_math`` called with :data:`TENSOR`, whose ``exp``, ``tanh``, ``erf``,
  ``where``, ... are engine ops, *is* the op written as a graph of engine ops. That graph is
  what ``create_graph=True`` differentiates (:attr:`Function.composed`), so second derivatives
  come from the one forward formula, and the tests hold ``backward_math`` against autograd
  of it.

Nothing else is written per op: no CPU form beside a GPU form, no separate composed form.
``rows = True`` marks an op whose formulas reduce over the last axis (norms): the C loop and
NumPy's blocks then see whole rows.
"""

from __future__ import annotations

import numpy as np

import tensorlab.method_functions as F
from tensorlab.creation import arange
from tensorlab.function import Function
from tensorlab.fused import HALF, fused
from tensorlab.ops.special import erf
from tensorlab.tensor import Tensor, where


def _where(condition, a, b):
    """where with a Tensor condition (its array: a condition carries no gradient)."""
    cond = condition.data if isinstance(condition, Tensor) else condition
    return where(cond, a, b)


class _TensorMath:
    """``xp`` for Tensors: each name is the engine op of the same meaning, so a formula run
    with it builds the graph that autograd differentiates."""

    exp = staticmethod(F.exp)
    log = staticmethod(F.log)
    sqrt = staticmethod(F.sqrt)
    abs = staticmethod(F.abs)
    tanh = staticmethod(lambda x: x.tanh())
    erf = staticmethod(erf)
    where = staticmethod(_where)
    maximum = staticmethod(F.maximum)
    minimum = staticmethod(F.minimum)
    arange = staticmethod(arange)

    @staticmethod
    def max(x, axis=None, keepdims=False):
        return x.max(axis=axis, keepdims=keepdims)

    @staticmethod
    def take_along_axis(x, index, axis):
        return x.gather(axis, index)

    @staticmethod
    def expm1(x):
        return F.exp(x) - 1.0

    @staticmethod
    def sum(x, axis=None, keepdims=False):
        return x.sum(axis=axis, keepdims=keepdims)

    @staticmethod
    def mean(x, axis=None, keepdims=False):
        return x.mean(axis=axis, keepdims=keepdims)


TENSOR = _TensorMath()


class FusedFunction(Function):
    """Base class of the fused ops: subclasses define ``forward_math(xp, *inputs, **params)``
    and ``backward_math(xp, g, *inputs, **params)`` (see the module docstring)."""

    rows = False  # True: the formulas reduce over the last axis
    saves = 0  # arrays forward_math returns after y, which backward_math reads after g

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        cls._forward_kernel = fused(cls.forward_math, rows=cls.rows, widen=True, keep=cls.saves)
        cls._backward_kernel = fused(cls.backward_math, rows=cls.rows, widen=True)
        cls._forward_kernel.__name__ = f"{cls.__name__}_forward"  # the GPU kernels' names
        cls._backward_kernel.__name__ = f"{cls.__name__}_backward"

    @staticmethod
    def forward_math(xp, *inputs, **params):
        raise NotImplementedError

    @staticmethod
    def backward_math(xp, g, *inputs, **params):
        raise NotImplementedError

    def forward(ctx, *arrays, **params):
        out = ctx._forward_kernel(*arrays, **params)
        if not ctx.saves:
            return out
        ctx.saved = out[1:]
        return out[0]

    def backward(ctx, g):
        arrays = [t.data for t in ctx.inputs]
        saved = ctx.saved if ctx.saves else ()
        grads = ctx._backward_kernel(g.data, *saved, *arrays, **ctx.params)
        return grads if isinstance(grads, tuple) else (grads,)

    @classmethod
    def composed(cls, *inputs, **params):
        """The op as engine ops: its forward formula run on Tensors (half inputs in float32,
        the result rounded back once, as the array runners do)."""
        half = inputs[0].dtype if inputs[0].data.dtype in HALF else None
        if half is not None:
            inputs = tuple(t.astype(np.float32) if t.data.dtype in HALF else t for t in inputs)
        y = cls.forward_math(TENSOR, *inputs, **params)
        y = y[0] if cls.saves else y
        return y if half is None else y.astype(half)


def fused_functions() -> list[type[FusedFunction]]:
    """Every FusedFunction subclass defined so far (the tests enumerate them)."""
    found, todo = [], list(FusedFunction.__subclasses__())
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return sorted(found, key=lambda c: (c.__module__, c.__name__))
