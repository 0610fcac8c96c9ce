"""Exercises the engine grades: write an op's backward (or a whole layer's) and check it.

A student writes a backward in NumPy, ``backward(g, *inputs) -> (d_input, ...)``, where ``g`` is
the gradient arriving at the output (``dL/dy``, the shape of ``y``), or a whole
:class:`~tensorlab.function.Function` subclass, and calls

    print(check("matmul", backward))     # or check("matmul", forward=..., backward=...)
    print(check("tanh", MyTanh))         # a Function subclass: its forward and its backward

The checker draws float64 inputs and a random ``g``, and holds the student's gradients to two
independent answers: the engine's own op (``reference``, through autograd) and central finite
differences of the reference forward, ``(L(x + ε) - L(x - ε)) / 2ε`` with ``L = Σ g ⊙ y``
(``tensorlab/gradcheck.py`` explains why float64 and ε = 1e-6). The answer is a
:class:`Verdict`, which reads as one or a few sentences: which input, which entry, yours vs
the finite difference, and a hint at the section of ``docs/`` that derives the rule. Three
mistakes are recognized by name: a gradient in the transposed shape (or equal to the
transpose of the answer), a gradient left in the broadcast shape (the missing reduction of
``docs/derivations.md`` section 2), and a gradient of the wrong sign.

Reference solutions live apart from the exercises (``notebooks/solutions.py``); a stub that
raises ``NotImplementedError`` is reported as "not written yet", so the student notebooks
run from top to bottom before any exercise is done.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nn.activation import gelu
from nn.attention import scaled_dot_product_attention
from nn.loss import cross_entropy
from nn.norm import layer_norm
from tensorlab.autograd import grad as _grad
from tensorlab.function import Function
from tensorlab.gradcheck import numeric_vjp
from tensorlab.tensor import Tensor

EPS = 1e-6  # finite-difference step (float64)
ATOL, RTOL = 1e-6, 1e-4  # |yours - numeric| <= ATOL + RTOL |numeric| for every entry

D1 = "docs/derivations.md"
D2 = "docs/derivations_nn.md"


@dataclass
class Exercise:
    """One exercise: the inputs it draws, the reference forward (engine ops on Tensors), and
    where its derivation lives.

    ``inputs`` maps each input's name to its shape; ``constants`` are passed after them to
    every function (integer targets, ...) and are not differentiated; ``positive`` inputs are
    drawn in [0.5, 2) (for log, sqrt, ...); ``rule`` is the answer in one line and ``section``
    the page#anchor that derives it."""

    name: str
    inputs: dict[str, tuple[int, ...]]
    reference: Callable
    rule: str
    section: str
    constants: dict[str, object] = field(default_factory=dict)
    positive: tuple[str, ...] = ()
    sign_hint: str = ""  # what a wrong sign usually means here

    def draw(self, seed: int = 0) -> tuple[list[np.ndarray], np.ndarray]:
        """The inputs and the gradient ``g`` arriving at the output, all float64."""
        rng = np.random.default_rng(seed)
        xs = [
            rng.uniform(0.5, 2.0, s) if n in self.positive else rng.standard_normal(s)
            for n, s in self.inputs.items()
        ]
        y = self.reference(*[Tensor(x) for x in xs], *self.constants.values())
        return xs, rng.standard_normal(y.shape)


# ---------------------------------------------------------------------- the exercises
def _matmul(a, b):
    return a @ b


def _add(a, b):
    return a + b


def _linear(x, W, b):
    return x @ W + b


def _softmax(s):
    return s.softmax(axis=-1)


def _cross_entropy(logits, targets):
    return cross_entropy(logits, targets)


def _layer_norm(x, gamma, beta):
    return layer_norm(x, gamma, beta)


def _gelu_tanh(x):
    return gelu(x, approximate="tanh")


def _attention(q, k, v):
    return scaled_dot_product_attention(q, k, v, causal=True)


EXERCISES: dict[str, Exercise] = {
    e.name: e
    for e in [
        Exercise(
            "mul",
            {"a": (3, 4), "b": (3, 4)},
            lambda a, b: a * b,
            "da = g ⊙ b, db = g ⊙ a: each factor's gradient is g times the other factor",
            f"{D1}#1-elementwise-ops",
        ),
        Exercise(
            "tanh",
            {"a": (3, 4)},
            lambda a: a.tanh(),
            "da = g ⊙ (1 - y²) with y = tanh(a)",
            f"{D1}#1-elementwise-ops",
            sign_hint="tanh' = 1 - tanh², not tanh² - 1",
        ),
        Exercise(
            "log",
            {"a": (3, 4)},
            lambda a: a.log(),
            "da = g / a",
            f"{D1}#1-elementwise-ops",
            positive=("a",),
        ),
        Exercise(
            "sub",
            {"a": (3, 4), "b": (3, 4)},
            lambda a, b: a - b,
            "da = g, db = -g",
            f"{D1}#1-elementwise-ops",
            sign_hint="y = a - b decreases as b grows, so db = -g",
        ),
        Exercise(
            "add_broadcast",
            {"a": (4, 3), "b": (3,)},
            _add,
            "da = g, db = g summed over the axes b was broadcast along (g.sum(axis=0))",
            f"{D1}#2-broadcasting-and-the-one-sum_to",
        ),
        Exercise(
            "sum_rows",
            {"a": (3, 5)},
            lambda a: a.sum(axis=1),
            "da = g[:, None] broadcast to a's shape: every entry of a row gets that row's g",
            f"{D1}#3-reductions",
        ),
        Exercise(
            "matmul",
            {"a": (2, 3), "b": (3, 4)},
            _matmul,
            "da = g bᵀ, db = aᵀ g (the only products whose shapes fit)",
            f"{D1}#4-matrix-multiplication",
        ),
        Exercise(
            "softmax",
            {"s": (3, 5)},
            _softmax,
            "ds = y ⊙ (g - rowsum(g ⊙ y)) with y = softmax(s), row by row",
            f"{D1}#9-softmax-and-its-jacobian",
        ),
        Exercise(
            "linear",
            {"x": (4, 3), "W": (3, 2), "b": (2,)},
            _linear,
            "dx = g Wᵀ, dW = xᵀ g, db = g summed over the rows",
            f"{D2}#2-linear-layer",
        ),
        Exercise(
            "cross_entropy",
            {"logits": (4, 5)},
            _cross_entropy,
            "dlogits = g (softmax(logits) - onehot(targets)) / N (mean over N rows)",
            f"{D2}#1-cross-entropy-softmax-minus-onehot",
            constants={"targets": np.array([0, 3, 1, 4])},
            sign_hint="the gradient is p - onehot, not onehot - p",
        ),
        Exercise(
            "layer_norm",
            {"x": (3, 6), "gamma": (6,), "beta": (6,)},
            _layer_norm,
            "dx = (1/σ)(ĝ - mean(ĝ) - x̂ ⊙ mean(ĝ ⊙ x̂)) with ĝ = g ⊙ γ; "
            "dγ = Σ_rows g ⊙ x̂; dβ = Σ_rows g (ε = 1e-5)",
            f"{D2}#5-layer-norm",
        ),
        Exercise(
            "gelu_tanh",
            {"x": (3, 4)},
            _gelu_tanh,
            "y = ½x(1 + t), t = tanh(c(x + kx³)): dx = g (½(1 + t) + ½x(1 - t²) c (1 + 3kx²))",
            f"{D2}#7-gelu-silu-and-elu",
        ),
        Exercise(
            "attention",
            {"q": (5, 4), "k": (5, 4), "v": (5, 3)},
            _attention,
            "causal, s = 1/√d: dV = Aᵀ g, dA = g Vᵀ, dS = A ⊙ (dA - rowsum(dA ⊙ A)), "
            "dQ = s dS K, dK = s dSᵀ Q",
            f"{D2}#9-scaled-dot-product-attention",
        ),
    ]
}


# ---------------------------------------------------------------------- the verdict
@dataclass
class Verdict:
    """The answer to :func:`check`: ``ok`` (also its truth value), ``done`` (False for a stub
    not written yet), and ``message``, the sentences a student reads (its ``str`` and its
    ``repr``). The notebooks ``print(check(...))``: a bare ``check(...)`` ending a cell shows
    in Jupyter, but a notebook run as a plain script would show nothing."""

    exercise: str
    ok: bool
    message: str
    done: bool = True
    mistake: str | None = None  # "transposed", "broadcast", "sign", "shape", "values", ...

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return self.message

    __str__ = __repr__


def _fmt(shape) -> str:
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def _as_array(x, what: str) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.numpy()
    try:
        return np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise _Wrong(f"{what} is a {type(x).__name__}, not an array ({err})", "type") from err


class _Wrong(Exception):
    """A mistake found while collecting the student's outputs (message, kind)."""

    def __init__(self, message: str, kind: str):
        super().__init__(message)
        self.kind = kind


def _reference_grads(ex: Exercise, xs, g) -> tuple[np.ndarray, list[np.ndarray]]:
    ts = [Tensor(x.copy(), requires_grad=True) for x in xs]
    y = ex.reference(*ts, *ex.constants.values())
    grads = _grad(y, ts, grad_outputs=Tensor(g))
    return y.numpy(), [gr.numpy() for gr in grads]


def _numeric_grads(ex: Exercise, xs, g) -> list[np.ndarray]:
    """Central differences of L = Σ g ⊙ f(x) in every entry of every input."""
    ts = [Tensor(x) for x in xs]  # (views of xs: the differences perturb them in place)
    return numeric_vjp(lambda *a: ex.reference(*a, *ex.constants.values()), ts, g, EPS)


def _close(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b) <= ATOL + RTOL * np.abs(b)


def _broadcast_axes(big: tuple, small: tuple) -> tuple[int, ...] | None:
    """The axes of ``big`` to sum so it becomes ``small``, if ``small`` broadcasts to ``big``."""
    if len(small) > len(big):
        return None
    lead = len(big) - len(small)
    axes = list(range(lead))
    for i, (n, m) in enumerate(zip(big[lead:], small)):
        if m == 1 and n != 1:
            axes.append(lead + i)
        elif m != n:
            return None
    return tuple(axes)


def _entry(idx) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def _diagnose(ex: Exercise, name: str, yours: np.ndarray, want: np.ndarray, num: np.ndarray):
    """Compare one input's gradient; None if right, else (message, kind)."""
    dname = f"d{name}"
    shape = want.shape
    if yours.shape != shape:
        if yours.ndim == 2 and yours.shape == shape[::-1] and np.allclose(yours.T, want):
            return (
                f"{dname} has shape {_fmt(yours.shape)} but {name} has shape {_fmt(shape)}: "
                f"it is the transpose of the right gradient (swap the factors or the "
                f"transposes)",
                "transposed",
            )
        axes = _broadcast_axes(yours.shape, shape)
        if axes is not None:
            reduced = yours.sum(axis=axes).reshape(shape)
            how = f"sum over axis {axes[0]}" if len(axes) == 1 else f"sum over axes {axes}"
            keep = ", keepdims=True" if len(yours.shape) == len(shape) else ""
            verdict = (
                "with that sum it would be right"
                if np.allclose(reduced, want)
                else "even summed it differs"
            )
            return (
                f"{dname} has shape {_fmt(yours.shape)} but {name} has shape {_fmt(shape)}: "
                f"{name} was broadcast, so its gradient is the {how} of what reached the "
                f"broadcast copy (.sum(axis={axes if len(axes) > 1 else axes[0]}{keep})); "
                f"{verdict}",
                "broadcast",
            )
        return (
            f"{dname} has shape {_fmt(yours.shape)} but {name} has shape {_fmt(shape)}: a "
            "gradient always has the shape of its input",
            "shape",
        )
    if not np.isfinite(yours).all():
        bad = tuple(np.argwhere(~np.isfinite(yours))[0])
        return f"{dname}{_entry(bad)} is {yours[bad]} (not finite)", "nan"
    ok = _close(yours, num)
    if ok.all():
        return None
    if np.allclose(yours, -want):
        extra = f" ({ex.sign_hint})" if ex.sign_hint else ""
        return (
            f"{dname} has the wrong sign at every entry: yours is minus the right gradient{extra}",
            "sign",
        )
    if yours.ndim == 2 and yours.shape[0] == yours.shape[1] and np.allclose(yours.T, want):
        return f"{dname} is the transpose of the right gradient", "transposed"
    err = np.where(ok, -1.0, np.abs(yours - num))
    worst = np.unravel_index(np.argmax(err), err.shape)
    n_bad = int((~ok).sum())
    return (
        f"{dname}{_entry(worst)}: yours {yours[worst]:.6g}, finite differences "
        f"{num[worst]:.6g} (the engine's op: {want[worst]:.6g}); {n_bad} of {ok.size} "
        f"entries of {dname} differ",
        "values",
    )


def _call(f, what: str, *args):
    """Run the student's function; an exception (other than the stub's) becomes a verdict."""
    try:
        return f(*args)
    except NotImplementedError:
        raise
    except Exception as err:  # the student's code: report it, do not crash the notebook
        text = " ".join(str(err).split())
        raise _Wrong(f"your {what} raised {type(err).__name__}: {text}", "error") from err


def _student_outputs(ex: Exercise, forward, backward, op, xs, g):
    """The student's forward output (or None) and one gradient per input, as arrays."""
    consts = list(ex.constants.values())
    names = list(ex.inputs)
    if op is not None:
        ts = [Tensor(x.copy(), requires_grad=True) for x in xs]
        y = _call(op.apply, "forward", *ts, *[Tensor(np.asarray(c)) for c in consts])
        if y._ctx is None:
            raise _Wrong(f"{op.__name__}.apply recorded no node", "type")
        grads = _call(type(y._ctx).backward, "backward", y._ctx, Tensor(g))
        y_out = _as_array(y, "the forward's output")
    else:
        y_out = None
        if forward is not None:
            y = _call(forward, "forward", *[x.copy() for x in xs], *consts)
            y_out = _as_array(y, "the forward's output")
        grads = _call(backward, "backward", g.copy(), *[x.copy() for x in xs], *consts)
    if not isinstance(grads, tuple | list):
        grads = (grads,)
    n = len(names)
    if len(grads) < n:
        want = ", ".join(f"d{k}" for k in names)
        raise _Wrong(
            f"the backward returned {len(grads)} gradient(s); it should return {n}: {want}",
            "count",
        )
    out = []
    for name, x, gr in zip(names, xs, grads[:n]):
        if gr is None:
            raise _Wrong(f"d{name} is None; {name} needs a gradient", "none")
        gr = _as_array(gr, f"d{name}")
        if op is not None and gr.shape != x.shape:
            axes = _broadcast_axes(gr.shape, x.shape)
            if axes is not None:  # what the engine does for a Function (its one sum_to)
                gr = gr.sum(axis=axes).reshape(x.shape)
        out.append(gr)
    return y_out, out


def check(
    exercise: str,
    backward: Callable | type | None = None,
    *,
    forward: Callable | None = None,
    seed: int = 0,
) -> Verdict:
    """Grade a hand-written backward (and forward) for ``exercise`` (a name in
    :data:`EXERCISES`). ``backward(g, *inputs, *constants)`` returns one gradient per input
    (NumPy arrays or Tensors); ``forward(*inputs, *constants)`` returns the output. Or pass a
    :class:`~tensorlab.function.Function` subclass as ``backward``: its own forward and backward
    are graded (the engine sums broadcast gradients for a Function, so it is not asked to).

    Returns a :class:`Verdict` whose text says what is right, or the first thing that is wrong
    with a hint at the derivation."""
    if exercise not in EXERCISES:
        raise KeyError(f"check: no exercise {exercise!r}; there are {', '.join(EXERCISES)}")
    ex = EXERCISES[exercise]
    op = None
    if inspect.isclass(backward) and issubclass(backward, Function):
        op, backward = backward, None
    if op is None and backward is None and forward is None:
        raise TypeError("check: pass the backward to grade (or forward=..., or a Function)")
    hint = f"hint: {ex.rule} (see {ex.section})"
    xs, g = ex.draw(seed)
    y_ref, want = _reference_grads(ex, xs, g)
    try:
        if backward is None and op is None:  # a forward alone
            y = _call(forward, "forward", *[x.copy() for x in xs], *ex.constants.values())
            y_out, grads = _as_array(y, "the forward's output"), None
        else:
            y_out, grads = _student_outputs(ex, forward, backward, op, xs, g)
    except NotImplementedError:
        return Verdict(
            exercise,
            False,
            f"{exercise}: not written yet (the function raises NotImplementedError); {hint}",
            done=False,
            mistake="not done",
        )
    except _Wrong as w:
        return Verdict(exercise, False, f"{exercise}: {w}; {hint}", mistake=w.kind)
    if y_out is not None:
        if y_out.shape != y_ref.shape:
            return Verdict(
                exercise,
                False,
                f"{exercise}: the forward's output has shape {_fmt(y_out.shape)}, the "
                f"engine's {_fmt(y_ref.shape)}",
                mistake="forward",
            )
        ok = _close(y_out, y_ref)
        if not ok.all():
            worst = np.unravel_index(np.argmax(np.where(ok, -1, np.abs(y_out - y_ref))), ok.shape)
            return Verdict(
                exercise,
                False,
                f"{exercise}: the forward differs at y{_entry(worst)}: yours "
                f"{y_out[worst]:.6g}, the engine's {y_ref[worst]:.6g}",
                mistake="forward",
            )
        if grads is None:
            return Verdict(exercise, True, f"{exercise}: the forward is right.")
    numeric = _numeric_grads(ex, xs, g)
    for name, yours, w, num in zip(ex.inputs, grads, want, numeric):
        found = _diagnose(ex, name, yours, w, num)
        if found is not None:
            message, kind = found
            return Verdict(exercise, False, f"{exercise}: {message}; {hint}", mistake=kind)
    worst = max(float(np.abs(y - n).max()) for y, n in zip(grads, numeric))
    names = ", ".join(f"d{k}" for k in ex.inputs)
    what = f"the forward and {names} agree" if y_out is not None else f"{names} agree"
    if y_out is None and len(ex.inputs) == 1:
        what = f"{names} agrees"
    return Verdict(
        exercise,
        True,
        f"{exercise}: right: {what} with finite differences (largest difference "
        f"{worst:.1e}) and with the engine's op.",
    )
