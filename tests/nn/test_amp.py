"""Mixed precision on the CPU: tl.autocast's dtype plumbing (float32 master weights, half
activations, float32 gradients), the loss scaler's logic (overflow skips and halves, growth
after N good steps), bfloat16 round trips, and a bfloat16 training run that learns like
float32's."""

from __future__ import annotations

import numpy as np
import pytest

import nn
import nn.functional as F
import tensorlab as tl
from nn.amp import GradScaler
from nn.linear import LinearFn
from nn.optim import SGD

pytestmark = pytest.mark.skipif(tl.bfloat16 is None, reason="bfloat16 needs ml_dtypes")
HALVES = ["bfloat16", "float16"]


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 3)

    def forward(self, x, seen: dict | None = None):
        h = F.gelu(self.fc1(x))
        if seen is not None:
            seen["hidden"] = h.dtype
            seen["norm"] = self.norm(h).dtype
        return self.fc2(self.norm(h))


@pytest.mark.parametrize("half", HALVES)
def test_autocast_runs_products_in_half_with_float32_masters(half):
    tl.manual_seed(0)
    model = MLP()
    x = tl.randn(5, 8)
    seen = {}
    with tl.autocast(half):
        logits = model(x, seen)
        loss = F.cross_entropy(logits, np.array([0, 1, 2, 0, 1]))
    assert seen == {"hidden": np.dtype(half), "norm": np.dtype(half)}  # activations in half
    assert logits.dtype == np.dtype(half) and loss.dtype == np.float32  # the loss in float32
    loss.backward()
    for name, p in model.named_parameters():
        assert p.dtype == np.float32, name  # the master weights stay float32
        assert p.grad is not None and p.grad.dtype == np.float32, name  # and get float32 grads
    # Outside the block (and in the backward) nothing is cast.
    assert model(x).dtype == np.float32


@pytest.mark.parametrize("half, rtol", [("bfloat16", 3e-2), ("float16", 4e-3)])
def test_autocast_gradients_match_float32(half, rtol):
    """The same model's gradients in half precision and float32 agree to a few times the
    half type's spacing (bfloat16 2⁻⁷ = 7.8e-3, float16 2⁻¹⁰ = 9.8e-4), relative to the
    gradient's largest entry: every product rounds its inputs once, and sums stay float32."""
    tl.manual_seed(0)  # drawn on the CPU, so the numbers (and the error) are the same on a GPU
    device = tl.backend.default_device()
    tl.backend.set_default_device("cpu")
    try:
        model, x, t = MLP(), tl.randn(32, 8), np.arange(32) % 3
    finally:
        tl.backend.set_default_device(device)
    model, x = model.to(device), x.to(device)

    def grads(dtype):
        model.zero_grad()
        with tl.autocast(dtype):
            F.cross_entropy(model(x), t).backward()
        return {n: p.grad.numpy().copy() for n, p in model.named_parameters()}

    ref, low = grads("float32"), grads(half)
    for name in ref:
        err = np.abs(low[name] - ref[name]).max() / np.abs(ref[name]).max()
        assert err < rtol, (name, err)


@pytest.mark.parametrize("half", HALVES)
@pytest.mark.parametrize("in_dims", [1, 2])
def test_linear_under_autocast_rounds_its_operands_itself(half, in_dims):
    """Inside tl.autocast, LinearFn rounds x and W to the half type itself (no Cast nodes on
    either side) and returns float32 gradients for float32 tensors unrounded: dx = g W_hᵀ,
    dW = x_hᵀ g, db = Σ_rows g, each the float32 sum of exact products (two halves multiply
    exactly in float32). The reference is NumPy's float32 product of the same half values:
    another summation order at most, so within k·2⁻²⁴ of Σ|terms| (k terms). The old Cast
    nodes rounded these gradients to the half type first (off by up to 2⁻⁹ relative), which
    the check that they are not representable in the half type tells apart."""
    dtype = np.dtype(half)
    rng = np.random.default_rng(2)
    w_shape = (3, 4, 5) if in_dims == 2 else (12, 5)
    x = tl.tensor(
        rng.standard_normal((6, *w_shape[:in_dims])).astype(np.float32), requires_grad=True
    )
    W = tl.tensor(rng.standard_normal(w_shape).astype(np.float32), requires_grad=True)
    b = tl.tensor(rng.standard_normal(5).astype(np.float32), requires_grad=True)
    with tl.autocast(half):
        y = F.linear(x, W, b, in_dims=in_dims)
    assert y.dtype == dtype and type(y.grad_fn).__name__ == "LinearFn"
    assert y.grad_fn.inputs[:2] == (x, W)  # the float32 tensors themselves: no Cast between
    g = rng.standard_normal(y.shape).astype(dtype)
    y.backward(tl.tensor(g, device=y.device))

    def host(t):
        return t.numpy().astype(np.float32).reshape(6, -1) if t.ndim > 1 else t.numpy()

    xh, Wh, g2 = (host(t).astype(dtype).astype(np.float32) for t in (x, W, tl.tensor(g)))
    Wh = Wh.reshape(-1, 5)
    want_y = (xh @ Wh).astype(dtype).astype(np.float32) + b.numpy()
    np.testing.assert_allclose(host(y).reshape(6, 5), want_y, rtol=2.0**-7)
    for got, want, terms in [
        (x.grad, (g2 @ Wh.T, np.abs(g2) @ np.abs(Wh.T)), 5),
        (W.grad, (xh.T @ g2, np.abs(xh.T) @ np.abs(g2)), 6),
        (b.grad, (g2.sum(0), np.abs(g2).sum(0)), 6),
    ]:
        assert got.dtype == np.float32
        value = got.numpy().reshape(want[0].shape)
        assert np.all(np.abs(value - want[0]) <= terms * 2.0**-24 * want[1])
        assert not np.array_equal(value, value.astype(dtype).astype(np.float32))


@pytest.mark.parametrize("half", HALVES)
def test_linear_under_autocast_equals_its_composed_form(half):
    """LinearFn's composed form (what create_graph differentiates) with autocast's dtype
    rounds x and W through Cast nodes and adds b in float32 before rounding: the same numbers
    as the op, bit for bit. Its gradients are the Cast nodes' (dx, dW rounded to the half type
    and widened), so they agree with the op's float32 ones to half a unit of the half type."""
    rng = np.random.default_rng(3)
    x, W, b = (
        tl.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True)
        for s in ((4, 6), (6, 3), (3,))
    )
    with tl.autocast(half):
        y = F.linear(x, W, b)
    z = LinearFn.composed(x, W, b, dtype=np.dtype(half))
    assert z.dtype == y.dtype == np.dtype(half)
    np.testing.assert_array_equal(z.numpy(), y.numpy())
    g = tl.tensor(rng.standard_normal((4, 3)).astype(half))
    fused = tl.autograd.grad(y, [x, W, b], g)
    composed = tl.autograd.grad(z, [x, W, b], g)
    ulp = 2.0**-8 if half == "bfloat16" else 2.0**-11
    for a, c in zip(fused, composed):
        assert a.dtype == c.dtype == np.float32
        np.testing.assert_allclose(c.numpy(), a.numpy(), rtol=ulp, atol=0)


def test_autocast_needs_a_half_dtype_and_nests():
    with pytest.raises(ValueError, match="autocast: dtype 'int8' is not a mixed-precision"):
        tl.autocast("int8")
    a = tl.randn(2, 3, requires_grad=True)
    with tl.autocast("bfloat16"):
        assert (a @ a.T).dtype == tl.bfloat16
        assert tl.einsum("ij,kj->ik", a, a).dtype == tl.bfloat16
        with tl.autocast(None):
            assert (a @ a.T).dtype == np.float32
        with tl.autocast("float16"):
            assert (a @ a.T).dtype == np.float16


def test_bfloat16_round_trips():
    """float32 → bfloat16 keeps the top 16 bits (rounded to nearest even): values that fit
    come back exact, others to within half a bfloat16 spacing (2⁻⁸ relative); the cast's
    gradient returns float32."""
    exact = np.array([1.0, -2.5, 0.15625, 2.0**127, -0.0], np.float32)
    t = tl.tensor(exact).to("bfloat16")
    assert t.dtype == tl.bfloat16 and str(t.dtype) == "bfloat16"
    np.testing.assert_array_equal(t.float().numpy(), exact)
    x = tl.tensor(np.random.default_rng(0).standard_normal(1000).astype(np.float32))
    back = x.to("bfloat16").float().numpy()
    assert np.all(np.abs(back - x.numpy()) <= np.abs(x.numpy()) * 2.0**-8)
    w = tl.randn(4, requires_grad=True)
    (w.to("bfloat16") * 3.0).sum().backward()
    assert w.grad.dtype == np.float32 and w.grad.numpy().tolist() == [3.0] * 4
    t = tl.tensor([1.0, 2.5], device="cpu").to("bfloat16")
    assert repr(t) == "tensor([1. , 2.5], dtype=bfloat16)"


def test_bfloat16_parameters_save_and_load(tmp_path):
    """A bfloat16 state dict written to safetensors reads back bit for bit."""
    from nn.serialization import load, save

    lin = nn.Linear(3, 2, dtype=tl.bfloat16)
    path = tmp_path / "bf16.safetensors"
    save(lin.state_dict(), path)
    back = load(path)
    for k, v in lin.state_dict().items():
        got = back[k].data if isinstance(back[k], tl.Tensor) else back[k]
        assert got.dtype == tl.bfloat16
        want = v.data if isinstance(v, tl.Tensor) else v
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


# ------------------------------------------------------------------ loss scaling
def _one_param(grad: float):
    p = nn.Parameter(tl.tensor(np.array([1.0], np.float32)).data)  # on the test device
    p.grad = tl.tensor(np.array([grad], np.float32))
    return p, SGD([p], lr=1.0)


def test_scaler_unscales_then_steps():
    scaler = GradScaler(init_scale=8.0)
    assert scaler.scale(tl.tensor(2.0)).item() == 16.0
    p, opt = _one_param(8.0 * 0.5)  # a gradient of 0.5, scaled by 8
    assert scaler.step(opt) is True
    assert p.grad.item() == 0.5 and p.item() == 0.5  # unscaled, then p -= lr * g
    scaler.update()
    assert scaler.scale_value == 8.0 and scaler.good_steps == 1


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_scaler_skips_the_step_and_halves_on_overflow(bad):
    scaler = GradScaler(init_scale=1024.0, growth_interval=3)
    scaler.good_steps = 2
    p, opt = _one_param(bad)
    assert scaler.step(opt) is False
    assert p.item() == 1.0  # the parameter was not touched
    scaler.update()
    assert scaler.scale_value == 512.0 and scaler.good_steps == 0 and scaler.skipped == 1


@pytest.mark.parametrize("bad", [None, np.inf, np.nan])
def test_on_a_gpu_unscaling_is_a_few_launches_for_all_gradients(bad, monkeypatch):
    """Ten gradients on CuPy emulated by NumPy (tests/fake_cupy.py counts launches): divided by
    S in one kernel over all of them (scale_kernel.each, plus its table), checked by one sum of
    squares (square_kernel.each_sum: its table, the kernel, the sum of the blocks' partial
    sums), one read by the host; an inf or NaN in any entry of any of them is found."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    params = [nn.Parameter(tl.zeros(n, device="cuda")) for n in (1, 5, 3000, 7, 2, 9, 4, 1, 6, 8)]
    for p in params:
        p.grad = tl.full(p.shape, 64.0, device="cuda")
    if bad is not None:
        params[2].grad.data[1234] = bad
    scaler = GradScaler(init_scale=32.0)
    opt = SGD(params, lr=1.0)
    fake_cupy.KERNELS.clear()
    fake_cupy.SYNCS.clear()
    assert scaler.unscale_(opt) is (bad is not None)
    assert sum(fake_cupy.KERNELS.values()) == 2 + 3, dict(fake_cupy.KERNELS)
    assert sum(fake_cupy.SYNCS.values()) == 1
    for p in params:
        g = p.grad.data.get()
        assert (g[np.isfinite(g)] == 2.0).all() and np.isfinite(g).sum() >= g.size - 1


def test_scaler_grows_after_n_good_steps():
    scaler = GradScaler(init_scale=4.0, growth_interval=3, growth_factor=2.0)
    scales = []
    for _ in range(7):
        _, opt = _one_param(1.0)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.scale_value)
    assert scales == [4.0, 4.0, 8.0, 8.0, 8.0, 16.0, 16.0]


def test_scaler_finds_its_level_in_float16():
    """A float16 gradient that overflows at 2¹⁶ (1.0 × 65536 × 2 > 65504) is skipped, the
    scale halves, and the next step goes through with the exact gradient."""
    w = nn.Parameter(np.array([2.0], np.float32))
    opt = SGD([w], lr=0.0)
    scaler = GradScaler(init_scale=2.0**16)
    taken = []
    for _ in range(3):
        opt.zero_grad()
        with tl.autocast("float16"):
            loss = (w.to("float16") * w.to("float16")).sum() * 0.25  # dloss/dw = w / 2 = 1
        scaler.scale(loss).backward()
        taken.append(scaler.step(opt))
        scaler.update()
    assert taken == [False, True, True]
    assert scaler.scale_value == 2.0**15 and w.grad.item() == 1.0


def test_disabled_scaler_is_a_pass_through():
    scaler = GradScaler(enabled=False)
    loss = tl.tensor(3.0)
    assert scaler.scale(loss) is loss
    p, opt = _one_param(0.25)
    assert scaler.step(opt) and p.item() == 0.75
    scaler.update()
    assert scaler.scale_value == 1.0


def test_scaler_checks_its_arguments_and_order():
    with pytest.raises(
        ValueError, match=r"GradScaler: init_scale=0.0: must be a finite number in \(0, ∞\)"
    ):
        GradScaler(init_scale=0.0)
    with pytest.raises(ValueError, match=r"GradScaler: growth_factor=1.0: .* in \(1, ∞\)"):
        GradScaler(growth_factor=1.0)
    with pytest.raises(ValueError, match=r"GradScaler: backoff_factor=1.0: .* in \(0, 1\)"):
        GradScaler(backoff_factor=1.0)
    with pytest.raises(
        ValueError, match=r"GradScaler: growth_interval=0.5: must be an integer ≥ 1"
    ):
        GradScaler(growth_interval=0.5)
    with pytest.raises(RuntimeError, match="call step"):
        GradScaler().update()


def test_scaler_state_round_trips():
    a = GradScaler(init_scale=64.0)
    a.good_steps, a.skipped = 5, 2
    b = GradScaler()
    b.load_state_dict(a.state_dict())
    assert (b.scale_value, b.good_steps, b.skipped) == (64.0, 5, 2)
