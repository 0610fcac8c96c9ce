"""notebooks/grader.py (the course's grader): every reference solution passes its exercise,
and the typical mistakes (transposed matrix, missing broadcast reduction, wrong sign) are named
in the answer."""

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
    assert "docs/derivations.md#4-matrix-multiplication" in v.message


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
    assert "db has the wrong sign at every entry" in v.message and "db = -g" in v.message
    p = SOL.softmax_forward

    def flipped(g, z, t):
        return g * (np.eye(5)[t] - p(z)) / len(t)

    v = check("cross_entropy", flipped)
    assert v.mistake == "sign" and "p - onehot" in v.message


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
    v = check("softmax", forward=lambda s: np.exp(s))
    assert v.mistake == "forward" and "the forward differs at y[" in v.message
    for v in [check("sum_rows", lambda g, a: g), check("linear", lambda g, x, W, b: (g, g, g))]:
        assert "\n" not in v.message
    v = check("matmul", lambda g, a, b: (g @ b, a.T @ g))  # (2, 4) @ (3, 4): shapes clash
    assert v.mistake == "error" and v.message.startswith("matmul: your backward raised ValueError")
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
