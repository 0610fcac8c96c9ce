"""nn/activation.py: the ops GELUFn, GELUTanhFn, SiLUFn and ELUFn against their composed
forms (values, first and second order, finite differences), Erf against the exact erf, the
activation functions and modules (formulas, float32, PyTorch), softmax, and FeedForward
(plain and gated variants, sizes, gradients, dropout)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis.extra import numpy as hnp

import nn
import nn.functional as F
import tensorlab as tl
from nn.activation import ELUFn, GELUFn, GELUTanhFn, SiLUFn
from tensorlab.fused import BLOCK
from tensorlab.ops.special import Erf, erf_kernel
from tests.strategies import away_from, check_fused_op, rand64, second_order, t64, values

act_inputs = hnp.array_shapes(min_dims=1, max_dims=3, max_side=4).flatmap(
    lambda s: values(s, -4, 4)
)

# ---------------------------------------------------------------------- the ops
FUSED = {
    "GELUFn": (GELUFn, {}),
    "GELUTanhFn": (GELUTanhFn, {}),
    "SiLUFn": (SiLUFn, {}),
    "ELUFn": (ELUFn, {"alpha": 1.0}),
    "ELUFn-alpha0.4": (ELUFn, {"alpha": 0.4}),
    "ELUFn-alpha1.7": (ELUFn, {"alpha": 1.7}),
}


@pytest.mark.parametrize("name", sorted(FUSED))
@given(x=act_inputs)
def test_activation_fn_matches_composed(name, x):
    """Each fused activation against Fn.composed. Tolerance 1e-10 absolute: for |x| ≤ 4 the
    two forms are the same formula in other ufuncs (σ as (1 + tanh(x/2))/2 against
    1/(1 + e^-x), expm1 against exp - 1, erf through Erf against the erf kernel directly),
    so values, gradients and second derivatives (all O(10) at most) differ by rounding,
    ≲ 1e-14. Inputs are kept 1e-3 away from ELU's kink at 0 (its second derivative jumps
    there, and for alpha ≠ 1 so does the first), finite differences use eps 1e-6."""
    fn, params = FUSED[name]
    x = t64(away_from(x, [0.0]))
    check_fused_op(lambda x: fn.apply(x, **params), lambda x: fn.composed(x, **params), [x])


@given(x=hnp.array_shapes(min_dims=1, max_dims=3, max_side=4).flatmap(lambda s: values(s, -3, 3)))
def test_erf_fn_against_the_exact_erf(x):
    """Erf has no composed form (there is no erf among the engine's ops; its backward is
    written in engine ops, so the engine differentiates it as it is). The reference is then
    the exact function: the forward (float64: math.erf itself) to rounding, the derivative
    (2/√π) e^(-x²) and the second derivative -2x (2/√π) e^(-x²) exactly (the same formula,
    so to rounding: 1e-12)."""
    xt = t64(x)
    y = Erf.apply(xt)
    assert np.abs(y.numpy() - np.vectorize(math.erf)(x)).max() <= 1e-15
    rng = np.random.default_rng(0)
    g, u = rng.standard_normal(x.shape), rng.standard_normal(x.shape)
    d1 = 2 / math.sqrt(math.pi) * np.exp(-x * x)
    (dx,) = tl.grad(y, [xt], grad_outputs=t64(g, False))
    np.testing.assert_allclose(dx.numpy(), g * d1, atol=1e-12, rtol=0)
    hvp, jvp = second_order(Erf.apply, [xt], g, [u])
    np.testing.assert_allclose(hvp, g * u * (-2 * x) * d1, atol=1e-12, rtol=0)
    np.testing.assert_allclose(jvp, u * d1, atol=1e-12, rtol=0)
    tl.gradcheck(Erf.apply, [xt])
    tl.gradgradcheck(Erf.apply, [xt])


# ---------------------------------------------------------------------- the functions
ACTS = {
    "gelu": lambda x: F.gelu(x),
    "gelu_tanh": lambda x: F.gelu(x, "tanh"),
    "silu": F.silu,
    "elu": F.elu,
    "relu": F.relu,
    "sigmoid": F.sigmoid,
    "tanh": F.tanh,
}


@pytest.mark.parametrize("name", sorted(ACTS))
@given(x=hnp.array_shapes(min_dims=1, max_dims=3, max_side=4).flatmap(lambda s: values(s, -4, 4)))
def test_activation_gradcheck(name, x):
    fn = ACTS[name]
    x = t64(away_from(x, [0.0]))
    tl.gradcheck(fn, [x])
    if name in ("gelu", "gelu_tanh", "silu", "elu"):
        tl.gradgradcheck(fn, [x])


def test_activation_values():
    x = np.linspace(-5, 5, 101)
    xt = t64(x, False)
    phi = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x])
    # float64: erf is exact (test_erf_accuracy); Φ = ½ + ½ erf is formed next to ½ (an ulp
    # there is 1.1e-16), so |gelu error| <= |x| · a few of those ulps
    assert (np.abs(F.gelu(xt).numpy() - x * phi) <= 5e-16 * np.abs(x)).all()
    c = math.sqrt(2 / math.pi)
    tanh_form = 0.5 * x * (1 + np.tanh(c * (x + 0.044715 * x**3)))
    np.testing.assert_allclose(F.gelu(xt, "tanh").data, tanh_form, atol=1e-12)
    np.testing.assert_allclose(F.silu(xt).data, x / (1 + np.exp(-x)), atol=1e-12)
    np.testing.assert_allclose(F.elu(xt, 0.5).data, np.where(x > 0, x, 0.5 * np.expm1(x)))
    with pytest.raises(ValueError):
        F.gelu(xt, "fast")


def test_silu_is_accurate_far_out_on_the_negative_side():
    """SiLU(x) = x sigmoid(x) ≈ x eˣ for x ≪ 0 keeps its digits (it took sigmoid as
    ½(1 + tanh(x/2)), which cancels there: 7e-4 relative error at x = -10 in float32), and so
    does its gradient sigmoid(x)(1 + x(1 - sigmoid(x))). float32 on the test device (a GPU's
    fused kernels too), against float64 references from the side where nothing cancels;
    tolerance 1e-6 relative, a few float32 ulps for the two or three roundings of each (the
    gradient crosses 0 at x ≈ -1.28, so it is held to 1e-6 absolute for x ≥ -3)."""
    x = np.linspace(-85.0, 40.0, 20001).astype(np.float32)
    x64 = x.astype(np.float64)
    e = np.exp(-np.abs(x64))
    s = np.where(x64 >= 0, 1 / (1 + e), e / (1 + e))
    xt = tl.tensor(x, requires_grad=True)
    y = F.silu(xt)
    y.backward(tl.ones(*x.shape))
    np.testing.assert_allclose(y.numpy(), x64 * s, rtol=1e-6, atol=0)
    grad, expected, far = xt.grad.numpy(), s * (1 + x64 * (1 - s)), x < -3
    np.testing.assert_allclose(grad[far], expected[far], rtol=1e-6, atol=0)
    np.testing.assert_allclose(grad[~far], expected[~far], rtol=0, atol=1e-6)


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (7,)])
def test_gelu_on_scalars_and_empty_arrays(shape):
    x = t64(np.full(shape, 0.5))
    y = F.gelu(x)
    y.sum().backward()
    assert y.shape == x.grad.shape == shape
    phi = 0.5 * (1 + math.erf(0.5 / math.sqrt(2)))
    np.testing.assert_allclose(y.numpy(), np.full(shape, 0.5 * phi), atol=1e-7)


def test_gelu_in_blocks_matches_the_formula():
    """An input bigger than one cache block (tensorlab.fused.BLOCK) is done block by block
    (whole rows, a last block shorter); values and gradients must be those of the formula
    everywhere, including across block edges and for a non-contiguous input. float64 (erf
    exact): as in test_activation_values, |x| times a few ulps of ½, and for the gradient
    Φ + xφ, 1e-15 absolute."""
    rng = np.random.default_rng(0)
    xv = rng.uniform(-5, 5, (3, BLOCK // 700 + 5, 700)).transpose(1, 0, 2)  # > 3 blocks
    x = t64(xv)
    y = F.gelu(x)
    y.backward(tl.tensor(np.ones_like(xv)))
    erf_v = np.vectorize(math.erf)(xv / math.sqrt(2))
    phi, pdf = 0.5 * (1 + erf_v), np.exp(-0.5 * xv**2) / math.sqrt(2 * math.pi)
    assert (np.abs(y.numpy() - xv * phi) <= 5e-16 * np.abs(xv)).all()
    np.testing.assert_allclose(x.grad.numpy(), phi + xv * pdf, rtol=0, atol=1e-15)


def test_erf_accuracy():
    """float64: exact (math.erf entry by entry); float32: Abramowitz & Stegun 7.1.26, within
    its bound 1.5e-7 plus what float32 arithmetic adds near 0 (tensorlab/fused.py)."""
    z = np.linspace(-6, 6, 2001)
    exact = np.array([math.erf(v) for v in z])
    assert np.abs(erf_kernel(z) - exact).max() == 0.0
    assert erf_kernel(np.float64(0.5).reshape(())) == math.erf(0.5)
    # float32, on a grid fine enough to find the worst point (near 0, where the formula's
    # 1 - (...)e^(-z²) cancels): 6.07e-7, measured; the formula alone is within 1.5e-7
    z32 = np.linspace(-6, 6, 2_000_001).astype(np.float32)
    exact32 = erf_kernel(z32.astype(np.float64))  # exact, as checked above
    assert np.abs(erf_kernel(z32) - exact32).max() <= 6.5e-7
    assert abs(erf_kernel(np.array([0.0]))[0]) < 1e-8


def test_activations_keep_float32():
    x = tl.randn(4, 5)
    for fn in ACTS.values():
        y = fn(x)
        assert y.dtype == np.float32


def test_softmax_and_log_softmax():
    x = rand64(np.random.default_rng(0), 3, 5)
    np.testing.assert_allclose(F.softmax(x).data.sum(-1), 1.0)
    np.testing.assert_allclose(np.exp(F.log_softmax(x).data), F.softmax(x).data)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_torch(approximate):
    torch = pytest.importorskip("torch")
    a = np.linspace(-6, 6, 97).reshape(97)
    x, tx = t64(a), torch.tensor(a, dtype=torch.float64, requires_grad=True)
    y, ty = F.gelu(x, approximate), torch.nn.functional.gelu(tx, approximate=approximate)
    np.testing.assert_allclose(y.data, ty.detach().numpy(), atol=3e-7)
    y.sum().backward()
    ty.sum().backward()
    np.testing.assert_allclose(x.grad.data, tx.grad.numpy(), atol=1e-6)


def assert_close_to_torch(ours, ref):
    """Within 1e-15; on a GPU within one ulp where that is more (|ref| > 4.5): nvcc contracts
    the kernel's ``0.5 * x * (1 + erf)`` into fused multiply-adds, which round once where the
    CPU rounds twice (seen: 8.249999999999998 for 8.25 at x = 8.25)."""
    tol = 1e-15 if ours.device == "cpu" else np.maximum(1e-15, np.spacing(np.abs(ref)))
    np.testing.assert_array_less(np.abs(ours.numpy() - ref), tol * (1 + 1e-9))


def test_exact_gelu_and_erf_match_torch_to_float64_rounding():
    """Issue 13: in float64 the exact GELU agreed with PyTorch only to 2.1e-7 (the float32
    erf approximation); now value, gradient and second derivative agree to 1e-15 over
    [-10, 10], and erf itself to an ulp. float32 keeps the fast approximation."""
    torch = pytest.importorskip("torch")
    a = np.linspace(-10, 10, 2001)
    x, tx = t64(a), torch.tensor(a, dtype=torch.float64, requires_grad=True)
    want = torch.erf(torch.tensor(a)).numpy()
    np.testing.assert_allclose(erf_kernel(a), want, atol=2.3e-16, rtol=0)
    y, ty = F.gelu(x), torch.nn.functional.gelu(tx)
    assert_close_to_torch(y, ty.detach().numpy())
    (dx,) = tl.grad(y.sum(), [x], create_graph=True)
    (dtx,) = torch.autograd.grad(ty.sum(), [tx], create_graph=True)
    assert_close_to_torch(dx, dtx.detach().numpy())
    (ddx,) = tl.grad(dx.sum(), [x])
    (ddtx,) = torch.autograd.grad(dtx.sum(), [tx])
    assert_close_to_torch(ddx, ddtx.numpy())
    a32 = a.astype(np.float32)
    err32 = np.abs(
        erf_kernel(a32).astype(np.float64) - torch.erf(torch.tensor(a, dtype=torch.float64)).numpy()
    )
    assert 1e-8 < err32.max() <= 5e-7  # the float32 approximation, as before


# ---------------------------------------------------------------------- the modules
MODULES = {
    "ReLU": nn.ReLU(),
    "GELU": nn.GELU(),
    "GELU_tanh": nn.GELU("tanh"),
    "SiLU": nn.SiLU(),
    "ELU": nn.ELU(0.7),
    "Sigmoid": nn.Sigmoid(),
    "Tanh": nn.Tanh(),
}


@pytest.mark.parametrize("name", sorted(MODULES))
@given(x=hnp.array_shapes(min_dims=1, max_dims=3, max_side=4).flatmap(lambda s: values(s, -3, 3)))
def test_activation_modules(name, x):
    module = MODULES[name]
    x = t64(away_from(x, [0.0]))
    tl.gradcheck(module, [x])
    assert module(x).shape == x.shape


def test_activation_fn_names():
    assert nn.Swish is nn.SiLU
    with pytest.raises(ValueError):
        nn.activation_fn("softplus")
    with pytest.raises(ValueError):
        nn.GELU("erf")


# ---------------------------------------------------------------------- feed-forward
def randomize(module, seed=0):
    rng = np.random.default_rng(seed)
    with tl.no_grad():
        for p in module.parameters():
            p.copy_(rng.standard_normal(p.shape) * 0.5)
    return module


def test_default_widths_and_parameter_names():
    plain = nn.FeedForward(48)
    assert plain.d_ff == 192 and not plain.gated
    assert [n for n, _ in plain.named_parameters()] == ["W_in", "b_in", "W_out", "b_out"]
    gated = nn.FeedForward(48, activation="swiglu")
    assert gated.gated and gated.activation == "silu"
    assert gated.d_ff == 128 and gated.d_ff % 8 == 0  # 8/3 * 48 = 128
    names = [n for n, _ in gated.named_parameters()]
    assert names == ["W_in", "b_in", "W_gate", "b_gate", "W_out", "b_out"]
    assert nn.FeedForward(128, gated=True).d_ff == 344  # 341.3 rounded up to a multiple of 8
    no_bias = nn.FeedForward(8, activation="geglu", bias=False)
    assert [n for n, _ in no_bias.named_parameters()] == ["W_in", "W_gate", "W_out"]


@pytest.mark.parametrize(
    "activation,gated",
    [("relu", False), ("gelu", False), ("gelu_tanh", False), ("silu", False)]
    + [("glu", True), ("reglu", True), ("geglu", True), ("swiglu", True)],
)
def test_forward_formula_and_gradcheck(activation, gated):
    ffn = randomize(nn.FeedForward(4, d_ff=5, activation=activation, dtype=np.float64))
    assert ffn.gated == gated
    rng = np.random.default_rng(1)
    x = tl.tensor(rng.standard_normal((2, 3, 4)), dtype=np.float64, requires_grad=True)
    f = nn.activation_fn(ffn.activation)
    h = F.linear(x, ffn.W_in, ffn.b_in)
    if gated:
        h = f(F.linear(x, ffn.W_gate, ffn.b_gate)) * h
    else:
        h = f(h)
    expect = F.linear(h, ffn.W_out, ffn.b_out)
    np.testing.assert_allclose(ffn(x).data, expect.data, atol=1e-12)
    tl.gradcheck(lambda x, *ps: ffn(x), [x, *ffn.parameters()])


def test_dropout_only_in_training():
    ffn = nn.FeedForward(8, dropout=0.5)
    x = tl.randn(4, 8)
    ffn.eval()
    np.testing.assert_array_equal(ffn(x).data, ffn(x).data)
    ffn.train()
    tl.manual_seed(0)
    a = ffn(x).data
    tl.manual_seed(0)
    np.testing.assert_array_equal(a, ffn(x).data)
    assert (a == 0).mean() > 0.3


@pytest.mark.parametrize("activation", ["gelu", "swiglu"])
def test_feedforward_hook_points_see_the_neurons(activation):
    """hook_pre holds the (gate's) pre-activations, hook_pre_linear the gated value, hook_post
    the hidden layer W_out reads: the output is hook_post · W_out + b_out."""
    from nn.activation import FeedForward

    tl.manual_seed(0)
    ff = FeedForward(8, 16, activation=activation)
    x = tl.tensor(np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32))
    seen = {}
    names = ["hook_pre", "hook_post"] + (["hook_pre_linear"] if ff.gated else [])
    for name in names:
        getattr(ff, name).register_forward_hook(lambda m, i, o, name=name: seen.update({name: o}))
    y = ff(x)
    f = ff.act
    if ff.gated:
        expected = f(seen["hook_pre"]).numpy() * seen["hook_pre_linear"].numpy()
    else:
        expected = f(seen["hook_pre"]).numpy()
    np.testing.assert_allclose(seen["hook_post"].numpy(), expected, rtol=1e-6, atol=1e-7)
    assert all(v.shape == (2, 3, 16) for v in seen.values())
    np.testing.assert_allclose(
        y.numpy(),
        seen["hook_post"].numpy() @ ff.W_out.numpy() + ff.b_out.numpy(),
        rtol=1e-5,
        atol=1e-6,
    )


# ---------------------------------------------------------------------- on the test device
KERNELS = {"GELUFn": GELUFn, "GELUTanhFn": GELUTanhFn, "SiLUFn": SiLUFn, "ELUFn": ELUFn}
# float32: with TENSORLAB_TEST_DEVICE=cuda the compiled kernels compute the formulas with other
# roundings than NumPy (and CUDA's erf is exact where NumPy's is Abramowitz & Stegun's, 1.5e-7
# from the true one): a few ulps of values up to 6 (ulp 4.8e-7), except in the tanh form's
# derivative, where 1 - t² cancels for large |x|. There t is within 2 ulps of tanh(u) (CUDA's
# tanhf), so 1 - t² is off by up to 5e-7, times ½ x c (1 + 3k x²) ≤ 14 at |x| = 6: 7e-6.
# Hence 1e-5; a wrong term or constant is off by 1e-3 or more. float64: rounding, ≲ 1e-15.
KERNEL_TOL = {"float32": 1e-5, "float64": 1e-13}


@pytest.mark.parametrize("dtype", sorted(KERNEL_TOL))
@pytest.mark.parametrize("name", sorted(KERNELS))
@given(x=hnp.array_shapes(min_dims=1, max_dims=3, max_side=9).flatmap(lambda s: values(s, -6, 6)))
def test_the_test_device_runs_the_formulas_as_numpy_does(name, dtype, x):
    """Each activation, forward and backward, on the test device (the compiled kernels with
    TENSORLAB_TEST_DEVICE=cuda) against the NumPy runner on the CPU."""
    fn = KERNELS[name]
    x = x.astype(dtype)
    g = np.random.default_rng(0).standard_normal(x.shape).astype(dtype)
    results = []
    for device in ("cpu", None):  # None: the test device
        xt = tl.tensor(x, device=device, requires_grad=True)
        y = fn.apply(xt)
        y.backward(tl.tensor(g, device=device))
        assert y.dtype == xt.grad.dtype == np.dtype(dtype)
        results.append((y.data, xt.grad.data))
    tol = KERNEL_TOL[dtype]
    for ours, cpu in zip(results[1], results[0]):
        np.testing.assert_allclose(ours, cpu, rtol=tol, atol=tol)


@pytest.mark.parametrize(
    "fn",
    [F.gelu, lambda x: F.gelu(x, approximate="tanh"), F.silu],
    ids=["gelu", "gelu_tanh", "silu"],
)
def test_on_a_gpu_each_activation_is_one_kernel_each_way(fn, monkeypatch):
    """On CuPy arrays an activation's forward and backward are one fused kernel each (on
    CuPy emulated by NumPy, which counts launches: tests/fake_cupy.py); the CPU form would be
    a dozen or more array operations, each a launch on a GPU."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    x = tl.tensor(np.linspace(-3, 3, 12, dtype=np.float32), device="cuda", requires_grad=True)
    g = tl.tensor(np.ones(12, np.float32), device="cuda")
    fake_cupy.KERNELS.clear()
    y = fn(x)
    forward = dict(fake_cupy.KERNELS)
    fake_cupy.KERNELS.clear()
    y.backward(g)
    assert len(forward) == 1 and sum(forward.values()) == 1, forward
    kernels = dict(fake_cupy.KERNELS)
    assert sum(n for k, n in kernels.items() if k.startswith("fused")) == 1, kernels
