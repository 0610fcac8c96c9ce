"""The function forms in ``tensorlab/method_functions.py`` (``tl.var(x, ...)`` for ``x.var(...)``):
each is its method, every argument passed on. Each case calls the function with values other
than the defaults, so an argument that is dropped or swapped on the way changes the result;
the method's own maths is tested with its op (test_reduce.py, test_shape.py, ...)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlab as tl
from tensorlab import method_functions as functions

X = np.array([[0.3, -1.2, 2.5, 0.7], [1.1, 0.4, -0.6, 3.2], [-2.0, 0.9, 0.1, -0.3]])
I = np.array([[2, 0, 1, 1], [0, 2, 2, 0]])
S = np.arange(8.0).reshape(2, 4) / 3
XP = np.abs(X) + 1  # for log and sqrt

# name: (args after the tensor, the method's name, NumPy's answer where it has one)
CASES = {
    "exp": ((), "exp", np.exp(X)),
    "log": ((), "log", np.log(XP)),  # (on XP)
    "sqrt": ((), "sqrt", np.sqrt(XP)),
    "abs": ((), "abs", np.abs(X)),
    "tanh": ((), "tanh", np.tanh(X)),
    "sigmoid": ((), "sigmoid", 1 / (1 + np.exp(-X))),
    "relu": ((), "relu", np.maximum(X, 0)),
    "sin": ((), "sin", np.sin(X)),
    "cos": ((), "cos", np.cos(X)),
    "maximum": ((0.5,), "maximum", np.maximum(X, 0.5)),
    "minimum": ((0.5,), "minimum", np.minimum(X, 0.5)),
    "clip": ((-1.0, 2.0), "clip", np.clip(X, -1.0, 2.0)),
    "clamp": ((None, 0.5), "clamp", np.minimum(X, 0.5)),
    "matmul": ((X.T,), "__matmul__", X @ X.T),
    "sum": ((1, True), "sum", X.sum(1, keepdims=True)),
    "mean": ((0, True), "mean", X.mean(0, keepdims=True)),
    "prod": ((1, True), "prod", X.prod(1, keepdims=True)),
    "var": ((1, True, 1), "var", X.var(1, keepdims=True, ddof=1)),
    "std": ((0, True, 1), "std", X.std(0, keepdims=True, ddof=1)),
    "logsumexp": ((0, True), "logsumexp", np.log(np.exp(X).sum(0, keepdims=True))),
    "cumsum": ((0,), "cumsum", X.cumsum(0)),
    "softmax": ((0,), "softmax", np.exp(X) / np.exp(X).sum(0)),
    "log_softmax": ((0,), "log_softmax", X - np.log(np.exp(X).sum(0))),
    "broadcast_to": (((2, 3, 4),), "broadcast_to", np.broadcast_to(X, (2, 3, 4))),
    "flip": ((1,), "flip", X[:, ::-1]),
    "roll": ((1, 0), "roll", np.roll(X, 1, 0)),
    "tile": (((2, 1),), "tile", np.tile(X, (2, 1))),
    "repeat_interleave": ((2, 1), "repeat_interleave", np.repeat(X, 2, 1)),
    "tril": ((1,), "tril", np.tril(X, 1)),
    "triu": ((-1,), "triu", np.triu(X, -1)),
    "sort": ((0, True), "sort", -np.sort(-X, 0)),
    "argsort": ((0, True), "argsort", np.argsort(-X, 0, kind="stable")),
    "topk": ((2, 0, False), "topk", np.sort(X, 0)[:2]),
    "gather": ((0, I), "gather", np.take_along_axis(X, I, 0)),
    "scatter_add": ((0, I, S), "scatter_add", None),
    "index_add": ((1, [3, 0, 3], X[:, :3]), "index_add", None),
}
KWARGS = {"index_add": {"alpha": -2.0}}


def test_every_function_form_has_a_case():
    public = {
        name
        for name, f in vars(functions).items()
        if callable(f) and f is not tl.Tensor and not name.startswith("_")
    }
    assert public == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_function_form_is_its_method_with_every_argument(name):
    args, method, expected = CASES[name]
    data = XP if name in ("log", "sqrt") else X
    args = tuple(
        tl.tensor(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in args
    )
    kwargs = KWARGS.get(name, {})
    got = getattr(tl, name)(tl.tensor(data), *args, **kwargs)
    want = getattr(tl.tensor(data), method)(*args, **kwargs)
    if name in ("sort", "topk"):
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())
        got, want = got.values, want.values
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=0, atol=0)
    if expected is not None:  # and the method, called so, gives NumPy's answer
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_index_add_and_scatter_add_by_hand():
    got = tl.index_add(tl.tensor(X), 1, [3, 0, 3], tl.tensor(X[:, :3]), alpha=-2.0).numpy()
    want = X.copy()
    for i, j in enumerate([3, 0, 3]):
        want[:, j] -= 2.0 * X[:, i]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    got = tl.scatter_add(tl.tensor(X), 0, I, tl.tensor(S)).numpy()
    want = X.copy()
    for r in range(I.shape[0]):
        for c in range(I.shape[1]):
            want[I[r, c], c] += S[r, c]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
