"""Optimizers, clipping and schedules: against the update rules worked by hand in plain Python
floats, and against PyTorch when it is installed."""

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nn
import nn.optim as optim
import tensorlab as tl
from nn.optim import (
    SGD,
    Adam,
    AdamW,
    clip_grad_norm_,
    cosine_with_warmup,
    param_groups_for_decay,
)


def param(values) -> nn.Parameter:
    return nn.Parameter(tl.tensor(np.asarray(values, dtype=np.float64), dtype=np.float64))


def set_grad(p, values) -> None:
    p.grad = tl.tensor(np.asarray(values, dtype=np.float64), dtype=np.float64)


# ------------------------------------------------------------------ references in plain floats
def ref_sgd(w, grads, lr, mu=0.0, damp=0.0, wd=0.0, nesterov=False):
    """SGD on a list of floats, one element at a time, written from the formulas."""
    w, buf = list(w), [None] * len(w)
    for g in grads:
        for i in range(len(w)):
            d = g[i] + wd * w[i]
            if mu:
                buf[i] = d if buf[i] is None else mu * buf[i] + (1 - damp) * d
                d = d + mu * buf[i] if nesterov else buf[i]
            w[i] -= lr * d
    return w


def ref_adam(w, grads, lr, b1, b2, eps, wd=0.0, decoupled=False):
    w, m, v = list(w), [0.0] * len(w), [0.0] * len(w)
    for t, g in enumerate(grads, start=1):
        for i in range(len(w)):
            gi = g[i]
            if decoupled:
                w[i] = w[i] - lr * wd * w[i]
            else:
                gi = gi + wd * w[i]
            m[i] = b1 * m[i] + (1 - b1) * gi
            v[i] = b2 * v[i] + (1 - b2) * gi * gi
            m_hat = m[i] / (1 - b1**t)
            v_hat = v[i] / (1 - b2**t)
            w[i] -= lr * m_hat / (math.sqrt(v_hat) + eps)
    return w


W0 = [0.5, -1.5, 2.0, 0.0]
GRADS = [[0.1, -0.2, 0.3, 1.0], [-0.4, 0.5, 0.0, 1.0], [0.2, 0.2, -0.7, -2.0]]


def run(opt_cls, grads=GRADS, **kw):
    p = param(W0)
    opt = opt_cls([p], **kw)
    for g in grads:
        set_grad(p, g)
        opt.step()
    return p.data.tolist()


@pytest.mark.parametrize(
    "kw",
    [
        dict(lr=0.1),
        dict(lr=0.1, weight_decay=0.05),
        dict(lr=0.1, momentum=0.9),
        dict(lr=0.1, momentum=0.9, dampening=0.3),
        dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    ],
)
def test_sgd_matches_hand_rule(kw):
    ref = ref_sgd(
        W0,
        GRADS,
        kw["lr"],
        kw.get("momentum", 0.0),
        kw.get("dampening", 0.0),
        kw.get("weight_decay", 0.0),
        kw.get("nesterov", False),
    )
    np.testing.assert_allclose(run(SGD, **kw), ref, rtol=1e-14, atol=1e-15)


def test_sgd_first_step_by_hand():
    # one step, worked out on paper: w - lr * g
    assert run(SGD, grads=GRADS[:1], lr=0.5) == pytest.approx([0.45, -1.4, 1.85, -0.5])
    # nesterov at step 1: buf = g, d = g + mu * g = 1.9 g
    out = run(SGD, grads=GRADS[:1], lr=0.5, momentum=0.9, nesterov=True)
    assert out == pytest.approx([0.5 - 0.5 * 1.9 * 0.1, -1.5 + 0.5 * 1.9 * 0.2, 2.0 - 0.285, -0.95])


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adam_matches_hand_rule(wd):
    kw = dict(lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=wd)
    ref = ref_adam(W0, GRADS, 0.01, 0.9, 0.99, 1e-8, wd=wd, decoupled=False)
    np.testing.assert_allclose(run(Adam, **kw), ref, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("wd", [0.0, 0.1, 0.5])
def test_adamw_matches_hand_rule(wd):
    kw = dict(lr=0.01, betas=(0.8, 0.9), eps=1e-8, weight_decay=wd)
    ref = ref_adam(W0, GRADS, 0.01, 0.8, 0.9, 1e-8, wd=wd, decoupled=True)
    np.testing.assert_allclose(run(AdamW, **kw), ref, rtol=1e-13, atol=1e-15)


def test_adam_first_step_is_lr_times_sign():
    # with bias correction, step 1 is m̂ / √v̂ = g / |g|: every weight moves by lr (eps aside)
    out = run(Adam, grads=[[0.1, -0.2, 0.3, 1e-3]], lr=0.01, eps=0.0)
    np.testing.assert_allclose(out, [0.49, -1.49, 1.99, -0.01], rtol=1e-12)


def test_adamw_decay_is_decoupled():
    # a zero gradient: Adam's coupled decay is normalised (moves by ~lr), AdamW's is lr·λ·w
    p = param([2.0])
    AdamW([p], lr=0.1, weight_decay=0.5, eps=0.0)
    opt = AdamW([p], lr=0.1, weight_decay=0.5)
    set_grad(p, [0.0])
    opt.step()
    assert float(p.data[0]) == pytest.approx(2.0 * (1 - 0.1 * 0.5))
    q = param([2.0])
    opt = Adam([q], lr=0.1, weight_decay=0.5, eps=0.0)
    set_grad(q, [0.0])
    opt.step()
    assert float(q.data[0]) == pytest.approx(2.0 - 0.1)


@pytest.mark.parametrize("cls", [Adam, AdamW])
def test_on_a_gpu_the_fused_step_is_one_launch_for_all_parameters(cls, monkeypatch):
    """Parameters of several sizes (one below a GPU block, several blocks, empty), dtypes and
    step counts (one has no gradient in some steps) on CuPy emulated by NumPy, which runs the
    one-launch kernel as the CUDA code does (tests/fake_cupy.py): bitwise the CPU's numbers
    (the same formula, run one parameter at a time on NumPy), and one kernel (plus its table)
    for each (dtypes, step count) group."""
    from tensorlab.fused import CHUNK
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    rng = np.random.default_rng(3)
    shapes = [(3,), (2, CHUNK + 5), (0, 4), (7, 5), (CHUNK,)]
    dtypes = ["float32", "float32", "float32", "float64", "float32"]
    w0 = [rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]
    hyper = dict(lr=3e-2, betas=(0.9, 0.99), eps=1e-8)
    gpu = [nn.Parameter(tl.tensor(w.copy(), device="cuda")) for w in w0]
    cpu = [nn.Parameter(tl.tensor(w.copy(), device="cpu")) for w in w0]
    opts = []
    for params in (gpu, cpu):
        groups = [{"params": params[:3], "weight_decay": 0.1}, {"params": params[3:]}]
        opts.append(cls(groups, weight_decay=0.0, **hyper))
    for step in range(4):
        grads = [rng.standard_normal(s).astype(d) for s, d in zip(shapes, dtypes)]
        for i, g in enumerate(grads):
            skip = i == 0 and step == 1  # the first parameter misses a step: its t lags
            gpu[i].grad = None if skip else tl.tensor(g.copy(), device="cuda")
            cpu[i].grad = None if skip else tl.tensor(g.copy(), device="cpu")
        fake_cupy.KERNELS.clear()
        opts[0].step()
        opts[1].step()
        # group 0: one launch (float32), from step 2 on two (the first parameter's t lags);
        # group 1: float64 and float32, a launch each. The first step also makes m and v.
        launches = 3 if step < 2 else 4
        want = {"fused each adam_kernel": launches, "asarray": launches}
        assert fake_cupy.KERNELS == want | ({"zeros_like": 10} if step == 0 else {})
    for p, q in zip(gpu, cpu):
        np.testing.assert_array_equal(p.data.get(), q.data)
        for k in "mv":
            np.testing.assert_array_equal(opts[0].state[p][k].get(), opts[1].state[q][k])
        assert opts[0].state[p]["step"] == opts[1].state[q]["step"]
    assert opts[0].state[gpu[0]]["step"] == 3


def test_step_updates_in_place_and_bumps_version():
    for cls, kw in [(SGD, dict(lr=0.1, momentum=0.9)), (Adam, {}), (AdamW, {})]:
        p = param([1.0, 2.0])
        array, v0 = p.data, p._version
        opt = cls([p], **kw)
        set_grad(p, [1.0, 1.0])
        opt.step()
        assert p.data is array and p._version == v0 + 1
        assert p.grad.data.tolist() == [1.0, 1.0]  # the gradient itself is not modified


def test_params_without_grad_are_skipped():
    a, b = param([1.0]), param([1.0])
    opt = Adam([a, b], lr=0.1)
    set_grad(a, [1.0])
    opt.step()
    assert b.data[0] == 1.0 and b not in opt.state and opt.state[a]["step"] == 1


def test_float32_params_keep_their_dtype():
    p = nn.Parameter(tl.ones((3, 2)))
    opt = AdamW([p], lr=0.1)
    p.grad = tl.ones((3, 2))
    opt.step()
    assert p.dtype == np.float32 and opt.state[p]["m"].dtype == np.float32


# ------------------------------------------------------------------ against PyTorch
TORCH_CASES = [
    ("SGD", dict(lr=0.05)),
    ("SGD", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)),
    ("Adam", dict(lr=0.01, betas=(0.9, 0.95), eps=1e-6)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, betas=(0.9, 0.95), weight_decay=0.1)),
    ("AdamW", dict(lr=0.003)),
]


@pytest.mark.parametrize("name,kw", TORCH_CASES)
@given(seed=st.integers(0, 2**32 - 1))
def test_matches_torch(name, kw, seed):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(seed)
    shapes = [(3, 4), (4,), ()]
    init = [rng.standard_normal(s) for s in shapes]
    ours = [param(w.copy()) for w in init]
    theirs = [torch.tensor(w.copy(), requires_grad=True) for w in init]
    opt = getattr(nn.optim, name)(ours, **kw)
    topt = getattr(torch.optim, name)(theirs, **kw)
    for step in range(6):
        for i, (p, tp) in enumerate(zip(ours, theirs)):
            if step == 2 and i == 1:  # a missing gradient: the parameter skips this step
                p.grad, tp.grad = None, None
                continue
            g = rng.standard_normal(shapes[i])
            set_grad(p, g)
            tp.grad = torch.tensor(g)
        opt.step()
        topt.step()
    for p, tp in zip(ours, theirs):
        np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-12, atol=1e-14)


def test_clip_grad_norm_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(s).astype(np.float32) for s in [(5, 3), (3,), (7,)]]
    ours = [nn.Parameter(tl.zeros(g.shape)) for g in grads]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for p, tp, g in zip(ours, theirs, grads):
        p.grad, tp.grad = tl.tensor(g.copy()), torch.tensor(g.copy())
    n = clip_grad_norm_(ours, 1.0)
    tn = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert n == pytest.approx(float(tn), rel=1e-6)
    for p, tp in zip(ours, theirs):
        np.testing.assert_allclose(p.grad.data, tp.grad.numpy(), rtol=1e-6)


# ------------------------------------------------------------------ param groups
class Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(tl.ones((3, 2)))
        self.bias = nn.Parameter(tl.ones(2))
        self.gain = nn.Parameter(tl.ones(2))
        self.frozen = nn.Parameter(tl.ones((2, 2)), requires_grad=False)


def test_param_groups_for_decay():
    m = Tiny()
    groups = param_groups_for_decay(m, 0.1)
    assert [p for p in groups[0]["params"]] == [m.weight] and groups[0]["weight_decay"] == 0.1
    assert groups[1]["params"] == [m.bias, m.gain] and groups[1]["weight_decay"] == 0.0


def test_no_decay_group_is_not_decayed():
    m = Tiny()
    opt = AdamW(param_groups_for_decay(m, 0.5), lr=0.1)
    for p in (m.weight, m.bias, m.gain):
        p.grad = tl.zeros(p.shape)  # zero gradient: only the decay can move a weight
    opt.step()
    np.testing.assert_allclose(m.weight.data, 1 - 0.1 * 0.5)
    assert m.bias.data.tolist() == [1.0, 1.0] and m.gain.data.tolist() == [1.0, 1.0]


def test_groups_have_their_own_hyperparameters():
    a, b = param([1.0]), param([1.0])
    opt = SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1)
    set_grad(a, [1.0])
    set_grad(b, [1.0])
    opt.step()
    assert float(a.data[0]) == pytest.approx(0.9) and float(b.data[0]) == pytest.approx(0.5)
    assert opt.param_groups[1]["momentum"] == 0.0  # filled from the defaults


def test_bad_param_lists():
    p = param([1.0])
    with pytest.raises(ValueError, match="empty"):
        SGD([], lr=0.1)
    with pytest.raises(ValueError, match="more than one param group"):
        SGD([{"params": [p]}, {"params": [p]}], lr=0.1)
    with pytest.raises(ValueError, match="non-leaf"):
        SGD([p * 2], lr=0.1)
    with pytest.raises(ValueError, match="nesterov"):
        SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        Adam([p], betas=(0.9, 1.0))


BAD_NUMBERS = [-0.1, float("nan"), float("inf"), True, "0.1", None]


HYPERPARAMETERS = [(SGD, n) for n in ("lr", "momentum", "dampening", "weight_decay")] + [
    (cls, n) for cls in (Adam, AdamW) for n in ("lr", "eps", "weight_decay")
]


@pytest.mark.parametrize("cls, name", HYPERPARAMETERS)
@pytest.mark.parametrize("bad", BAD_NUMBERS, ids=repr)
def test_bad_hyperparameters_are_refused_in_defaults_and_in_groups(cls, name, bad):
    """A learning rate, decay, ε, momentum or dampening that is negative, NaN, infinite, a
    bool or not a number is refused by name, given as a default or in one param group (a NaN
    learning rate would make every weight NaN at the first step, silently)."""
    p, q = param([1.0]), param([2.0])
    message = f"{cls.__name__}: {name}={bad!r}: must be a finite number in [0, ∞)"
    if not (bad is None and name == "weight_decay" and cls is not SGD):  # None: the default
        with pytest.raises(ValueError, match=re.escape(message)):
            cls([p], **{name: bad})
    with pytest.raises(ValueError, match=re.escape(message)):
        cls([{"params": [p]}, {"params": [q], name: bad}])


@pytest.mark.parametrize("cls", [Adam, AdamW])
@pytest.mark.parametrize(
    "betas", [(0.9, 1.0), (1.0, 0.9), (-0.1, 0.9), (0.9, float("nan")), (0.9,), (0.9, "x")]
)
def test_bad_betas_are_refused_in_defaults_and_in_groups(cls, betas):
    rule = (
        "must be two numbers in [0, 1)" if len(betas) != 2 else "must be a finite number in [0, 1)"
    )
    with pytest.raises(ValueError, match=rf"{cls.__name__}: betas.*: {re.escape(rule)}"):
        cls([param([1.0])], betas=betas)
    with pytest.raises(ValueError, match="betas"):
        cls([{"params": [param([1.0])], "betas": betas}])


def test_defaults_are_pytorchs():
    """The defaults of PyTorch 2's optimizers (SGD and Adam lr 1e-3, Adam's betas
    (0.9, 0.999) and ε 1e-8, weight decay 0 for Adam and 1e-2 for AdamW)."""
    p = param([1.0])
    sgd = SGD([p]).defaults
    assert sgd == dict(lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False)
    adam = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    assert Adam([p]).defaults == adam
    assert AdamW([p]).defaults == {**adam, "weight_decay": 1e-2}


def test_schedule_bounds():
    """The cosine schedule refuses a negative warmup and a total below the warmup."""
    with pytest.raises(ValueError, match="warmup=-1"):
        cosine_with_warmup(0, -1, 10, 1.0, 0.1)
    with pytest.raises(ValueError, match="warmup=5, total=4"):
        cosine_with_warmup(0, 5, 4, 1.0, 0.1)


def test_repr_lists_each_group_and_its_hyperparameters():
    a, b = param([1.0]), param([2.0])
    text = repr(SGD([{"params": [a]}, {"params": [b], "lr": 0.5}], lr=0.1))
    assert text.splitlines() == [
        "SGD (",
        "  group 0: 1 params, lr=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, "
        "nesterov=False",
        "  group 1: 1 params, lr=0.5, momentum=0.0, dampening=0.0, weight_decay=0.0, "
        "nesterov=False",
        ")",
    ]


def test_edge_hyperparameters_are_accepted():
    """lr = 0, β = 0, ε = 0 and the other edges of the valid ranges are accepted."""
    p = param([1.0])
    SGD([p], lr=0.0, momentum=0.0, dampening=0.0, weight_decay=0.0)
    Adam([p], lr=0.0, betas=(0.0, 0.0), eps=0.0, weight_decay=0.0)
    AdamW([p], lr=np.float32(1e-3), betas=(np.float64(0.9), 0.999))
    assert cosine_with_warmup(0, 0, 1, 1.0, 0.0) == 1.0  # no warmup: the peak at once


def test_zero_grad():
    p = param([1.0, 2.0])
    opt = SGD([p], lr=0.1)
    set_grad(p, [3.0, 4.0])
    g = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is g and p.grad.data.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert p.grad is None


# ------------------------------------------------------------------ clipping
def test_clip_grad_norm_value_and_scaling():
    a, b = param([0.0, 0.0]), param([0.0])
    set_grad(a, [3.0, 0.0])
    set_grad(b, [4.0])
    norm = clip_grad_norm_([a, b], max_norm=1.0)
    assert norm == pytest.approx(5.0)
    np.testing.assert_allclose(a.grad.data, [0.6, 0.0], rtol=1e-5)
    np.testing.assert_allclose(b.grad.data, [0.8], rtol=1e-5)
    assert clip_grad_norm_([a, b], max_norm=10.0) == pytest.approx(1.0, rel=1e-5)
    np.testing.assert_allclose(a.grad.data, [0.6, 0.0], rtol=1e-5)  # below max: unchanged


@pytest.mark.parametrize("bad", [-1.0, float("nan"), True, "1", None], ids=repr)
def test_clip_grad_norm_refuses_a_bad_max_norm(bad):
    """A negative max_norm would flip every gradient's sign and a NaN one make them NaN:
    both are refused by name, before any gradient is touched."""
    p = param([3.0, 4.0])
    set_grad(p, [3.0, 4.0])
    with pytest.raises(
        ValueError,
        match=re.escape(f"clip_grad_norm_: max_norm={bad!r}: must be a number in [0, ∞]"),
    ):
        clip_grad_norm_([p], bad)
    np.testing.assert_array_equal(tl.tensor(p.grad).numpy(), [3.0, 4.0])


def test_clip_grad_norm_takes_zero_and_infinity():
    """max_norm = 0 zeroes the gradients; ∞ leaves them as they are (no clipping)."""
    p = param([3.0, 4.0])
    set_grad(p, [3.0, 4.0])
    assert clip_grad_norm_([p], math.inf) == pytest.approx(5.0)
    np.testing.assert_array_equal(tl.tensor(p.grad).numpy(), [3.0, 4.0])
    assert clip_grad_norm_([p], 0) == pytest.approx(5.0)
    np.testing.assert_array_equal(tl.tensor(p.grad).numpy(), [0.0, 0.0])


def test_clip_grad_norm_accumulates_in_float64():
    # 10^6 float32 entries of 1e-3: a float32 running sum would drift; float64 gives exactly 1.0
    p = nn.Parameter(tl.zeros(10**6))
    p.grad = tl.full((10**6,), 1e-3)
    norm = clip_grad_norm_(p, max_norm=100.0)
    expected = math.sqrt(10**6 * float(np.float32(1e-3)) ** 2)
    assert norm == pytest.approx(expected, rel=1e-12)


@given(st.lists(st.floats(-10, 10), min_size=1, max_size=8), st.floats(0.01, 5))
def test_clipped_norm_is_at_most_max(values, max_norm):
    """Clipped gradients have a norm of at most max_norm, and gradients whose norm is below
    it (by more than clipping's ε) are left exactly as they were, never scaled up."""
    p = param([0.0] * len(values))
    set_grad(p, values)
    before = tl.tensor(p.grad).numpy().copy()
    norm = clip_grad_norm_([p], max_norm)
    assert np.linalg.norm(p.grad.data) <= max_norm * (1 + 1e-9)
    if norm + 1e-6 <= max_norm:
        np.testing.assert_array_equal(tl.tensor(p.grad).numpy(), before)


def test_clip_grad_norm_leaves_a_norm_just_below_max_alone():
    """A norm of 5 under max_norm 6 (factor 1.2, above 1) is not scaled."""
    p = param([0.0, 0.0])
    set_grad(p, [3.0, 4.0])
    assert clip_grad_norm_([p], 6.0) == pytest.approx(5.0)
    np.testing.assert_array_equal(tl.tensor(p.grad).numpy(), [3.0, 4.0])


def test_clip_grad_norm_of_no_gradients_is_zero():
    p = param([1.0, 2.0])  # no backward yet: no gradient
    assert clip_grad_norm_([p], 1.0) == 0.0
    assert p.grad is None


@given(
    st.lists(st.integers(0, 9), min_size=1, max_size=12),
    st.integers(0, 2**32 - 1),
)
def test_clip_grad_norm_is_the_norm_of_all(sizes, seed):
    """Gradients of any sizes (empty ones and 0-d ones among them): the norm is the float64
    norm of all entries (to 1e-12 relative: the sums differ in order only) and every gradient
    is scaled by the same factor."""
    rng = np.random.default_rng(seed)
    params = [param(np.zeros(n) if n else 0.0) for n in sizes]  # size 0 means a 0-d parameter
    values = [rng.standard_normal(p.shape).astype(np.float32) for p in params]
    for p, v in zip(params, values):
        p.grad = tl.tensor(v.copy())  # scaled in place below; v keeps the values
    norm = clip_grad_norm_(params, max_norm=0.5)
    flat = np.concatenate([v.ravel() for v in values]).astype(np.float64)
    assert norm == pytest.approx(math.sqrt(flat @ flat), rel=1e-12, abs=1e-300)
    scale = min(1.0, 0.5 / (norm + 1e-6))
    for p, v in zip(params, values):
        np.testing.assert_allclose(p.grad.numpy(), v * np.float32(scale), rtol=1e-6, atol=0)


def test_on_a_gpu_clipping_launches_a_few_kernels_not_a_few_per_tensor(monkeypatch):
    """Ten gradients on CuPy emulated by NumPy (tests/fake_cupy.py counts launches): their norm
    is one square_kernel.each_sum over all of them (the copy of its table of addresses, the
    kernel, the sum of its blocks' partial sums: three launches, where a float64 copy, a dot
    and a sum per tensor would be thirty); clipping adds one scaling kernel over all of them
    (scale_kernel.each) and the copy of its table."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    params = [nn.Parameter(tl.zeros(n, device="cuda")) for n in range(1, 11)]
    for p in params:
        p.grad = tl.ones(p.shape, device="cuda")
    fake_cupy.KERNELS.clear()
    norm = clip_grad_norm_(params, max_norm=100.0)
    assert norm == pytest.approx(math.sqrt(55)) and sum(fake_cupy.KERNELS.values()) == 3
    assert fake_cupy.KERNELS["fused each_sum square_kernel"] == 1
    fake_cupy.KERNELS.clear()
    clip_grad_norm_(params, max_norm=1.0)
    assert sum(fake_cupy.KERNELS.values()) == 3 + 2, dict(fake_cupy.KERNELS)
    assert fake_cupy.KERNELS["fused each scale_kernel"] == 1
    for p in params:  # every gradient scaled by 1/√55 (to float32 rounding of the factor)
        np.testing.assert_allclose(p.grad.data.get(), 1 / math.sqrt(55), rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_on_a_gpu_the_sum_of_squares_is_the_float64_sum_of_every_square(dtype, monkeypatch):
    """Gradients of sizes around the GPU's block of CHUNK numbers (empty, 0-d, one block, a
    partial last block, several), the sum of squares of the one-launch kernel against NumPy's
    run of the same kernel, array by array: the same to 1e-12 (the float64 sums differ in
    order only). Entries of 2e19 overflow a float32 square (3.4e38) but not the float64 one. A
    strided gradient is summed on its own; an inf anywhere makes the total inf."""
    from tensorlab.fused import CHUNK
    from tests import fake_cupy

    rng = np.random.default_rng(0)
    sizes = [(0,), (), (3,), (CHUNK,), (2, CHUNK // 2 + 3), (3 * CHUNK - 7,), (5, 7)]
    values = [rng.standard_normal(s).astype(dtype) for s in sizes]
    if dtype != "float16":
        values[2][1] = 2e19
    want = float(optim.sum_of_squares(values))
    fake_cupy.install(monkeypatch)
    on_gpu = [tl.tensor(v, device="cuda").data for v in values]
    on_gpu[-1] = tl.tensor(values[-1].T.copy(), device="cuda").data.T  # (5, 7), strided
    fake_cupy.KERNELS.clear()
    got = optim.sum_of_squares(on_gpu)
    assert got.shape == () and got.dtype == np.float64
    assert float(got) == pytest.approx(want, rel=1e-12)
    assert fake_cupy.KERNELS["fused each_sum square_kernel"] == 1
    on_gpu[4].ravel()[CHUNK + 5] = np.inf
    assert float(optim.sum_of_squares(on_gpu)) == np.inf


# ------------------------------------------------------------------ schedules
def test_cosine_with_warmup_landmarks():
    lr, mn, warm, total = 1.0, 0.1, 10, 110
    assert cosine_with_warmup(0, warm, total, lr, mn) == pytest.approx(1 / 11)  # never 0
    assert cosine_with_warmup(warm, warm, total, lr, mn) == pytest.approx(lr)  # the peak
    assert cosine_with_warmup(60, warm, total, lr, mn) == pytest.approx((lr + mn) / 2)
    assert cosine_with_warmup(total, warm, total, lr, mn) == mn
    assert cosine_with_warmup(10 * total, warm, total, lr, mn) == mn
    assert cosine_with_warmup(0, 0, 5, lr, mn) == lr  # no warmup: start at the peak


@given(st.integers(0, 50), st.integers(0, 200))
def test_cosine_with_warmup_shape(warmup, extra):
    total = warmup + extra
    lrs = [cosine_with_warmup(s, warmup, total, 3e-4, 3e-5) for s in range(total + 3)]
    assert all(0 < x <= 3e-4 for x in lrs)  # the warmup starts near 0, below min_lr
    assert all(x >= 3e-5 - 1e-15 for x in lrs[warmup:])
    assert all(a < b for a, b in zip(lrs[:warmup], lrs[1:warmup]))  # rising
    if extra > 0:
        assert lrs[warmup] == pytest.approx(3e-4)  # the peak
    assert all(a >= b - 1e-15 for a, b in zip(lrs[warmup:], lrs[warmup + 1 :]))  # then falling


# ------------------------------------------------------------------ optimizer state_dict
def make_problem(seed=0):
    """A tiny least-squares problem: parameters and a deterministic gradient function."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((8, 3)).astype(np.float32)
    y = rng.standard_normal((8, 2)).astype(np.float32)
    w = nn.Parameter(tl.tensor(rng.standard_normal((3, 2)).astype(np.float32)))
    b = nn.Parameter(tl.zeros(2))

    def grads():
        loss = (((tl.tensor(x) @ w + b) - tl.tensor(y)) ** 2).mean()
        w.grad = b.grad = None
        loss.backward()

    return [w, b], grads


@pytest.mark.parametrize("cls,kw", [(AdamW, dict(lr=0.05)), (SGD, dict(lr=0.05, momentum=0.9))])
def test_resume_from_state_dict_is_bit_identical(cls, kw):
    params, grads = make_problem()
    opt = cls([{"params": params[:1]}, {"params": params[1:], "weight_decay": 0.0}], **kw)
    for _ in range(10):
        grads()
        opt.step()
    straight = [p.data.copy() for p in params]

    params2, grads2 = make_problem()
    opt2 = cls([{"params": params2[:1]}, {"params": params2[1:], "weight_decay": 0.0}], **kw)
    for _ in range(4):
        grads2()
        opt2.step()
    saved_params = [p.data.copy() for p in params2]
    saved = opt2.state_dict()
    # a fresh run: new parameters with the saved values, a new optimizer loaded from the dict
    params3, grads3 = make_problem()
    with tl.no_grad():
        for p, a in zip(params3, saved_params):
            p.copy_(a)
    opt3 = cls([{"params": params3[:1]}, {"params": params3[1:]}], lr=123.0)
    opt3.load_state_dict(saved)
    assert opt3.param_groups[0]["lr"] == kw["lr"] and opt3.param_groups[1]["weight_decay"] == 0.0
    for _ in range(6):
        grads3()
        opt3.step()
    for a, p in zip(straight, params3):
        np.testing.assert_array_equal(a, p.data)


def test_state_dict_is_detached_copies():
    params, grads = make_problem()
    opt = Adam(params, lr=0.1)
    grads()
    opt.step()
    sd = opt.state_dict()
    assert sd["state"][0]["step"] == 1 and sd["param_groups"][0]["params"] == [0, 1]
    sd["state"][0]["m"][...] = 99.0
    assert not np.any(opt.state[params[0]]["m"] == 99.0)


def test_load_state_dict_errors():
    params, grads = make_problem()
    opt = Adam(params, lr=0.1)
    grads()
    opt.step()
    sd = opt.state_dict()
    with pytest.raises(ValueError, match="1 param groups.*2"):
        Adam([{"params": params[:1]}, {"params": params[1:]}]).load_state_dict(sd)
    with pytest.raises(ValueError, match="2 parameters in the state but 1"):
        Adam(params[:1]).load_state_dict(sd)
    other = [nn.Parameter(tl.zeros((2, 2))), nn.Parameter(tl.zeros(2))]
    with pytest.raises(ValueError, match=r"parameter 0 has shape \(3, 2\).*\(2, 2\)"):
        Adam(other).load_state_dict(sd)
