"""The backward engine: accumulation, retained and freed graphs, in-place checks, error
messages, ``tl.grad`` (higher order included), grad modes, hooks, anomaly detection, deep
graphs, broadcasting, gradient aliasing and devices."""

from __future__ import annotations

import inspect
import os
import threading
import weakref

import numpy as np
import pytest

import tensorlab as tl

from .opcheck import leaf

rng = np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _restore_global_modes():
    """A test that breaks grad mode must not make every later test fail with it."""
    yield
    tl.function.modes.grad_enabled = True
    tl.function.modes.anomaly = False
    tl.function.modes.trace = None


def _line() -> int:
    """The line number of the caller's next line."""
    return inspect.currentframe().f_back.f_lineno + 1


# ---------------------------------------------------------------- accumulation
def test_gradients_accumulate_across_backward_calls():
    x = leaf([1.0, -2.0, 3.0])
    (x * x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2 * x.numpy())
    (x * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2 * x.numpy() + 3)


def test_a_second_backward_adds_into_the_same_gradient_in_place():
    """As PyTorch's AccumulateGrad: no new array per accumulation, the .grad object kept, and
    its version bumped (a node that saved the gradient refuses to backward afterwards)."""
    x, w = leaf([1.0, -2.0, 3.0]), leaf([0.5, 0.5, 0.5])
    (x * x).sum().backward()
    first, array = x.grad, x.grad.data
    y = (w * x.grad).sum()  # saves x.grad for w's gradient
    (x * 3.0).sum().backward()
    assert x.grad is first and x.grad.data is array
    np.testing.assert_array_equal(array, 2 * x.numpy() + 3)
    with pytest.raises(RuntimeError, match="modified in place"):
        y.backward()


def test_a_gradient_held_as_a_numpy_scalar_is_added_out_of_place():
    """A custom op's backward may return a NumPy scalar for a 0-d input; stored as .grad it
    has no memory to add into (NumPy's += on a scalar makes a new one): the sum must not be
    lost."""

    class Triple(tl.Function):
        def forward(ctx, a):
            return a * 3.0

        def backward(ctx, g):
            return np.float64(3.0) * g.data  # a NumPy scalar, not an array

    x = leaf(2.0)
    Triple.apply(x).backward()
    Triple.apply(x).backward()
    assert float(x.grad.data) == 6.0


def test_an_accumulation_under_create_graph_is_a_new_differentiable_tensor():
    x = leaf([1.0, -2.0])
    (x * x).sum().backward(create_graph=True)
    first = x.grad.detach().numpy().copy()
    (x * x).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    np.testing.assert_array_equal(first, 2 * x.numpy())  # the first one was not changed
    np.testing.assert_array_equal(x.grad.detach().numpy(), 4 * x.numpy())


def test_tensor_used_twice_in_one_graph():
    x = leaf([0.5, -1.5])
    y = x * x + x.exp() * x  # x reaches the output along four paths
    y.sum().backward()
    xn = x.numpy()
    np.testing.assert_allclose(x.grad.numpy(), 2 * xn + np.exp(xn) * (1 + xn), rtol=1e-14)


def test_diamond_graph():
    x = leaf([0.3, 0.7])
    h = x * 2.0
    y = (h.tanh() * h.sigmoid()).sum()
    y.backward()
    hn = 2 * x.numpy()
    s = 1 / (1 + np.exp(-hn))
    t = np.tanh(hn)
    expected = 2 * ((1 - t**2) * s + t * s * (1 - s))
    np.testing.assert_allclose(x.grad.numpy(), expected, rtol=1e-13)


def test_module_level_backward():
    x = leaf([2.0])
    tl.backward((x * x).sum())
    np.testing.assert_array_equal(x.grad.numpy(), [4.0])


# ---------------------------------------------------------------- retained and freed graphs
def test_retain_graph_allows_a_second_backward():
    x = leaf([1.0, 2.0])
    y = (x * x.exp()).sum()
    y.backward(retain_graph=True)
    first = x.grad.numpy().copy()
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-15)


def test_second_backward_through_freed_graph_raises():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph") as err:
        y.backward()
    assert "freed" in str(err.value) and "second time" in str(err.value)


def test_saved_tensors_are_freed_during_the_backward_pass():
    """Without retain_graph a node lets go of what it saved as soon as its backward has run:
    by the time the gradient reaches ``a``, the intermediate ``b`` (saved by tanh, kept for
    mul) is gone, not only after the whole pass (issue 13: lower peak memory)."""
    x = leaf([0.5, 1.0])
    a = x.exp()
    b = a * 3.0
    alive = weakref.ref(b)
    loss = b.tanh().sum()
    del b
    seen = []
    a.register_hook(lambda g: seen.append(alive() is None))
    loss.backward()
    assert seen == [True]
    np.testing.assert_allclose(
        x.grad.numpy(), 3 * np.exp([0.5, 1.0]) * (1 - np.tanh(3 * np.exp([0.5, 1.0])) ** 2)
    )


def test_freed_intermediate_node_is_named():
    x = leaf([1.0, 2.0])
    h = x.exp()
    y = (h * 2.0).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="freed"):
        (h * 3.0).sum().backward()  # reaches the freed Exp node
    assert np.array_equal(x.grad.numpy(), 2 * np.exp(x.numpy()))  # nothing added


def test_tl_grad_frees_the_graph_unless_asked():
    x = leaf([1.0, 2.0])
    y = (x * x).sum()
    tl.grad(y, x, retain_graph=True)
    (g,) = tl.grad(y, x)
    np.testing.assert_array_equal(g.numpy(), 2 * x.numpy())
    with pytest.raises(RuntimeError, match="freed"):
        tl.grad(y, x)


# ---------------------------------------------------------------- in-place changes
def test_inplace_change_of_a_saved_tensor_is_detected():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    y = (a * b).sum()
    with tl.no_grad():
        b.mul_(2)  # b was saved by Mul for a's gradient
    with pytest.raises(RuntimeError, match="Mul") as err:
        y.backward()
    assert "in place" in str(err.value)


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.add_(1.0),
        lambda t: t.sub_(1.0),
        lambda t: t.zero_(),
        lambda t: t.fill_(2.0),
        lambda t: t.copy_(np.ones(2)),
        lambda t: t.__setitem__(0, 5.0),
    ],
    ids=["add_", "sub_", "zero_", "fill_", "copy_", "setitem"],
)
def test_every_inplace_method_bumps_the_version(change):
    x = leaf([1.0, 2.0])
    h = x.exp()  # a non-leaf saved by Log below
    y = h.log().sum()
    with tl.no_grad():
        change(h)
    with pytest.raises(RuntimeError, match="Log.*in place"):
        y.backward()


def test_inplace_on_a_leaf_that_requires_grad_is_refused():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="mul_"):
        x.mul_(2)
    with pytest.raises(RuntimeError, match="in-place"):
        x[0] = 3.0
    np.testing.assert_array_equal(x.numpy(), [1.0, 2.0])
    with tl.no_grad():
        x.mul_(2)  # an update, allowed
    np.testing.assert_array_equal(x.numpy(), [2.0, 4.0])


# ---------------------------------------------------------------- error messages
def test_backward_of_a_non_scalar_needs_a_gradient():
    x = leaf(np.ones((2, 3)))
    with pytest.raises(RuntimeError, match=r"\(2, 3\)"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match=r"grad has shape \(3,\)"):
        (x * 2).backward(np.ones(3))
    y = x * 2
    y.backward(np.full((2, 3), 0.5))
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((2, 3)))


def test_backward_of_a_tensor_without_graph_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        tl.ones(2).sum().backward()
    x = leaf([1.0])
    with tl.no_grad():
        y = x * 2
    with pytest.raises(RuntimeError, match="no_grad"):
        y.sum().backward()


@pytest.mark.parametrize(
    "make",
    [
        lambda: tl.tensor([1, 2, 3], requires_grad=True),
        lambda: tl.zeros(3, dtype=np.int64, requires_grad=True),
        lambda: tl.arange(3).requires_grad_(),
    ],
)
def test_integer_tensors_cannot_require_grad(make):
    with pytest.raises(TypeError, match="int64"):
        make()


def test_bool_tensors_cannot_require_grad():
    with pytest.raises(TypeError, match="bool"):
        tl.tensor([True, False], requires_grad=True)


def test_shape_mismatch_names_op_and_shapes():
    a, b = tl.ones(2, 3), tl.ones(4)
    with pytest.raises(ValueError, match=r"Add.*\(2, 3\).*\(4,\)"):
        a + b
    with pytest.raises(ValueError, match=r"Mul.*\(2, 3\).*\(4,\)"):
        a * b


# ---------------------------------------------------------------- tl.grad
def test_grad_returns_without_touching_dot_grad():
    x, w = leaf([1.0, 2.0]), leaf([3.0, -1.0])
    y = (x * w).sum()
    gx, gw = tl.grad(y, [x, w])
    np.testing.assert_array_equal(gx.numpy(), w.numpy())
    np.testing.assert_array_equal(gw.numpy(), x.numpy())
    assert x.grad is None and w.grad is None
    assert not gx.requires_grad


def test_grad_with_grad_outputs():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    v = np.array([[1.0, -1.0], [0.5, 2.0]])
    (g,) = tl.grad(x * x, x, grad_outputs=tl.tensor(v))
    np.testing.assert_array_equal(g.numpy(), 2 * x.numpy() * v)
    # several outputs, each with its own grad_output
    y1, y2 = x.sum(0), x.exp()
    (g,) = tl.grad([y1, y2], [x], grad_outputs=[tl.tensor([1.0, 2.0]), tl.tensor(v)])
    np.testing.assert_allclose(g.numpy(), [[1.0, 2.0]] + np.exp(x.numpy()) * v, rtol=1e-15)


def test_grad_of_an_intermediate():
    x = leaf([1.0, 2.0])
    h = x * 3.0
    y = (h * h).sum()
    (gh,) = tl.grad(y, h)
    np.testing.assert_array_equal(gh.numpy(), 2 * h.numpy())


def test_hessian_vector_product_of_a_cubic():
    x = leaf(rng.standard_normal(5))
    v = tl.tensor(rng.standard_normal(5))
    (g,) = tl.grad((x**3).sum(), x, create_graph=True)
    assert g.requires_grad
    np.testing.assert_allclose(g.numpy(), 3 * x.numpy() ** 2, rtol=1e-14)
    (hv,) = tl.grad((g * v).sum(), x)
    np.testing.assert_allclose(hv.numpy(), 6 * x.numpy() * v.numpy(), rtol=1e-14)  # H = diag(6x)


def test_full_hessian_of_a_quadratic_form():
    n = 4
    a_np = rng.standard_normal((n, n))
    a = tl.tensor(a_np)
    x = leaf(rng.standard_normal(n))
    (g,) = tl.grad(x @ (a @ x), x, create_graph=True)
    np.testing.assert_allclose(g.numpy(), (a_np + a_np.T) @ x.numpy(), rtol=1e-12)
    hessian = np.stack(
        [
            tl.grad(g, x, grad_outputs=tl.tensor(np.eye(n)[i]), retain_graph=True)[0].numpy()
            for i in range(n)
        ]
    )
    np.testing.assert_allclose(hessian, a_np + a_np.T, rtol=1e-12, atol=1e-14)


def test_third_derivative():
    x = leaf([0.7, -0.2])
    (g1,) = tl.grad(x.tanh().sum(), x, create_graph=True)
    (g2,) = tl.grad(g1.sum(), x, create_graph=True)
    (g3,) = tl.grad(g2.sum(), x)
    t = np.tanh(x.numpy())
    np.testing.assert_allclose(g2.numpy(), -2 * t * (1 - t**2), rtol=1e-13)
    np.testing.assert_allclose(g3.numpy(), (1 - t**2) * (6 * t**2 - 2), rtol=1e-13)


def test_backward_with_create_graph_gives_differentiable_grads():
    x = leaf([1.5, -0.5])
    (x**3).sum().backward(create_graph=True)
    assert x.grad.requires_grad
    (h,) = tl.grad(x.grad.sum(), x)
    np.testing.assert_allclose(h.numpy(), 6 * x.numpy(), rtol=1e-14)


def test_grad_allow_unused():
    x, unused = leaf([1.0]), leaf([2.0])
    y = (x * 2).sum()
    with pytest.raises(RuntimeError, match="input 1.*allow_unused"):
        tl.grad(y, [x, unused], retain_graph=True)
    gx, gu = tl.grad(y, [x, unused], allow_unused=True)
    np.testing.assert_array_equal(gx.numpy(), [2.0])
    assert gu is None


def test_grad_of_an_input_that_does_not_require_grad_raises():
    x = leaf([1.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        tl.grad((x * 2).sum(), tl.ones(1))


# ---------------------------------------------------------------- grad modes
def test_no_grad_context_records_nothing():
    x = leaf([1.0])
    with tl.no_grad():
        assert not tl.is_grad_enabled()
        y = x * 2
        with tl.enable_grad():
            assert tl.is_grad_enabled()
            z = x * 2
        assert not tl.is_grad_enabled()
    assert tl.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None


def test_set_grad_enabled_context():
    x = leaf([1.0])
    with tl.set_grad_enabled(False):
        assert not (x * 2).requires_grad
        with tl.set_grad_enabled(True):
            assert (x * 2).requires_grad
    assert tl.is_grad_enabled()


def test_grad_mode_decorators():
    x = leaf([1.0])

    @tl.no_grad()
    def f(t):
        return t * 2

    @tl.enable_grad()
    def g(t):
        return t * 2

    @tl.set_grad_enabled(False)
    def h(t):
        return t * 2

    assert not f(x).requires_grad
    assert not h(x).requires_grad
    with tl.no_grad():
        assert g(x).requires_grad
    assert tl.is_grad_enabled()
    assert f.__name__ == "f"


def test_grad_mode_is_restored_after_an_exception():
    with pytest.raises(KeyError):
        with tl.no_grad():
            raise KeyError
    assert tl.is_grad_enabled()


def test_recursive_decorated_function_restores_grad_mode():
    @tl.no_grad()
    def depth(n):
        assert not tl.is_grad_enabled()
        return 0 if n == 0 else 1 + depth(n - 1)

    assert depth(3) == 3
    assert tl.is_grad_enabled()


def test_grad_mode_is_per_thread():
    inside, release = threading.Event(), threading.Event()

    def work():
        with tl.no_grad():
            inside.set()
            release.wait(5)

    t = threading.Thread(target=work)
    t.start()
    inside.wait(5)
    try:
        assert tl.is_grad_enabled()  # this thread did not ask for no_grad
    finally:
        release.set()
        t.join()


# ---------------------------------------------------------------- hooks and retain_grad
def test_hooks_on_a_leaf_read_and_replace():
    x = leaf([1.0, 2.0])
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().copy()))
    x.register_hook(lambda g: g * 10)
    (x * 3.0).sum().backward()
    np.testing.assert_array_equal(seen[0], [3.0, 3.0])
    np.testing.assert_array_equal(x.grad.numpy(), [30.0, 30.0])


def test_hooks_on_a_non_leaf_read_and_replace():
    x = leaf([1.0, 2.0])
    h = x * 2.0
    seen = []
    h.register_hook(lambda g: seen.append(g.numpy().copy()))
    remove = h.register_hook(lambda g: g * 0.5)
    (h * h).sum().backward(retain_graph=True)
    np.testing.assert_array_equal(seen[0], 2 * h.numpy())
    # the replaced gradient is what flows on to x: d/dx = 0.5 * 2h * 2
    np.testing.assert_array_equal(x.grad.numpy(), 0.5 * 2 * h.numpy() * 2)
    remove()
    x.grad = None
    (h * h).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 2 * h.numpy() * 2)
    assert len(seen) == 2


def test_hook_remove_handle_on_a_leaf():
    x = leaf([1.0])
    calls = []
    remove = x.register_hook(lambda g: calls.append(1))
    (x * 2).sum().backward()
    remove()
    (x * 2).sum().backward()
    assert calls == [1]


def test_hook_returning_a_wrong_shape_raises():
    x = leaf([1.0, 2.0])
    x.register_hook(lambda g: g.sum())
    with pytest.raises(RuntimeError, match="shape"):
        (x * 2).sum().backward()


@pytest.mark.parametrize(
    "edit",
    [lambda g: g.data.__imul__(2), lambda g: g.mul_(2), lambda g: g.__setitem__(0, 0.0)],
    ids=["data", "mul_", "setitem"],
)
def test_a_hook_that_edits_its_gradient_in_place_gets_a_clear_error(edit):
    """The gradient a hook sees may be shared (a + b sends one array to both, a sum's is a
    broadcast): the hook must return a new one, and an edit in place says so."""
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    a.register_hook(edit)
    with pytest.raises(RuntimeError, match="hook .* in place; a hook must return a new gradient"):
        (a + b).sum().backward()
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    a.register_hook(lambda g: g * 2)  # the way to change it
    (a + b).sum().backward()
    assert a.grad.numpy().tolist() == [2.0, 2.0] and b.grad.numpy().tolist() == [1.0, 1.0]


def test_hook_on_a_tensor_without_grad_raises():
    with pytest.raises(RuntimeError, match="does not require grad"):
        tl.ones(2).register_hook(lambda g: g)


def test_retain_grad_on_a_non_leaf():
    x = leaf([1.0, -2.0])
    h = x * 3.0
    kept = (x * 2.0).retain_grad()
    y = (h * h + kept).sum()
    y.backward()
    assert h.grad is None  # non-leaves keep no gradient by default
    np.testing.assert_array_equal(kept.grad.numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(x.grad.numpy(), 2 * h.numpy() * 3 + 2)


# ---------------------------------------------------------------- anomaly detection
def test_anomaly_in_forward_names_op_and_line():
    x = leaf([1.0, -1.0])
    with tl.detect_anomaly():
        with pytest.raises(tl.AnomalyError, match="Log") as err:
            line = _line()
            (x * 2.0).log()
    msg = str(err.value)
    assert "forward" in msg
    assert f'{os.path.basename(__file__)}", line {line}' in msg


def test_anomaly_in_backward_names_op_and_line():
    x = leaf([0.0, 4.0])
    with tl.detect_anomaly():
        line = _line()
        y = x.sqrt()  # fine forward; the gradient 1 / (2 sqrt(x)) is inf at 0
        z = (y * 2.0).sum()
        with pytest.raises(tl.AnomalyError, match="Sqrt") as err:
            z.backward()
    msg = str(err.value)
    assert "backward" in msg
    assert f'{os.path.basename(__file__)}", line {line}' in msg


def test_no_anomaly_check_outside_the_context():
    x = leaf([-1.0])
    with np.errstate(invalid="ignore"):
        assert np.isnan(x.log().item())
    assert isinstance(tl.AnomalyError("x"), RuntimeError)


# ---------------------------------------------------------------- deep graphs
def test_chain_of_100k_ops_needs_no_recursion():
    c = 1.00001
    x = leaf([1.0, 2.0])
    y = x
    for _ in range(100_000):
        y = y * c
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [c**100_000] * 2, rtol=1e-9)


# ---------------------------------------------------------------- broadcasting
def test_broadcast_gradients_are_summed_back():
    a = leaf(rng.standard_normal((3, 1)))
    b = leaf(rng.standard_normal((4,)))
    c = leaf(2.0)  # 0-d
    d = leaf(rng.standard_normal((2, 1, 1)))
    y = a * b + c * d  # shape (2, 3, 4)
    assert y.shape == (2, 3, 4)
    y.sum().backward()
    an, bn, cn, dn = a.numpy(), b.numpy(), c.numpy(), d.numpy()
    assert a.grad.shape == (3, 1) and b.grad.shape == (4,)
    assert c.grad.shape == () and d.grad.shape == (2, 1, 1)
    np.testing.assert_allclose(a.grad.numpy(), np.full((3, 1), 2 * bn.sum()), rtol=1e-14)
    np.testing.assert_allclose(b.grad.numpy(), np.full(4, 2 * an.sum()), rtol=1e-14)
    np.testing.assert_allclose(c.grad.numpy(), 12 * dn.sum(), rtol=1e-14)
    np.testing.assert_allclose(d.grad.numpy(), np.full((2, 1, 1), 12 * cn), rtol=1e-14)


# ---------------------------------------------------------------- aliasing
@pytest.mark.parametrize("create_graph", [False, True])
def test_leaf_gradients_are_never_aliased(create_graph):
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    (a + b).sum().backward(create_graph=create_graph)
    with tl.no_grad():
        a.grad.mul_(2)
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(b.grad.numpy(), [1.0, 1.0])


@pytest.mark.parametrize(
    "backward",
    [
        lambda x, g: x.backward(g),  # the leaf itself is the root
        lambda x, g: (x + 1.0).backward(g),  # Add's backward passes g on as it is
    ],
)
def test_the_callers_root_gradient_is_not_the_leafs_grad(backward):
    """A later accumulation adds into .grad in place, so .grad must not be the caller's g."""
    x, g = leaf([1.0, 2.0]), tl.tensor([10.0, 20.0])
    backward(x, g)
    backward(x, g)
    np.testing.assert_array_equal(g.numpy(), [10.0, 20.0])
    np.testing.assert_array_equal(x.grad.numpy(), [20.0, 40.0])


def test_a_hooks_result_is_not_the_leafs_grad():
    x, kept = leaf([1.0, 2.0]), tl.tensor([5.0, 5.0])
    x.register_hook(lambda g: kept)
    (x * 2.0).sum().backward()
    (x * 2.0).sum().backward()
    np.testing.assert_array_equal(kept.numpy(), [5.0, 5.0])
    np.testing.assert_array_equal(x.grad.numpy(), [10.0, 10.0])


def test_leaf_gradient_not_aliased_with_a_retained_gradient():
    a, b = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    s = (a + b).retain_grad()
    (s * s).sum().backward()
    with tl.no_grad():
        a.grad.zero_()
        b.grad.add_(1.0)
    np.testing.assert_array_equal(s.grad.numpy(), 2 * s.numpy())
    np.testing.assert_array_equal(a.grad.numpy(), [0.0, 0.0])


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.sum(),  # gradient is a broadcast view of one number
        lambda x: x.reshape(4).sum(),  # a reshaped view
        lambda x: x.T.sum(),  # a transposed view
        lambda x: x.expand(3, 2, 2).sum(),
    ],
)
def test_leaf_gradients_are_writable(make):
    x = leaf(np.ones((2, 2)))
    make(x).backward()
    with tl.no_grad():
        x.grad.mul_(0.5)
        x.grad.add_(1.0)
    assert x.grad.shape == (2, 2)


def test_a_where_condition_changed_after_the_forward_does_not_change_the_gradient():
    """The issue's example: where() kept the condition's array, and c[0] = False before the
    backward gave [3, 3, 2]."""
    for make in (tl.tensor, np.array):
        x = leaf([1.0, 1.0, 1.0])
        c = make([True, False, True])
        y = tl.where(c, 2 * x, 3 * x)
        c[0] = False
        y.sum().backward()
        assert x.grad.numpy().tolist() == [2.0, 3.0, 2.0]
    x = leaf([1.0, -1.0])
    m = tl.tensor([True, False])
    y = x.masked_fill(m, 0.0)
    m[:] = True
    y.sum().backward()
    assert x.grad.numpy().tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    "read, want",
    [
        (lambda x, i: x.gather(0, i), [1.0, 0.0, 10.0]),
        (lambda x, i: x[i], [1.0, 0.0, 10.0]),
        (lambda x, i: x[(i,)], [1.0, 0.0, 10.0]),
        (lambda x, i: tl.zeros(3, dtype="float64").scatter_add(0, i, x[:2]), [1.0, 10.0, 0.0]),
        (lambda x, i: tl.zeros(3, dtype="float64").index_add(0, i, x[:2]), [1.0, 10.0, 0.0]),
    ],
    ids=["gather", "getitem", "getitem-tuple", "scatter_add", "index_add"],
)
@pytest.mark.parametrize("make", [tl.tensor, np.array], ids=["Tensor", "ndarray"])
def test_an_index_changed_after_the_forward_does_not_change_the_gradient(read, want, make):
    x = leaf([1.0, 2.0, 3.0])
    idx = make([0, 2])
    y = read(x, idx)
    idx[0] = 1
    w = [1.0, 10.0] if len(y) == 2 else [1.0, 100.0, 10.0]  # (scatters give 3 entries)
    (y * tl.tensor(w, dtype="float64")).sum().backward()
    assert x.grad.numpy().tolist() == want


def test_an_array_operand_changed_after_the_forward_does_not_change_the_gradient():
    """x * arr saves arr for x's gradient: the op keeps a copy of the caller's array."""
    x = leaf([1.0, 2.0])
    arr = np.array([3.0, 4.0])
    y = (x * arr).sum() + (arr - x).sum()
    arr[0] = 100.0
    y.backward()
    assert x.grad.numpy().tolist() == [2.0, 3.0]


def test_saved_indices_are_not_copied_without_a_graph():
    x = tl.tensor([1.0, 2.0, 3.0])
    idx = tl.tensor([0, 2])
    with tl.no_grad():
        y = leaf([1.0, 2.0, 3.0])[idx]
    assert y._ctx is None and x[idx].numpy().tolist() == [1.0, 3.0]


# ---------------------------------------------------------------- devices
def test_backward_on_device(device):
    x = tl.tensor(np.array([1.0, 2.0]), device=device, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    assert x.grad.device == device
    np.testing.assert_array_equal(x.grad.numpy(), [2.0, 4.0])


def test_mixed_devices_raise():
    if not tl.cuda_available():
        pytest.skip("mixing devices needs a CUDA GPU with CuPy; none on this machine")
    a = tl.ones(3, device="cpu")
    b = tl.ones(3, device="cuda")
    with pytest.raises(RuntimeError, match="different devices"):
        a + b


def test_device_round_trip_gradient():
    if not tl.cuda_available():
        pytest.skip("moving to the GPU needs a CUDA GPU with CuPy; none on this machine")
    x = tl.tensor([1.0, 2.0], device="cpu", requires_grad=True)
    (x.to("cuda") * 3.0).sum().backward()
    assert x.grad.device == "cpu"
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])


# ---------------------------------------------------------------------- versions (issue 12)
def _exp_then(change):
    x = tl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x.exp()
    with tl.no_grad():
        change(y)
    return y


@pytest.mark.parametrize(
    "change",
    [
        lambda y: y.add_(100.0),
        lambda y: y.reshape(3).add_(100.0),
        lambda y: y.detach().add_(100.0),
        lambda y: y[1:].add_(100.0),
        lambda y: y.reshape(1, 3)[0, 1:].add_(100.0),  # NumPy's base: y's array, not the reshape
    ],
    ids=["itself", "a reshape", "detach()", "a slice", "a slice of a reshape"],
)
def test_changing_a_saved_output_in_place_is_refused(change):
    """Exp's backward reads its output: changed in place (through itself, a view or a
    detach()), the gradient would be silently wrong (102.7 instead of 2.72), so it raises."""
    y = _exp_then(change)
    with pytest.raises(RuntimeError, match="Exp: its output of shape \\(3,\\).*modified in place"):
        y.sum().backward()


def test_changing_a_slice_of_a_saved_input_is_refused():
    x = tl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = x * 1.0
    y = w * w  # Mul saves w
    with tl.no_grad():
        w[0:2].add_(100.0)
    with pytest.raises(RuntimeError, match="Mul: an input of shape \\(3,\\).*version went from"):
        y.sum().backward()


def test_in_place_changes_that_nothing_saved_are_allowed():
    """As in PyTorch: a tensor no backward reads may change (an Add keeps neither input nor
    output), and a copy cuts the shared counter."""
    x = tl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x + 1.0
    with tl.no_grad():
        y.add_(100.0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones(3))
    x.grad = None
    z = x.exp()
    c = tl.tensor(z.numpy().copy())
    c.add_(5.0)
    z.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([1.0, 2.0, 3.0]))


def test_a_gradient_has_its_inputs_dtype_after_promotion():
    """float32 · float64 computes in float64, but each leaf's gradient comes back in the
    leaf's own dtype (and shape), as in PyTorch (issue 12)."""
    a = tl.tensor(np.array([1.0, 2.0, 3.0], np.float32), requires_grad=True)
    b = tl.tensor(np.array([[0.5], [0.25]]), requires_grad=True)  # float64, broadcast
    (a * b).sum().backward()
    assert a.grad.dtype == np.float32 and a.grad.shape == (3,)
    assert b.grad.dtype == np.float64 and b.grad.shape == (2, 1)
    np.testing.assert_allclose(a.grad.numpy(), [0.75, 0.75, 0.75])
    np.testing.assert_allclose(b.grad.numpy(), [[6.0], [6.0]])
    (g,) = tl.grad((a * b).sum(), [a], create_graph=True)
    assert g.dtype == np.float32 and g.requires_grad  # the cast stays in the graph
