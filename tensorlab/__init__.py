"""tensorlab: a reverse-mode tensor autograd engine on NumPy (CPU) and CuPy (GPU).

Read it in this order: ``tensor.py`` (the data structure), ``function.py`` (a graph node),
``ops/`` (every op's forward and backward), ``autograd.py`` (the backward pass),
``gradcheck.py`` (how we know the gradients are right). ``method_functions.py`` holds the
function forms of the methods (``tl.sin(x)``), ``numpy_protocol.py`` what ``np.sin(x)`` does,
``transforms.py`` jacobian, hessian, vjp, jvp, hvp, ``checkpoint.py`` activation
checkpointing, ``fused.py`` GPU kernels written once in Python (``docs/gpu.md``).
"""

# tensor first: it defines Tensor, then imports the ops (which import Tensor and Function).
from tensorlab.tensor import Tensor, split, where  # isort: skip
from tensorlab import allocator
from tensorlab.autograd import (
    autocast,
    backward,
    detect_anomaly,
    enable_grad,
    grad,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from tensorlab.backend import BFLOAT16 as bfloat16  # None without ml_dtypes
from tensorlab.backend import (
    DEFAULT_DTYPE,
    cuda_available,
    default_device,
    manual_seed,
    set_default_device,
)
from tensorlab.checkpoint import checkpoint
from tensorlab.creation import (
    arange,
    as_tensor,
    eye,
    from_dlpack,
    from_numpy,
    full,
    full_like,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    tensor,
    zeros,
    zeros_like,
)
from tensorlab.draw import backward_steps, draw  # the function replaces the submodule's name here
from tensorlab.function import AnomalyError, Function, named_scope
from tensorlab.gradcheck import GradcheckError, gradcheck, gradgradcheck
from tensorlab.method_functions import *  # noqa: F403 - tl.exp(x), tl.sum(x, axis), ...
from tensorlab.ops.linalg import autocast_array, autocast_inputs, einsum, matmul_grads
from tensorlab.ops.shape import concatenate, stack
from tensorlab.ops.softmax import log_softmax_array
from tensorlab.trace import trace_backward
from tensorlab.transforms import hessian, hvp, jacobian, jvp, vhp, vjp

if allocator.wanted():  # once per process: keep freed memory for reuse (see allocator.py)
    allocator.keep_freed_memory()

float32 = "float32"
float64 = "float64"
int64 = "int64"

cat = concatenate
