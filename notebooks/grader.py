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
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from nn.activation import gelu
from nn.attention import scaled_dot_product_attention
from nn.linear import linear
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
D3 = "docs/transformer.md"


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
    # An answer that is not one op's backward (an engine, an optimizer step, an attribution):
    # grade(answer) runs it on the grader's own cases and returns what agreed, or raises _Wrong
    # with the first mistake; inputs and reference are then unused.
    grade: Callable | None = None

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


def _mlp(x, W_in, b_in, W_out, b_out):
    return linear(gelu(linear(x, W_in, b_in), approximate="tanh"), W_out, b_out)


def _heads(x, W_q, W_k, W_v, W_O):
    """Causal multi-head self-attention of x (T, d_model): W_q, W_k, W_v (d_model, H, d_head),
    W_O (H, d_head, d_model), no biases: every head at once as (H, T, d_head)."""
    q, k, v = (linear(x, W).transpose(0, 1) for W in (W_q, W_k, W_v))
    z = scaled_dot_product_attention(q, k, v, causal=True).transpose(0, 1)  # (T, H, d_head)
    return linear(z, W_O, in_dims=2)


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
        Exercise(
            "mlp",
            {"x": (4, 6), "W_in": (6, 8), "b_in": (8,), "W_out": (8, 6), "b_out": (6,)},
            _mlp,
            "h = x W_in + b_in, a = gelu(h), y = a W_out + b_out: dW_out = aᵀ g, "
            "db_out = Σ_rows g, da = g W_outᵀ, dh = da ⊙ gelu'(h), dW_in = xᵀ dh, "
            "db_in = Σ_rows dh, dx = dh W_inᵀ",
            f"{D3}#3-backward-with-shapes",
            "three layers in series, a linear layer, GELU, a linear layer: go back through them "
            "one at a time, keeping the forward's intermediates (h and gelu(h)); each step is "
            "a backward you wrote in an earlier notebook, and each gradient has the shape of "
            "what it is the gradient of",
        ),
        Exercise(
            "heads",
            {"x": (5, 6), "W_q": (6, 2, 3), "W_k": (6, 2, 3), "W_v": (6, 2, 3), "W_O": (2, 3, 6)},
            _heads,
            "per head h, q = x W_q[:, h] (k, v alike), z = attention(q, k, v): "
            "dz = g W_O[h]ᵀ, dW_O[h] = zᵀ g, (dq, dk, dv) = the attention backward of dz, "
            "dW_q[:, h] = xᵀ dq (k, v alike), dx = Σ_h (dq W_q[:, h]ᵀ + dk W_k[:, h]ᵀ + "
            "dv W_v[:, h]ᵀ)",
            f"{D3}#3-backward-with-shapes",
            "each head is the single head of notebook 4 between two projections: the output "
            "projection sums the heads, so each head's z gets its own slice of the gradient; "
            "the attention backward you wrote turns it into the gradients of q, k and v; the "
            "input projections bring those back to x, and x feeds every head and all three "
            "projections, so its gradient is a sum",
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
    """'PAGE, section N' (a section's title can spell the answer: "softmax minus onehot"), or
    for a source file 'FILE, the docstring of NAME'."""
    page, anchor = ex.section.split("#")
    if page.endswith(".py"):
        return f"{page}, the docstring of {anchor}"
    return f"{page}, section {anchor.split('-', 1)[0]}"


def _ask(name: str) -> str:
    """How a verdict points to the hints (never the formula itself)."""
    return f'stuck? hint("{name}"), and again for more (or read {_where(EXERCISES[name])})'


def hint_text(exercise: str, level: int) -> str:
    """Hint ``level`` (1, 2 or 3) for ``exercise``: 1 says where the derivation is, 2 the
    idea in words, 3 the formula (the exercise's ``rule``)."""
    ex = _exercise(exercise)
    level = min(max(int(level), 1), len(HINT_LEVELS))
    if level == 1 and ex.section.split("#")[0].endswith(".py"):
        body = f"read {_where(ex)}: {ex.section}; it states what the library computes"
    elif level == 1:
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


def _not_written(exercise: str) -> Verdict:
    return Verdict(
        exercise,
        False,
        f"{exercise}: not written yet (the function raises NotImplementedError): write it "
        f'and run the cell again; for a hint, hint("{exercise}") (each call tells more)',
        done=False,
        mistake="not done",
    )


def _graded(ex: Exercise, answer) -> Verdict:
    """The verdict on an exercise graded by its own cases (``Exercise.grade``)."""
    if answer is None:
        raise TypeError(f"check: pass your answer to {ex.name!r} (a function or a class)")
    try:
        right = ex.grade(answer)
    except NotImplementedError:
        return _not_written(ex.name)
    except _Wrong as w:
        return _wrong(ex.name, str(w), w.kind)
    return Verdict(ex.name, True, f"{ex.name}: right: {right}.")


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
    if ex.grade is not None:
        return _graded(ex, backward if backward is not None else forward)
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
        return _not_written(exercise)
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


# ---------------------------------------------------------------------- not one op's backward
# Each grades a function or a class on the grader's own cases, against tensorlab (its .grad,
# gpt.model.Block, nn.optim, gpt.circuits), and raises _Wrong with the first mistake it finds.
def _allclose(yours, want, rtol=1e-6, atol=1e-9) -> bool:
    yours = np.asarray(yours, dtype=np.float64)
    return yours.shape == np.shape(want) and bool(np.allclose(yours, want, rtol=rtol, atol=atol))


def _first_diff(what: str, yours, want) -> str:
    """'WHAT[i, j] is yours Y, tensorlab's W' at the worst entry (or the two shapes)."""
    yours, want = np.asarray(yours, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if yours.shape != want.shape:
        return f"{what} has shape {_fmt(yours.shape)}, tensorlab's {_fmt(want.shape)}"
    if yours.ndim == 0:
        return f"{what} is yours {float(yours):.6g}, tensorlab's {float(want):.6g}"
    worst = np.unravel_index(np.argmax(np.abs(yours - want)), want.shape)
    return f"{what}{_entry(worst)} is yours {yours[worst]:.6g}, tensorlab's {want[worst]:.6g}"


def _matching_slip(slips: dict, yours, variant) -> str | None:
    """The kind of the first slip whose variant output ``variant(kind)`` equals ``yours``."""
    for kind in slips:
        if _allclose(yours, variant(kind), rtol=1e-7, atol=1e-10):
            return kind
    return None


# --- write the engine: a scalar Value class, sum_to, an array class
def _twice(d):
    return d * d.tanh()  # d used by two ops: the product and tanh


# (what, the expression, its leaves' values, what a wrong gradient here points to)
_VALUE_CASES = [
    ("a + b", lambda a, b: a + b, (0.7, -1.3), "local"),
    ("a * b", lambda a, b: a * b, (0.7, -1.3), "local"),
    ("a.tanh()", lambda a: a.tanh(), (0.6,), "local"),
    ("(a * b + c).tanh()", lambda a, b, c: (a * b + c).tanh(), (0.5, -1.5, 0.2), "chain"),
    ("a * a", lambda a: a * a, (0.8,), "accumulate"),
    ("d * d.tanh() with d = a * b", lambda a, b: _twice(a * b), (0.9, -0.4), "order"),
]
_ARRAY_CASES = [
    ("(x * y).sum()", lambda x, y: (x * y).sum(), {"x": (2, 3), "y": (2, 3)}, "local"),
    ("(x * x).sum()", lambda x: (x * x).sum(), {"x": (2, 3)}, "accumulate"),
    (
        "(x @ W + b).tanh().sum()",
        lambda x, W, b: (x @ W + b).tanh().sum(),
        {"x": (4, 3), "W": (3, 2), "b": (2,)},
        "broadcast",
    ),
    ("(x * c).sum()", lambda x, c: (x * c).sum(), {"x": (4, 3), "c": (4, 1)}, "broadcast"),
    (
        "(h * h.tanh()).sum() with h = x @ W",
        lambda x, W: _twice(x @ W).sum(),
        {"x": (4, 3), "W": (3, 2)},
        "order",
    ),
]
_NAMES = "abc"


def _grade_engine(cls, cases, arrays: bool) -> str:
    """Build each case from ``cls`` and from tensorlab, call backward() on both, and compare
    the output's value and every leaf's gradient."""
    rng = np.random.default_rng(0)
    for what, f, leaves, kind in cases:
        if arrays:
            names, values = list(leaves), [rng.standard_normal(s) for s in leaves.values()]
        else:
            names, values = list(_NAMES[: len(leaves)]), [float(v) for v in leaves]
        mine = [_call(cls, f"{cls.__name__}()", v.copy() if arrays else v) for v in values]
        out = _call(f, f"{what} (a forward of your class)", *mine)
        _call(out.backward, "backward")
        ts = [Tensor(np.asarray(v, dtype=np.float64), requires_grad=True) for v in values]
        ref = f(*ts)
        ref.backward()
        if not _allclose(_as_array(out.data, "data"), ref.numpy()):
            raise _Wrong(f"in {what}, {_first_diff('the value', out.data, ref.numpy())}", "forward")
        grads = [_as_array(m.grad, f"{n}.grad") for n, m in zip(names, mine)]
        wants = [t.grad.numpy() for t in ts]
        if all(not g.any() for g in grads):
            raise _Wrong(
                f"after {what} and backward(), every leaf's .grad is still 0: nothing reached "
                "the leaves (does the walk start from the output's own gradient, dL/dL, and "
                "visit every node?)",
                "seed",
            )
        for n, g, w in zip(names, grads, wants):
            if _allclose(g, w):
                continue
            if g.shape != w.shape:
                raise _Wrong(
                    f"in {what}, {n} has shape {_fmt(w.shape)} but {n}.grad has shape "
                    f"{_fmt(g.shape)}: {n} was broadcast, so the gradient that arrives for it "
                    f"has the shape of the op's output and must be summed back to {n}'s shape "
                    "(your sum_to) before it is added",
                    "broadcast",
                )
            diff = _first_diff(f"{n}.grad", g, w)
            if kind == "accumulate" and _allclose(2 * g, w):
                raise _Wrong(
                    f"in {what}, {n} is used twice and {diff}, half of it: one use's share "
                    "replaced the other's, but a value used more than once receives the sum of "
                    "its uses' shares",
                    "accumulate",
                )
            if kind == "order":
                raise _Wrong(
                    f"in {what}, {diff}, though the single ops and a reused leaf were right: d "
                    "is used by two ops, and it passed its gradient on before both had sent "
                    "their shares; the walk must reach a node only after every node that uses it",
                    "order",
                )
            sign = " (the wrong sign)" if _allclose(g, -w) else ""
            raise _Wrong(f"in {what}, {diff}{sign}", "local" if kind == "local" else "chain")
    return (
        "the value and every leaf's gradient agree with tensorlab's .grad in "
        f"{len(cases)} expressions (single ops, a chain, a reused leaf, a reused inner node"
        f"{', broadcasting' if arrays else ''})"
    )


def _grade_value(cls) -> str:
    return _grade_engine(cls, _VALUE_CASES, arrays=False)


def _grade_array(cls) -> str:
    try:
        return _grade_engine(cls, _ARRAY_CASES, arrays=True)
    except _Wrong as w:
        if "non-broadcastable output operand" not in str(w):
            raise
        raise _Wrong(
            "adding a gradient to a leaf's .grad failed because their shapes differ (NumPy: "
            "non-broadcastable output operand): a broadcast leaf's gradient arrives in the "
            "shape of the op's output and must be summed back to the leaf's shape (your "
            "sum_to) before it is added",
            "broadcast",
        ) from None


_SUM_TO_CASES = [((4, 3), (4, 1)), ((2, 4, 3), (4, 1)), ((4, 3), (3,)), ((2, 3), (2, 3))]
_SUM_TO_CASES += [((3, 1, 5), (1, 5)), ((4,), ())]


def _grade_sum_to(sum_to) -> str:
    rng = np.random.default_rng(0)
    for big, shape in _SUM_TO_CASES:
        g = rng.standard_normal(big)
        want = Tensor(g).sum_to(shape).numpy()
        yours = _as_array(_call(sum_to, "sum_to", g.copy(), shape), "sum_to's result")
        if _allclose(yours, want):
            continue
        lead = len(big) - len(shape)
        ones = tuple(i for i, n in enumerate(shape) if n == 1 and big[lead + i] != 1)
        where = f"sum_to(g of shape {_fmt(big)}, {_fmt(shape)})"
        if yours.shape == shape:
            raise _Wrong(f"{where}: {_first_diff('the result', yours, want)}", "values")
        if lead and yours.shape == big[:lead] + shape:
            raise _Wrong(
                f"{where} has shape {_fmt(yours.shape)}: g has {lead} more leading axis(es) "
                f"than {_fmt(shape)}, which NumPy put in front when it broadcast; the input "
                "was copied along them too, so they are summed away",
                "leading",
            )
        if ones and yours.shape == big[lead:]:
            raise _Wrong(
                f"{where} has shape {_fmt(yours.shape)}: where the input has a 1 and g more "
                f"(axis {ones[0]} of the input), the input was stretched too, so that axis is "
                "summed as well (and stays, with length 1)",
                "ones",
            )
        if ones and yours.shape == tuple(n for i, n in enumerate(shape) if i not in ones):
            raise _Wrong(
                f"{where} has shape {_fmt(yours.shape)}: the length-1 axes were summed but "
                f"dropped; a gradient has its input's shape, {_fmt(shape)}",
                "keepdims",
            )
        raise _Wrong(f"{where} has shape {_fmt(yours.shape)}, not {_fmt(shape)}", "shape")
    return f"sum_to agrees with tensorlab's Tensor.sum_to on {len(_SUM_TO_CASES)} shapes"


# --- a GPT block, from engine ops
_BLOCK = dict(d_model=8, n_head=2, d_head=4, T=5)


def _np_block(x, p, kind=None):
    """A pre-norm GPT block in NumPy (the grader's own, for naming slips): ``kind`` leaves
    one thing out or changes it ("residual", "causal", "scale", "post")."""
    H, dh = _BLOCK["n_head"], _BLOCK["d_head"]

    def ln(z, n):
        return _np_normalize(z) * p[f"{n}.w"] + p[f"{n}.b"]

    def attn(h):
        q, k, v = (
            np.einsum("td,dhe->hte", h, p[f"attn.W_{c}"]) + p[f"attn.b_{c}"].reshape(H, 1, dh)
            for c in "qkv"
        )
        s = q @ k.swapaxes(-1, -2) / (1 if kind == "scale" else np.sqrt(dh))
        if kind != "causal":
            s = np.where(_causal(h), s, -np.inf)
        z = _np_softmax(s) @ v
        return np.einsum("hte,hed->td", z, p["attn.W_O"]) + p["attn.b_O"]

    def mlp(h):
        a = h @ p["mlp.W_in"] + p["mlp.b_in"]
        a = 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a**3)))
        return a @ p["mlp.W_out"] + p["mlp.b_out"]

    if kind == "post":
        x = ln(x + attn(x), "ln1")
        return ln(x + mlp(x), "ln2")
    if kind == "residual":
        return mlp(ln(attn(ln(x, "ln1")), "ln2"))
    x = x + attn(ln(x, "ln1"))
    return x + mlp(ln(x, "ln2"))


_BLOCK_SLIPS = {
    "residual": "has no residual connections: each sublayer's output is added to the stream "
    "it read, and the stream goes on",
    "causal": "has no causal mask: position i may look at positions j ≤ i only",
    "scale": "has no 1/√d_head scale on the scores",
    "post": "normalizes after each residual add (post-norm, Vaswani et al.); GPT-2's block "
    "normalizes each sublayer's input (pre-norm)",
}


def _grade_block(block_forward) -> str:
    from gpt.config import GPTConfig
    from gpt.model import Block

    d, H, dh, T = (_BLOCK[k] for k in ("d_model", "n_head", "d_head", "T"))
    sizes = dict(n_layer=1, n_head=H, d_head=dh, d_model=d, block_size=T)
    with warnings.catch_warnings():  # (a toy size, far from the usual aspect ratio)
        warnings.simplefilter("ignore")
        cfg = GPTConfig(vocab_size=16, activation="gelu_tanh", **sizes)
    block = Block(cfg).to("cpu")  # the grader's tensors are on the CPU, whatever the default
    rng = np.random.default_rng(0)
    weights = {k: rng.standard_normal(v.shape) * 0.5 for k, v in block.state_dict().items()}
    for k in weights:
        if k.endswith("ln1.w") or k.endswith("ln2.w"):
            weights[k] += 1.0
    block.load_state_dict(weights)
    for p in block.parameters():  # float64, as everywhere in the grader
        p.data = p.data.astype(np.float64)
    weights = {k: np.array(v, dtype=np.float64) for k, v in block.state_dict().items()}
    x0 = rng.standard_normal((T, d))
    g = rng.standard_normal((T, d))
    x_ref = Tensor(x0[None], requires_grad=True)
    y_ref = block(x_ref)
    y_ref.backward(g[None])
    x = Tensor(x0.copy(), requires_grad=True)
    params = {k: Tensor(v.copy(), requires_grad=True) for k, v in weights.items()}
    y = _call(block_forward, "forward", x, params)
    yours = _as_array(y, "the block's output")
    want = y_ref.numpy()[0]
    if not _allclose(yours, want):
        slip = _matching_slip(_BLOCK_SLIPS, yours, lambda k: _np_block(x0, weights, k))
        if slip is not None:
            raise _Wrong(f"the block {_BLOCK_SLIPS[slip]}", f"block-{slip}")
        raise _Wrong(_first_diff("the block's output", yours, want), "forward")
    if not isinstance(y, Tensor) or y._ctx is None:
        raise _Wrong(
            "the output is right but is not a Tensor made by engine ops (a NumPy array, or "
            "computed from .numpy() or .data), so no gradient can flow back through it",
            "detached",
        )
    _call(y.backward, "backward", Tensor(g))
    named = dict(block.named_parameters())
    for k, t in [("x", x), *params.items()]:
        ref = x_ref.grad.numpy()[0] if k == "x" else named[k].grad.numpy()
        if t.grad is None:
            raise _Wrong(
                f"no gradient reached {k}: the forward does not use it through engine ops "
                "(left out, or read through .numpy() or .data)",
                "detached",
            )
        if not _allclose(t.grad.numpy(), ref):
            raise _Wrong(_first_diff(f"the gradient of {k}", t.grad.numpy(), ref), "values")
    return (
        "the output agrees with gpt.model.Block's, and the engine's gradients through your "
        f"forward agree with the Block's for x and all {len(params)} parameters"
    )


# --- the training step: AdamW, gradient clipping
# (λ and the weights large enough that Adam's L2 decay, g + λw, flips the sign of some of the
# first step's entries: the first step is ±lr per entry, and else it looks like no decay)
_ADAMW = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.5)


def _np_adamw(w, g, m, v, t, lr, betas, eps, weight_decay, kind=None):
    """The AdamW step in NumPy, or with one slip (``kind``) in it, for naming mistakes."""
    b1, b2 = betas
    if kind == "coupled":
        g = g + weight_decay * w
    elif kind == "decay-scale":
        w = w * (1 - weight_decay)
    elif kind != "no-decay":
        w = w * (1 - lr * weight_decay)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat, v_hat = (m, v) if kind == "bias" else (m / (1 - b1**t), v / (1 - b2**t))
    step = m_hat / ((v_hat if kind == "sqrt" else np.sqrt(v_hat)) + eps)
    return w + lr * step if kind == "sign" else w - lr * step, m, v


_ADAMW_SLIPS = {
    "bias": "has no bias correction: m and v start at 0, so early on they are too small, "
    "and each is divided by its own (1 - β^t) before use",
    "coupled": "adds the weight decay to the gradient (Adam's L2 decay), where the adaptive "
    "scaling then divides it; AdamW shrinks the weights directly",
    "decay-scale": "shrinks the weights by the factor λ alone; the decay is a step too, "
    "scaled by the learning rate",
    "no-decay": "has no weight decay",
    "sqrt": "divides by v̂ itself; v̂ is a mean of squares, so its units are the gradient's squared",
    "sign": "moves the weights up the gradient, so the loss would grow",
}


def _grade_adamw(adamw_step) -> str:
    import nn
    from nn.optim import AdamW

    rng = np.random.default_rng(0)
    w0 = 3 * rng.standard_normal((3, 4))
    grads = [rng.standard_normal((3, 4)) for _ in range(3)]
    p = nn.Parameter(Tensor(w0.copy()))
    opt = AdamW([p], **_ADAMW)
    w, m, v = w0.copy(), np.zeros_like(w0), np.zeros_like(w0)
    for t, g in enumerate(grads, start=1):
        p.grad = Tensor(g.copy())
        opt.step()
        args = (w.copy(), g.copy(), m.copy(), v.copy(), t, *_ADAMW.values())
        out = _call(adamw_step, "update", *args)
        if not isinstance(out, tuple | list) or len(out) != 3:
            raise _Wrong("adamw_step returns the new (w, m, v), three arrays", "count")
        new = [_as_array(a, n) for a, n in zip(out, ("w", "m", "v"))]
        want = p.numpy()
        if not _allclose(new[0], want):
            slip = _matching_slip(
                _ADAMW_SLIPS,
                new[0],
                lambda k, s=(w, g, m, v, t): _np_adamw(*s, **_ADAMW, kind=k)[0],
            )
            if slip is not None:
                raise _Wrong(f"at step {t} your update {_ADAMW_SLIPS[slip]}", slip)
            raise _Wrong(f"after step {t}, {_first_diff('w', new[0], want)}", "values")
        state = opt.state[p]
        for name, yours, ref in [("m", new[1], state["m"]), ("v", new[2], state["v"])]:
            if not _allclose(yours, ref):
                raise _Wrong(
                    f"after step {t} w is right but {_first_diff(name, yours, ref)}: the "
                    f"next step reads the {name} you return",
                    "moments",
                )
        w, m, v = new
    return "three steps agree with nn.optim.AdamW's (weights and both moments)"


def _np_clip(grads, max_norm, kind=None):
    if kind == "per-array":
        return [g * min(1.0, max_norm / (np.sqrt((g * g).sum()) + 1e-6)) for g in grads]
    norm = sum(float((g * g).sum()) for g in grads)
    norm = norm if kind == "no-sqrt" else np.sqrt(norm)
    s = max_norm / (norm + 1e-6)
    return [g * (s if kind == "scale-up" else min(1.0, s)) for g in grads]


_CLIP_SLIPS = {
    "per-array": "clips each gradient array to max_norm on its own; the norm is one number "
    "over all of them together, and all are scaled by the same factor",
    "scale-up": "scales gradients up when their norm is below max_norm; clipping only ever "
    "shrinks them",
    "no-sqrt": "measures the gradients by their sum of squares; the norm is its square root",
}


def _grade_clip(clip_grad_norm) -> str:
    import nn
    from nn.optim import clip_grad_norm_

    rng = np.random.default_rng(0)
    shapes = [(3, 4), (5,), (2, 2)]
    for max_norm in (1.0, 3.0, 100.0):  # clipped hard, clipped a little, untouched
        grads = [rng.standard_normal(s) for s in shapes]
        params = [nn.Parameter(Tensor(np.zeros(s))) for s in shapes]
        for p, g in zip(params, grads):
            p.grad = Tensor(g.copy())
        norm = clip_grad_norm_(params, max_norm)
        out = _call(clip_grad_norm, "clip", [g.copy() for g in grads], max_norm)
        if not isinstance(out, tuple | list) or len(out) != 2:
            raise _Wrong("clip_grad_norm returns (the clipped gradients, the norm)", "count")
        clipped, yours_norm = out
        clipped = [_as_array(c, "a clipped gradient") for c in clipped]
        wants = [p.grad.numpy() for p in params]
        if len(clipped) != len(wants) or not all(
            _allclose(c, w, rtol=1e-5) for c, w in zip(clipped, wants)
        ):
            for kind in _CLIP_SLIPS:
                variant = _np_clip(grads, max_norm, kind)
                if len(clipped) == len(variant) and all(
                    _allclose(c, w, rtol=1e-5) for c, w in zip(clipped, variant)
                ):
                    raise _Wrong(f"with max_norm={max_norm:g} yours {_CLIP_SLIPS[kind]}", kind)
            i = next((i for i, (c, w) in enumerate(zip(clipped, wants)) if not _allclose(c, w)), 0)
            diff = _first_diff(f"gradient {i}", clipped[i], wants[i]) if clipped else "empty"
            raise _Wrong(f"with max_norm={max_norm:g}, {diff}", "values")
        if not _allclose(_as_array(yours_norm, "the norm"), norm, rtol=1e-5):
            slip = "no-sqrt" if _allclose(yours_norm, norm**2, rtol=1e-5) else None
            if slip:
                raise _Wrong(f"the norm you return {_CLIP_SLIPS[slip]}", slip)
            raise _Wrong(_first_diff("the norm you return", yours_norm, norm), "values")
    return "the clipped gradients and the norm agree with nn.optim.clip_grad_norm_ (3 cases)"


# --- direct logit attribution
_DLA_SLIPS = {
    "no-centre": "does not centre each head's output: the final layer norm subtracts each "
    "vector's mean before anything else",
    "no-scale": "does not divide by the final norm's σ (cache['ln_final.hook_scale'])",
    "no-gain": "reads the logits with W_U alone; the final norm's gain γ multiplies first "
    "(fold it into the unembedding)",
}


def _grade_dla(head_attributions) -> str:
    import gpt
    from gpt import circuits

    with warnings.catch_warnings():  # (a toy size, far from the usual aspect ratio)
        warnings.simplefilter("ignore")
        cfg = gpt.GPTConfig(vocab_size=13, block_size=8, n_layer=2, n_head=2, d_model=8)
    model = gpt.GPT(cfg)
    rng = np.random.default_rng(0)
    model.load_state_dict(
        {k: rng.standard_normal(v.shape) * 0.5 for k, v in model.state_dict().items()}
    )
    tokens = rng.integers(0, 13, (2, 6))
    next_tokens = rng.integers(0, 13, (2, 6))
    _, cache = circuits.run_with_cache(model, tokens)
    stack = circuits.stack_head_results(model, cache)
    want = circuits.logit_attrs(model, cache, stack, next_tokens)
    yours = _as_array(
        _call(head_attributions, "attribution", model, cache, next_tokens), "your attributions"
    )
    if _allclose(yours, want, rtol=1e-5, atol=1e-6):
        return (
            "every head's direct logit attribution agrees with gpt.circuits.logit_attrs "
            f"({want.shape[0]} heads, {want.shape[1]} sequences of {want.shape[2]})"
        )
    if yours.shape != want.shape:
        raise _Wrong(
            f"your attributions have shape {_fmt(yours.shape)}; there is one number per head "
            f"(layer-major), sequence and position: {_fmt(want.shape)}",
            "shape",
        )
    W_U = np.asarray(model.W_U.numpy(), dtype=np.float64)
    gain = np.asarray(model.ln_final.w.numpy(), dtype=np.float64)
    sigma = cache["ln_final.hook_scale"]
    r = np.asarray(stack)

    def variant(kind):
        c = r if kind == "no-centre" else r - r.mean(axis=-1, keepdims=True)
        c = c if kind == "no-scale" else c / sigma
        dirs = (W_U if kind == "no-gain" else gain[:, None] * W_U).T[next_tokens]
        return (c * dirs).sum(axis=-1)

    for kind in _DLA_SLIPS:
        if _allclose(yours, variant(kind), rtol=1e-5, atol=1e-6):
            raise _Wrong(f"your attribution {_DLA_SLIPS[kind]}", kind)
    raise _Wrong(_first_diff("the attribution", yours, want), "values")


for _e in [
    Exercise(
        "value",
        {},
        None,
        "topological order: list each node after its parents (a depth-first search from the "
        "output); out.grad = 1; then for each node in reversed order and each (parent, local) "
        "pair: parent.grad += node.grad * local",
        "docs/autograd.md#2-reverse-topological-order",
        "a node may pass its gradient on only once every node that uses it has sent its share: "
        "list the nodes so that each comes after its parents, start the output's gradient at "
        "dL/dL, and walk the list from the end; each parent gets the chain rule's product, and "
        "a parent used twice gets two shares, added",
        grade=_grade_value,
    ),
    Exercise(
        "sum_to",
        {},
        None,
        "sum g over its first len(g.shape) - len(shape) axes; then over every axis where shape "
        "has 1 and g more, with keepdims=True",
        "docs/derivations.md#2-broadcasting-and-the-one-sum_to",
        "NumPy lines the shapes up from the right: it put new axes in front of the smaller "
        "shape and stretched its length-1 axes; every copy it made sends back a gradient, and "
        "the copies of one entry add up: undo both kinds of copying with sums",
        grade=_grade_sum_to,
    ),
    Exercise(
        "array",
        {},
        None,
        "as Value.backward, with out.grad = np.ones_like(out.data) and each parent's share "
        "p.grad += sum_to(vjp(node.grad), p.data.shape)",
        "docs/autograd.md#4-the-single-sum_to",
        "the scalar walk carries over: the same order, the same seeding and the same sums; what "
        "changes is that a share arrives in the shape of the op's output, which for a "
        "broadcast parent is bigger than the parent",
        grade=_grade_array,
    ),
    Exercise(
        "gpt_block",
        {},
        None,
        "h = x + attention(ln1(x)), with attention = softmax(causal(q kᵀ / √d_head)) v per "
        "head, heads summed through W_O; y = h + mlp(ln2(h)), mlp = gelu(h W_in + b_in) W_out "
        "+ b_out",
        "docs/transformer.md#1-forward-with-shapes",
        "two sublayers, each reading a normalized copy of the stream and adding its output to "
        "the stream itself; attention projects to queries, keys and values per head, scores "
        "them, masks the future, scales and takes a softmax, mixes the values, and projects "
        "back",
        grade=_grade_block,
    ),
    Exercise(
        "adamw",
        {},
        None,
        "w = w (1 - lr λ); m = β1 m + (1 - β1) g; v = β2 v + (1 - β2) g²; "
        "w = w - lr (m / (1 - β1ᵗ)) / (√(v / (1 - β2ᵗ)) + eps)",
        "nn/optim.py#Adam",
        "keep two running averages per weight, of the gradient and of its square, correct "
        "both for starting at zero, and step by the first over the square root of the second; "
        "AdamW's weight decay shrinks the weights themselves, apart from that step",
        grade=_grade_adamw,
    ),
    Exercise(
        "clip",
        {},
        None,
        "n = √(Σ over every gradient of Σ g²); if n > max_norm: g = g · max_norm / (n + 1e-6) "
        "for every g; return the gradients and n",
        "nn/optim.py#clip_grad_norm_",
        "one number measures all the gradients together, as if they were one long vector; if "
        "it is too large, every gradient is shrunk by the same factor, so the direction of the "
        "step is kept",
        grade=_grade_clip,
    ),
    Exercise(
        "dla",
        {},
        None,
        "per head, with r its output (hook_result) and σ the final norm's scale (hook_scale), "
        "attr = ((r - mean(r)) / σ) · (γ ⊙ W_U)ᵀ[token]",
        "docs/interpretability.md#4-the-residual-stream-taken-apart",
        "each head's output is a vector added to the residual stream; the final layer norm is "
        "linear once its scale σ is read from this run, so each head's share of a logit is its "
        "vector put through that norm (centred, divided by σ, times γ) and dotted with the "
        "token's column of the unembedding",
        grade=_grade_dla,
    ),
]:
    EXERCISES[_e.name] = _e


# ---------------------------------------------------------------------- predict, then run
# Each notebook asks a few questions before a cell runs: predict, run, then reveal(name)
# for the reasoning. The answers live here, so a notebook prints none of them unless asked.
QUESTIONS: dict[str, str] = {
    # 01
    "sigmoid-sign": "negative for w and b, positive for x (x > 0 but w < 0): y = σ(u) is "
    "about 0.37 here, and L = y² grows with y, so anything that raises u raises L. dL/du = "
    "2y·y(1 - y) > 0; then dL/dw = dL/du · x has x's sign (+), dL/db = dL/du (+), and "
    "dL/dx = dL/du · w has w's sign (-).",
    "offset-grad": "each entry of the offset was copied into the 3 columns of its row, so "
    "its gradient is the sum of g over that row: [0+1+2, 3+4+5, 6+7+8, 9+10+11] = "
    "[3, 12, 21, 30], kept as a column (4, 1).",
    # 02
    "reuse": "6 = 2a: a * a uses a twice, and each use sends a share of 3 (the other "
    "factor). An engine that replaced a.grad instead of adding would report 3, one share.",
    "sum-to-axes": "axis 0 (NumPy put it in front: the input had 2 axes, g has 3) and axis 2 "
    "(the input had 1 there, g has 3): 24 numbers become 4, each the sum of the 6 copies of "
    "one input entry.",
    # 03
    "max-tie": "the two 3s get 0.5 each and the 1 gets 0: the max moves only with its "
    "largest entries, and a tie splits g evenly so that the shares still add up to g.",
    "softmax-sum": "0, to rounding: a softmax row sums to 1 whatever s is, so moving s "
    "along any direction cannot change that sum; its gradient is orthogonal to (1, ..., 1).",
    # 04
    "mask-grad": "exactly 0: the mask sets those scores to -∞, the softmax makes their "
    "weight e^-∞ = 0, and dS = A ⊙ (...) is then 0 there; no gradient crosses a pair the "
    "forward did not use.",
    "query-zero": "all zeros: query 0 sees key 0 only, so its softmax row is [1, 0, ...] "
    "whatever its scores are; a constant has no gradient.",
    # 05
    "fused-error": "rounding only, about 1e-16 to 1e-15 in float64: both forms compute the "
    "same function, one as a closed form and one op by op, so they differ by the order of "
    "floating-point operations.",
    "node-count": "1 against 8 or 9: the fused op is one node however long its formula; "
    "the composed form has one node per primitive (mean, subtract, square, ...).",
    # 06
    "block-params": "the block's parameters: ln1 (2·d), W_q, W_k, W_v (3·d·d) and their "
    "biases (3·d), W_O (d·d) and b_O (d), ln2 (2·d), W_in (d·4d) and b_in (4d), W_out "
    "(4d·d) and b_out (d): 12d² + 13d, 872 for d = 8; the weight matrices dominate (at "
    "GPT-2's d = 768, 12d² is 99.9% of it).",
    "last-position": "only position 4's output changes: positions 0-3 cannot see position "
    "4 (the mask), and the MLP and the norms act on each position alone.",
    # 07
    "first-loss": "about ln V: GPT-2's initialization (std 0.02) makes every logit nearly "
    "0, so the first prediction is nearly uniform over the V characters.",
    "adam-first-step": "about lr = 0.01 for every entry whatever the size of g: at step 1, "
    "m̂ = g and v̂ = g², so m̂/√v̂ = ±1; Adam's first step is a sign step.",
    # 08
    "bigram-floor": "H(next | current): a model without layers sees only the current "
    "token, so the best it can do is the text's bigram table, whose loss is that "
    "conditional entropy.",
    "top-head": "a layer-1 head: an induction head copies the token after the earlier "
    "occurrence, so it writes the right next token's direction straight into the stream; "
    "the layer-0 heads write what layer 1 reads (the previous token), not the answer.",
}


def reveal(name: str) -> None:
    """Print the answer to the notebook's question ``name`` (after you have predicted)."""
    if name not in QUESTIONS:
        raise KeyError(f"no question {name!r}; there are {', '.join(QUESTIONS)}")
    print(f"{name}: {QUESTIONS[name]}")
