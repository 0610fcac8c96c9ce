"""Activation checkpointing (``tensorlab/checkpoint.py``): gradients identical to the same
function without checkpointing (first and second order, through parameters read from the
closure, earlier results, dropout), the activations it would save are dropped after the
forward, and the edge cases (no_grad, a non-Tensor result, in-place changes) behave."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

import nn
import nn.functional as F
import tensorlab as tl

RNG = np.random.default_rng(0)


def t64(a, requires_grad=True):
    return tl.tensor(np.asarray(a, dtype=np.float64), dtype=np.float64, requires_grad=requires_grad)


class Block(nn.Module):
    """x + W2 · gelu(layer_norm(x) W1), with dropout: a transformer MLP block."""

    def __init__(self, d=6, p=0.0):
        super().__init__()
        self.w1 = nn.Parameter(RNG.standard_normal((d, 2 * d)) * 0.3)
        self.w2 = nn.Parameter(RNG.standard_normal((2 * d, d)) * 0.3)
        self.ln = nn.LayerNorm(d, dtype=np.float64)
        self.p = p
        self.seen: list[weakref.ref] = []
        self.to(tl.backend.default_device())  # (the suite may run on a GPU)

    def forward(self, x, scale=1.0):
        h = F.gelu(self.ln(x) @ self.w1)
        self.seen.append(weakref.ref(h))
        return x + F.dropout(h, self.p, self.training) @ self.w2 * scale


def _params_to_float64(m):
    for p in m.parameters():
        p.data = p.data.astype(np.float64)


def run(blocks, x, use_checkpoint, seed=0):
    tl.manual_seed(seed)
    for b in blocks:
        x = tl.checkpoint(b, x, 0.5) if use_checkpoint else b(x, 0.5)
    return (x * x).sum()


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_gradients_are_identical_to_no_checkpoint(p):
    blocks = [Block(p=p) for _ in range(3)]
    for b in blocks:
        _params_to_float64(b)
    x = t64(RNG.standard_normal((2, 3, 6)))
    grads = {}
    for ck in (False, True):
        params = [q for b in blocks for q in b.parameters()] + [x]
        for q in params:
            q.grad = None
        loss = run(blocks, x, ck)
        loss.backward()
        grads[ck] = (loss.item(), [q.grad.numpy().copy() for q in params])
    assert grads[False][0] == grads[True][0]
    for a, b in zip(grads[False][1], grads[True][1]):
        np.testing.assert_array_equal(a, b)  # the same arithmetic: equal to the bit


def test_the_recomputation_leaves_the_random_stream_where_the_forward_left_it():
    """The backward's second forward redraws the same dropout masks from the saved state
    and then puts the generator back: what the program draws next (the next step's masks, a
    batch) is the same with checkpointing as without."""
    blocks = [Block(p=0.3) for _ in range(2)]
    x = t64(RNG.standard_normal((2, 3, 6)))
    after = {}
    for ck in (False, True):
        run(blocks, x, ck).backward()
        after[ck] = tl.rand(8).numpy()  # the next draw from the default device's generator
    np.testing.assert_array_equal(after[False], after[True])


def test_saved_activations_are_dropped_until_backward():
    """Without checkpointing every block's hidden activation stays alive (saved by the next
    op) until backward; with it none does, and backward rebuilds them one block at a time."""
    blocks = [Block() for _ in range(4)]
    for b in blocks:
        _params_to_float64(b)
    x = t64(RNG.standard_normal((2, 6)))
    for ck, expect_alive in ((False, 4), (True, 0)):
        loss = run(blocks, x, ck)
        gc.collect()
        alive = sum(r() is not None for b in blocks for r in b.seen)
        assert alive == expect_alive
        for b in blocks:
            b.seen.clear()
        loss.backward()
    assert sum(len(b.seen) for b in blocks) == 4  # the recomputation ran once per block
    gc.collect()
    assert all(r() is None for b in blocks for r in b.seen)  # and freed again


def test_the_node_keeps_only_its_inputs():
    b = Block()
    _params_to_float64(b)
    x = t64(RNG.standard_normal((2, 6)))
    y = tl.checkpoint(b, x)
    node = y.grad_fn
    assert node.name == "Checkpoint"
    assert {id(t) for t in node.inputs} == {id(x)} | {id(q) for q in b.parameters()}
    assert not [k for k, v in vars(node).items() if hasattr(v, "shape") and k != "inputs"]


def test_gradients_reach_tensors_computed_outside_fn():
    a = t64([[0.5, -1.0], [2.0, 0.3]])
    w = a * 2.0  # a non-leaf read from the closure
    x = t64([[1.0, 2.0]])
    y = tl.checkpoint(lambda x: (x @ w).sin(), x)
    y.sum().backward()
    ga, gx = a.grad.numpy(), x.grad.numpy()
    a.grad = x.grad = None
    (x @ (a * 2.0)).sin().sum().backward()
    np.testing.assert_array_equal(ga, a.grad.numpy())
    np.testing.assert_array_equal(gx, x.grad.numpy())


def test_tl_grad_and_second_derivatives_through_a_checkpoint():
    w = t64(RNG.standard_normal((3, 3)))
    x = t64(RNG.standard_normal((2, 3)))

    def f(x):
        return ((x @ w).tanh() @ w).sin()

    results = []
    for ck in (False, True):
        y = tl.checkpoint(f, x) if ck else f(x)
        gx, gw = tl.grad((y * y).sum(), [x, w], create_graph=True)
        hx, hw = tl.grad((gx * gx).sum() + gw.sum(), [x, w])
        results.append([t.numpy() for t in (gx, gw, hx, hw)])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-14)
    assert w.grad is None and x.grad is None  # tl.grad stores nothing
    assert tl.gradcheck(lambda x, w: tl.checkpoint(lambda a: (a @ w).tanh(), x), [x, w])
    assert tl.gradgradcheck(lambda x, w: tl.checkpoint(lambda a: (a @ w).tanh(), x), [x, w])


def test_repeated_and_non_tensor_arguments():
    x = t64([1.0, 2.0])
    y = tl.checkpoint(lambda a, b, k: a * b * k, x, x, 3.0)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [6.0, 12.0])


def test_nested_checkpoints():
    w = t64([[1.0, 0.5], [-0.5, 1.0]])
    x = t64([[0.2, 0.4]])

    def inner(a):
        return (a @ w).tanh()

    def outer(a):
        return tl.checkpoint(inner, tl.checkpoint(inner, a))

    tl.checkpoint(outer, x).sum().backward()
    g = w.grad.numpy()
    w.grad = None
    inner(inner(x)).sum().backward()
    np.testing.assert_array_equal(g, w.grad.numpy())


def test_outside_a_graph_it_is_a_plain_call():
    x = t64([1.0, 2.0])
    with tl.no_grad():
        y = tl.checkpoint(lambda a: a * 2, x)
    assert not y.requires_grad and y.grad_fn is None
    z = tl.checkpoint(lambda a: a * 2, t64([1.0], requires_grad=False))
    assert not z.requires_grad


def test_errors():
    x = t64([1.0, 2.0])
    with pytest.raises(TypeError, match="checkpoint: fn must return one Tensor, not tuple"):
        tl.checkpoint(lambda a: (a, a), x)
    y = x * 1.0
    z = tl.checkpoint(lambda a: a.exp(), y)
    with tl.no_grad():
        y.add_(1.0)
    with pytest.raises(RuntimeError, match="Checkpoint: an input of shape \\(2,\\)"):
        z.sum().backward()


def test_generator_state_round_trip():
    """generator_state/set_generator_state, which the recomputation uses: the draws after a
    restore repeat those after the save."""
    from tensorlab import backend

    tl.manual_seed(3)
    state = backend.generator_state()
    first = backend.generator().random(5)
    backend.generator().random(7)  # move on
    backend.set_generator_state(state)
    np.testing.assert_array_equal(backend.generator().random(5), first)


class _FakeCuPy:
    """A stand-in for CuPy's random-state layout (cupy/random/_generator_api.pyx and
    _bit_generator.pyx): ``default_rng(seed)`` is a Generator whose ``bit_generator`` keeps
    its cuRAND states in the device array ``_state`` (int8) and whose ``state`` attribute is
    a method; a draw reads and advances the states. NumPy arrays play the device arrays."""

    ndarray = np.ndarray
    asarray = staticmethod(np.asarray)
    __version__ = "fake"

    class _XORWOW:
        def __init__(self, seed):
            self._state = np.frombuffer(np.random.default_rng(seed).bytes(64), np.int8).copy()

        def state(self):  # CuPy's: a device pointer, not something to save
            return id(self._state)

    class _Generator:
        def __init__(self, seed):
            self.bit_generator = _FakeCuPy._XORWOW(seed)

        def random(self, n):
            s = self.bit_generator._state
            out = np.random.default_rng(s.view(np.uint8).astype(np.uint64)).random(n)
            s += 1  # the states advance with every draw
            return out


def test_generator_state_of_cupy_is_its_curand_states(monkeypatch):
    """On CuPy the state is a copy of the generator's device array of cuRAND states (CuPy has
    no public state API; its ``bit_generator.state`` is a method returning a pointer, which an
    earlier version saved and 'restored', so recomputed dropout drew other masks)."""
    from tensorlab import backend

    fake = _FakeCuPy()
    monkeypatch.setattr(backend, "cupy", fake)
    monkeypatch.setitem(backend._generators, "cuda", _FakeCuPy._Generator(0))
    state = backend.generator_state("cuda")
    assert isinstance(state, np.ndarray) and state.dtype == np.int8
    first = backend.generator("cuda").random(4)
    backend.generator("cuda").random(4)
    backend.set_generator_state(state, "cuda")
    np.testing.assert_array_equal(backend.generator("cuda").random(4), first)
    with pytest.raises(ValueError, match="CuPy generator state is int8 of shape"):
        backend.set_generator_state(state[:3], "cuda")
    monkeypatch.setattr(backend._generators["cuda"], "bit_generator", object())
    with pytest.raises(RuntimeError, match="cannot read the random generator's state"):
        backend.generator_state("cuda")


def test_recomputation_redraws_the_cuda_generator(monkeypatch):
    """A checkpointed function that draws from the GPU's generator draws the same numbers
    again in backward (with the stand-in CuPy above), so its gradient is the plain one."""
    from tensorlab import backend

    monkeypatch.setattr(backend, "cupy", _FakeCuPy())
    monkeypatch.setattr(backend, "cuda_available", lambda: True)

    def fn(x):  # a mask drawn from the "cuda" generator, as dropout on a GPU does
        return (x * tl.tensor(backend.generator("cuda").random(4))).sum()

    grads = []
    for use in (False, True):
        monkeypatch.setitem(backend._generators, "cuda", _FakeCuPy._Generator(0))
        x = t64(np.ones(4))
        (tl.checkpoint(fn, x) if use else fn(x)).backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[1], grads[0])
