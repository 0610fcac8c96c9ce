"""Function: one node of the computation graph.

Every differentiable op is a subclass with two methods::

    class Exp(Function):
        def forward(ctx, a):          # raw arrays in, raw array out
            return xp_of(a).exp(a)

        def backward(ctx, grad):      # Tensor in, one Tensor (or None) per input out
            return grad * ctx.output

``Op.apply(*tensors, **params)`` runs ``forward`` on the tensors' arrays and, when a gradient
will be needed, records the node: the ``ctx`` object passed to both methods *is* the node.
It keeps

- ``ctx.inputs``: the input Tensors (``backward`` reads them; freed after backward),
- ``ctx.output``: the output Tensor (read through a weak reference: no reference cycle),
- any attribute ``forward`` chose to store (``ctx.axis = axis``, a mask array, ...).

``backward`` is written with Tensor operations, so under ``create_graph=True`` the same lines
record a graph of the gradient (second derivatives for free), and may return a gradient in a
broadcast shape: the engine sums it back once (``Tensor.sum_to``). docs/autograd.md, sections
1, 4 and 5, walks through it.
"""

from __future__ import annotations

import contextlib
import copy
import os
import threading
import traceback
import weakref

import numpy as np

from tensorlab.backend import xp_of
from tensorlab.tensor import Tensor

_new_tensor = Tensor.__new__
_generic = np.generic
_asarray = np.asarray


class _Modes(threading.local):
    """The engine's switches, one set per thread (as in PyTorch), so that a ``no_grad()`` block
    or a backward pass in one thread does not change what another thread records. Each is set
    by a :class:`Switch` context (``no_grad``, ``detect_anomaly``, ``trace_backward``, ...),
    except the stack of ``named_scope()``s, which each recorded node reads for ``tl.draw``."""

    def __init__(self):
        self.grad_enabled = True  # record graphs? Off in no_grad() and during a plain backward
        self.anomaly = False  # check every forward and backward result for NaN/Inf
        self.trace = None  # trace_backward()'s callable(node, grad, grads), after each node
        self.autocast = None  # the dtype of matrix products in tl.autocast (autocast_inputs)
        self.scope_stack: list[str] = []  # the enclosing named_scope()s, innermost last


modes = _Modes()


class Switch(contextlib.ContextDecorator):
    """Set one of :data:`modes`' switches inside a ``with`` block (or a decorated function) and
    put the old value back after it."""

    switch: str  # the name of the attribute of ``modes`` this context sets

    def __init__(self, value):
        self.value = value

    def _recreate_cm(self):
        # ContextDecorator makes a fresh copy per call of a decorated function, so that
        # recursive calls do not overwrite each other's saved value.
        return copy.copy(self)

    def __enter__(self):
        self.prev = getattr(modes, self.switch)
        setattr(modes, self.switch, self.value)
        return self

    def __exit__(self, *exc):
        setattr(modes, self.switch, self.prev)
        return False


class Function:
    """Base class of differentiable operations (see the module docstring)."""

    inputs: tuple | None
    _versions: tuple
    _output_ref: weakref.ref
    scope: str | None = None  # the named_scope the node was created in, if any
    # An op whose backward reads its output (``ctx.output``: exp, tanh, softmax, ...) sets
    # ``saves_output``; backward then refuses if that output was changed in place since.
    saves_output = False
    # A fused op (one node for what would be many) sets ``composed`` to the same function
    # written in engine ops, ``composed(*inputs, **params)``. Its ``backward`` is then a
    # closed form on arrays for the first order, and under ``create_graph=True`` the engine
    # differentiates ``composed`` instead (see autograd.local_grads): one hand-written backward.
    composed = None

    def forward(ctx, *arrays, **params):
        raise NotImplementedError(f"{type(ctx).__name__}.forward")

    def backward(ctx, grad: Tensor):
        raise NotImplementedError(f"{type(ctx).__name__} has no backward")

    @property
    def output(ctx) -> Tensor:
        """The Tensor this node produced (alive whenever its backward can run)."""
        return ctx._output_ref()

    @property
    def name(ctx) -> str:
        return type(ctx).__name__

    @classmethod
    def apply(cls, *inputs: Tensor, **params) -> Tensor:
        """Run ``forward`` on the inputs' arrays; record the node if a gradient may flow."""
        ctx = cls.__new__(cls)
        try:
            if len(inputs) == 1:  # the common arities skip building a list of arrays
                data = cls.forward(ctx, inputs[0].data, **params)
            elif len(inputs) == 2:
                data = cls.forward(ctx, inputs[0].data, inputs[1].data, **params)
            else:
                data = cls.forward(ctx, *[t.data for t in inputs], **params)
        except Exception as err:
            raise _forward_error(cls, inputs, err) from err
        if data.__class__ is not np.ndarray and isinstance(data, _generic):
            data = _asarray(data)  # ufuncs on 0-d arrays return NumPy scalars

        out = _new_tensor(Tensor)
        out.data = data
        out.grad = None
        # a view of its (first) input's memory shares that memory's version counter
        out._vc = [0]
        if inputs:
            src, base = inputs[0].data, data.base
            if data is src or (base is not None and (base is src or base is src.base)):
                out._vc = inputs[0]._vc
        out._hooks = None
        out.name = None
        out._retains_grad = False
        if modes.grad_enabled:
            for t in inputs:
                if t.requires_grad:
                    ctx.inputs = inputs
                    ctx._versions = tuple([t._vc[0] for t in inputs])
                    ctx._output_ref = weakref.ref(out)
                    ctx._output_version = out._vc[0]
                    ctx.output_shape = data.shape  # outlives the output (tl.draw's labels)
                    ctx.params = params
                    out.requires_grad = True
                    out._ctx = ctx
                    if modes.scope_stack:
                        ctx.scope = modes.scope_stack[-1]
                    if modes.anomaly:
                        _check_forward(ctx, data)
                    return out
        out.requires_grad = False
        out._ctx = None
        return out


def _forward_error(cls, inputs, err: Exception) -> Exception:
    """Turn a NumPy/CuPy error inside a forward into one that names the op and its inputs."""
    name = cls.__name__
    devices = {t.device for t in inputs}
    if len(devices) > 1:
        where = ", ".join(f"input {i} on {t.device}" for i, t in enumerate(inputs))
        return RuntimeError(
            f"{name}: tensors are on different devices ({where}); move them with .to(device) first"
        )
    shapes = " and ".join(str(tuple(t.shape)) for t in inputs)
    # the first of these err is (an AxisError is both a ValueError and an IndexError; an index
    # out of range stays an IndexError, as in PyTorch and NumPy: code that catches it must
    # still see it), else its own class
    kinds = (np.exceptions.AxisError, IndexError, ValueError, type(err))
    kind = next(k for k in kinds if isinstance(err, k))
    try:
        return kind(f"{name}: inputs of shapes {shapes}: {err}")
    except Exception:
        return RuntimeError(f"{name}: inputs of shapes {shapes}: {err}")


# Frames from files under this directory are tensorlab's own, not the user's code (a path test,
# not a substring test: the user's files may sit in a folder named tensorlab too, as tests do).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


@contextlib.contextmanager
def named_scope(name: str):
    """Label every node recorded inside the block with ``name`` (nested scopes join with a
    dot), so that ``tl.draw`` can draw them as one cluster or collapse them into one box."""
    stack = modes.scope_stack
    outer = stack[-1] if stack else ""
    stack.append(f"{outer}.{name}" if outer else name)
    try:
        yield
    finally:
        stack.pop()


class AnomalyError(RuntimeError):
    """Raised inside detect_anomaly() by the first op that produces NaN or Inf: ``node`` is
    that op's node (its ``name``, and its ``scope``: the named_scope it ran in, a module path
    under ``nn.module_scopes``), ``gradient`` whether its backward (True) or its forward made
    it."""

    def __init__(self, message: str, node=None, gradient: bool = False):
        super().__init__(message)
        self.node, self.gradient = node, gradient


def _check_forward(ctx, data) -> None:
    ctx._stack = traceback.extract_stack()[:-1]  # tensorlab's own frames are skipped below
    if data.dtype.kind == "f" and not bool(xp_of(data).isfinite(data).all()):
        raise AnomalyError(
            f"{ctx.name} produced NaN or Inf in its forward output\n{creation_site(ctx)}", ctx
        )


def creation_site(ctx) -> str:
    """Where the user's code created this node (recorded only under detect_anomaly)."""
    stack = getattr(ctx, "_stack", None)
    if not stack:
        return "(creation site not recorded: run inside tensorlab.detect_anomaly())"
    user = [f for f in stack if not os.path.abspath(f.filename).startswith(_PACKAGE_DIR)]
    frame = (user or stack)[-1]
    return (
        f'  created at File "{frame.filename}", line {frame.lineno}, in {frame.name}\n'
        f"    {frame.line}"
    )
