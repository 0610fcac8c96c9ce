"""Tensor: an array, its gradient, and a link to the op that produced it.

A Tensor holds

- ``data``: a NumPy array on ``"cpu"`` or a CuPy array on ``"cuda"`` (the device follows the array),
- ``requires_grad``: whether gradients should flow to it,
- ``grad``: the accumulated gradient (a Tensor) after ``backward()``, for leaves,
- ``_ctx``: the :class:`~tensorlab.function.Function` node that made it (``None`` for leaves).

Its operators and methods do no math themselves: each delegates to one op in ``tensorlab.ops``
(``a * b`` is ``Mul.apply(a, b)``), which is where forward and backward live.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections import namedtuple
from collections.abc import Callable, Sequence

import numpy as np

from tensorlab.backend import (
    BFLOAT16,
    DEFAULT_DTYPE,
    as_dtype,
    device_of,
    is_float,
    to_device,
    xp_of,
)

Axis = int | tuple[int, ...] | None
# What sort and topk return, as in PyTorch: ``values, indices = x.sort()`` or ``.values``.
Sorted = namedtuple("Sorted", ["values", "indices"])


def _lift(x, like: Tensor) -> Tensor:
    """A constant Tensor for a Python scalar or array used beside ``like`` in an op.

    Python scalars take ``like``'s dtype (``x * 2`` stays float32), as in NumPy 2 and PyTorch.
    """
    if isinstance(x, Tensor):
        return x
    xp = xp_of(like.data)
    floating = is_float(like.data.dtype)
    if isinstance(x, bool | int) and not isinstance(x, np.ndarray):
        # (an int beside a boolean tensor counts: mask + 1 is int64, as in NumPy and PyTorch)
        numeric = isinstance(x, bool) or like.data.dtype.kind != "b"
        dtype = like.data.dtype if numeric else np.int64
    elif isinstance(x, float):
        dtype = like.data.dtype if floating else DEFAULT_DTYPE
    else:
        arr = xp.asarray(x)
        dtype = like.data.dtype if (floating and is_float(arr.dtype)) else arr.dtype
        arr = arr.astype(dtype, copy=False)
        if arr is x and like.requires_grad and _modes.grad_enabled:
            arr = arr.copy()  # the caller's array, which the backward may read: keep a copy
        return Tensor._wrap(arr)
    return Tensor._wrap(xp.asarray(x, dtype=dtype))


def _axis(axis) -> Axis:
    return tuple(axis) if isinstance(axis, list) else axis


def sizes_of(args) -> tuple:
    """The sizes (or axes) given as ``f(2, 3)`` or ``f((2, 3))``, as one tuple."""
    return tuple(args[0]) if len(args) == 1 and isinstance(args[0], tuple | list) else args


def axis_index(op: str, axis: int, ndim: int) -> int:
    """``axis`` counted from 0 (``-1`` is the last of ``ndim`` axes), or an error naming the op:
    an axis out of range never wraps around to another one (``sum(5)`` of a matrix is not
    ``sum(1)``). The error is NumPy's AxisError, both a ValueError and an IndexError."""
    if not isinstance(axis, numbers.Integral):
        raise TypeError(
            f"{op}: axis must be an integer (or a tuple of them), got {type(axis).__name__} "
            f"{axis!r}"
        )
    if not -ndim <= axis < ndim:
        valid = f"valid: {-ndim}..{ndim - 1}" if ndim else "a 0-d tensor has none"
        raise np.exceptions.AxisError(
            f"{op}: axis {axis} is out of range for a tensor of {ndim} axes ({valid})"
        )
    return axis % ndim


def axes_index(op: str, axis: Axis | list, ndim: int) -> tuple[int, ...]:
    """``axis`` (an int, a tuple or list of them, or None: every axis) as axes counted from 0,
    each checked by :func:`axis_index` and named once."""
    if axis is None:
        return tuple(range(ndim))
    if not isinstance(axis, tuple | list):  # an int (a NumPy integer too)
        return (axis_index(op, axis, ndim),)
    axes = tuple(axis_index(op, a, ndim) for a in axis)
    if len(set(axes)) != len(axes):
        raise ValueError(f"{op}: axis {tuple(axis)} names an axis twice; name each once")
    return axes


def _in_place(name: str, op):
    """The method ``x.name(other)`` that runs ``op`` (``operator.isub``, ...) in x's memory."""

    def method(self, other):
        return self._update(name, op, other)

    return method


def _comparison(op):
    """The comparison ``x op y`` (``np.less``, ...): a boolean tensor, no gradient."""

    def method(self, other):
        return Tensor._wrap(op(self.data, other.data if isinstance(other, Tensor) else other))

    return method


class Tensor:
    """An n-dimensional array that can record the operations applied to it.

    ``Tensor(data)`` (and ``tl.tensor(data)``) copies: the new tensor owns its memory, whether
    ``data`` is Python data, a NumPy/CuPy array or another Tensor, as ``torch.tensor`` does.
    ``tl.from_numpy(a)`` shares ``a``'s memory instead (changing one changes the other). The
    ops wrap their results without a copy (``Tensor._wrap``).
    """

    __slots__ = (
        "data",
        "grad",
        "requires_grad",
        "_ctx",
        "_vc",
        "_hooks",
        "_retains_grad",
        "name",
        "__weakref__",
    )

    def __init__(
        self,
        data,
        requires_grad: bool = False,
        dtype=None,
        device: str | None = None,
        name: str | None = None,
    ):
        if isinstance(data, Tensor):
            data = data.data
        given = data  # an array passed in is copied below: the new tensor owns its memory
        try:
            xp = xp_of(data)
        except TypeError:
            xp = np
        if xp is np:
            was_array = isinstance(data, np.ndarray | np.generic)
            data = np.asarray(data, dtype=dtype)  # host: Python data or a NumPy array
            if dtype is None and not was_array and data.dtype == np.float64:
                data = data.astype(DEFAULT_DTYPE)  # Python floats become float32
            if data.dtype.kind not in "biufc" and data.dtype != BFLOAT16:
                raise TypeError(
                    f"tensor: cannot make a tensor of {type(given).__name__} data {given!r:.60} "
                    f"(NumPy dtype {data.dtype}); give numbers, nested lists of numbers or a "
                    "numeric array"
                )
        elif dtype is not None:
            data = data.astype(dtype, copy=False)
        if device is not None:
            data = to_device(data, device)
        if data is given or data.base is given:
            data = data.copy()
        if requires_grad and not is_float(data.dtype):
            raise TypeError(
                f"only floating-point tensors can require gradients; this one has dtype "
                f"{data.dtype} (integer and boolean tensors index and count, they are not "
                "differentiated)"
            )
        self.data = data
        self.requires_grad = bool(requires_grad)
        self.grad = None
        self._ctx = None
        self._vc = [0]
        self._hooks = None
        self._retains_grad = False
        self.name = name

    @staticmethod
    def _wrap(data) -> Tensor:
        """A constant Tensor around ``data`` (no checks: the fast path for internal use)."""
        t = Tensor.__new__(Tensor)
        t.data = data
        t.requires_grad = False
        t.grad = None
        t._ctx = None
        t._vc = [0]
        t._hooks = None
        t._retains_grad = False
        t.name = None
        return t

    # ------------------------------------------------------------------ properties
    @property
    def _version(self) -> int:
        """How many in-place changes the memory behind this tensor has seen. A tensor, its
        views (reshape, slices, transposes ... made by ops) and its ``detach()`` share one
        counter (``_vc``), as they share memory: changing one changes them all. Backward
        compares it with the value saved at the forward pass."""
        return self._vc[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def device(self) -> str:
        return device_of(self.data)

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None

    @property
    def grad_fn(self):
        """The Function node that produced this tensor, or None for a leaf."""
        return self._ctx

    @property
    def T(self) -> Tensor:
        """All axes reversed (NumPy's ``.T``)."""
        return Permute.apply(self, axes=tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self) -> Tensor:
        """The last two axes swapped: the matrix transpose of a batch of matrices."""
        return self.transpose(-2, -1)

    def __len__(self) -> int:
        return len(self.data)

    def __iter__(self):
        """The sub-tensors along axis 0 (``for row in x``, ``a, b = x``), each ``x[i]``."""
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(len(self)))

    def __repr__(self) -> str:
        values = self.numpy()  # a host copy, for printing
        if values.dtype == BFLOAT16:  # NumPy prints ml_dtypes' bfloat16 without its decimals
            values = values.astype(np.float32)
        body = np.array2string(values, precision=4, separator=", ", prefix="tensor(")  # host: copy
        extra = []
        if self.dtype != DEFAULT_DTYPE:
            extra.append(f"dtype={self.dtype}")
        if self.device != "cpu":
            extra.append(f"device='{self.device}'")
        if self._ctx is not None:
            extra.append(f"grad_fn={self._ctx.name}")
        elif self.requires_grad:
            extra.append("requires_grad=True")
        return f"tensor({body}{''.join(', ' + e for e in extra)})"

    # ------------------------------------------------------------------ interop
    def numpy(self) -> np.ndarray:
        """The data as a NumPy array (copied from the GPU if needed; shared on the CPU)."""
        return to_device(self.data, "cpu")

    def item(self):
        return self.data.item()

    def tolist(self):
        return self.data.tolist()

    def __array__(self, dtype=None, copy=None):
        a = self.numpy()
        return a if dtype is None else a.astype(dtype, copy=False)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """``np.sin(x)``, ``array * x``: the engine op of the same meaning, or a TypeError
        naming the ufunc; never a plain array that has lost the graph (numpy_protocol.py)."""
        if method == "__call__" and not kwargs:
            op = _UFUNCS.get(ufunc)
            if op is not None:
                return op(*inputs)
        return _array_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        """``np.sum(x)``, ``np.concatenate([x, y])``: as ``__array_ufunc__``, for functions."""
        return _array_function(func, args, kwargs)

    def __dlpack__(self, *args, **kwargs):
        return self.data.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()

    def __bool__(self) -> bool:
        return bool(self.data)

    def __float__(self) -> float:
        return float(self.data)

    def __int__(self) -> int:
        return int(self.data)

    __hash__ = object.__hash__

    # ------------------------------------------------------------------ devices and dtypes
    def to(self, device_or_dtype) -> Tensor:
        """A copy on another device (``"cpu"``/``"cuda"``) or with another float dtype.

        Differentiable: the gradient flows back to the original device and dtype.
        """
        if isinstance(device_or_dtype, str) and device_or_dtype.split(":")[0] in ("cpu", "cuda"):
            if device_or_dtype.split(":")[0] == self.device:
                return self
            return ToDevice.apply(self, device=device_or_dtype)
        try:
            dtype = as_dtype(device_or_dtype)
        except TypeError as e:
            raise TypeError(
                f"to: {device_or_dtype!r} is neither a device ('cpu', 'cuda') nor a dtype ({e})"
            ) from None
        if dtype == self.dtype:
            return self
        if not is_float(dtype):  # integer tensors never require grad: a constant
            return Tensor._wrap(self.data.astype(dtype))
        return Cast.apply(self, dtype=dtype)

    def astype(self, dtype) -> Tensor:
        return self.to(dtype)

    def float(self) -> Tensor:
        return self.to(np.float32)

    def double(self) -> Tensor:
        return self.to(np.float64)

    def cpu(self) -> Tensor:
        return self.to("cpu")

    def cuda(self) -> Tensor:
        return self.to("cuda")

    # ------------------------------------------------------------------ autograd
    def backward(self, grad=None, retain_graph: bool = False, create_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad."""
        from tensorlab.autograd import backward

        backward(self, grad, retain_graph=retain_graph, create_graph=create_graph)

    def detach(self) -> Tensor:
        """The same data, cut from the graph (shares memory and its version counter; never
        requires grad)."""
        t = Tensor._wrap(self.data)
        t._vc = self._vc
        return t

    def requires_grad_(self, flag: bool = True) -> Tensor:
        if flag and not is_float(self.data.dtype):
            raise TypeError(f"only floating-point tensors can require gradients, not {self.dtype}")
        if not flag and self._ctx is not None:
            raise RuntimeError("requires_grad_(False) is only for leaves; use .detach()")
        self.requires_grad = flag
        return self

    def retain_grad(self) -> Tensor:
        """Keep ``.grad`` for this non-leaf tensor after backward (leaves always keep it)."""
        self._retains_grad = True
        return self

    def register_hook(self, hook: Callable[[Tensor], Tensor | None]) -> Callable[[], None]:
        """Call ``hook(grad)`` when this tensor's gradient is computed.

        The hook may return a Tensor to use in place of the gradient. Returns a function that
        removes the hook.
        """
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that does not require grad")
        if self._hooks is None:
            self._hooks = []
        self._hooks.append(hook)
        return lambda: self._hooks.remove(hook)

    # ------------------------------------------------------------------ in place (no graph)
    def _inplace(self, name: str, other=None) -> None:
        """The rule of every in-place change (``add_``, ``x += y``, ``x[i] = v``, ...): it is
        never recorded in the graph, so under grad mode it is refused on a tensor that requires
        grad (a leaf, as in PyTorch, or an op's output: write ``y = y + 1``) and with a value
        that requires grad (its gradient would be lost). Each change bumps the version counter
        shared with views and ``detach()``es (docs/autograd.md, section 6)."""
        if _modes.grad_enabled:
            if self.requires_grad:
                if self._ctx is None:
                    raise RuntimeError(
                        f"{name}: a leaf tensor that requires grad (shape {self.shape}) is used "
                        "in an in-place operation; wrap the update in tensorlab.no_grad() "
                        "(p -= lr * p.grad), or write it out of place (y = x + 1)"
                    )
                raise RuntimeError(
                    f"{name}: in-place change of a tensor of shape {self.shape} that requires "
                    "grad (an op's output); tensorlab records no in-place ops: write it out of "
                    "place (y = y + 1), or wrap it in tensorlab.no_grad()"
                )
            if isinstance(other, Tensor) and other.requires_grad:
                raise RuntimeError(
                    f"{name}: the operand of shape {other.shape} requires grad but the tensor "
                    f"of shape {self.shape} changed in place does not, so its gradient would be "
                    "lost; write it out of place (y = x + other)"
                )
        self._vc[0] += 1

    def _update(self, name: str, op, other) -> Tensor:
        """``op(self.data, other)`` in the same memory (``op`` is ``operator.iadd`` for
        ``x += y``, and so on). ``other`` must broadcast to this tensor's shape and the result
        cast to its dtype, as in PyTorch; otherwise a one-line error and nothing changes."""
        o = other.data if isinstance(other, Tensor) else other
        self._inplace(name, other)
        try:
            op(self.data, o)
        except (TypeError, ValueError) as e:
            self._vc[0] -= 1  # nothing was written
            what = f"shape {np.shape(o)} {getattr(o, 'dtype', type(o).__name__)}"
            raise (TypeError if isinstance(e, TypeError) else ValueError)(
                f"{name}: cannot update a tensor of shape {self.shape} {self.dtype} in place "
                f"with an operand of {what} ({' '.join(str(e).split())}); the operand must "
                f"broadcast to {self.shape} and the result cast to {self.dtype}"
            ) from None
        return self

    def zero_(self) -> Tensor:
        self._inplace("zero_")
        self.data[...] = 0
        return self

    def fill_(self, value) -> Tensor:
        self._inplace("fill_", value)
        self.data[...] = value.data if isinstance(value, Tensor) else value
        return self

    def copy_(self, src) -> Tensor:
        """Write ``src``'s values into this tensor (broadcast to its shape, cast to its dtype),
        from whichever device holds them, as PyTorch's ``copy_``."""
        self._inplace("copy_", src)
        src = src.data if isinstance(src, Tensor) else src
        self.data[...] = to_device(src, self.device) if hasattr(src, "dtype") else src
        return self

    def add_(self, other, alpha: float = 1.0) -> Tensor:
        return self._update("add_", operator.iadd, other if alpha == 1.0 else alpha * other)

    # ``x += y`` changes x in place (PyTorch's meaning), so ``p -= lr * p.grad`` inside
    # ``no_grad()`` updates the parameter instead of rebinding the name to a new tensor.
    # Refused under grad mode on a tensor that requires grad (:meth:`_inplace`).
    sub_ = _in_place("sub_", operator.isub)
    mul_ = _in_place("mul_", operator.imul)
    div_ = _in_place("div_", operator.itruediv)
    __iadd__ = _in_place("+=", operator.iadd)
    __isub__ = _in_place("-=", operator.isub)
    __imul__ = _in_place("*=", operator.imul)
    __itruediv__ = _in_place("/=", operator.itruediv)

    def __setitem__(self, key, value) -> None:
        self._inplace("__setitem__", value)
        self.data[_index_key(key, self.data)] = value.data if isinstance(value, Tensor) else value

    # ------------------------------------------------------------------ arithmetic
    # a + b, a - b, a * b, a / b and their reflected forms (2 - a), -a, the elementwise
    # functions (exp, log, ...) and the reductions (sum, mean, ...) are one op each: they are
    # set on Tensor from the table at the end of this file, once the ops (which import Tensor)
    # exist.
    def __pos__(self):
        return self

    def __pow__(self, exponent):
        if isinstance(exponent, Tensor):
            return Pow.apply(self, exponent)
        if isinstance(exponent, np.generic):  # np.float64(2): a number, as 2.0 is (x's dtype)
            exponent = exponent.item()
        if isinstance(exponent, int | float):
            return PowScalar.apply(self, p=exponent)
        return Pow.apply(self, _lift(exponent, self))  # an array or list: one per entry

    pow = __pow__

    def __rpow__(self, base):
        return Pow.apply(_lift(base, self), self)

    def __matmul__(self, other):
        a, b = self, _lift(other, self)
        if _modes.autocast is not None:  # inside tl.autocast: the product in its dtype
            a, b = autocast_inputs(a, b)
        return MatMul.apply(a, b)

    def __rmatmul__(self, other):
        return _lift(other, self).__matmul__(self)

    # comparisons give boolean tensors (no gradient)
    __lt__ = _comparison(np.less)
    __le__ = _comparison(np.less_equal)
    __gt__ = _comparison(np.greater)
    __ge__ = _comparison(np.greater_equal)
    __eq__ = _comparison(np.equal)
    __ne__ = _comparison(np.not_equal)

    def __invert__(self):
        return Tensor._wrap(~self.data)

    # ------------------------------------------------------------------ elementwise
    def clip(self, min=None, max=None) -> Tensor:  # noqa: A002 - NumPy's names
        if min is None and max is None:
            raise ValueError(f"clip: min and max are both None (shape {self.shape}); give one")
        return Clip.apply(self, lo=min, hi=max)

    clamp = clip  # PyTorch's name

    def masked_fill(self, mask, value: float) -> Tensor:
        """``value`` where ``mask`` is true, ``self`` elsewhere (``mask`` broadcasts)."""
        return where(mask, value, self)

    # ------------------------------------------------------------------ reductions
    def var(self, axis: Axis = None, keepdims: bool = False, ddof: int = 0) -> Tensor:
        return Var.apply(self, axis=_axis(axis), keepdims=keepdims, ddof=ddof)

    def std(self, axis: Axis = None, keepdims: bool = False, ddof: int = 0) -> Tensor:
        """√var (``ddof=0`` as NumPy; PyTorch's default is ``correction=1``, i.e. ddof=1)."""
        return Std.apply(self, axis=_axis(axis), keepdims=keepdims, ddof=ddof)

    def cumsum(self, axis: int | None = None) -> Tensor:
        """Running sum along ``axis``; ``None`` flattens first (NumPy's rule)."""
        if axis is None:
            return Cumsum.apply(self.reshape(-1), axis=0)
        if self.ndim == 0:  # (axis 0 or -1 names the one entry, as in PyTorch)
            axis_index("cumsum", axis, 1)
            return self.reshape(1).cumsum(0).reshape(())
        return Cumsum.apply(self, axis=axis_index("cumsum", axis, self.ndim))

    def softmax(self, axis: int = -1) -> Tensor:
        return Softmax.apply(self, axis=axis)

    def log_softmax(self, axis: int = -1) -> Tensor:
        return LogSoftmax.apply(self, axis=axis)

    def argsort(self, axis: int = -1, descending: bool = False) -> Tensor:
        """The indices that sort ``self`` along ``axis`` (int64, no gradient). Stable: equal
        entries keep their order, in both directions."""
        a = self.data
        xp = xp_of(a)
        if a.dtype == BFLOAT16:  # sorted as float32 (the same order; CuPy sorts no bfloat16)
            a = a.astype(np.float32)
        if not descending:
            return Tensor._wrap(xp.argsort(a, axis=axis, kind="stable"))
        # reverse, sort ascending (stable), reverse back: descending with ties in input order
        n = a.shape[axis] if a.ndim else 1
        rev = xp.flip(xp.argsort(xp.flip(a, axis), axis=axis, kind="stable"), axis)
        return Tensor._wrap(n - 1 - rev)

    def sort(self, axis: int = -1, descending: bool = False) -> Sorted:
        """(values, indices) along ``axis``, as PyTorch's ``sort``; the values are
        ``gather(axis, indices)``, so each gets the gradient of the entry it came from.
        Ties: stable, equal entries keep their input order."""
        if self.ndim == 0:
            return Sorted(self * 1, Tensor._wrap(xp_of(self.data).zeros((), dtype=np.int64)))
        axis = axis_index("sort", axis, self.ndim)
        idx = self.argsort(axis, descending)
        return Sorted(Gather.apply(self, axis=axis, index=idx.data), idx)

    def topk(self, k: int, axis: int = -1, largest: bool = True, sorted: bool = True) -> Sorted:  # noqa: A002
        """The ``k`` largest (``largest=False``: smallest) entries along ``axis`` and their
        indices, in sorted order, as PyTorch's ``topk`` (``sorted`` is taken for its signature:
        the result is always sorted). The values are a gather, as in :meth:`sort`. Ties: the
        lower index first."""
        ax = axis_index("topk", axis, self.ndim) if self.ndim else 0
        n = self.shape[ax] if self.ndim else 1
        if not 0 <= k <= n:
            raise ValueError(
                f"topk: k={k} is out of range for axis {axis} of shape {self.shape}: 0 <= k <= {n}"
            )
        if self.ndim == 0:
            return self.sort()
        idx = self.argsort(ax, descending=largest).data
        idx = idx[(slice(None),) * ax + (slice(0, k),)]
        return Sorted(Gather.apply(self, axis=ax, index=idx), Tensor._wrap(idx))

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return Tensor._wrap(self.data.argmax(axis=axis, keepdims=keepdims))

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return Tensor._wrap(self.data.argmin(axis=axis, keepdims=keepdims))

    # ------------------------------------------------------------------ shape
    def reshape(self, *shape) -> Tensor:
        return Reshape.apply(self, shape=sizes_of(shape))

    view = reshape

    def flatten(self, start: int = 0, end: int = -1) -> Tensor:
        s = self.shape
        if not s:  # a 0-d tensor flattens to one entry (axes 0 and -1 name it, as in PyTorch)
            axis_index("flatten", start, 1), axis_index("flatten", end, 1)
            return self.reshape(1)
        start, end = axis_index("flatten", start, len(s)), axis_index("flatten", end, len(s))
        if start > end:
            raise ValueError(
                f"flatten: start axis {start} comes after end axis {end} (shape {s}); "
                "need start <= end"
            )
        # the product, not -1: with a 0 among the other axes, -1 could be any size
        return self.reshape(s[:start] + (math.prod(s[start : end + 1]),) + s[end + 1 :])

    def permute(self, *axes) -> Tensor:
        return Permute.apply(self, axes=sizes_of(axes))

    def transpose(self, axis0: int = -2, axis1: int = -1) -> Tensor:
        """Swap two axes (PyTorch's meaning; NumPy's ``transpose(axes)`` is ``permute``)."""
        axes = list(range(self.ndim))
        i, j = axis_index("transpose", axis0, self.ndim), axis_index("transpose", axis1, self.ndim)
        axes[i], axes[j] = axes[j], axes[i]
        return Permute.apply(self, axes=tuple(axes))

    def expand(self, *shape) -> Tensor:
        shape = sizes_of(shape)
        shape = tuple(
            s if s != -1 else self.shape[i - len(shape) + self.ndim] for i, s in enumerate(shape)
        )
        return BroadcastTo.apply(self, shape=shape)

    broadcast_to = expand

    def flip(self, axis: Axis = None) -> Tensor:
        """Reverse the order along ``axis`` (None: every axis): indexing with step -1, so the
        gradient is g flipped back (the backward of indexing, section 7 of derivations.md)."""
        key = [slice(None)] * self.ndim
        for a in axes_index("flip", axis, self.ndim):
            key[a] = slice(None, None, -1)
        return GetItem.apply(self, key=tuple(key))

    def roll(self, shifts, axis: Axis = None) -> Tensor:
        """Shift cyclically by ``shifts`` along ``axis`` (None: over the flattened tensor,
        then the shape is restored), as ``np.roll`` and ``torch.roll``."""
        return Roll.apply(self, shifts=_axis(shifts), axis=_axis(axis))

    def tile(self, *reps) -> Tensor:
        """The tensor repeated ``reps[i]`` times along axis i (missing reps count as 1, extra
        ones add leading axes), as ``np.tile``: a reshape that interleaves size-1 axes, an
        expand of those to reps, and a reshape back. No new op: the gradient sums the copies."""
        reps = sizes_of(reps)
        n = max(len(reps), self.ndim)
        reps = (1,) * (n - len(reps)) + tuple(reps)
        shape = (1,) * (n - self.ndim) + self.shape
        x = self.reshape(tuple(v for s in shape for v in (1, s)))
        x = x.expand(tuple(v for r, s in zip(reps, shape) for v in (r, s)))
        return x.reshape(tuple(r * s for r, s in zip(reps, shape)))

    def repeat(self, *sizes) -> Tensor:
        """PyTorch's ``repeat``: the whole tensor ``sizes[i]`` times along axis i, which is
        ``tile`` (NumPy's ``repeat``, each entry k times, is :meth:`repeat_interleave`)."""
        sizes = sizes_of(sizes)
        if len(sizes) < self.ndim:
            raise ValueError(
                f"repeat: {len(sizes)} sizes for a tensor of shape {self.shape}; give at least "
                f"{self.ndim} (one per axis)"
            )
        return self.tile(sizes)

    def repeat_interleave(self, repeats, axis: int | None = None) -> Tensor:
        """Each entry ``repeats`` times in a row along ``axis`` (None: flattened), as
        ``np.repeat`` and ``torch.repeat_interleave``; ``repeats`` an int or one per entry.
        Indexing with the repeated positions, so repeats accumulate in the gradient."""
        if axis is None:
            return self.reshape(-1).repeat_interleave(repeats, 0)
        xp = xp_of(self.data)
        axis = axis_index("repeat_interleave", axis, self.ndim)
        r = repeats.data if isinstance(repeats, Tensor) else repeats
        r = r.tolist() if hasattr(r, "tolist") else r  # CuPy's repeat takes ints or a list
        index = xp.repeat(xp.arange(self.shape[axis]), r)
        return GetItem.apply(self, key=(slice(None),) * axis + (index,))

    def sum_to(self, shape: tuple[int, ...]) -> Tensor:
        """Sum over broadcast axes so the result has ``shape`` (undoes broadcasting)."""
        return self if self.shape == tuple(shape) else SumTo.apply(self, shape=tuple(shape))

    def squeeze(self, axis: Axis = None) -> Tensor:
        s = self.shape
        axes = axes_index("squeeze", axis, self.ndim)
        if axis is None:
            axes = [i for i in axes if s[i] == 1]
        for a in axes:
            if s[a] != 1:
                raise ValueError(f"squeeze: axis {a} of shape {s} has size {s[a]}, not 1")
        return self.reshape(tuple(n for i, n in enumerate(s) if i not in axes))

    def unsqueeze(self, axis: int) -> Tensor:
        axis = axis_index("unsqueeze", axis, self.ndim + 1)
        return self.reshape(self.shape[:axis] + (1,) + self.shape[axis:])

    def split(self, split_size_or_sections, axis: int = 0) -> list[Tensor]:
        return split(self, split_size_or_sections, axis)

    def chunk(self, chunks: int, axis: int = 0) -> list[Tensor]:
        """``chunks`` pieces of ceil(n / chunks) entries along ``axis`` (the last one shorter,
        and fewer pieces where they run out), as PyTorch; an empty axis gives ``chunks``
        empty pieces."""
        if not isinstance(chunks, numbers.Integral) or isinstance(chunks, bool) or chunks < 1:
            raise ValueError(f"chunk: chunks must be an integer of at least 1, got {chunks!r}")
        n = self.shape[axis_index("chunk", axis, self.ndim)]
        return split(self, -(-n // chunks) if n else [0] * chunks, axis)

    def tril(self, k: int = 0) -> Tensor:
        return Triangle.apply(self, k=k, upper=False)

    def triu(self, k: int = 0) -> Tensor:
        return Triangle.apply(self, k=k, upper=True)

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, key) -> Tensor:
        """NumPy's indexing rules, also where PyTorch's differ: with advanced indices split by
        a slice, ``x[0, :, [0, 1]]`` puts the advanced axis first (shape (2, 3) for x of shape
        (2, 3, 4)), where PyTorch gives (3, 2) (docs/derivations_nn.md, differences from
        PyTorch). Index arrays are copied when the backward keeps them."""
        saved = self.requires_grad and _modes.grad_enabled
        return GetItem.apply(self, key=_index_key(key, self.data, saved))

    def gather(self, axis: int, index) -> Tensor:
        """``out[..., i, ...] = self[..., index[..., i, ...], ...]`` along ``axis``; the result
        has ``index``'s shape. As PyTorch's ``gather``: ``index`` has ``self``'s rank and may be
        smaller on the other axes (then only that corner is read; it never broadcasts).
        Negative indices count from the end, as in NumPy (PyTorch refuses them)."""
        axis = axis_index("gather", axis, self.ndim)
        idx = index.data if isinstance(index, Tensor) else xp_of(self.data).asarray(index)
        if idx.dtype.kind not in "iu":
            raise TypeError(f"gather: index must hold integers, not {idx.dtype}")
        if idx.ndim != self.ndim or any(
            k > m for i, (k, m) in enumerate(zip(idx.shape, self.shape)) if i != axis
        ):
            raise ValueError(
                f"gather: index of shape {idx.shape} for self of shape {self.shape} along axis "
                f"{axis}: need the same rank, and no larger than self except along axis"
            )
        return Gather.apply(self, axis=axis, index=_own_index(idx, index, self))

    def scatter_add(self, axis: int, index, src) -> Tensor:
        """A copy of ``self`` with ``src[..., i, ...]`` added at ``index[..., i, ...]`` along
        ``axis`` (PyTorch's ``scatter_add``; ``index`` of ``src``'s shape, or smaller: then
        only that corner of ``src`` is used). Gradients: ``self`` gets g, ``src`` gets
        ``g.gather(axis, index)``."""
        idx, src = _checked_index("scatter_add", index, self, axis, src)
        if src.shape != idx.shape:
            src = src[tuple(slice(0, n) for n in idx.shape)]
        return self + ScatterAlongAxis.apply(
            src, axis=axis % self.ndim, index=idx, shape=self.shape
        )

    def index_add(self, axis: int, index, source, alpha: float = 1.0) -> Tensor:
        """A copy of ``self`` with ``alpha * source``'s slice i added to slice ``index[i]``
        along ``axis`` (PyTorch's ``index_add``; repeated indices add up). Gradients:
        ``self`` gets g, ``source`` gets ``alpha * g`` read at those slices."""
        idx, source = _checked_index("index_add", index, self, axis, source)
        if alpha != 1.0:
            source = source * alpha
        key = (slice(None),) * (axis % self.ndim) + (idx,)
        return self + ScatterAdd.apply(source, key=key, shape=self.shape)


def _index_key(key, like, saved: bool = False):
    """Replace Tensors inside an index by their arrays, and a list by an array on ``like``'s
    device (an empty list by an empty integer array: ``x[[]]`` selects nothing, as in NumPy
    and PyTorch). With ``saved`` (the key is kept for a backward) the caller's arrays are
    copied, so that changing them afterwards cannot change the gradient."""
    if key.__class__ is tuple:
        return tuple([_index_part(k, like, saved) for k in key])
    return _index_part(key, like, saved)


def _index_part(k, like, saved: bool):
    if k is None or k is Ellipsis or k.__class__ is int or k.__class__ is slice:
        return k
    if isinstance(k, list):
        k = xp_of(like).asarray(k)
        return k.astype(np.intp) if k.size == 0 and k.dtype.kind == "f" else k  # (fresh)
    if isinstance(k, Tensor):
        k = k.data
    return k.copy() if saved and hasattr(k, "dtype") else k


def _own_index(arr, given, *tensors: Tensor):
    """``arr``, the array of ``given`` (an index or a condition an op keeps for its backward),
    copied when that op will be recorded and ``arr`` is the caller's memory (a Tensor's data
    or an array passed in): changing ``given`` afterwards then cannot change the gradient."""
    if (arr is given or isinstance(given, Tensor)) and _modes.grad_enabled:
        for t in tensors:
            if t.requires_grad:
                return arr.copy()
    return arr


def _checked_index(op: str, index, x: Tensor, axis: int, src):
    """(the integer array of ``index``, ``src`` as a Tensor beside ``x``), the index checked
    against ``x`` along ``axis`` (one-line errors naming the op, the shapes and the valid range)
    and owned by the op (:func:`_own_index`)."""
    idx = index.data if isinstance(index, Tensor) else xp_of(x.data).asarray(index)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{op}: index must hold integers, not {idx.dtype}")
    if x.ndim == 0:
        raise ValueError(f"{op}: needs a tensor with at least one axis, not a 0-d one")
    if not -x.ndim <= axis < x.ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for shape {x.shape}")
    n = x.shape[axis]
    src_shape = src.shape if hasattr(src, "shape") else np.shape(src)
    if op == "index_add":
        ok = idx.ndim == 1 and len(src_shape) == x.ndim and src_shape[axis] == len(idx)
        ok = ok and all(
            s == m for i, (s, m) in enumerate(zip(src_shape, x.shape)) if i != axis % x.ndim
        )
        want = "a 1-D index with one entry per slice of source, source shaped like self elsewhere"
    else:
        ok = idx.ndim == x.ndim == len(src_shape) and all(
            k <= s and (i == axis % x.ndim or k <= m)
            for i, (k, s, m) in enumerate(zip(idx.shape, src_shape, x.shape))
        )
        want = "index no larger than src, and than self except along axis, all of one rank"
    if not ok:
        raise ValueError(
            f"{op}: index of shape {idx.shape}, source of shape {tuple(src_shape)} and self of "
            f"shape {x.shape} along axis {axis}: need {want}"
        )
    if idx.size and (int(idx.min()) < 0 or int(idx.max()) >= n):
        bad = int(idx.min()) if int(idx.min()) < 0 else int(idx.max())
        raise IndexError(
            f"{op}: index {bad} is out of range for axis {axis} of size {n}: 0..{n - 1}"
        )
    src = _lift(src, x)
    return _own_index(idx, index, src), src


def where(condition, a, b) -> Tensor:
    """``a`` where ``condition`` is true, else ``b`` (all three broadcast together).

    The backward reads ``condition`` again: a Tensor or an array passed in is copied when a
    gradient will flow, so that changing it afterwards cannot change the gradient."""
    like = a if isinstance(a, Tensor) else b
    if not isinstance(like, Tensor):
        raise TypeError("where: a or b must be a Tensor")
    cond = condition.data if isinstance(condition, Tensor) else xp_of(like.data).asarray(condition)
    a, b = _lift(a, like), _lift(b, like)
    return Where.apply(a, b, cond=_own_index(cond, condition, a, b))


def select(mask, a, b) -> Tensor:
    """:func:`where` for the ops' backwards: ``mask`` is a boolean array made for this one
    call, which nobody else holds, so it is never copied."""
    like = a if isinstance(a, Tensor) else b
    return Where.apply(_lift(a, like), _lift(b, like), cond=mask)


def split(x: Tensor, split_size_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split along ``axis`` into pieces of a given size (int) or of the given sizes (list of
    integers ≥ 0 that add up to the axis's size; a negative size would make pieces overlap)."""
    axis = axis_index("split", axis, x.ndim)
    n = x.shape[axis]
    is_int = lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool)  # noqa: E731
    if is_int(split_size_or_sections):
        size = int(split_size_or_sections)
        if size < 1:
            raise ValueError(f"split: the size of a piece must be at least 1, got {size}")
        sizes = [min(size, n - i) for i in range(0, n, size)] or [0]  # (empty: one empty piece)
    else:
        try:
            sizes = list(split_size_or_sections)
        except TypeError:
            raise TypeError(
                f"split: split_size_or_sections must be an integer or a list of integers, "
                f"got {split_size_or_sections!r}"
            ) from None
        if not all(is_int(s) and s >= 0 for s in sizes):
            raise ValueError(f"split: sizes {sizes} must be integers >= 0")
        if sum(sizes) != n:
            raise ValueError(f"split: sizes {sizes} do not add up to {n}, the size of axis {axis}")
    lead = (slice(None),) * axis
    out, start = [], 0
    for s in sizes:
        out.append(GetItem.apply(x, key=lead + (slice(start, start + s),)))
        start += s
    return out


# The ops import Tensor, so they are imported after the class exists.
from tensorlab.function import modes as _modes  # noqa: E402
from tensorlab.ops.elementwise import (  # noqa: E402
    Abs,
    Add,
    Cast,
    Clip,
    Cos,
    Div,
    Exp,
    Log,
    Maximum,
    Minimum,
    Mul,
    Neg,
    Pow,
    PowScalar,
    ReLU,
    Sigmoid,
    Sin,
    Sqrt,
    Sub,
    Tanh,
    ToDevice,
    Where,
)
from tensorlab.ops.index import (  # noqa: E402
    Gather,
    GetItem,
    ScatterAdd,
    ScatterAlongAxis,
    Triangle,
)
from tensorlab.ops.linalg import MatMul, autocast_inputs  # noqa: E402
from tensorlab.ops.reduce import (  # noqa: E402
    Cumsum,
    LogSumExp,
    Max,
    Mean,
    Min,
    Prod,
    Std,
    Sum,
    Var,
)
from tensorlab.ops.shape import BroadcastTo, Permute, Reshape, Roll, SumTo  # noqa: E402
from tensorlab.ops.softmax import LogSoftmax, Softmax  # noqa: E402

# ------------------------------------------------------------------ the methods that are one op
# Set here, now that the ops exist; each is one call of its op. ``2 - a`` (``__rsub__``) is
# ``Sub.apply(2, a)``, the number lifted to a constant tensor beside ``a`` by :func:`_lift`.
Tensor.__add__ = lambda self, other: Add.apply(self, _lift(other, self))
Tensor.__radd__ = lambda self, other: Add.apply(_lift(other, self), self)
Tensor.__sub__ = lambda self, other: Sub.apply(self, _lift(other, self))
Tensor.__rsub__ = lambda self, other: Sub.apply(_lift(other, self), self)
Tensor.__mul__ = lambda self, other: Mul.apply(self, _lift(other, self))
Tensor.__rmul__ = lambda self, other: Mul.apply(_lift(other, self), self)
Tensor.__truediv__ = lambda self, other: Div.apply(self, _lift(other, self))
Tensor.__rtruediv__ = lambda self, other: Div.apply(_lift(other, self), self)
Tensor.maximum = lambda self, other: Maximum.apply(self, _lift(other, self))
Tensor.minimum = lambda self, other: Minimum.apply(self, _lift(other, self))
Tensor.__neg__ = lambda self: Neg.apply(self)
Tensor.exp = lambda self: Exp.apply(self)
Tensor.log = lambda self: Log.apply(self)
Tensor.sqrt = lambda self: Sqrt.apply(self)
Tensor.abs = lambda self: Abs.apply(self)
Tensor.tanh = lambda self: Tanh.apply(self)
Tensor.sin = lambda self: Sin.apply(self)
Tensor.cos = lambda self: Cos.apply(self)
Tensor.sigmoid = lambda self: Sigmoid.apply(self)
Tensor.relu = lambda self: ReLU.apply(self)


def _reduction(op):
    def method(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        return op.apply(self, axis=_axis(axis), keepdims=keepdims)

    return method


Tensor.sum = _reduction(Sum)
Tensor.mean = _reduction(Mean)
Tensor.max = _reduction(Max)
Tensor.min = _reduction(Min)
Tensor.prod = _reduction(Prod)
Tensor.logsumexp = _reduction(LogSumExp)
for _name, _method in list(vars(Tensor).items()):  # each made by a lambda or a maker: named
    if getattr(_method, "__name__", "") in ("<lambda>", "method"):  # as it is called
        _method.__name__, _method.__qualname__ = _name, f"Tensor.{_name}"

# NumPy's hooks (__array_ufunc__, __array_function__) look their ops up here.
from tensorlab.numpy_protocol import UFUNCS as _UFUNCS  # noqa: E402
from tensorlab.numpy_protocol import array_function as _array_function  # noqa: E402
from tensorlab.numpy_protocol import array_ufunc as _array_ufunc  # noqa: E402
