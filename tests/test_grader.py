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
    assert one.startswith(f"{name}, hint 1 of 3 (where to read): read docs/")
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
    a wrong forward): the verdict points to the hints and states no part of the rule."""
    ex = EXERCISES[name]
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
