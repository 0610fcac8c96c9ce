"""The function forms of Tensor methods, as PyTorch users write them: ``tl.sin(x)`` is
``x.sin()``. Each is the method itself, called with the tensor first (the op lives in
``tensorlab/ops/``); where NumPy and PyTorch name a thing differently both names exist
(``clip``/``clamp``, ``concatenate``/``cat``), and ``repeat`` means PyTorch's (see
:meth:`Tensor.repeat`).
"""

from tensorlab.tensor import Tensor

exp = Tensor.exp
log = Tensor.log
sqrt = Tensor.sqrt
abs = Tensor.abs  # noqa: A001 - the name users look for
tanh = Tensor.tanh
sigmoid = Tensor.sigmoid
relu = Tensor.relu
sin = Tensor.sin
cos = Tensor.cos
maximum = Tensor.maximum
minimum = Tensor.minimum
clip = clamp = Tensor.clip
sum = Tensor.sum  # noqa: A001
mean = Tensor.mean
prod = Tensor.prod
var = Tensor.var
std = Tensor.std
logsumexp = Tensor.logsumexp
cumsum = Tensor.cumsum
softmax = Tensor.softmax
log_softmax = Tensor.log_softmax
broadcast_to = Tensor.broadcast_to
flip = Tensor.flip
roll = Tensor.roll
tile = Tensor.tile
repeat_interleave = Tensor.repeat_interleave
tril = Tensor.tril
triu = Tensor.triu
sort = Tensor.sort
argsort = Tensor.argsort
topk = Tensor.topk
gather = Tensor.gather
scatter_add = Tensor.scatter_add
index_add = Tensor.index_add


def matmul(a, b) -> Tensor:
    """``a @ b``, either of them the Tensor (an array on the left reaches ``__rmatmul__``)."""
    return a @ b
