"""Check analytic gradients against central finite differences.

For a function f and an input entry xᵢ, the central difference

    (f(x + ε eᵢ) - f(x - ε eᵢ)) / 2ε  =  ∂f/∂xᵢ + O(ε²)

approximates one column of the Jacobian. The analytic Jacobian is built row by row, one
backward per output entry, so both sides are full Jacobians and a mismatch is reported at the
exact (output, input) entry. Checks run in float64 with ε = 1e-6 and pass when
|analytic - numeric| ≤ atol + rtol·|numeric| (atol = 1e-5, rtol = 1e-3, PyTorch's defaults);
why these numbers, and why float32 is refused: docs/autograd.md, section 8.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tensorlab.autograd import grad as _grad
from tensorlab.tensor import Tensor


class GradcheckError(AssertionError):
    """Analytic and numeric gradients disagree; the message shows where and by how much."""


def _as_list(out) -> list[Tensor]:
    return [out] if isinstance(out, Tensor) else [o for o in out if isinstance(o, Tensor)]


def _outputs_flat(fn, inputs) -> np.ndarray:
    outs = _as_list(fn(*inputs))
    return np.concatenate([np.asarray(o.numpy(), dtype=np.float64).ravel() for o in outs])


def _numeric_jacobian(fn, inputs, x: Tensor, n_out: int, eps: float) -> np.ndarray:
    jac = np.zeros((n_out, x.size))
    if not x.data.flags.c_contiguous:  # then reshape(-1) would copy, and perturb nothing
        raise ValueError("gradcheck needs contiguous inputs")
    flat = x.data.reshape(-1)  # a view: writing to it perturbs x
    for i in range(x.size):
        orig = float(flat[i])
        flat[i] = orig + eps
        plus = _outputs_flat(fn, inputs)
        flat[i] = orig - eps
        minus = _outputs_flat(fn, inputs)
        flat[i] = orig
        jac[:, i] = (plus - minus) / (2 * eps)
    return jac


def numeric_vjp(fn: Callable, inputs: Sequence[Tensor], g, eps: float = 1e-6) -> list:
    """Central differences of L = Σ g ⊙ fn(*inputs) in every entry of every input: the
    vector-Jacobian product gᵀJ from the numeric Jacobian (the course's grader checks a
    student's backward against it)."""
    n_out = int(np.size(g))
    g = np.asarray(g, dtype=np.float64).ravel()
    return [(g @ _numeric_jacobian(fn, inputs, x, n_out, eps)).reshape(x.shape) for x in inputs]


def _analytic_jacobians(fn, inputs, wrt: list[Tensor]) -> list[np.ndarray]:
    outs = _as_list(fn(*inputs))
    n_out = sum(o.size for o in outs)
    jacs = [np.zeros((n_out, x.size)) for x in wrt]
    row = 0
    for o in outs:
        for j in range(o.size):
            if o.requires_grad:
                onehot = np.zeros(o.size, dtype=o.dtype)
                onehot[j] = 1
                gs = _grad(
                    o,
                    wrt,
                    grad_outputs=Tensor(onehot.reshape(o.shape), device=o.device),
                    retain_graph=True,
                    allow_unused=True,
                )
                for k, g in enumerate(gs):
                    if g is not None:
                        jacs[k][row] = np.asarray(g.numpy(), dtype=np.float64).ravel()
            row += 1
    return jacs


def gradcheck(
    fn: Callable,
    inputs: Sequence[Tensor] | Tensor,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """Compare ``fn``'s autograd Jacobian with central differences, for every input that
    requires grad. Raises :class:`GradcheckError` (or returns False) on a mismatch."""
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    wrt = [x for x in inputs if isinstance(x, Tensor) and x.requires_grad]
    if not wrt:
        raise ValueError("gradcheck: no input requires grad, so there is nothing to check")
    for i, x in enumerate(inputs):
        if isinstance(x, Tensor) and x.requires_grad and x.dtype != np.float64:
            raise ValueError(
                f"gradcheck: input {i} has dtype {x.dtype}; finite differences "
                "need float64 (use .double() or dtype=float64)"
            )
    # first position of each input (not list.index: Tensor == is elementwise)
    position = {id(x): i for i, x in reversed(list(enumerate(inputs)))}
    analytic = _analytic_jacobians(fn, inputs, wrt)
    n_out = analytic[0].shape[0]
    report = []
    for x, a in zip(wrt, analytic):
        n = _numeric_jacobian(fn, inputs, x, n_out, eps)
        err = np.abs(a - n)
        bad = ~(err <= atol + rtol * np.abs(n))  # NaN on either side is a mismatch too
        if bad.any():
            r, c = np.unravel_index(np.argmax(np.where(bad, err, -1)), err.shape)
            idx = tuple(int(i) for i in np.unravel_index(c, x.shape)) if x.shape else ()
            report.append(
                f"  input {position[id(x)]} (shape {x.shape}): {int(bad.sum())} of {bad.size} "
                f"Jacobian entries differ; worst at output entry {r}, input index {idx}: "
                f"analytic {a[r, c]:.6g}, numeric {n[r, c]:.6g}, error {err[r, c]:.3g} "
                f"(allowed {atol + rtol * abs(n[r, c]):.3g})"
            )
    if report:
        if raise_exception:
            raise GradcheckError(
                f"gradcheck failed for {getattr(fn, '__name__', fn)} (eps={eps}, atol={atol}, "
                f"rtol={rtol}):\n" + "\n".join(report)
            )
        return False
    return True


def gradgradcheck(
    fn: Callable,
    inputs: Sequence[Tensor] | Tensor,
    grad_outputs: Sequence[Tensor] | None = None,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    seed: int = 0,
) -> bool:
    """Check second derivatives: gradcheck of ``v ↦ vᵀ ∂fn/∂x`` (built with
    ``create_graph=True``) with respect to both the inputs and ``v``."""
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    outs = _as_list(fn(*inputs))
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        grad_outputs = [
            Tensor(rng.standard_normal(o.shape), device=o.device, requires_grad=True) for o in outs
        ]
    n = len(inputs)

    def first_derivative(*args):
        xs = list(args[:n])
        diff = [x for x in xs if isinstance(x, Tensor) and x.requires_grad]
        pairs = [(o, v) for o, v in zip(_as_list(fn(*xs)), args[n:]) if o.requires_grad]
        gs = _grad(
            [o for o, _ in pairs],
            diff,
            grad_outputs=[v for _, v in pairs],
            create_graph=True,
            allow_unused=True,
        )
        return tuple(g for g in gs if g is not None)

    first_derivative.__name__ = f"d({getattr(fn, '__name__', 'fn')})"
    return gradcheck(
        first_derivative,
        inputs + list(grad_outputs),
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
    )
