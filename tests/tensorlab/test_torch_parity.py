"""The engine's ops against PyTorch in float64: values, first-order gradients g·J and
second-order products (the derivative of <∂(g·y)/∂x, u> in x and in g), for the ops of
issue 13 and the zero-size reductions of issue 12. Skipped without torch.

Tolerance 1e-10 (relative, and absolute for values near 0): both sides compute the same
formulas in float64, so they differ by rounding only (a few ulps after a dozen operations)."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlab as tl

torch = pytest.importorskip("torch")

TOL = dict(rtol=1e-10, atol=1e-10)


def _np(t) -> np.ndarray:
    # (force=True: torch returns a ZeroTensor for some zero second derivatives, e.g. of abs)
    return t.numpy() if isinstance(t, tl.Tensor) else t.detach().numpy(force=True)


def _or_zeros(grads, like):
    return [np.zeros(x.shape) if g is None else _np(g) for g, x in zip(grads, like)]


def parity(tl_fn, torch_fn, *arrays, second: bool = True, seed: int = 0):
    """Assert tl_fn and torch_fn agree in value, gradient and second-order products."""
    rng = np.random.default_rng(seed)
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    xs = [tl.tensor(a.copy(), dtype=np.float64, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a.copy(), requires_grad=True) for a in arrays]
    y, yt = tl_fn(*xs), torch_fn(*ts)
    assert y.shape == tuple(yt.shape)
    np.testing.assert_allclose(_np(y), _np(yt), **TOL)
    g = rng.standard_normal(y.shape)
    gx = tl.tensor(g, dtype=np.float64, requires_grad=True)
    gt = torch.tensor(g, requires_grad=True)
    first = tl.grad(y, xs, grad_outputs=gx, create_graph=second, allow_unused=True)
    first_t = torch.autograd.grad(yt, ts, gt, create_graph=second, allow_unused=True)
    for a, b in zip(_or_zeros(first, xs), _or_zeros(first_t, ts)):
        np.testing.assert_allclose(a, b, **TOL)
    if not second:
        return
    us = [rng.standard_normal(x.shape) for x in xs]
    terms = [(f * tl.tensor(u)).sum() for f, u in zip(first, us) if f is not None]
    terms_t = [(f * torch.tensor(u)).sum() for f, u in zip(first_t, us) if f is not None]
    terms = [t for t in terms if t.requires_grad]
    terms_t = [t for t in terms_t if t.requires_grad]
    if not terms:  # linear in x with a constant Jacobian: nothing of second order
        assert not terms_t
        return
    s, st = sum(terms[1:], terms[0]), sum(terms_t[1:], terms_t[0])
    ours = tl.grad(s, xs + [gx], allow_unused=True)
    theirs = torch.autograd.grad(st, ts + [gt], allow_unused=True)
    for a, b in zip(_or_zeros(ours, xs + [gx]), _or_zeros(theirs, ts + [gt])):
        np.testing.assert_allclose(a, b, **TOL)


RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4))
POS = RNG.uniform(0.5, 1.5, (3, 4)) * RNG.choice([-1, 1], (3, 4))
WITH_ZERO = np.array([[1.5, 0.0, -2.0, 0.5], [0.0, 0.0, 1.0, 2.0], [1.0, 2.0, 3.0, 4.0]])
TIES = np.array([[1.0, 2.0, 1.0, 0.5], [3.0, 3.0, 3.0, 3.0], [0.0, -1.0, 2.0, -1.0]])
INDEX = np.array([[0, 2, 2, 1], [1, 1, 0, 0], [2, 0, 1, 2]])
T = torch.tensor

CASES = {
    "sin": (lambda x: x.sin(), torch.sin, [X]),
    "cos": (tl.cos, torch.cos, [X]),
    "cumsum_1": (lambda x: x.cumsum(1), lambda x: x.cumsum(1), [X]),
    "cumsum_0": (lambda x: tl.cumsum(x, 0), lambda x: torch.cumsum(x, 0), [X]),
    "prod_all": (lambda x: x.prod(), torch.prod, [POS]),
    "prod_axis": (lambda x: x.prod(1, keepdims=True), lambda x: x.prod(1, keepdim=True), [POS]),
    "prod_zeros": (lambda x: x.prod(1), lambda x: x.prod(1), [WITH_ZERO]),
    "prod_zeros_axis0": (lambda x: x.prod(0), lambda x: x.prod(0), [WITH_ZERO]),
    "std_ddof0": (lambda x: x.std(1), lambda x: x.std(1, correction=0), [X]),
    "std_ddof1": (lambda x: tl.std(x, 0, True, 1), lambda x: x.std(0, keepdim=True), [X]),
    "std_all": (lambda x: x.std(ddof=1), torch.std, [X]),
    "flip": (lambda x: x.flip(1), lambda x: x.flip(1), [X]),
    "flip_both": (lambda x: tl.flip(x, (0, 1)), lambda x: torch.flip(x, (0, 1)), [X]),
    "roll": (lambda x: x.roll(1, 1), lambda x: x.roll(1, 1), [X]),
    "roll_flat": (lambda x: x.roll(-5), lambda x: x.roll(-5), [X]),
    "roll_two": (lambda x: x.roll((1, -2), (0, 1)), lambda x: x.roll((1, -2), (0, 1)), [X]),
    "tile": (lambda x: x.tile((2, 1, 3)), lambda x: x.tile((2, 1, 3)), [X]),
    "repeat": (lambda x: x.repeat(2, 1, 3), lambda x: x.repeat(2, 1, 3), [X]),
    "repeat_interleave": (
        lambda x: x.repeat_interleave(np.array([2, 0, 1]), 0),
        lambda x: x.repeat_interleave(T([2, 0, 1]), 0),
        [X],
    ),
    "repeat_interleave_int": (
        lambda x: tl.repeat_interleave(x, 2, 1),
        lambda x: torch.repeat_interleave(x, 2, 1),
        [X],
    ),
    "sort": (lambda x: x.sort(1).values, lambda x: x.sort(dim=1, stable=True).values, [X]),
    "sort_desc_ties": (
        lambda x: tl.sort(x, 1, descending=True).values,
        lambda x: x.sort(dim=1, descending=True, stable=True).values,
        [TIES],
    ),
    "topk": (lambda x: x.topk(2).values, lambda x: x.topk(2).values, [X]),
    "topk_smallest": (
        lambda x: tl.topk(x, 3, 0, largest=False).values,
        lambda x: x.topk(3, 0, largest=False).values,
        [X],
    ),
    "scatter_add": (
        lambda x, s: x.scatter_add(1, INDEX[:, :3], s),
        lambda x, s: x.scatter_add(1, T(INDEX[:, :3]), s),
        [X, RNG.standard_normal((3, 3))],
    ),
    "scatter_add_0": (
        lambda x, s: tl.scatter_add(x, 0, INDEX[:2], s),
        lambda x, s: torch.scatter_add(x, 0, T(INDEX[:2]), s),
        [X, RNG.standard_normal((2, 4))],
    ),
    "index_add": (
        lambda x, s: x.index_add(0, [2, 0, 2], s, alpha=0.5),
        lambda x, s: x.index_add(0, T([2, 0, 2]), s, alpha=0.5),
        [X, RNG.standard_normal((3, 4))],
    ),
    "index_add_1": (
        lambda x, s: tl.index_add(x, 1, [3, 3], s),
        lambda x, s: torch.index_add(x, 1, T([3, 3]), s),
        [X, RNG.standard_normal((3, 2))],
    ),
    "tril": (lambda x: tl.tril(x, -1), lambda x: torch.tril(x, -1), [X]),
    "triu": (lambda x: x.triu(1), lambda x: x.triu(1), [X]),
    "logsumexp": (lambda x: tl.logsumexp(x, 1), lambda x: torch.logsumexp(x, 1), [X]),
    "clamp": (lambda x: tl.clamp(x, -0.5, 0.5), lambda x: torch.clamp(x, -0.5, 0.5), [X]),
    "broadcast_to": (
        lambda x: tl.broadcast_to(x, (2, 3, 4)),
        lambda x: torch.broadcast_to(x, (2, 3, 4)),
        [X],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_torch(name):
    ours, theirs, arrays = CASES[name]
    parity(ours, theirs, *arrays)


def test_sort_and_topk_indices_match_torch_with_ties():
    """Stable sort in both directions: the same indices as torch's stable sort; topk picks the
    lower index among equal values, which torch's topk does on these inputs as well."""
    x, t = tl.tensor(TIES), T(TIES)
    for desc in (False, True):
        np.testing.assert_array_equal(
            x.argsort(1, descending=desc).numpy(),
            t.sort(dim=1, descending=desc, stable=True).indices.numpy(),
        )
    np.testing.assert_array_equal(x.sort(0).indices.numpy(), t.sort(dim=0, stable=True).indices)


# ---------------------------------------------------------------- zero-size (issue 12)
EMPTY = [((2, 0), -1), ((0, 3), -1), ((0, 3), 0), ((0,), 0)]
ZERO_SIZE = {
    "softmax": (lambda x, a: x.softmax(a), lambda x, a: x.softmax(a)),
    "log_softmax": (lambda x, a: tl.log_softmax(x, a), lambda x, a: x.log_softmax(a)),
    "logsumexp": (lambda x, a: x.logsumexp(a), lambda x, a: x.logsumexp(a)),
    "var": (lambda x, a: x.var(a), lambda x, a: x.var(a, correction=0)),
    "var_ddof1": (lambda x, a: x.var(a, ddof=1), lambda x, a: x.var(a)),
    "std": (lambda x, a: x.std(a), lambda x, a: x.std(a, correction=0)),
    "mean": (lambda x, a: x.mean(a), lambda x, a: x.mean(a)),
    "sum": (lambda x, a: x.sum(a), lambda x, a: x.sum(a)),
    "prod": (lambda x, a: x.prod(a), lambda x, a: x.prod(a)),
    "cumsum": (lambda x, a: x.cumsum(a), lambda x, a: x.cumsum(a)),
}


@pytest.mark.filterwarnings("ignore:var|std:UserWarning")
@pytest.mark.parametrize("name", sorted(ZERO_SIZE))
@pytest.mark.parametrize("shape, axis", EMPTY, ids=str)
def test_zero_size_matches_torch(name, shape, axis):
    """Reductions and normalizations over empty axes: PyTorch's values (empty, NaN, -inf,
    1 for an empty product), no error, and gradients of the input's (empty) shape."""
    ours, theirs = ZERO_SIZE[name]
    x = tl.zeros(*shape, dtype=np.float64, requires_grad=True)
    t = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    y, yt = ours(x, axis), theirs(t, axis)
    assert y.shape == tuple(yt.shape)
    np.testing.assert_array_equal(y.numpy(), yt.detach().numpy())  # NaN == NaN here
    y.sum().backward()
    yt.sum().backward()
    assert x.grad.shape == tuple(t.grad.shape) == shape


def test_var_of_one_entry_with_ddof_1_is_nan_like_torch():
    x = tl.tensor([2.0], dtype=np.float64, requires_grad=True)
    t = torch.tensor([2.0], dtype=torch.float64, requires_grad=True)
    y = x.var(ddof=1)
    with pytest.warns(UserWarning):
        yt = t.var()
    y.backward()
    yt.backward()
    np.testing.assert_array_equal(y.numpy(), yt.detach().numpy())
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


# ---------------------------------------------------------------- axes, ties, kinks, indexing
X3 = RNG.standard_normal((2, 3, 4))
# Ties of every kind: within a row, across rows, and between the two inputs of maximum.
TIES3 = np.array([[[1.0, 2.0, 2.0, 0.0], [2.0, 2.0, 2.0, 2.0], [-1.0, 0.5, 0.5, -1.0]]] * 2)
# Entries exactly at the kinks: 0 for abs and relu, ±0.5 for clamp(-0.5, 0.5).
KINKS = np.array([[-1.0, -0.5, 0.0, 0.5], [1.0, 0.0, -0.25, 0.25], [0.5, -0.5, 2.0, -2.0]])
NEG_INF = np.array([[0.0, -np.inf, 1.0, 2.0], [-np.inf, 3.0, -np.inf, -1.0], [1.0, 2.0, 3.0, 4.0]])
MASK = X > 0

MORE_CASES = {
    # reductions over negative and multiple axes, with and without keepdims
    "sum_neg_tuple": (lambda x: x.sum((-1, 0)), lambda x: x.sum((-1, 0)), [X3]),
    "sum_keepdims": (lambda x: x.sum((0, -2), True), lambda x: x.sum((0, -2), True), [X3]),
    "mean_neg": (lambda x: x.mean(-2, True), lambda x: x.mean(-2, True), [X3]),
    "var_tuple_ddof1": (
        lambda x: x.var((0, 2), ddof=1),
        lambda x: x.var((0, 2)),
        [X3],
    ),
    "std_neg_keepdims": (
        lambda x: x.std(-1, True),
        lambda x: x.std(-1, keepdim=True, correction=0),
        [X3],
    ),
    "logsumexp_tuple": (lambda x: x.logsumexp((-1, 1)), lambda x: x.logsumexp((-1, 1)), [X3]),
    "prod_neg": (lambda x: x.prod(-2), lambda x: x.prod(-2), [X3]),
    "cumsum_neg": (lambda x: x.cumsum(-2), lambda x: x.cumsum(-2), [X3]),
    # ties: max and min split the gradient evenly among the tied entries, which is what
    # torch.amax / amin (and torch.maximum / minimum between two inputs) do; torch.max(dim)
    # sends it all to the one index it returns instead (see test_max_dim_differs_from_torch)
    "amax_ties": (lambda x: x.max((0, -1)), lambda x: x.amax((0, -1)), [TIES3]),
    "amin_ties_keepdims": (lambda x: x.min(1, True), lambda x: x.amin(1, True), [TIES3]),
    "max_all_ties": (lambda x: x.max(), torch.max, [TIES3]),
    "maximum_ties": (tl.maximum, torch.maximum, [TIES3, TIES3[:, ::-1].copy()]),
    "minimum_ties": (tl.minimum, torch.minimum, [TIES3, TIES3[:, :, ::-1].copy()]),
    # kinks: the gradient at the kink itself
    "abs_at_0": (tl.abs, torch.abs, [KINKS]),
    "relu_at_0": (tl.relu, torch.relu, [KINKS]),
    "clamp_at_bounds": (lambda x: x.clamp(-0.5, 0.5), lambda x: x.clamp(-0.5, 0.5), [KINKS]),
    "clamp_min_only": (lambda x: x.clamp(min=0.0), lambda x: x.clamp(min=0.0), [KINKS]),
    "clamp_max_only": (lambda x: x.clamp(max=0.0), lambda x: x.clamp(max=0.0), [KINKS]),
    # -inf entries (a masked softmax): zero probability, zero gradient there
    "softmax_neg_inf": (lambda x: x.softmax(-1), lambda x: x.softmax(-1), [NEG_INF]),
    "log_softmax_neg_inf": (lambda x: x.log_softmax(0), lambda x: x.log_softmax(0), [NEG_INF]),
    "masked_fill_softmax": (
        lambda x: x.masked_fill(MASK, -np.inf).softmax(0),
        lambda x: x.masked_fill(T(MASK), -np.inf).softmax(0),
        [X],
    ),
    # broadcasting binary ops, pow with negative bases and integer exponents
    "div_broadcast": (lambda a, b: a / b, lambda a, b: a / b, [X3, POS[:, :1]]),
    "pow_negative_base": (
        lambda a: a ** tl.tensor(np.array([2.0, 3.0, 0.0, -1.0]), dtype=np.float64),
        lambda a: a ** T([2.0, 3.0, 0.0, -1.0]),
        [POS],
    ),
    "rpow": (lambda b: 0.5**b, lambda b: 0.5**b, [X]),
    "where_broadcast": (
        lambda a, b: tl.where(MASK[:, :1], a, b),
        lambda a, b: torch.where(T(MASK[:, :1]), a, b),
        [X[:1], X3],
    ),
    # indexing: repeated and negative integer indices, masks, slices with steps
    "getitem_repeated": (
        lambda x: x[np.array([0, -1, 0, 2]), np.array([1, 1, 1, -1])],
        lambda x: x[T([0, -1, 0, 2]), T([1, 1, 1, -1])],
        [X],
    ),
    "getitem_mask_and_slice": (
        lambda x: x[:, MASK[0]][1:, ::2],
        lambda x: x[:, T(MASK[0])][1:, ::2],
        [X],
    ),
    "getitem_ellipsis_newaxis": (lambda x: x[..., None, 1], lambda x: x[..., None, 1], [X3]),
    "gather_corner": (
        lambda x: x.gather(1, INDEX[:2, :3]),
        lambda x: x.gather(1, T(INDEX[:2, :3])),
        [X],
    ),
    # shape ops with odd sizes and empty pieces
    "split_odd": (
        lambda x: tl.cat(x.split(3, -1)[::-1], -1),
        lambda x: torch.cat(x.split(3, -1)[::-1], -1),
        [X3],
    ),
    "split_empty_piece": (lambda x: x.split([0, 3], 1)[1], lambda x: x.split([0, 3], 1)[1], [X3]),
    "chunk": (lambda x: x.chunk(3, -1)[1], lambda x: x.chunk(3, -1)[1], [X3]),
    "stack_neg": (lambda a, b: tl.stack([a, b], -2), lambda a, b: torch.stack([a, b], -2), [X, X]),
    "permute_neg": (lambda x: x.permute(-1, 0, 1), lambda x: x.permute(-1, 0, 1), [X3]),
    "transpose_neg": (lambda x: x.transpose(0, -1), lambda x: x.transpose(0, -1), [X3]),
    "unsqueeze_neg": (lambda x: x.unsqueeze(-1), lambda x: x.unsqueeze(-1), [X]),
    "squeeze_neg": (lambda x: x[:, :1].squeeze(-1), lambda x: x[:, :1].squeeze(-1), [X]),
    "expand_minus_one": (lambda x: x[:1].expand(2, -1, -1), lambda x: x[:1].expand(2, -1, -1), [X]),
    "flatten": (lambda x: x.flatten(1), lambda x: x.flatten(1), [X3]),
    "matmul_dot": (lambda a, b: a @ b, lambda a, b: a @ b, [X[0], X[1]]),
    "matmul_vec_batch": (lambda a, b: a @ b, lambda a, b: a @ b, [X[0, :3], X3]),
}


@pytest.mark.parametrize("name", sorted(MORE_CASES))
def test_more_ops_match_torch(name):
    ours, theirs, arrays = MORE_CASES[name]
    parity(ours, theirs, *arrays)


def test_pow_at_a_zero_base_takes_torchs_limits():
    """0^b: da = 0 where b = 0 (a⁰ = 1), db = 0 where b ≥ 0 (0^b constant for b > 0), as
    PyTorch, where the bare formulas b·a^(b-1) and y·log(a) give 0·inf = NaN. First order
    only against torch: its own second derivatives there are NaN; ours are finite where the
    second derivative exists (a = 0 with b = 0 or b ≥ 2)."""
    a, b = np.array([0.0, 0.0, 0.0, 2.0, 1.5]), np.array([0.0, 1.5, 3.0, 0.0, -1.0])
    parity(lambda x, y: x**y, lambda x, y: x**y, a, b, second=False)
    parity(lambda y: 0.0**y, lambda y: 0.0**y, b[:3], second=False)  # a constant zero base
    x, y = tl.tensor(a, requires_grad=True), tl.tensor(b, requires_grad=True)
    ga, gb = tl.grad((x**y).sum(), [x, y], create_graph=True)
    second = tl.grad((ga + gb).sum(), [x, y])
    for d in second:
        assert np.isfinite(d.numpy()[[0, 2, 3, 4]]).all()


def test_max_along_an_axis_splits_ties_unlike_torch_max_dim():
    """A deliberate difference: tensorlab's max(axis) is torch.amax (ties share the gradient
    evenly), not torch.max(dim), which sends it all to the one index it returns."""
    x = tl.tensor(TIES, requires_grad=True)
    x.max(1).sum().backward()
    t = T(TIES, requires_grad=True)
    t.max(1).values.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy()[1], [0.25] * 4)
    np.testing.assert_array_equal(t.grad.numpy()[1], [1.0, 0.0, 0.0, 0.0])
