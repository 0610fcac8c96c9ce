"""nn.DataParallel: the batch split over threads gives the whole batch's loss and gradient,
through the plain step (``_, loss = model(x, y); loss.backward(); optimizer.step()``)."""

import threading

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nn
import nn.functional as F
import tensorlab as tl
from nn import data_parallel


class MLP(nn.Module):
    """A float64 two-layer classifier with optional dropout: small, but every piece of the
    mechanism (shared weights, a mean loss, random draws) is in it."""

    def __init__(self, d_in=5, d_hidden=7, classes=3, p=0.0):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden, dtype=np.float64)
        self.fc2 = nn.Linear(d_hidden, classes, dtype=np.float64)
        self.drop = nn.Dropout(p)

    def forward(self, x, y):
        logits = self.fc2(self.drop(self.fc1(x).relu()))
        return logits, F.cross_entropy(logits, y)


class Fn(nn.Module):
    """A module around a function of the batch that returns a mean loss."""

    def __init__(self, fn, params=()):
        super().__init__()
        self.fn = fn
        for i, p in enumerate(params):
            setattr(self, f"p{i}", nn.Parameter(p) if not isinstance(p, nn.Parameter) else p)

    def forward(self, *batch):
        return None, self.fn(*batch)


def parallel_backward(module, batch, threads):
    """The data-parallel step's forward and backward; returns the loss."""
    _, loss = nn.DataParallel(module, threads)(*batch)
    loss.backward()
    return loss.item()


def batch(n, seed=0, d_in=5, classes=3):
    rng = np.random.default_rng(seed)
    return tl.tensor(rng.standard_normal((n, d_in))), tl.tensor(rng.integers(0, classes, n))


def grads(model):
    return {k: p.grad.numpy().copy() for k, p in model.named_parameters()}


@given(n=st.integers(1, 9), threads=st.integers(1, 4))
def test_split_batch_matches_whole_batch(n, threads):
    """Loss and gradients equal one backward over the whole batch, for any batch size and
    thread count (pieces of unequal size included). Float64, so the only difference is the
    order of additions: rtol 1e-12 is ~10⁴ ulps of headroom for sums of a few terms."""
    tl.manual_seed(0)
    model = MLP()
    x, y = batch(n)
    _, whole = model(x, y)
    whole.backward()
    expected = grads(model)

    model.zero_grad()
    loss = parallel_backward(model, (x, y), threads)
    assert loss == pytest.approx(whole.item(), rel=1e-12)
    for k, g in grads(model).items():
        np.testing.assert_allclose(g, expected[k], rtol=1e-12, atol=1e-15, err_msg=k)


def test_float32_gpt_matches_whole_batch():
    """The real use: a float32 GPT. rtol 1e-4: float32 sums in another order differ by a few
    ulps (1e-7 each) per addition, over the few hundred additions of a reduction."""
    from gpt.config import GPTConfig
    from gpt.model import GPT

    tl.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, d_model=32))
    rng = np.random.default_rng(1)
    x, y = (tl.tensor(rng.integers(0, 11, (6, 8))) for _ in range(2))
    _, whole = model(x, y)
    whole.backward()
    expected = grads(model)
    model.zero_grad()
    loss = parallel_backward(model, (x, y), 2)
    assert loss == pytest.approx(whole.item(), rel=1e-5)
    # atol is relative to the largest gradient of the model, not of each parameter: the key
    # bias's gradient is 0 in exact arithmetic (a key bias adds q·b_k to a whole row of
    # scores, which the softmax ignores), so all it has is rounding noise from the others.
    scale = max(np.abs(g).max() for g in expected.values())
    for k, g in grads(model).items():
        np.testing.assert_allclose(g, expected[k], rtol=1e-4, atol=1e-6 * scale, err_msg=k)


def test_adds_to_existing_grads_like_backward():
    tl.manual_seed(0)
    model = MLP()
    x, y = batch(6)
    model(x, y)[1].backward()
    once = grads(model)
    parallel_backward(model, (x, y), 2)
    for k, g in grads(model).items():
        np.testing.assert_allclose(g, 2 * once[k], rtol=1e-12, err_msg=k)


def test_gradients_do_not_share_memory():
    """``a + b`` sends one gradient array to both inputs; stored as two .grads it must be two
    arrays, or an in-place update of one (gradient clipping) would change the other."""
    a = nn.Parameter(np.ones(3))
    b = nn.Parameter(np.ones(3))
    x = tl.tensor(np.arange(4.0).reshape(4, 1))
    m = Fn(lambda x: ((a + b) * x).sum() / len(x), [a, b])
    parallel_backward(m, (x,), 2)
    a.grad.data *= 0
    np.testing.assert_allclose(b.grad.numpy(), np.full(3, 1.5))


def test_unused_parameter_keeps_no_grad():
    tl.manual_seed(0)
    model = MLP()
    model.spare = nn.Parameter(np.ones(2))
    parallel_backward(model, batch(4), 2)
    assert model.spare.grad is None and model.fc1.W.grad is not None


def test_dropout_is_reproducible_and_differs_per_piece():
    """Each piece draws from a generator seeded, in piece order, from the shared one: the same
    seed gives the same gradients however the threads were scheduled."""
    runs = []
    for _ in range(3):
        tl.manual_seed(5)
        model = MLP(p=0.5)
        parallel_backward(model, batch(8), 2)
        runs.append(grads(model))
    for k in runs[0]:
        np.testing.assert_array_equal(runs[0][k], runs[1][k], err_msg=k)
        np.testing.assert_array_equal(runs[0][k], runs[2][k], err_msg=k)

    masks = []

    def record(x):  # the dropout masks the two pieces drew, for identical inputs
        masks.append(F.dropout(x, 0.5, True).numpy() != 0)
        return x.sum() * 0.0

    tl.manual_seed(5)
    w = nn.Parameter(np.ones(64))
    parallel_backward(Fn(lambda x: record(x * w), [w]), (tl.tensor(np.ones((2, 64))),), 2)
    assert len(masks) == 2 and not np.array_equal(masks[0], masks[1])


def test_each_thread_records_its_own_graph():
    """Grad mode is per thread: a worker's backward (which switches recording off while it
    runs) must not stop the other pieces' forwards from recording."""
    seen = []

    def loss_fn(x):
        seen.append((threading.get_ident(), tl.is_grad_enabled()))
        return (w * x).sum() / len(x)

    w = nn.Parameter(np.ones(3))
    for _ in range(20):
        w.grad = None
        parallel_backward(Fn(loss_fn, [w]), (tl.tensor(np.ones((4, 3))),), 4)
        np.testing.assert_allclose(w.grad.numpy(), np.ones(3))
    assert all(enabled for _, enabled in seen)
    assert len({ident for ident, _ in seen}) > 1  # the work really ran on several threads


def test_error_in_a_worker_reaches_the_caller():
    def loss_fn(x):
        if x.shape[0] and x.numpy()[0, 0] > 2:  # only the second piece fails
            raise ValueError("bad piece")
        return x.sum()

    x = tl.tensor(np.arange(12.0).reshape(4, 3))
    with pytest.raises(ValueError, match="bad piece"):
        parallel_backward(Fn(loss_fn), (x,), 2)


def test_bad_arguments_are_named():
    x, y = batch(4)
    with pytest.raises(ValueError, match="entry 0 has 4, entry 1 has 3"):
        parallel_backward(MLP(), (x, y[:3]), 2)
    with pytest.raises(ValueError, match="threads must be ≥ 1, got 0"):
        parallel_backward(MLP(), (x, y), 0)
    with pytest.raises(ValueError, match="batch is empty"):
        parallel_backward(MLP(), (), 2)
    with pytest.raises(ValueError, match="no examples"):
        parallel_backward(MLP(), (x[:0], y[:0]), 2)


def test_create_graph_is_refused_by_name():
    model = MLP()
    _, loss = nn.DataParallel(model, 2)(*batch(4))
    with pytest.raises(RuntimeError, match="create_graph=True is not supported"):
        tl.grad(loss, list(model.parameters()), create_graph=True)


def test_evaluation_records_no_graph_on_any_thread():
    """Under no_grad (nn.evaluating) the workers record nothing either: grad mode is per
    thread, and the wrapper hands the caller's to them."""
    tl.manual_seed(0)
    model = MLP()
    recorded = []

    def loss_fn(x, y):
        loss = model(x, y)[1]
        recorded.append(loss.requires_grad)
        return loss

    dp = nn.DataParallel(Fn(loss_fn), threads=3)
    batches = [batch(6, seed=s) for s in range(4)]
    with nn.evaluating(dp):
        losses = [dp(x, y)[1] for x, y in batches]
    with tl.no_grad():
        expected = [model(x, y)[1].item() for x, y in batches]
    assert [loss.item() for loss in losses] == pytest.approx(expected, rel=1e-12)
    assert not any(loss.requires_grad for loss in losses)
    assert recorded == [False] * 12
    assert tl.is_grad_enabled()


def test_blas_threads_per_piece_never_oversubscribes():
    n = data_parallel.cores()
    assert n >= 1
    assert data_parallel.blas_threads_per_piece(1) == n
    for pieces in range(1, 2 * n + 2):
        per = data_parallel.blas_threads_per_piece(pieces)
        assert per >= 1 and (per * pieces <= n or per == 1)


@pytest.mark.parametrize(
    "make_opt",
    [
        lambda ps, t: nn.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, threads=t),
        lambda ps, t: nn.optim.Adam(ps, lr=1e-2, weight_decay=0.1, threads=t),
        lambda ps, t: nn.optim.SGD(
            ps, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=0.1, threads=t
        ),
    ],
)
@pytest.mark.parametrize("threads", [2, 3])
def test_threaded_optimizer_step_is_the_serial_step_bit_for_bit(make_opt, threads):
    """Optimizer(threads=N) shares the updates out; each parameter's update is independent,
    so the threads' order cannot matter."""
    shapes = [(17, 5), (3,), (40,), (2, 2, 2), (), (9, 9)]
    runs = []
    for parallel in (False, True):
        # the same start for both runs
        params = [
            tl.tensor(np.arange(np.prod(s)).reshape(s) / 7 - 1, requires_grad=True) for s in shapes
        ]
        opt = make_opt(params, threads if parallel else 1)
        for it in range(4):
            for i, p in enumerate(params):
                p.grad = tl.tensor(np.sin(np.arange(p.size).reshape(p.shape) + it + i))
            params[1].grad = None if it == 2 else params[1].grad  # a parameter without a grad
            opt.step()
        runs.append([p.numpy().copy() for p in params])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
