"""The Tensor data structure: creation functions and their dtype defaults, random seeding,
NumPy interop (``.numpy()``, ``__array__``, DLPack), PyTorch DLPack exchange, detach,
repr, comparisons, properties and device errors."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlab as tl


# ---------------------------------------------------------------- creation and dtypes
@pytest.mark.parametrize(
    "data, dtype",
    [
        ([1.0, 2.0], np.float32),  # Python floats become float32
        (2.5, np.float32),
        ([[1, 2], [3, 4]], np.int64),  # Python ints become int64
        (3, np.int64),
        ([True, False], np.bool_),
        (np.array([1.0, 2.0]), np.float64),  # NumPy arrays keep their dtype
        (np.array([1.0], dtype=np.float32), np.float32),
        (np.float64(2.0), np.float64),
        (np.arange(3, dtype=np.int32), np.int32),
    ],
)
def test_tensor_dtype_defaults(data, dtype):
    t = tl.tensor(data)
    assert t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), np.asarray(data))
    assert t.device == tl.backend.default_device()  # "cpu", unless the suite runs on a GPU
    assert not t.requires_grad and t.is_leaf and t.grad is None and t.grad_fn is None


def test_explicit_dtype_wins():
    assert tl.tensor([1.0, 2.0], dtype=np.float64).dtype == np.float64
    assert tl.tensor([1, 2], dtype=tl.float32).dtype == np.float32
    assert tl.tensor(np.ones(2), dtype="float32").dtype == np.float32


def test_tensor_copies_arrays_and_tensors_as_torch_tensor_does():
    a = np.array([1.0, 2.0])
    t = tl.tensor(a)
    a[0] = 5.0  # the caller's array changes; the tensor keeps its own copy
    assert t.numpy().tolist() == [1.0, 2.0]
    assert tl.Tensor(a).data is not a and tl.tensor(a[::2]).data.base is None  # views too
    u = tl.tensor(t)
    assert u.data is not t.data and not np.shares_memory(u.data, t.data)


def test_tensor_of_a_tensor_is_a_copy_the_graph_does_not_see():
    """The wrong-gradient case of the issue: a copy made with tl.tensor was changed in place,
    and the backward read the changed values through the shared array."""
    x = tl.tensor([0.0, 1.0], dtype="float64", requires_grad=True)
    y = x.exp()
    tl.tensor(y).add_(1.0)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp([0.0, 1.0]))


def test_from_numpy_shares_memory_and_keeps_the_dtype():
    a = np.array([1.0, 2.0])  # float64 stays float64 (tl.tensor of Python floats: float32)
    t = tl.from_numpy(a)
    assert t.dtype == np.float64 and t.data is a
    a[0] = 7.0
    assert t.numpy()[0] == 7.0
    t.add_(1.0)
    assert a.tolist() == [8.0, 3.0]
    with pytest.raises(TypeError, match="from_numpy: expected a NumPy array, got list"):
        tl.from_numpy([1.0])
    with pytest.raises(TypeError, match="from_numpy: dtype <U1 is not numeric"):
        tl.from_numpy(np.array(["a"]))


@pytest.mark.parametrize("data", ["abc", None, b"x", [object()], {"a": 1}], ids=repr)
def test_non_numeric_data_is_refused(data):
    with pytest.raises(TypeError, match="tensor: cannot make a tensor of .* data") as err:
        tl.tensor(data)
    assert "numbers" in str(err.value) and "\n" not in str(err.value)


def test_arange_with_step_zero_is_a_clear_error():
    with pytest.raises(ValueError, match=r"arange: step must not be 0 \(start 0, stop 10\)"):
        tl.arange(0, 10, 0)


@pytest.mark.parametrize(
    "make, shape, fill",
    [
        (lambda: tl.zeros(2, 3), (2, 3), 0.0),
        (lambda: tl.zeros((2, 3)), (2, 3), 0.0),
        (lambda: tl.ones(4), (4,), 1.0),
        (lambda: tl.ones([2, 2]), (2, 2), 1.0),
        (lambda: tl.full((2, 1), 7.5), (2, 1), 7.5),
        (lambda: tl.full(3, -1.0), (3,), -1.0),
        (lambda: tl.zeros(()), (), 0.0),
    ],
)
def test_constant_creation(make, shape, fill):
    t = make()
    assert t.shape == shape and t.dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), np.full(shape, fill, dtype=np.float32))


def test_creation_options():
    z = tl.zeros(2, dtype=np.float64, requires_grad=True)
    assert z.dtype == np.float64 and z.requires_grad and z.is_leaf
    assert tl.ones(2, dtype=np.int64).dtype == np.int64
    e = tl.eye(3)
    assert e.dtype == np.float32
    np.testing.assert_array_equal(e.numpy(), np.eye(3))
    np.testing.assert_array_equal(tl.eye(2, 3).numpy(), np.eye(2, 3))


@pytest.mark.parametrize(
    "args, dtype",
    [((5,), np.int64), ((1, 7, 2), np.int64), ((0.0, 1.0, 0.25), np.float32), ((3.0,), np.float32)],
)
def test_arange(args, dtype):
    t = tl.arange(*args)
    assert t.dtype == dtype
    np.testing.assert_array_equal(t.numpy(), np.arange(*args).astype(dtype))


def test_like_functions_keep_shape_and_dtype():
    base = tl.tensor(np.zeros((2, 3)))  # float64
    for t, fill in [(tl.zeros_like(base), 0.0), (tl.ones_like(base), 1.0)]:
        assert t.shape == (2, 3) and t.dtype == np.float64
        np.testing.assert_array_equal(t.numpy(), np.full((2, 3), fill))
    f = tl.full_like(base, 3.0, dtype=np.float32)
    assert f.dtype == np.float32 and (f.numpy() == 3).all()
    for t in (tl.randn_like(base), tl.rand_like(base)):
        assert t.shape == (2, 3) and t.dtype == np.float64
    assert tl.ones_like(base, requires_grad=True).requires_grad
    assert tl.randn_like(tl.ones(4)).dtype == np.float32


def test_random_creation_dtype_and_range():
    tl.manual_seed(0)
    n = tl.randn(1000)
    u = tl.rand(1000)
    r = tl.randint(-2, 3, (1000,))
    assert n.dtype == np.float32 and u.dtype == np.float32
    assert r.dtype == np.int64 and r.shape == (1000,)
    assert (u.numpy() >= 0).all() and (u.numpy() < 1).all()
    assert set(np.unique(r.numpy())) <= {-2, -1, 0, 1, 2}
    assert abs(n.numpy().mean()) < 0.2 and 0.8 < n.numpy().std() < 1.2  # ~6 sigma bounds
    assert tl.randn(2, 3, dtype=np.float64).dtype == np.float64
    assert tl.randn(2, requires_grad=True).requires_grad


def test_manual_seed_reproducibility():
    def draw():
        return tl.randn(5).numpy(), tl.rand(2, 2).numpy(), tl.randint(0, 100, 4).numpy()

    tl.manual_seed(123)
    first = draw()
    tl.manual_seed(123)
    second = draw()
    tl.manual_seed(124)
    other = draw()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], other[0])


# ---------------------------------------------------------------- NumPy interop
def test_numpy_item_and_array_protocol():
    t = tl.tensor(np.arange(6.0).reshape(2, 3), device="cpu")  # (numpy() shares CPU memory)
    a = t.numpy()
    assert isinstance(a, np.ndarray) and np.shares_memory(a, t.data)
    np.testing.assert_array_equal(np.asarray(t), a)
    assert np.asarray(t, dtype=np.float32).dtype == np.float32
    assert np.array(t).shape == (2, 3)
    assert t.sum().item() == 15.0 and isinstance(t.sum().item(), float)
    assert float(t[1, 2]) == 5.0 and int(t[0, 1]) == 1
    assert t.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert bool(tl.tensor(1.0)) and not bool(tl.tensor(0.0))


def test_from_dlpack_of_a_numpy_array_shares_memory():
    a = np.arange(4.0)
    t = tl.from_dlpack(a)
    assert isinstance(t, tl.Tensor) and t.dtype == np.float64
    a[0] = 42.0
    assert t.numpy()[0] == 42.0


def test_numpy_from_dlpack_of_a_tensor_shares_memory():
    t = tl.tensor(np.arange(3.0), device="cpu")  # (NumPy imports CPU memory only)
    a = np.from_dlpack(t)
    np.testing.assert_array_equal(a, [0.0, 1.0, 2.0])
    with tl.no_grad():
        t.fill_(7.0)
    np.testing.assert_array_equal(a, [7.0, 7.0, 7.0])


def test_dlpack_with_torch():
    torch = pytest.importorskip("torch")
    t = tl.tensor(np.arange(4.0, dtype=np.float32), device="cpu")  # (the CPU build of torch)
    pt = torch.from_dlpack(t)
    assert pt.dtype == torch.float32
    pt[1] = -5.0
    assert t.numpy()[1] == -5.0  # shared memory

    src = torch.arange(3, dtype=torch.float64)
    back = tl.from_dlpack(src)
    assert back.dtype == np.float64
    src[2] = 9.0
    np.testing.assert_array_equal(back.numpy(), [0.0, 1.0, 9.0])


# ---------------------------------------------------------------- detach and repr
def test_detach():
    x = tl.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x * 2
    d = y.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    assert np.shares_memory(d.data, y.data)
    (x * d).sum().backward()  # no gradient flows through d
    np.testing.assert_array_equal(x.grad.numpy(), d.numpy())


def test_repr():
    r = repr(tl.tensor([1.0, 2.5]))
    assert r.startswith("tensor(") and "2.5" in r and "dtype" not in r
    x = tl.tensor(np.array([1.0]), requires_grad=True)
    assert "dtype=float64" in repr(x) and "requires_grad=True" in repr(x)
    y = x * 2
    assert "grad_fn=Mul" in repr(y) and "requires_grad" not in repr(y)
    assert "dtype=int64" in repr(tl.tensor([1, 2]))


def test_properties():
    x = tl.zeros(2, 3, 4)
    assert x.shape == (2, 3, 4) and x.ndim == 3 and x.size == 24 and len(x) == 2
    y = tl.tensor(np.ones(2), requires_grad=True) * 2
    assert not y.is_leaf and y.grad_fn.name == "Mul"
    with pytest.raises(RuntimeError, match="detach"):
        y.requires_grad_(False)


# ---------------------------------------------------------------- comparisons
def test_comparisons_give_bool_tensors_without_grad():
    a = tl.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    b = tl.tensor(np.array([3.0, 2.0, 1.0]))
    an, bn = a.numpy(), b.numpy()
    cases = [
        (a < b, an < bn),
        (a <= b, an <= bn),
        (a > b, an > bn),
        (a >= 2.0, an >= 2.0),
        (a == b, an == bn),
        (a != b, an != bn),
        (~(a > 1.5), ~(an > 1.5)),
    ]
    for got, expected in cases:
        assert isinstance(got, tl.Tensor)
        assert got.dtype == np.bool_
        assert not got.requires_grad and got.grad_fn is None
        np.testing.assert_array_equal(got.numpy(), expected)


def test_argmax_argmin():
    x = tl.tensor(np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 3.0]]), requires_grad=True)
    np.testing.assert_array_equal(x.argmax(1).numpy(), [1, 0])
    np.testing.assert_array_equal(x.argmin(0).numpy(), [0, 1, 0])
    assert not x.argmax().requires_grad and x.argmax().item() == 3


# ---------------------------------------------------------------- in place
def test_in_place_arithmetic_changes_the_memory():
    x = tl.tensor(np.array([1.0, 2.0, 3.0]))
    view = x.data
    x.add_(tl.tensor(np.array([1.0, 1.0, 2.0])), alpha=-0.5)
    np.testing.assert_array_equal(x.numpy(), [0.5, 1.5, 2.0])
    x.add_(2.0)
    x.sub_(tl.tensor(np.array([0.5, 0.5, 0.0])))
    x.mul_(tl.tensor([2.0, 1.0, -1.0]))
    np.testing.assert_array_equal(x.numpy(), [4.0, 3.0, -4.0])
    assert x.data is view  # in place: the same array, changed


def test_in_place_operators_change_the_tensor_not_the_name():
    """``p -= lr * p.grad`` under no_grad updates the parameter itself (before: __sub__ made
    a new tensor and rebound the name, and the parameter never changed)."""
    p = tl.tensor([1.0, 2.0], requires_grad=True)
    (p * p).sum().backward()
    same, data, version = p, p.data, p._version
    with tl.no_grad():
        p -= 0.25 * p.grad
    assert p is same and p.data is data and p._version == version + 1
    np.testing.assert_allclose(p.numpy(), [0.5, 1.0])
    x = tl.tensor([2.0, 4.0])
    y = x
    y += 1
    y *= tl.tensor([2.0, 0.5])
    y /= 2
    y -= tl.tensor(1.0)
    assert y is x and x.numpy().tolist() == [2.0, 0.25] and x._version == 4
    x.div_(0.5)
    assert x.numpy().tolist() == [4.0, 0.5]


def test_in_place_on_a_leaf_that_requires_grad_is_refused_outside_no_grad():
    p = tl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"\+=: a leaf tensor that requires grad .* in-place"):
        p += 1
    with pytest.raises(RuntimeError, match="-=: a leaf tensor that requires grad"):
        p -= 1
    assert p.numpy().tolist() == [1.0, 2.0] and p._version == 0


def test_in_place_on_an_ops_output_under_grad_mode_is_refused_not_recorded():
    x = tl.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2
    with pytest.raises(RuntimeError, match=r"\*=: in-place change .* out of place"):
        h *= 3
    a = tl.tensor([1.0, 2.0])  # requires no grad, but the operand does: its gradient is lost
    with pytest.raises(RuntimeError, match=r"/=: the operand of shape \(2,\) requires grad"):
        a /= x
    with pytest.raises(RuntimeError, match="__setitem__: the operand of shape"):
        a[:] = x


def test_in_place_operator_errors_are_one_line_and_change_nothing():
    x = tl.tensor([1, 2])  # int64
    with pytest.raises(TypeError, match=r"\+=: cannot update a tensor of shape \(2,\) int64"):
        x += 0.5
    y = tl.ones(2)
    with pytest.raises(ValueError, match=r"shape \(3, 2\) float32 .* must broadcast to \(2,\)"):
        y += tl.ones(3, 2)
    assert x._version == 0 and y._version == 0 and x.numpy().tolist() == [1, 2]


def test_setitem_bumps_the_version_that_saved_tensors_check():
    x = tl.tensor([1.0, 2.0], dtype="float64", requires_grad=True)
    w = tl.tensor([3.0, 4.0], dtype="float64")
    y = (x * w).sum()  # Mul saves w for x's gradient
    w[0] = 0.0
    assert w._version == 1
    with pytest.raises(RuntimeError, match="Mul: an input of shape .* modified in place"):
        y.backward()


# ---------------------------------------------------------------- devices
def test_cuda_without_a_gpu_gives_a_clear_error():
    if tl.cuda_available():
        pytest.skip("this machine has a CUDA GPU")
    x = tl.ones(2)
    with pytest.raises(RuntimeError, match="CuPy") as err:
        x.to("cuda")
    assert "cuda" in str(err.value)
    with pytest.raises(RuntimeError, match="CuPy"):
        x.cuda()
    with pytest.raises(RuntimeError, match="CuPy"):
        tl.zeros(2, device="cuda")
    assert x.to("cpu") is x and x.cpu() is x


def test_unknown_device_is_refused():
    with pytest.raises(ValueError, match="unknown device"):
        tl.zeros(2, device="tpu")
    # .to takes a device or a dtype: NumPy's "data type 'tpu' not understood" alone misled
    with pytest.raises(TypeError, match="to: 'tpu' is neither a device .* nor a dtype"):
        tl.zeros(2).to("tpu")


def test_creation_on_device(device):
    t = tl.randn(3, device=device)
    assert t.device == device
    assert tl.ones(2, device=device).device == device
    assert tl.arange(3, device=device).numpy().tolist() == [0, 1, 2]
