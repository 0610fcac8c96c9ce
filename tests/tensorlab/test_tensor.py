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


def test_tensor_of_a_tensor_shares_the_array():
    a = tl.tensor([1.0, 2.0])
    assert tl.tensor(a).data is a.data


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
