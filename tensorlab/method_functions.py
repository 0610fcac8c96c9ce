"""The function forms of Tensor methods, as PyTorch users write them: ``tl.sin(x)`` is
``x.sin()``. Each is one line that calls the method (the op lives in ``tensorlab/ops/``);
where NumPy and PyTorch name a thing differently both names exist (``clip``/``clamp``,
``concatenate``/``cat``), and ``repeat`` means PyTorch's (see :meth:`Tensor.repeat`).
"""

from __future__ import annotations

from tensorlab.tensor import Axis, Sorted, Tensor


def exp(x: Tensor) -> Tensor:
    return x.exp()


def log(x: Tensor) -> Tensor:
    return x.log()


def sqrt(x: Tensor) -> Tensor:
    return x.sqrt()


def abs(x: Tensor) -> Tensor:  # noqa: A001 - the name users look for
    return x.abs()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def relu(x: Tensor) -> Tensor:
    return x.relu()


def sin(x: Tensor) -> Tensor:
    return x.sin()


def cos(x: Tensor) -> Tensor:
    return x.cos()


def maximum(a: Tensor, b) -> Tensor:
    return a.maximum(b)


def minimum(a: Tensor, b) -> Tensor:
    return a.minimum(b)


def clip(x: Tensor, min=None, max=None) -> Tensor:  # noqa: A002 - NumPy's and PyTorch's names
    return x.clip(min, max)


clamp = clip


def matmul(a: Tensor, b: Tensor) -> Tensor:
    return a @ b


def sum(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return x.sum(axis, keepdims)


def mean(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
    return x.mean(axis, keepdims)


def prod(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
    return x.prod(axis, keepdims)


def var(x: Tensor, axis: Axis = None, keepdims: bool = False, ddof: int = 0) -> Tensor:
    return x.var(axis, keepdims, ddof)


def std(x: Tensor, axis: Axis = None, keepdims: bool = False, ddof: int = 0) -> Tensor:
    return x.std(axis, keepdims, ddof)


def logsumexp(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
    return x.logsumexp(axis, keepdims)


def cumsum(x: Tensor, axis: int | None = None) -> Tensor:
    return x.cumsum(axis)


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.softmax(axis)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    return x.log_softmax(axis)


def broadcast_to(x: Tensor, shape) -> Tensor:
    return x.broadcast_to(shape)


def flip(x: Tensor, axis: Axis = None) -> Tensor:
    return x.flip(axis)


def roll(x: Tensor, shifts, axis: Axis = None) -> Tensor:
    return x.roll(shifts, axis)


def tile(x: Tensor, reps) -> Tensor:
    return x.tile(reps)


def repeat_interleave(x: Tensor, repeats, axis: int | None = None) -> Tensor:
    return x.repeat_interleave(repeats, axis)


def tril(x: Tensor, k: int = 0) -> Tensor:
    return x.tril(k)


def triu(x: Tensor, k: int = 0) -> Tensor:
    return x.triu(k)


def sort(x: Tensor, axis: int = -1, descending: bool = False) -> Sorted:
    return x.sort(axis, descending)


def argsort(x: Tensor, axis: int = -1, descending: bool = False) -> Tensor:
    return x.argsort(axis, descending)


def topk(x: Tensor, k: int, axis: int = -1, largest: bool = True) -> Sorted:
    return x.topk(k, axis, largest)


def gather(x: Tensor, axis: int, index) -> Tensor:
    return x.gather(axis, index)


def scatter_add(x: Tensor, axis: int, index, src) -> Tensor:
    return x.scatter_add(axis, index, src)


def index_add(x: Tensor, axis: int, index, source, alpha: float = 1.0) -> Tensor:
    return x.index_add(axis, index, source, alpha)
