"""Exercises the engine grades: write an op's backward (or a whole layer's) and check it.

A student writes a backward in NumPy, ``backward(g, *inputs) -> (d_input, ...)``, where ``g`` is
the gradient arriving at the output (``dL/dy``, the shape of ``y``), or a whole
:class:`~tensorlab.function.Function` subclass, and calls

    print(check("matmul", backward))     # or check("matmul", forward=..., backward=...)
    print(check("tanh", MyTanh))         # a Function subclass: its forward and its backward
    hint("matmul")                       # stuck: where to read, then the idea, then the formula

The checker draws float64 inputs and a random ``g``, and holds the student's gradients to two
independent answers: the engine's own op (``reference``, through autograd) and central finite
differences of the reference forward, ``(L(x + ε) - L(x - ε)) / 2ε`` with ``L = Σ g ⊙ y``
(``tensorlab/gradcheck.py`` explains why float64 and ε = 1e-6). The answer is a
:class:`Verdict`, which reads as one or a few sentences: which input, which entry, yours vs
the finite difference, and where to read or ask for a hint. It never states the answer: the
formula is the last of three :func:`hint` levels, which the student asks for one at a time.

The mistakes recognized by name (``Verdict.mistake``): a gradient in the transposed shape (or
equal to the transpose of the answer), a gradient left in the broadcast shape (the missing
reduction of ``docs/derivations.md`` section 2) or summed over the wrong axis, a reduction's
``g`` spread back along the wrong axis, a gradient of the wrong sign or off by a constant
factor (a missing 1/N or 1/√d), a matrix product or a broadcast whose shapes do not fit
(NumPy's error rewritten as the two shapes), and a wrong forward that is minus, a multiple or
the transpose of the right one, or one that skips a step (a softmax, a mask, a scale, ...).

Reference solutions live apart from the exercises (``notebooks/solutions.py``); a stub that
raises ``NotImplementedError`` is reported as "not written yet", so the student notebooks
run from top to bottom before any exercise is done.
"""

from __future__ import annotations

import inspect
import os
import re
import traceback
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
    drawn in [0.5, 2) (for log, sqrt, ...). The three :func:`hint` levels: ``section``, the
    page#anchor that derives the rule; ``idea``, the way to it in words (no formula);
    ``rule``, the answer in one line. ``slips`` name wrong forwards: what the forward left
    out -> a test of the student's output ``y`` (and the inputs) for that slip."""

    name: str
    inputs: dict[str, tuple[int, ...]]
    reference: Callable
    rule: str
    section: str
    idea: str
    constants: dict[str, object] = field(default_factory=dict)
    positive: tuple[str, ...] = ()
    sign_hint: str = ""  # what a wrong sign usually means here (no formula)
    slips: dict[str, Callable[..., bool]] = field(default_factory=dict)

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


# NumPy forms of the wrong forwards the slips look for
def _np_softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _near(y, want) -> bool:
    return y.shape == np.shape(want) and bool(np.allclose(y, want, rtol=1e-6, atol=1e-9))


def _scores(q, k, scale=True):
    return q @ k.T / (np.sqrt(q.shape[-1]) if scale else 1.0)


def _causal(q):
    return np.tri(len(q), dtype=bool)  # True where query i may see key j (j <= i)


def _np_normalize(x, sqrt=True, eps=1e-5):
    var = x.var(axis=-1, keepdims=True) + eps
    return (x - x.mean(axis=-1, keepdims=True)) / (np.sqrt(var) if sqrt else var)


def _gelu_no_tanh(x):
    return 0.5 * x * (1 + np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))


EXERCISES: dict[str, Exercise] = {
    e.name: e
    for e in [
        Exercise(
            "mul",
            {"a": (3, 4), "b": (3, 4)},
            lambda a, b: a * b,
            "da = g ⊙ b, db = g ⊙ a: each factor's gradient is g times the other factor",
            f"{D1}#1-elementwise-ops",
            "entry j of y depends on entry j of a and of b alone: multiply g, entry by entry, "
            "by the derivative of the product with respect to the factor in question",
        ),
        Exercise(
            "tanh",
            {"a": (3, 4)},
            lambda a: a.tanh(),
            "da = g ⊙ (1 - y²) with y = tanh(a)",
            f"{D1}#1-elementwise-ops",
            "entry j of y depends on entry j of a alone: multiply g, entry by entry, by the "
            "derivative of tanh at a; that derivative can be written with y = tanh(a) alone "
            "(differentiate sinh/cosh once and simplify)",
            sign_hint="tanh is increasing, so its derivative is positive everywhere",
        ),
        Exercise(
            "log",
            {"a": (3, 4)},
            lambda a: a.log(),
            "da = g / a",
            f"{D1}#1-elementwise-ops",
            "entry j of y depends on entry j of a alone: multiply g, entry by entry, by the "
            "derivative of log at a",
            positive=("a",),
        ),
        Exercise(
            "sub",
            {"a": (3, 4), "b": (3, 4)},
            lambda a, b: a - b,
            "da = g, db = -g",
            f"{D1}#1-elementwise-ops",
            "y moves one for one with a; ask how y moves as b grows. Both gradients have g's "
            "shape and need no multiplication by a or b",
            sign_hint="y = a - b decreases as b grows",
        ),
        Exercise(
            "add_broadcast",
            {"a": (4, 3), "b": (3,)},
            _add,
            "da = g, db = g summed over the axes b was broadcast along (g.sum(axis=0))",
            f"{D1}#2-broadcasting-and-the-one-sum_to",
            "a's gradient is what reaches a, as it is; b (3,) was copied into each of the 4 "
            "rows, and a value used several times receives the sum of its copies' gradients: "
            "find the axis of g that holds the copies",
        ),
        Exercise(
            "sum_rows",
            {"a": (3, 5)},
            lambda a: a.sum(axis=1),
            "da = g[:, None] broadcast to a's shape: every entry of a row gets that row's g",
            f"{D1}#3-reductions",
            "each entry of a moves its row's sum one for one, so it receives the g of the "
            "output it was summed into; da has a's shape (3, 5) and g has (3,): give g back the "
            "axis the sum removed, then spread it",
        ),
        Exercise(
            "matmul",
            {"a": (2, 3), "b": (3, 4)},
            _matmul,
            "da = g bᵀ, db = aᵀ g (the only products whose shapes fit)",
            f"{D1}#4-matrix-multiplication",
            "da must have a's shape (2, 3) and db b's shape (3, 4); each is a matrix product of "
            "g (2, 4) with the other factor, transposed where needed: find the arrangements "
            "whose shapes fit (or write one entry as a sum over k and read it back as a product)",
        ),
        Exercise(
            "softmax",
            {"s": (3, 5)},
            _softmax,
            "ds = y ⊙ (g - rowsum(g ⊙ y)) with y = softmax(s), row by row",
            f"{D1}#9-softmax-and-its-jacobian",
            "every output of a row depends on every input of that row, so ds is not g times one "
            "derivative: write ∂y_j/∂s_i (two cases, i = j and i ≠ j), multiply by g and sum "
            "over j; the result needs one sum per row and no Jacobian matrix",
            slips={
                "is not normalized: each row of a softmax sums to 1": lambda y, s: _near(
                    y / y.sum(axis=-1, keepdims=True), _np_softmax(s)
                ),
                "normalizes each column (axis 0), not each row (axis -1)": lambda y, s: _near(
                    y, _np_softmax(s, axis=0)
                ),
            },
        ),
        Exercise(
            "linear",
            {"x": (4, 3), "W": (3, 2), "b": (2,)},
            _linear,
            "dx = g Wᵀ, dW = xᵀ g, db = g summed over the rows",
            f"{D2}#2-linear-layer",
            "y = x W + b is a matrix product followed by a broadcast add: dx and dW are "
            "products of g (4, 2) with the other factor whose shapes fit, and b (2,) was "
            "copied into every row of the output",
        ),
        Exercise(
            "cross_entropy",
            {"logits": (4, 5)},
            _cross_entropy,
            "dlogits = g (softmax(logits) - onehot(targets)) / N (mean over N rows)",
            f"{D2}#1-cross-entropy-softmax-minus-onehot",
            "the loss is the mean over the N rows of minus the log-probability of the target; "
            "in one row the log and the softmax's exponential cancel, so differentiate the "
            "log-sum-exp and the target's logit separately; g is a scalar, and the mean divides",
            constants={"targets": np.array([0, 3, 1, 4])},
            sign_hint="raising the target's logit lowers the loss",
            slips={
                "is missing the log: the loss is minus the log-probability of the target": (
                    lambda y, z, t: _near(y, -_np_softmax(z)[np.arange(len(t)), t].mean())
                ),
                "sums over the rows: the loss is their mean": lambda y, z, t: _near(
                    y, -np.log(_np_softmax(z)[np.arange(len(t)), t]).sum()
                ),
            },
        ),
        Exercise(
            "layer_norm",
            {"x": (3, 6), "gamma": (6,), "beta": (6,)},
            _layer_norm,
            "dx = (1/σ)(ĝ - mean(ĝ) - x̂ ⊙ mean(ĝ ⊙ x̂)) with ĝ = g ⊙ γ; "
            "dγ = Σ_rows g ⊙ x̂; dβ = Σ_rows g (ε = 1e-5)",
            f"{D2}#5-layer-norm",
            "γ and β are shared by every row, so their gradients are sums over the rows; for dx, "
            "first pass g through γ, then note that x reaches x̂ three ways (directly, through "
            "the mean and through the variance) and add the three paths",
            slips={
                "leaves out γ and β (the scale and the shift after normalizing)": (
                    lambda y, x, gamma, beta: _near(y, _np_normalize(x))
                ),
                "divides by the variance, not by its square root": lambda y, x, gamma, beta: _near(
                    y, _np_normalize(x, sqrt=False) * gamma + beta
                ),
            },
        ),
        Exercise(
            "gelu_tanh",
            {"x": (3, 4)},
            _gelu_tanh,
            "y = ½x(1 + t), t = tanh(c(x + kx³)): dx = g (½(1 + t) + ½x(1 - t²) c (1 + 3kx²))",
            f"{D2}#7-gelu-silu-and-elu",
            "the product rule on x times a term in tanh, then the chain rule through tanh and "
            "the cubic inside it; tanh's derivative can be written with tanh itself",
            slips={"is missing the tanh": lambda y, x: _near(y, _gelu_no_tanh(x))},
        ),
        Exercise(
            "attention",
            {"q": (5, 4), "k": (5, 4), "v": (5, 3)},
            _attention,
            "causal, s = 1/√d: dV = Aᵀ g, dA = g Vᵀ, dS = A ⊙ (dA - rowsum(dA ⊙ A)), "
            "dQ = s dS K, dK = s dSᵀ Q",
            f"{D2}#9-scaled-dot-product-attention",
            "go back through the forward's three lines, scores S from q and k, A = the softmax "
            "of each row of S, y = A v, one at a time: each is a matrix product or a softmax "
            "whose backward you have written; the mask needs no code of its own, and the "
            "scale 1/√d comes back in dq and dk",
            slips={
                "has no softmax: the scores go into the product with v as they are": (
                    lambda y, q, k, v: (
                        _near(y, np.where(_causal(q), _scores(q, k), 0) @ v)
                        or _near(y, _scores(q, k) @ v)
                    )
                ),
                "has no causal mask: query i sees only keys j ≤ i": lambda y, q, k, v: _near(
                    y, _np_softmax(_scores(q, k)) @ v
                ),
                "has no 1/√d scale on the scores (before the softmax)": lambda y, q, k, v: _near(
                    y, _np_softmax(np.where(_causal(q), _scores(q, k, False), -np.inf)) @ v
                ),
            },
        ),
    ]
}


# ---------------------------------------------------------------------- hints
HINT_LEVELS = ("where to read", "the idea in words", "the formula")
_HINTS_SHOWN: dict[str, int] = {}  # exercise -> the last hint level shown


def _exercise(name: str) -> Exercise:
    if name not in EXERCISES:
        raise KeyError(f"no exercise {name!r}; there are {', '.join(EXERCISES)}")
    return EXERCISES[name]


def _where(ex: Exercise) -> str:
    """'PAGE, section N' (a section's title can spell the answer: "softmax minus onehot")."""
    page, anchor = ex.section.split("#")
    return f"{page}, section {anchor.split('-', 1)[0]}"


def _ask(name: str) -> str:
    """How a verdict points to the hints (never the formula itself)."""
    return f'stuck? hint("{name}"), and again for more (or read {_where(EXERCISES[name])})'


def hint_text(exercise: str, level: int) -> str:
    """Hint ``level`` (1, 2 or 3) for ``exercise``: 1 says where the derivation is, 2 the
    idea in words, 3 the formula (the exercise's ``rule``)."""
    ex = _exercise(exercise)
    level = min(max(int(level), 1), len(HINT_LEVELS))
    if level == 1:
        page, anchor = ex.section.split("#")
        number, title = anchor.split("-", 1)
        body = (
            f"read {page}, section {number} ({title.replace('-', ' ')}): {ex.section}; "
            "it derives this rule and others like it"
        )
    else:
        body = ex.idea if level == 2 else ex.rule
    head = f"{exercise}, hint {level} of {len(HINT_LEVELS)} ({HINT_LEVELS[level - 1]}): "
    if level < len(HINT_LEVELS):
        tail = f'. Call hint("{exercise}") again for {HINT_LEVELS[level]}.'
    else:
        tail = ". (That is the last hint: the answer itself.)"
    return head + body + tail


def hint(exercise: str) -> None:
    """Print the next hint for ``exercise``: each call for the same exercise reveals one
    level more (where to read, the idea in words, the formula), then repeats the last.
    Printed, so that it shows in a notebook and in a script alike."""
    level = min(_HINTS_SHOWN.get(exercise, 0) + 1, len(HINT_LEVELS))
    text = hint_text(exercise, level)
    _HINTS_SHOWN[exercise] = level
    print(text)


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
    mistake: str | None = None  # "transposed", "broadcast", "axis", "sign", "scale", ...

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


def _unreduced_grads(ex: Exercise, xs, g, want) -> list[tuple | None]:
    """For each input broadcast to the output's shape: ``(full, axes, shape)``, the gradient
    reaching its broadcast copy (the reference run on the input broadcast up front; None if
    the reference refuses that), the axes that sum it to the right answer, and the output's
    shape; None for the other inputs."""
    out: list[tuple | None] = []
    for i, x in enumerate(xs):
        axes = _broadcast_axes(g.shape, x.shape) if x.shape != g.shape else None
        if not axes:
            out.append(None)
            continue
        ts = [Tensor(v) for v in xs]
        ts[i] = Tensor(np.broadcast_to(x, g.shape).copy(), requires_grad=True)
        try:
            y = ex.reference(*ts, *ex.constants.values())
            (gr,) = _grad(y, [ts[i]], grad_outputs=Tensor(g))
            full = gr.numpy()
        except Exception:  # the reference does not take that input broadcast
            full = None
        if full is not None and not np.allclose(full.sum(axis=axes).reshape(x.shape), want[i]):
            full = None
        out.append((full, axes, g.shape))
    return out


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


def _factor(yours: np.ndarray, want: np.ndarray) -> float | None:
    """c if yours = c × want at every entry (c ≠ 0, 1, -1), else None."""
    norm = float((want * want).sum())
    if norm == 0.0 or want.size < 2:  # (one number is a multiple of any other)
        return None
    c = float((yours * want).sum()) / norm
    if abs(c) < 1e-9 or abs(abs(c) - 1) < 1e-3:
        return None
    return c if np.allclose(yours, c * want, rtol=1e-5, atol=1e-9 * max(1.0, abs(c))) else None


def _scale_message(ex: Exercise, what: str, c: float) -> str:
    """'WHAT is c× the answer', and a missing 1/N or 1/√d if c is one for this exercise."""
    text = f"{what} is {c:#.3g}× the right one at every entry"
    sizes = sorted({n for shape in ex.inputs.values() for n in shape if n > 1})
    for n in sizes:
        named = [(n, f"{n}"), (1 / n, f"1/{n}"), (n**0.5, f"√{n}"), (n**-0.5, f"1/√{n}")]
        for value, name in named:
            if abs(abs(c) / value - 1) < 0.01:
                return (
                    f"{text}: {abs(c):#.3g} = {name}, and {n} is a size in this exercise "
                    f"(sizes {', '.join(map(str, sizes))}): a missing scale such as 1/N or 1/√d?"
                )
    return f"{text}: a constant factor is off"


def _wrong_axis(dname: str, name: str, yours: np.ndarray, unreduced) -> str | None:
    """If ``yours`` is what reached a broadcast input summed over another axis than the
    right one (by its shape, or by its values when the shapes agree): which axis it was and
    which it should be."""
    if unreduced is None:
        return None
    full, axes, big = unreduced
    right = axes[0] if len(axes) == 1 else axes
    right_shape = tuple(n for i, n in enumerate(big) if i not in axes)
    for k in range(len(big)):
        if k in axes:
            continue
        for keep in (False, True):
            shape = tuple(1 if i == k else n for i, n in enumerate(big) if keep or i != k)
            if shape != yours.shape:
                continue
            if yours.shape == right_shape and (
                full is None or not np.allclose(yours, full.sum(axis=k, keepdims=keep))
            ):
                continue  # the right shape: only the values can tell
            return (
                f"{dname} looks like a sum over axis {k} of what reached {name}'s "
                f"broadcast copies (shape {_fmt(big)}), but {name} was copied along axis "
                f"{right}: the sum should run over axis {right}"
            )
    return None


def _wrong_spread(dname: str, yours: np.ndarray, g: np.ndarray | None, want) -> str | None:
    """If the forward summed an axis away (g has fewer axes than the input) and ``yours`` is
    g spread along another axis than that one: both axes."""
    if g is None or g.ndim >= want.ndim:
        return None
    spread = {
        k: np.broadcast_to(np.expand_dims(g, k), want.shape)
        for k in range(want.ndim)
        if want.shape[:k] + want.shape[k + 1 :] == g.shape
    }
    right = [k for k, copies in spread.items() if np.allclose(copies, want)]
    for k, copies in spread.items():
        if right and k not in right and np.allclose(yours, copies):
            return (
                f"{dname} spreads g along axis {k}, but the forward summed over axis "
                f"{right[0]}: each entry of g goes back to the entries summed into it, along "
                f"axis {right[0]}"
            )
    return None


def _diagnose(ex: Exercise, name: str, yours, want, num, full=None, g=None):
    """Compare one input's gradient; None if right, else (message, kind). ``full`` is the
    unreduced gradient of a broadcast input and its axes (see :func:`_unreduced_grads`),
    ``g`` the gradient arriving at the output."""
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
        wrong_axis = _wrong_axis(dname, name, yours, full)
        if wrong_axis is not None:
            return f"{wrong_axis} (it has shape {_fmt(yours.shape)}, {name} {_fmt(shape)})", "axis"
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
    c = _factor(yours, want)
    if c is not None:
        return _scale_message(ex, dname, c), "scale"
    wrong_axis = _wrong_axis(dname, name, yours, full) or _wrong_spread(dname, yours, g, want)
    if wrong_axis is not None:  # (before the transpose: g spread the wrong way is one too)
        return wrong_axis, "axis"
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


def _diagnose_forward(ex: Exercise, xs, y: np.ndarray, want: np.ndarray):
    """Compare the student's forward output with the engine's; None if right, else
    (message, kind): the shape, minus, a multiple or the transpose of the right output, a
    slip the exercise names (a missing softmax, mask, scale, ...), or the worst entry."""
    if y.shape != want.shape:
        if y.ndim == 2 and y.shape == want.shape[::-1] and np.allclose(y.T, want):
            return (
                f"the forward's output has shape {_fmt(y.shape)}, the engine's "
                f"{_fmt(want.shape)}: yours is its transpose",
                "forward-transposed",
            )
        return (
            f"the forward's output has shape {_fmt(y.shape)}, the engine's {_fmt(want.shape)}",
            "forward-shape",
        )
    ok = _close(y, want)
    if ok.all():
        return None
    if np.allclose(y, -want):
        return "the forward has the wrong sign: yours is minus the engine's output", "forward-sign"
    c = _factor(y, want)
    if c is not None:
        return _scale_message(ex, "the forward's output", c), "forward-scale"
    if y.ndim == 2 and y.shape[0] == y.shape[1] and np.allclose(y.T, want):
        return "the forward's output is the transpose of the engine's", "forward-transposed"
    for what, slip in ex.slips.items():
        with np.errstate(all="ignore"):
            if slip(y, *xs, *ex.constants.values()):
                return f"the forward {what}", "forward-missing"
    worst = np.unravel_index(np.argmax(np.where(ok, -1, np.abs(y - want))), ok.shape)
    return (
        f"the forward differs at y{_entry(worst)}: yours {y[worst]:.6g}, the engine's "
        f"{want[worst]:.6g}",
        "forward",
    )


class _Traced(np.ndarray):
    """An array that notes the operand shapes of every matrix product it takes part in (to
    name the shapes behind NumPy's matmul error)."""

    products: list[tuple[tuple[int, ...], ...]] = []

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain = [x.view(np.ndarray) if isinstance(x, _Traced) else x for x in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(
                o.view(np.ndarray) if isinstance(o, _Traced) else o for o in kwargs["out"]
            )
        if ufunc is np.matmul and method == "__call__":
            _Traced.products.append(tuple(np.shape(x) for x in plain))
        result = getattr(ufunc, method)(*plain, **kwargs)
        if isinstance(result, tuple):
            return tuple(r.view(_Traced) if type(r) is np.ndarray else r for r in result)
        return result.view(_Traced) if type(result) is np.ndarray else result


_GUFUNC = re.compile(r"matmul: Input operand \d has a mismatch in its core dimension")
_NOT_ALIGNED = re.compile(r"shapes \(([\d, ]*)\) and \(([\d, ]*)\) not aligned")
_BROADCAST = re.compile(
    r"could not be broadcast together with (?:remapped )?shapes (?:\[original->remapped\]: )?"
    r"\(([\d,]*)\)\s+(?:and requested shape )?\(([\d,]*)\)"
)
_ENGINE = re.compile(r"MatMul: inputs of shapes \(([\d, ]*)\) and \(([\d, ]*)\)")  # on Tensors


def _matmul_shapes(err: ValueError, f, args) -> tuple[tuple, tuple] | None:
    """The two shapes of the product that raised ``err`` (NumPy's matmul or dot, or the
    engine's on Tensors), () if they cannot be found, None if ``err`` is another error.
    np.dot's and the engine's messages name them; for ``@`` on arrays the student's function
    is run again on arrays that note each product's shapes."""
    text = str(err)
    found = _NOT_ALIGNED.search(text) or (_GUFUNC.search(text) and _ENGINE.search(text))
    if found:
        s1, s2 = (tuple(int(n) for n in grp.split(",") if n.strip()) for grp in found.groups())
        return s1, s2
    if not _GUFUNC.search(text):
        return None
    if not any(isinstance(a, np.ndarray) for a in args):
        return ()
    _Traced.products = []
    traced = [a.view(_Traced) if isinstance(a, np.ndarray) else a for a in args]
    try:
        f(*traced)
    except ValueError as again:
        if _GUFUNC.search(str(again)) and _Traced.products:
            return _Traced.products[-1]
    except Exception:
        pass
    return ()


def _student_line(err: BaseException) -> str:
    """The student's line of code where ``err`` was raised (the last frame outside NumPy and
    this file), as ' (in `...`)', or ''."""
    frames = [
        fr
        for fr in traceback.extract_tb(err.__traceback__)
        if fr.filename != __file__ and f"{os.sep}numpy{os.sep}" not in fr.filename
    ]
    line = frames[-1].line if frames else ""
    return f" (in `{line.strip()}`)" if line and line.strip() else ""


def _matmul_message(what: str, shapes, err: ValueError) -> str:
    where = _student_line(err)
    if not shapes:
        sizes = re.search(r"size (\d+) is different from (\d+)", str(err))
        inner = f" ({sizes[1]} vs {sizes[2]})" if sizes else ""
        return (
            f"your {what} multiplies two matrices whose inner sizes differ{inner}{where}: "
            "the columns of the left factor must match the rows of the right one; one factor "
            "probably needs a transpose (.T)"
        )
    s1, s2 = shapes
    k1, k2 = s1[-1], (s2[-2] if len(s2) > 1 else s2[0])
    fix = "one factor probably needs a transpose (.T)"
    if len(s2) > 1 and s1[-1] == s2[-1]:
        fix = f"the right factor transposed, {_fmt(s2[::-1])}, would fit: does it need a .T?"
    elif len(s1) > 1 and s1[-2] == k2:
        fix = f"the left factor transposed, {_fmt(s1[::-1])}, would fit: does it need a .T?"
    return (
        f"your {what} multiplies {_fmt(s1)} @ {_fmt(s2)}{where}, and a matrix product needs "
        f"the inner sizes to match ({k1} vs {k2}); each gradient has its input's shape, and "
        f"{fix}"
    )


def _broadcast_message(what: str, err: ValueError) -> str | None:
    """NumPy's "could not be broadcast together" as the two shapes and NumPy's rule, or None
    for another error."""
    found = _BROADCAST.search(str(err))
    if not found:
        return None
    s1, s2 = (tuple(int(n) for n in grp.split(",") if n) for grp in found.groups())
    last = f"{s1[-1]} and {s2[-1]}" if s1 and s2 else "the sizes"
    return (
        f"your {what} broadcasts shape {_fmt(s1)} against {_fmt(s2)}{_student_line(err)}: NumPy "
        f"lines shapes up from the last axis, so {last} must be equal (or one of them 1); to "
        "spread an array along another axis, give it a length-1 axis where it belongs first "
        "(keepdims=True when summing, or indexing with None)"
    )


def _call(f, what: str, *args):
    """Run the student's function; an exception (other than the stub's) becomes a verdict."""
    try:
        return f(*args)
    except NotImplementedError:
        raise
    except ValueError as err:  # shapes that do not fit: a shape hint instead of NumPy's words
        broadcast = _broadcast_message(what, err)
        if broadcast is not None:
            raise _Wrong(broadcast, "broadcast-shape") from err
        shapes = _matmul_shapes(err, f, args)
        if shapes is not None:
            raise _Wrong(_matmul_message(what, shapes, err), "matmul-shape") from err
        text = " ".join(str(err).split())
        raise _Wrong(f"your {what} raised ValueError: {text}", "error") from err
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


def _wrong(exercise: str, message: str, kind: str) -> Verdict:
    return Verdict(exercise, False, f"{exercise}: {message}; {_ask(exercise)}", mistake=kind)


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
    and how to ask for a :func:`hint`; it never states the formula."""
    if exercise not in EXERCISES:
        raise KeyError(f"check: no exercise {exercise!r}; there are {', '.join(EXERCISES)}")
    ex = EXERCISES[exercise]
    op = None
    if inspect.isclass(backward) and issubclass(backward, Function):
        op, backward = backward, None
    if op is None and backward is None and forward is None:
        raise TypeError("check: pass the backward to grade (or forward=..., or a Function)")
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
            f"{exercise}: not written yet (the function raises NotImplementedError): write it "
            f'and run the cell again; for a hint, hint("{exercise}") (each call tells more)',
            done=False,
            mistake="not done",
        )
    except _Wrong as w:
        return _wrong(exercise, str(w), w.kind)
    if y_out is not None:
        found = _diagnose_forward(ex, xs, y_out, y_ref)
        if found is not None:
            message, kind = found
            return Verdict(
                exercise, False, f"{exercise}: {message}; {_ask(exercise)}", mistake=kind
            )
        if grads is None:
            return Verdict(exercise, True, f"{exercise}: the forward is right.")
    numeric = _numeric_grads(ex, xs, g)
    unreduced = _unreduced_grads(ex, xs, g, want)
    for name, yours, w, num in zip(ex.inputs, grads, want, numeric):
        full = unreduced[list(ex.inputs).index(name)]
        found = _diagnose(ex, name, yours, w, num, full, g)
        if found is not None:
            message, kind = found
            return Verdict(
                exercise, False, f"{exercise}: {message}; {_ask(exercise)}", mistake=kind
            )
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
