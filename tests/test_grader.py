"""notebooks/grader.py (the course's grader): every reference solution passes its exercise;
the typical mistakes (transposed matrix, missing broadcast reduction or a sum over the wrong
axis, wrong sign, a constant factor, a matrix product whose shapes clash, a wrong forward) are
named in the answer; and no verdict states the formula, which only the third hint reveals."""

import importlib.util
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorlab as tl

ROOT = Path(__file__).resolve().parents[1]


def course_module(name: str):
    """notebooks/NAME.py as a module (the course's folder is not a package: the notebooks
    import its files by name, from their own folder)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "notebooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # (dataclasses look their module up there)
    spec.loader.exec_module(module)
    return module


SOL, GRADER = course_module("solutions"), course_module("grader")
EXERCISES, _broadcast_axes, check = GRADER.EXERCISES, GRADER._broadcast_axes, GRADER.check


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_every_reference_solution_passes(name):
    verdict = check(name, SOL.SOLUTIONS[name], forward=SOL.FORWARDS.get(name))
    assert verdict.ok, verdict.message
    assert verdict.message.startswith(f"{name}: right:")


def test_every_exercise_has_a_solution_and_a_hint_that_resolves():
    assert set(SOL.SOLUTIONS) == set(EXERCISES)
    for ex in EXERCISES.values():
        page, anchor = ex.section.split("#")
        if page.endswith(".py"):  # a source file's class or function, whose docstring says it
            text = (ROOT / page).read_text()
            assert re.search(rf"^(class|def) {anchor}\b", text, re.M), ex.section
            continue
        headings = re.findall(r"^#{1,6}\s+(.*?)\s*$", (ROOT / page).read_text(), re.M)
        slugs = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}
        assert anchor in slugs, ex.section


def test_transposed_matrix_is_named():
    v = check("matmul", lambda g, a, b: (g @ b.T, g.T @ a))  # db = gᵀ a: (4, 3), not (3, 4)
    assert not v and v.mistake == "transposed"
    assert v.message.startswith(
        "matmul: db has shape (4, 3) but b has shape (3, 4): it is the transpose of the right "
        "gradient"
    )
    assert 'stuck? hint("matmul")' in v.message and "docs/derivations.md, section 4" in v.message


def test_transposed_square_matrix_is_named_by_its_values():
    tl_ex = EXERCISES["matmul"]
    square = dict(tl_ex.__dict__, name="matmul_sq", inputs={"a": (3, 3), "b": (3, 3)})
    EXERCISES["matmul_sq"] = type(tl_ex)(**square)
    try:
        v = check("matmul_sq", lambda g, a, b: (g @ b.T, (a.T @ g).T))
    finally:
        del EXERCISES["matmul_sq"]
    assert v.mistake == "transposed" and "db is the transpose of the right gradient" in v.message


def test_missing_broadcast_reduction_is_named():
    v = check("linear", lambda g, x, W, b: (g @ W.T, x.T @ g, g))
    assert not v and v.mistake == "broadcast"
    assert (
        "db has shape (4, 2) but b has shape (2,): b was broadcast, so its gradient is the sum "
        "over axis 0" in v.message
    )
    assert "with that sum it would be right" in v.message
    v = check("add_broadcast", lambda g, a, b: (g, g[:1] * 0))  # (1, 3): broadcast, wrong values
    assert v.mistake == "broadcast" and "even summed it differs" in v.message


@pytest.mark.parametrize(
    "big, small, axes",
    [
        ((4, 3), (3,), (0,)),
        ((4, 3), (1, 3), (0,)),
        ((2, 4, 3), (4, 1), (0, 2)),  # a new leading axis and a kept one of length 1
        ((2, 4, 3), (1, 4, 1), (0, 2)),
        ((4, 3), (4,), None),  # (4,) does not broadcast to (4, 3)
        ((3,), (2, 3), None),
    ],
)
def test_the_broadcast_hint_names_the_axes_to_sum(big, small, axes):
    """A gradient of the broadcast shape ``big`` for an input of shape ``small`` becomes the
    right one summed over the axes the hint names: those added in front and those of length
    1 in ``small`` (counted in ``big``'s axes)."""
    assert _broadcast_axes(big, small) == axes
    if axes is not None:
        g = np.random.default_rng(0).standard_normal(big)
        want = tl.tensor(g).sum_to(small).numpy()
        np.testing.assert_allclose(g.sum(axis=axes).reshape(small), want, rtol=1e-12)


def test_wrong_sign_is_named():
    v = check("sub", lambda g, a, b: (g, g))
    assert v.mistake == "sign"
    assert "db has the wrong sign at every entry" in v.message
    assert "decreases as b grows" in v.message and "db = -g" not in v.message
    p = SOL.softmax_forward

    def flipped(g, z, t):
        return g * (np.eye(5)[t] - p(z)) / len(t)

    v = check("cross_entropy", flipped)
    assert v.mistake == "sign" and "raising the target's logit lowers the loss" in v.message
    assert "onehot" not in v.message


def test_a_wrong_value_names_the_input_the_entry_and_both_numbers():
    v = check("tanh", lambda g, a: g * (1 - np.tanh(a)))
    assert v.mistake == "values"
    m = re.search(r"da\[(\d+), (\d+)\]: yours (\S+), finite differences (\S+) \(", v.message)
    assert m, v.message
    (i, j), yours, numeric = map(int, m.groups()[:2]), float(m[3]), float(m[4])
    xs, g = EXERCISES["tanh"].draw(0)
    a = xs[0]
    assert yours == pytest.approx(g[i, j] * (1 - np.tanh(a[i, j])), rel=1e-5)
    assert numeric == pytest.approx(g[i, j] * (1 - np.tanh(a[i, j]) ** 2), rel=1e-5)


def test_a_stub_is_not_written_yet_and_other_slips_are_one_line():
    def stub(g, a, b):
        raise NotImplementedError

    v = check("matmul", stub)
    assert not v.done and "not written yet" in v.message
    v = check("matmul", lambda g, a, b: g @ b.T)
    assert (
        v.mistake == "count" and "returned 1 gradient(s); it should return 2: da, db" in v.message
    )
    v = check("mul", lambda g, a, b: (None, g * a))
    assert v.mistake == "none"
    v = check("softmax", forward=lambda s: np.tanh(s))
    assert v.mistake == "forward" and "the forward differs at y[" in v.message
    assert 'hint("softmax")' in v.message
    for v in [check("sum_rows", lambda g, a: g), check("linear", lambda g, x, W, b: (g, g, g))]:
        assert "\n" not in v.message
    v = check("matmul", lambda g, a, b: (g.foo, g))
    assert v.mistake == "error" and v.message.startswith(
        "matmul: your backward raised AttributeError: 'numpy.ndarray' object has no attribute"
    )
    assert "\n" not in v.message
    with pytest.raises(KeyError, match="no exercise 'matmull'"):
        check("matmull", stub)


def test_a_function_subclass_is_graded_with_the_engines_sum_to():
    class MyAdd(tl.Function):
        def forward(ctx, a, b):
            return a + b

        def backward(ctx, g):
            return g, g  # the engine sums b's gradient back to (3,)

    assert check("add_broadcast", MyAdd).ok

    class MyTanh(tl.Function):
        def forward(ctx, a):
            return np.tanh(a)

        def backward(ctx, g):
            return g * (ctx.output**2 - 1)

    assert check("tanh", MyTanh).mistake == "sign"


def test_verdict_reads_as_its_message():
    v = check("mul", SOL.mul_backward)
    assert repr(v) == str(v) == v.message and bool(v)


# ---------------------------------------------------------------------- no formula before asking
def formula_parts(ex):
    """The pieces of an exercise's rule that state a formula (each part with an '='), as a
    student would read them: none may appear in a verdict."""
    return [part.strip() for part in re.split(r"[,;:]", ex.rule) if "=" in part]


def assert_no_formula(ex, message):
    assert ex.rule not in message, message
    for part in formula_parts(ex):
        assert part not in message, (part, message)


def stub(*args):
    raise NotImplementedError


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_a_stub_verdict_shows_no_formula_but_how_to_ask(name):
    ex = EXERCISES[name]
    v = check(name, stub)
    assert not v.done and v.mistake == "not done"
    assert v.message.startswith(f"{name}: not written yet")
    assert f'hint("{name}")' in v.message
    assert_no_formula(ex, v.message)
    v = check(name, stub, forward=stub)
    assert not v.done and f'hint("{name}")' in v.message


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_the_hints_escalate_from_where_to_read_to_the_formula(name, capsys):
    """Each call reveals one level more; only the third states the rule, and each says which
    level it is and, until the last, that calling again reveals more."""
    ex = EXERCISES[name]
    GRADER._HINTS_SHOWN.clear()
    shown = []
    for _ in range(4):
        GRADER.hint(name)
        shown.append(capsys.readouterr().out.strip())
    one, two, three, four = shown
    assert one.startswith(f"{name}, hint 1 of 3 (where to read): read {ex.section.split('#')[0]}")
    assert ex.section in one and f'Call hint("{name}") again for the idea in words.' in one
    assert two.startswith(f"{name}, hint 2 of 3 (the idea in words): {ex.idea}")
    assert f'Call hint("{name}") again for the formula.' in two
    for text in (one, two):
        assert_no_formula(ex, text)
    assert ex.idea and ex.idea not in one and len(ex.idea) < 400
    last = "(That is the last hint: the answer itself.)"
    assert three == f"{name}, hint 3 of 3 (the formula): {ex.rule}. {last}"
    assert four == three  # after the last level, the last one again
    GRADER._HINTS_SHOWN.clear()
    with pytest.raises(KeyError, match="no exercise 'tanhh'"):
        GRADER.hint("tanhh")


@pytest.mark.parametrize("name", sorted(EXERCISES))
def test_no_wrong_answer_is_told_the_formula(name):
    """Wrong answers of every kind (a sign, a factor, zeros, one gradient short, an error,
    a wrong forward): the verdict points to the hints and states no part of the rule. (The
    exercises graded by their own cases: test_each_diagnosis_of_an_own_case_exercise.)"""
    ex = EXERCISES[name]
    if ex.grade is not None:
        pytest.skip("not one op's backward: its wrong answers are in WRONG below")
    right, forward = SOL.SOLUTIONS[name], SOL.FORWARDS.get(name)

    def scaled(c):
        def backward(*args):
            return tuple(c * np.asarray(d) for d in right(*args))

        return backward

    def zeros(g, *xs):
        return tuple(np.zeros_like(x) for x in xs[: len(ex.inputs)])

    def short(*args):
        return right(*args)[:-1] if len(ex.inputs) > 1 else None

    def broken(*args):
        raise ZeroDivisionError("oops")

    wrongs = [check(name, scaled(c)) for c in (-1.0, 2.0, 1.37)]
    wrongs += [check(name, zeros), check(name, short), check(name, broken)]
    if forward is not None:
        wrongs += [check(name, right, forward=lambda *a, f=forward: -f(*a))]
        wrongs += [check(name, right, forward=lambda *a, f=forward: f(*a) + 1)]
    for v in wrongs:
        assert not v.ok and v.mistake is not None, v.message
        assert f'stuck? hint("{name}")' in v.message
        assert_no_formula(ex, v.message)


# ---------------------------------------------------------------------- the diagnoses
def with_square_inputs(name, inputs):
    """A copy of exercise NAME with other input shapes, registered for one check."""
    ex = EXERCISES[name]
    return type(ex)(**dict(ex.__dict__, name=f"{name}_sq", inputs=inputs))


def test_a_constant_factor_is_named_with_the_missing_scale():
    def no_scale_in_dq(g, q, k, v):  # forgot the 1/√d of the scores in dq
        dq, dk, dv = SOL.attention_backward(g, q, k, v)
        return dq * 2, dk, dv

    v = check("attention", no_scale_in_dq)
    assert not v and v.mistake == "scale"
    assert v.message.startswith(
        "attention: dq is 2.00× the right one at every entry: 2.00 = √4, and 4 is a size in "
        "this exercise (sizes 3, 4, 5): a missing scale such as 1/N or 1/√d?"
    )

    def no_mean(g, logits, targets):  # forgot the 1/N of the mean over the N = 4 rows
        return SOL.cross_entropy_backward(g, logits, targets) * len(targets)

    v = check("cross_entropy", no_mean)
    assert v.mistake == "scale" and "dlogits is 4.00× the right one" in v.message
    assert "4.00 = 4, and 4 is a size" in v.message and "missing scale" in v.message
    v = check(
        "layer_norm",
        lambda g, x, ga, be: (
            SOL.layer_norm_backward(g, x, ga, be)[0] / 6,
            *SOL.layer_norm_backward(g, x, ga, be)[1:],
        ),
    )
    assert v.mistake == "scale" and "dx is 0.167× the right one" in v.message
    assert "0.167 = 1/6" in v.message and "missing scale" in v.message
    v = check("tanh", lambda g, a: 1.5 * SOL.tanh_backward(g, a))  # no size of the exercise
    assert v.mistake == "scale"
    assert "da is 1.50× the right one at every entry: a constant factor is off;" in v.message
    assert "missing scale" not in v.message


def test_a_sum_over_the_wrong_axis_is_named():
    v = check("linear", lambda g, x, W, b: (g @ W.T, x.T @ g, g.sum(axis=1)))  # (4,), not (2,)
    assert not v and v.mistake == "axis"
    assert v.message.startswith(
        "linear: db looks like a sum over axis 1 of what reached b's broadcast copies (shape "
        "(4, 2)), but b was copied along axis 0: the sum should run over axis 0"
    )
    v = check("linear", lambda g, x, W, b: (g @ W.T, x.T @ g, g.sum(axis=1, keepdims=True)))
    assert v.mistake == "axis" and "the sum should run over axis 0" in v.message

    def beta_by_rows(g, x, gamma, beta):  # the reference refuses a broadcast β: found by shape
        dx, dgamma, _ = SOL.layer_norm_backward(g, x, gamma, beta)
        return dx, dgamma, g.sum(axis=1)

    v = check("layer_norm", beta_by_rows)
    assert v.mistake == "axis" and "dbeta looks like a sum over axis 1" in v.message
    assert "the sum should run over axis 0" in v.message
    # a square output: the wrong sum has the right shape, and only its values tell
    EXERCISES["add_broadcast_sq"] = with_square_inputs("add_broadcast", {"a": (3, 3), "b": (3,)})
    try:
        v = check("add_broadcast_sq", lambda g, a, b: (g, g.sum(axis=1)))
        right = check("add_broadcast_sq", SOL.add_broadcast_backward)
    finally:
        del EXERCISES["add_broadcast_sq"]
    assert right.ok
    assert v.mistake == "axis" and "db looks like a sum over axis 1" in v.message
    assert "the sum should run over axis 0" in v.message


def test_a_matmul_shape_error_becomes_a_shape_hint():
    def clash(g, a, b):
        da = g @ b  # (2, 4) @ (3, 4)
        return da, a.T @ g

    v = check("matmul", clash)
    assert not v and v.mistake == "matmul-shape"
    assert v.message.startswith(
        "matmul: your backward multiplies (2, 4) @ (3, 4) (in `da = g @ b  # (2, 4) @ (3, 4)`), "
        "and a matrix product needs the inner sizes to match (4 vs 3)"
    )
    assert "the right factor transposed, (4, 3), would fit: does it need a .T?" in v.message
    assert "gufunc" not in v.message and "\n" not in v.message
    v = check("matmul", lambda g, a, b: (g @ b.T, g @ a))  # (2, 4) @ (2, 3): gᵀ would fit
    assert v.mistake == "matmul-shape" and "multiplies (2, 4) @ (2, 3)" in v.message
    assert "the left factor transposed, (4, 2), would fit" in v.message
    v = check("matmul", lambda g, a, b: (np.dot(g, b), a.T @ g))  # np.dot's own message
    assert v.mistake == "matmul-shape" and "multiplies (2, 4) @ (3, 4)" in v.message

    def deep(g, q, k, v):  # the clash two products in, on arrays made inside the function
        A = SOL.softmax_forward(q @ k.T)
        dA = g @ v  # (5, 3) @ (5, 3)
        return dA, A, v

    v = check("attention", deep)
    assert v.mistake == "matmul-shape" and "multiplies (5, 3) @ (5, 3)" in v.message

    class MyMatMul(tl.Function):  # a Function's backward: on Tensors, the engine's error
        def forward(ctx, a, b):
            return a @ b

        def backward(ctx, g):
            a, b = ctx.inputs
            return g @ b, a.T @ g

    v = check("matmul", MyMatMul)
    assert v.mistake == "matmul-shape" and "multiplies (2, 4) @ (3, 4)" in v.message
    assert GRADER._matmul_message("backward", (), ValueError("(size 3 is different from 4)")) == (
        "your backward multiplies two matrices whose inner sizes differ (3 vs 4): the columns "
        "of the left factor must match the rows of the right one; one factor probably needs "
        "a transpose (.T)"
    )


def test_a_wrong_forward_is_diagnosed():
    sm, att = SOL.softmax_forward, SOL.attention_forward
    causal = np.tri(5, dtype=bool)
    cases = [
        ("softmax", lambda s: -sm(s), "forward-sign", "the forward has the wrong sign"),
        ("softmax", lambda s: 0.5 * sm(s), "forward-scale", "output is 0.500× the right one"),
        ("softmax", lambda s: np.exp(s), "forward-missing", "is not normalized"),
        ("softmax", lambda s: sm(s.T).T, "forward-missing", "normalizes each column (axis 0)"),
        ("attention", lambda q, k, v: att(q, k, v).T, "forward-transposed", "its transpose"),
        ("attention", lambda q, k, v: sm(q @ k.T / 2) @ v, "forward-missing", "no causal mask"),
        (
            "attention",
            lambda q, k, v: np.where(causal, q @ k.T / 2, 0) @ v,
            "forward-missing",
            "has no softmax",
        ),
        (
            "attention",
            lambda q, k, v: sm(np.where(causal, q @ k.T, -np.inf)) @ v,
            "forward-missing",
            "has no 1/√d scale",
        ),
        (
            "cross_entropy",
            lambda z, t: -sm(z)[np.arange(len(t)), t].mean(),
            "forward-missing",
            "is missing the log",
        ),
        (
            "cross_entropy",
            lambda z, t: SOL.cross_entropy_forward(z, t) * len(t),
            "forward-missing",
            "sums over the rows",
        ),
        (
            "layer_norm",
            lambda x, gamma, beta: SOL.layer_norm_forward(x, np.ones(6), np.zeros(6)),
            "forward-missing",
            "leaves out γ and β",
        ),
        (
            "gelu_tanh",
            lambda x: 0.5 * x * (1 + np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)),
            "forward-missing",
            "is missing the tanh",
        ),
        ("softmax", lambda s: np.tanh(s), "forward", "the forward differs at y["),
    ]
    for name, forward, mistake, text in cases:
        v = check(name, SOL.SOLUTIONS[name], forward=forward)
        assert not v and v.mistake == mistake and text in v.message, (name, text, v.message)
        assert f'stuck? hint("{name}")' in v.message
        v = check(name, forward=forward)  # a forward alone gets the same diagnosis
        assert v.mistake == mistake, v.message


def test_g_spread_along_the_wrong_axis_is_named():
    """A reduction's backward spreads g back; spread along another axis than the summed one,
    it has the right shape when the input is square (only the values tell), and NumPy refuses
    it when not (its error becomes the two shapes and NumPy's rule)."""
    EXERCISES["sum_rows_sq"] = with_square_inputs("sum_rows", {"a": (3, 3)})
    try:
        v = check("sum_rows_sq", lambda g, a: np.broadcast_to(g, a.shape))  # g[None, :]
        right = check("sum_rows_sq", SOL.sum_rows_backward)
    finally:
        del EXERCISES["sum_rows_sq"]
    assert right.ok
    assert not v and v.mistake == "axis"
    assert v.message.startswith(
        "sum_rows_sq: da spreads g along axis 0, but the forward summed over axis 1"
    )

    def spread(g, a):
        return g * np.ones_like(a)  # (3,) * (3, 5)

    v = check("sum_rows", spread)
    assert v.mistake == "broadcast-shape"
    assert v.message.startswith(
        "sum_rows: your backward broadcasts shape (3,) against (3, 5) (in `return g * "
        "np.ones_like(a)  # (3,) * (3, 5)`): NumPy lines shapes up from the last axis, so 3 "
        "and 5 must be equal (or one of them 1)"
    )
    v = check("sum_rows", lambda g, a: np.broadcast_to(g, a.shape))
    assert v.mistake == "broadcast-shape" and "broadcasts shape (3,) against (3, 5)" in v.message
    assert "remapped" not in v.message


# ---------------------------------------------------------------------- not one op's backward
# The exercises graded by their own cases (an engine, sum_to, a GPT block, AdamW, clipping,
# direct logit attribution): a wrong answer of every kind each names, with that kind.
class SeedlessValue(SOL.Value):
    def backward(self):  # the output's own gradient never set
        for node in reversed(_walk(self)):
            for p, local in zip(node.parents, node.local):
                p.grad += node.grad * local


class SwappedMul(SOL.Value):
    def __mul__(self, other):  # each factor's local derivative is itself
        return SwappedMul(self.data * other.data, (self, other), (self.data, other.data))

    def __add__(self, other):
        return SwappedMul(self.data + other.data, (self, other), (1.0, 1.0))


class WrongSignTanh(SOL.Value):
    def tanh(self):
        t = np.tanh(self.data)
        return WrongSignTanh(t, (self,), (t * t - 1,))


class AddsInsteadOfMul(SOL.Value):
    def __mul__(self, other):
        return AddsInsteadOfMul(self.data + other.data, (self, other), (1.0, 1.0))


def _walk(node):
    order, seen = [], set()

    def visit(n):
        if id(n) not in seen:
            seen.add(id(n))
            for p in n.parents:
                visit(p)
            order.append(n)

    visit(node)
    return order


class Overwrites(SOL.Value):
    def backward(self):  # '=' where the shares should add
        self.grad = 1.0
        for node in reversed(_walk(self)):
            for p, local in zip(node.parents, node.local):
                p.grad = node.grad * local


class NoOrder(SOL.Value):
    def backward(self):  # each node passes its gradient on at once, recursively
        self.grad = 1.0
        self._send()

    def _send(self):
        for p, local in zip(self.parents, self.local):
            p.grad += self.grad * local
            p._send()


class LocalOnly(SOL.Value):
    def backward(self):  # each parent gets the local derivative, not times the node's grad
        self.grad = 1.0
        for node in reversed(_walk(self)):
            for p, local in zip(node.parents, node.local):
                p.grad += local


for _cls in (SeedlessValue, Overwrites, NoOrder, LocalOnly):  # ops that make their own class
    for _op in ("__add__", "__mul__"):
        setattr(
            _cls,
            _op,
            lambda a, b, op=_op, c=_cls: c(
                getattr(SOL.Value, op)(a, b).data, (a, b), getattr(SOL.Value, op)(a, b).local
            ),
        )
    _cls.tanh = lambda a, c=_cls: c(SOL.Value.tanh(a).data, (a,), SOL.Value.tanh(a).local)


class ArrayNoSumTo(SOL.Array):
    def backward(self):
        self.grad = np.ones_like(self.data)
        for node in reversed(_walk(self)):
            for p, vjp in zip(node.parents, node.vjps):
                p.grad += vjp(node.grad)


class ArrayOverwrites(SOL.Array):
    def backward(self):
        self.grad = np.ones_like(self.data)
        for node in reversed(_walk(self)):
            for p, vjp in zip(node.parents, node.vjps):
                p.grad = SOL.sum_to(vjp(node.grad), p.data.shape)


class ArraySeedless(SOL.Array):
    def backward(self):
        for node in reversed(_walk(self)):
            for p, vjp in zip(node.parents, node.vjps):
                p.grad += SOL.sum_to(vjp(node.grad), p.data.shape)


class ArrayNoOrder(SOL.Array):
    def backward(self):
        self.grad = np.ones_like(self.data)
        self._send()

    def _send(self):
        for p, vjp in zip(self.parents, self.vjps):
            p.grad += SOL.sum_to(vjp(self.grad), p.data.shape)
            p._send()


def _array_ops(cls):  # the ops make nodes of cls (the subclass), so its backward runs
    for op in ("__add__", "__mul__", "__matmul__"):

        def f(a, b, op=op):
            out = getattr(SOL.Array, op)(a, b)
            return cls(out.data, out.parents, out.vjps)

        setattr(cls, op, f)
    for op in ("tanh", "sum"):

        def f(a, op=op):
            out = getattr(SOL.Array, op)(a)
            return cls(out.data, out.parents, out.vjps)

        setattr(cls, op, f)


for _cls in (ArrayNoSumTo, ArrayOverwrites, ArraySeedless, ArrayNoOrder):
    _array_ops(_cls)


def _stretched(g, shape):
    """The axes of g where shape has a 1 and g more (aligned from the right)."""
    lead = g.ndim - len(shape)
    return tuple(lead + i for i, n in enumerate(shape) if n == 1 and g.shape[lead + i] != 1)


def only_leading_summed(g, shape):
    return g.sum(axis=tuple(range(g.ndim - len(shape))))


def only_ones_summed(g, shape):
    return g.sum(axis=_stretched(g, shape), keepdims=True)


def ones_summed_and_dropped(g, shape):
    return g.sum(axis=tuple(range(g.ndim - len(shape))) + _stretched(g, shape))


def block(x, p, kind=None):
    """A GPT block from engine ops with one slip (``kind``)."""
    T, (H, dh) = x.shape[0], p["attn.W_O"].shape[:2]

    def ln(z, n):
        return SOL._ln(z, p[f"{n}.w"], p[f"{n}.b"])

    def attn(h):
        q, k, v = (
            ((h @ p[f"attn.W_{c}"].reshape(-1, H * dh)) + p[f"attn.b_{c}"])
            .reshape(T, H, dh)
            .transpose(0, 1)
            for c in "qkv"
        )
        s = q @ k.mT / (1.0 if kind == "scale" else dh**0.5)
        if kind != "causal":
            s = tl.where(np.tri(T, dtype=bool), s, -np.inf)
        z = (s.softmax(axis=-1) @ v).transpose(0, 1).reshape(T, H * dh)
        return z @ p["attn.W_O"].reshape(H * dh, -1) + p["attn.b_O"]

    def mlp(h):
        return SOL._gelu(h @ p["mlp.W_in"] + p["mlp.b_in"]) @ p["mlp.W_out"] + p["mlp.b_out"]

    if kind == "post":
        x = ln(x + attn(x), "ln1")
        return ln(x + mlp(x), "ln2")
    if kind == "residual":
        return mlp(ln(attn(ln(x, "ln1")), "ln2"))
    x = x + attn(ln(x, "ln1"))
    return x + mlp(ln(x, "ln2"))


def adamw(kind):
    def step(w, g, m, v, t, lr, betas, eps, weight_decay):
        b1, b2 = betas
        if kind == "coupled":
            g = g + weight_decay * w
        elif kind == "decay-scale":
            w = w - weight_decay * w
        elif kind != "no-decay":
            w = w - lr * weight_decay * w
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g**2
        mh, vh = (m, v) if kind == "bias" else (m / (1 - b1**t), v / (1 - b2**t))
        d = lr * mh / ((vh if kind == "sqrt" else np.sqrt(vh)) + eps)
        return (w + d if kind == "sign" else w - d), m, v

    return step


def clip(kind):
    def f(grads, max_norm):
        if kind == "per-array":
            return [g * min(1, max_norm / (np.linalg.norm(g) + 1e-6)) for g in grads], 0.0
        n = sum((g**2).sum() for g in grads)
        n = n if kind == "no-sqrt" else np.sqrt(n)
        s = max_norm / (n + 1e-6)
        return [g * (s if kind == "scale-up" else min(1, s)) for g in grads], n

    return f


def dla(kind):
    def f(model, cache, tokens):
        W_U = model.W_U.numpy().astype(np.float64)
        if kind != "no-gain":
            W_U = W_U * model.ln_final.w.numpy()[:, None]
        out = []
        for layer in range(len(model.blocks)):
            result = cache[f"blocks.{layer}.attn.hook_result"]
            for h in range(result.shape[2]):
                r = result[:, :, h]
                r = r if kind == "no-centre" else r - r.mean(axis=-1, keepdims=True)
                r = r if kind == "no-scale" else r / cache["ln_final.hook_scale"]
                out.append((r * W_U.T[tokens]).sum(axis=-1))
        return np.stack(out[:2] if kind == "shape" else out)

    return f


WRONG = {  # exercise -> (a wrong answer, the mistake it must be named as, words of the message)
    "value": [
        (AddsInsteadOfMul, "forward", "in a * b, the value is yours -0.6"),
        (SeedlessValue, "seed", "every leaf's .grad is still 0"),
        (SwappedMul, "local", "in a * b, a.grad is yours 0.7"),
        (WrongSignTanh, "local", "(the wrong sign)"),
        (LocalOnly, "chain", "in (a * b + c).tanh(), "),
        (Overwrites, "accumulate", "in a * a, a is used twice"),
        (NoOrder, "order", "d is used by two ops, and it passed its gradient on before"),
    ],
    "array": [
        (ArrayNoSumTo, "broadcast", "non-broadcastable output operand"),
        (ArraySeedless, "seed", "every leaf's .grad is still 0"),
        (ArrayOverwrites, "accumulate", "in (x * x).sum(), x is used twice"),
        (ArrayNoOrder, "order", "in (h * h.tanh()).sum() with h = x @ W, "),
    ],
    "sum_to": [
        (lambda g, shape: g, "ones", "axis 1 of the input"),
        (only_leading_summed, "ones", "axis 1 of the input"),
        (only_ones_summed, "leading", "g has 1 more leading axis(es)"),
        (ones_summed_and_dropped, "keepdims", "summed but dropped"),
        (lambda g, shape: SOL.sum_to(g, shape) / 2, "values", "the result["),
        (lambda g, shape: SOL.sum_to(g, shape).ravel()[:1], "shape", "has shape (1,), not"),
    ],
    "gpt_block": [
        (lambda x, p: block(x, p, "residual"), "block-residual", "has no residual connections"),
        (lambda x, p: block(x, p, "causal"), "block-causal", "has no causal mask"),
        (lambda x, p: block(x, p, "scale"), "block-scale", "has no 1/√d_head scale"),
        (lambda x, p: block(x, p, "post"), "block-post", "normalizes after each residual add"),
        (lambda x, p: block(x, p) * 1.01, "forward", "the block's output["),
        (  # (device="cpu": the grader's tensors are, whatever the test device)
            lambda x, p: tl.tensor(block(x, p).numpy(), device="cpu"),
            "detached",
            "is not a Tensor made by",
        ),
        (
            lambda x, p: block(
                x, {**p, "mlp.b_out": tl.tensor(p["mlp.b_out"].numpy(), device="cpu")}
            ),
            "detached",
            "no gradient reached mlp.b_out",
        ),
    ],
    "adamw": [
        *[(adamw(k), k, GRADER._ADAMW_SLIPS[k][:30]) for k in GRADER._ADAMW_SLIPS],
        (lambda w, g, m, v, t, *a: (adamw(None)(w, g, m, v, t, *a)[0], m, v), "moments", "but m"),
        (lambda *a: adamw(None)(*a)[0], "count", "returns the new (w, m, v)"),
        (lambda *a: (adamw(None)(*a)[0] * 1.001, *adamw(None)(*a)[1:]), "values", "w["),
    ],
    "clip": [
        *[(clip(k), k, GRADER._CLIP_SLIPS[k][:30]) for k in GRADER._CLIP_SLIPS],
        (lambda gs, n: (clip(None)(gs, n)[0], 1.0), "values", "the norm you return is yours"),
    ],
    "dla": [
        *[(dla(k), k, GRADER._DLA_SLIPS[k][:30]) for k in GRADER._DLA_SLIPS],
        (dla("shape"), "shape", "one number per head"),
        (lambda *a: dla(None)(*a) * 2, "values", "the attribution["),
    ],
}


def test_every_own_case_exercise_has_its_wrong_answers():
    assert set(WRONG) == {n for n, ex in EXERCISES.items() if ex.grade is not None}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_each_diagnosis_of_an_own_case_exercise(name):
    """Every kind a grader names is reached by a wrong answer of that kind; the verdict points
    to the hints and states no part of the rule."""
    ex = EXERCISES[name]
    kinds = set()
    for wrong, kind, words in WRONG[name]:
        v = check(name, wrong)
        assert not v and v.done and v.mistake == kind, (kind, v.message)
        assert words in v.message, (words, v.message)
        assert f'stuck? hint("{name}")' in v.message and "\n" not in v.message
        assert_no_formula(ex, v.message)
        kinds.add(kind)
    assert len(kinds) >= 3


def test_an_error_in_an_own_case_answer_is_reported_not_raised():
    def broken(*args):
        return 1 / 0

    for name in WRONG:
        v = check(name, broken)
        assert v.mistake == "error" and "ZeroDivisionError" in v.message, v.message
    with pytest.raises(TypeError, match="pass your answer"):
        check("value")
