"""NumPy calls on Tensors: ``np.sin(x)``, ``np.sum(x, axis=0)``, ``array * x``.

NumPy hands a call that involves a Tensor to ``Tensor.__array_ufunc__`` (ufuncs, and the ``*``
of ``array * x``) or ``Tensor.__array_function__`` (``np.sum``, ...). Without them it would
convert the tensor with ``__array__`` and return a plain array, the graph silently gone. So
each call runs the engine op of the same meaning (the tables below), returns a constant Tensor
for predicates and piecewise-constant ufuncs (``np.isnan``, ``np.floor``), or raises a
``TypeError`` that names the NumPy function (docs/autograd.md, section 9). ``np.asarray(x)`` is
a conversion, not a call: it still gives the values. ``x * y`` and ``x.sin()`` never come here.
"""

from __future__ import annotations

import numpy as np

from tensorlab.backend import xp_of
from tensorlab.ops.elementwise import Add, Div, Maximum, Minimum, Mul, Pow, Sub
from tensorlab.ops.linalg import MatMul, einsum
from tensorlab.ops.shape import concatenate, stack
from tensorlab.tensor import Tensor, _lift, where


def _arithmetic(op):
    """``op`` of two inputs, one a Tensor, the other lifted beside it (``array * x`` lands
    here, so this stays as short as ``Tensor.__rmul__``)."""

    def call(a, b):
        if isinstance(a, Tensor):
            return op.apply(a, _lift(b, a))
        return op.apply(_lift(a, b), b)

    return call


def _constant(ufunc):
    """A ufunc computed on the arrays, its result a constant Tensor (no gradient flows)."""

    def call(*args):
        # an array beside a tensor goes to the tensor's device (CuPy refuses host arrays)
        xp = xp_of(next(x for x in args if isinstance(x, Tensor)).data)
        arrays = [
            x.data if isinstance(x, Tensor) else xp.asarray(x) if isinstance(x, np.ndarray) else x
            for x in args
        ]
        return Tensor._wrap(ufunc(*arrays))

    return call


# ufunc -> what np.<ufunc>(...) runs (positional arguments only; the call form "__call__").
UFUNCS = {
    np.add: _arithmetic(Add),
    np.subtract: _arithmetic(Sub),
    np.multiply: _arithmetic(Mul),
    np.true_divide: _arithmetic(Div),
    np.power: _arithmetic(Pow),
    np.float_power: _arithmetic(Pow),
    np.matmul: _arithmetic(MatMul),
    np.maximum: _arithmetic(Maximum),
    np.minimum: _arithmetic(Minimum),
    np.negative: Tensor.__neg__,
    np.positive: Tensor.__pos__,
    np.exp: Tensor.exp,
    np.log: Tensor.log,
    np.sqrt: Tensor.sqrt,
    np.absolute: Tensor.abs,
    np.tanh: Tensor.tanh,
    np.sin: Tensor.sin,
    np.cos: Tensor.cos,
    np.square: lambda x: x * x,
    np.reciprocal: lambda x: 1.0 / x,
}
_PREDICATES = (
    "isnan isinf isfinite signbit less less_equal greater greater_equal equal not_equal "
    "logical_and logical_or logical_xor logical_not"
)
_PIECEWISE_CONSTANT = "floor ceil trunc rint sign"
for _name in (_PREDICATES + " " + _PIECEWISE_CONSTANT).split():
    UFUNCS[getattr(np, _name)] = _constant(getattr(np, _name))

# ufunc -> Tensor method for np.<ufunc>.reduce(x, axis=..., keepdims=...)
REDUCE = {np.add: "sum", np.multiply: "prod", np.maximum: "max", np.minimum: "min"}


def array_ufunc(ufunc, method: str, inputs: tuple, kwargs: dict):
    """``Tensor.__array_ufunc__`` when the fast path (a plain call in ``UFUNCS``) missed."""
    name = f"numpy.{ufunc.__name__}"
    if "out" in kwargs:
        raise TypeError(
            f"{name}(..., out=...) with a Tensor: results are new Tensors; write y = {name}(x)"
        )
    if method == "reduce" and ufunc in REDUCE and not set(kwargs) - {"axis", "keepdims"}:
        return getattr(inputs[0], REDUCE[ufunc])(
            kwargs.get("axis", 0), kwargs.get("keepdims", False)
        )
    if method == "accumulate" and ufunc is np.add and not set(kwargs) - {"axis"}:
        return inputs[0].cumsum(kwargs.get("axis", 0))
    form = name if method == "__call__" else f"{name}.{method}"
    if method == "__call__" and ufunc in UFUNCS:  # the op exists, not with these arguments
        raise TypeError(f"{form} on a Tensor takes no keyword arguments (got {sorted(kwargs)})")
    raise TypeError(
        f"{form} has no tensorlab op, so it would drop the graph: use the Tensor method, or "
        f"call it on the values ({form}(x.numpy())) for a plain array"
    )


def _reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    return a.reshape(shape if shape is not None else newshape)


def _where(condition, *branches):
    if len(branches) != 2:
        raise TypeError("numpy.where with one argument (the indices of nonzeros) needs an array")
    return where(condition, *branches)


def _dot(a, b, out=None):
    a, b = (a, _lift(b, a)) if isinstance(a, Tensor) else (_lift(a, b), b)
    if a.ndim > 2 or b.ndim > 2:
        raise TypeError("numpy.dot of Tensors with more than 2 axes: use matmul (a @ b)")
    return a * b if a.ndim == 0 or b.ndim == 0 else a @ b


def _tensors(xs) -> list[Tensor]:
    """``xs`` as Tensors: arrays beside the tensors among them go to those tensors' device."""
    device = next(x.device for x in xs if isinstance(x, Tensor))
    return [x if isinstance(x, Tensor) else Tensor(x, device=device) for x in xs]


# function -> its tensorlab form, taking NumPy's argument names (the common ones).
FUNCTIONS = {
    np.sum: lambda a, axis=None, keepdims=False: a.sum(axis, keepdims),
    np.mean: lambda a, axis=None, keepdims=False: a.mean(axis, keepdims),
    np.max: lambda a, axis=None, keepdims=False: a.max(axis, keepdims),
    np.min: lambda a, axis=None, keepdims=False: a.min(axis, keepdims),
    np.var: lambda a, axis=None, ddof=0, keepdims=False: a.var(axis, keepdims, ddof),
    np.std: lambda a, axis=None, ddof=0, keepdims=False: a.std(axis, keepdims, ddof),
    np.prod: lambda a, axis=None, keepdims=False: a.prod(axis, keepdims),
    np.cumsum: lambda a, axis=None: a.cumsum(axis),
    np.argmax: lambda a, axis=None, keepdims=False: a.argmax(axis, keepdims),
    np.argmin: lambda a, axis=None, keepdims=False: a.argmin(axis, keepdims),
    np.reshape: _reshape,
    np.transpose: lambda a, axes=None: a.T if axes is None else a.permute(axes),
    np.squeeze: lambda a, axis=None: a.squeeze(axis),
    np.expand_dims: lambda a, axis: a.unsqueeze(axis),
    np.broadcast_to: lambda a, shape: a.broadcast_to(shape),
    np.concatenate: lambda arrays, axis=0: concatenate(_tensors(arrays), axis),
    np.stack: lambda arrays, axis=0: stack(_tensors(arrays), axis),
    np.where: _where,
    np.clip: lambda a, a_min=None, a_max=None: a.clip(a_min, a_max),
    np.flip: lambda m, axis=None: m.flip(axis),
    np.roll: lambda a, shift, axis=None: a.roll(shift, axis),
    np.tile: lambda a, reps: a.tile(reps),
    np.repeat: lambda a, repeats, axis=None: a.repeat_interleave(repeats, axis),
    np.sort: lambda a, axis=-1, kind=None, order=None, stable=None: a.sort(axis).values,
    np.argsort: lambda a, axis=-1, kind=None, order=None, stable=None: a.argsort(axis),
    np.tril: lambda m, k=0: m.tril(k),
    np.triu: lambda m, k=0: m.triu(k),
    np.dot: _dot,
    np.einsum: lambda spec, *operands: einsum(spec, *_tensors(operands)),
    np.shape: lambda a: a.shape,
    np.ndim: lambda a: a.ndim,
    np.size: lambda a, axis=None: a.size if axis is None else a.shape[axis],
}


def array_function(func, args: tuple, kwargs: dict):
    """``Tensor.__array_function__``: the tensorlab form of ``func``, or a TypeError."""
    name = f"numpy.{func.__name__}"
    fn = FUNCTIONS.get(func)
    if fn is None:
        raise TypeError(
            f"{name} has no tensorlab form, so it would drop the graph: use Tensor ops, or "
            f"call it on the values ({name}(x.numpy(), ...)) for a plain array"
        )
    try:
        return fn(*args, **kwargs)
    except TypeError as err:
        if "argument" in str(err):  # a NumPy argument the tensorlab form does not take
            raise TypeError(f"{name} on a Tensor: {err}") from None
        raise
