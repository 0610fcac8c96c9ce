"""nn/norm.py: the ops LayerNormFn (with 0, 1 or 2 affine inputs) and RMSNormFn (with and
without a gain) against their composed forms (values, first and second order, finite
differences), F.layer_norm and F.rms_norm against references written here and against
PyTorch, and the layers LayerNorm and RMSNorm."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nn
import nn.functional as F
import tensorlab as tl
from nn.norm import LayerNormFn, RMSNormFn
from tests.strategies import (
    assert_same,
    check_fused_op,
    rand64,
    rms_rows,
    rows_shapes,
    spread_rows,
    t64,
    values,
)

lead_shapes = hnp.array_shapes(min_dims=1, max_dims=2, max_side=3)


def layer_norm_ref(x, w, b, eps=1e-5):
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) * (x - mu)).mean(axis=-1, keepdims=True)
    return (x - mu) / (var + eps).sqrt() * w + b


def rms_norm_ref(x, w, eps=1e-6):
    return x / ((x * x).mean(axis=-1, keepdims=True) + eps).sqrt() * w


def randomize(module, seed=0):
    """Give every parameter random values (gains and biases start at 1 and 0)."""
    rng = np.random.default_rng(seed)
    with tl.no_grad():
        for p in module.parameters():
            p.copy_(rng.standard_normal(p.shape))
    return module


def check_module(module, x):
    """gradcheck with respect to the input and every parameter."""
    params = list(module.parameters())
    tl.gradcheck(lambda x, *ps: module(x), [x, *params])


# ---------------------------------------------------------------------- the ops
# Tolerance of the fused-vs-composed checks below: 1e-10 absolute. The inputs' rows are kept
# spread out (strategies.spread_rows / rms_rows), so 1/σ ≤ 3.7 and every value, gradient and
# second derivative is at most O(100) for entries ≤ 2; the two forms compute the same formula
# in another order (a gemv mean and 1/√ on arrays against mean() and ** -0.5 on Tensors), so
# they differ by rounding, ≲ 1e-13, and a wrong term would show at ≳ 1e-3.
@pytest.mark.parametrize("n_affine", [0, 1, 2])
@given(
    x=rows_shapes.flatmap(values).map(spread_rows),
    eps=st.sampled_from([1e-5, 0.1]),
    data=st.data(),
)
def test_layer_norm_fn_matches_composed(n_affine, x, eps, data):
    d = x.shape[-1]
    affine = [t64(data.draw(values((d,)))) for _ in range(n_affine)]
    check_fused_op(
        lambda *a: LayerNormFn.apply(*a, eps=eps),
        lambda *a: LayerNormFn.composed(*a, eps=eps),
        [t64(x), *affine],
    )


@pytest.mark.parametrize("gain", [False, True])
@given(
    x=rows_shapes.flatmap(values).map(rms_rows),
    eps=st.sampled_from([1e-6, 0.1]),
    data=st.data(),
)
def test_rms_norm_fn_matches_composed(gain, x, eps, data):
    affine = [t64(data.draw(values((x.shape[-1],))))] if gain else []
    check_fused_op(
        lambda *a: RMSNormFn.apply(*a, eps=eps),
        lambda *a: RMSNormFn.composed(*a, eps=eps),
        [t64(x), *affine],
    )


def test_norm_fns_only_differentiate_what_requires_grad():
    """Inputs that need no gradient get none; the others are unchanged by that."""
    rng = np.random.default_rng(0)
    x, w, b = rand64(rng, 3, 4), rand64(rng, 4, requires_grad=False), rand64(rng, 4)
    fn = lambda x, b: LayerNormFn.apply(x, w, b, eps=1e-5)
    ref = lambda x, b: layer_norm_ref(x, w, b)
    assert_same(fn, ref, [x, b], atol=1e-8)
    (dx,) = tl.grad(RMSNormFn.apply(x, w, eps=1e-6).sum(), [x])
    (ref_dx,) = tl.grad(rms_norm_ref(x, w).sum(), [x])
    np.testing.assert_allclose(dx.numpy(), ref_dx.numpy(), atol=1e-8)


def test_the_norms_save_numbers_per_row_not_the_normalized_input():
    """What a norm keeps for its backward is μ and 1/σ (layer norm) or 1/σ (RMS norm): one or
    two numbers per row, not a second (..., d) array (x̂ is recomputed from x)."""
    a = np.random.default_rng(0).standard_normal((2, 3, 8))
    x, w, b = tl.tensor(a, requires_grad=True), tl.ones(8), tl.zeros(8)
    mu = a.mean(-1, keepdims=True)
    ln = LayerNormFn.apply(x, w, b, eps=1e-5)._ctx.saved
    rms = RMSNormFn.apply(x, w, eps=1e-6)._ctx.saved
    assert [s.shape for s in ln] == [(2, 3, 1)] * 2 and [s.shape for s in rms] == [(2, 3, 1)]
    np.testing.assert_allclose(ln[0], mu, rtol=1e-12)
    np.testing.assert_allclose(ln[1], 1 / np.sqrt(((a - mu) ** 2).mean(-1, keepdims=True) + 1e-5))
    np.testing.assert_allclose(rms[0], 1 / np.sqrt((a**2).mean(-1, keepdims=True) + 1e-6))


def test_a_bias_gradient_passed_through_is_not_the_callers_array():
    """Layer norm's backward hands g itself back as the bias's gradient; for one row of d
    features that is already the bias's shape, so .grad would alias the caller's g, and the
    next backward adds into .grad in place."""
    x = tl.tensor(np.array([1.0, -2.0, 0.5]), requires_grad=True)
    w, b = (tl.tensor(np.ones(3), requires_grad=True) for _ in range(2))
    g = tl.tensor(np.array([1.0, 2.0, 3.0]))
    for _ in range(2):
        F.layer_norm(x, w, b).backward(g)
    np.testing.assert_array_equal(g.numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(b.grad.numpy(), [2.0, 4.0, 6.0])


# ---------------------------------------------------------------------- the functions
@given(rows_shapes.flatmap(lambda s: values(s)))
def test_layer_norm_gradcheck_and_composed(x):
    d = x.shape[-1]
    rng = np.random.default_rng(0)
    x, w, b = t64(x), rand64(rng, d), rand64(rng, d)
    tl.gradcheck(lambda x, w, b: F.layer_norm(x, w, b), [x, w, b])
    tl.gradcheck(lambda x: F.layer_norm(x), [x])
    assert_same(lambda x, w, b: F.layer_norm(x, w, b), layer_norm_ref, [x, w, b], atol=1e-8)


@given(rows_shapes.flatmap(lambda s: values(s)))
def test_rms_norm_gradcheck_and_composed(x):
    d = x.shape[-1]
    x, w = t64(x), rand64(np.random.default_rng(0), d)
    tl.gradcheck(lambda x, w: F.rms_norm(x, w), [x, w])
    tl.gradcheck(lambda x: F.rms_norm(x), [x])
    assert_same(lambda x, w: F.rms_norm(x, w), rms_norm_ref, [x, w], atol=1e-8)


def test_norms_gradgradcheck():
    rng = np.random.default_rng(0)
    x, w, b = rand64(rng, 2, 3, 4), rand64(rng, 4), rand64(rng, 4)
    tl.gradgradcheck(lambda x, w, b: F.layer_norm(x, w, b), [x, w, b])
    tl.gradgradcheck(lambda x, w: F.layer_norm(x, w), [x, w])
    tl.gradgradcheck(lambda x, w: F.rms_norm(x, w), [x, w])


NORMS_WITH_PARAMS = {  # each norm with each set of parameters it takes: (function, params)
    "layer_norm": (F.layer_norm, 2),
    "layer_norm_gain": (F.layer_norm, 1),
    "layer_norm_plain": (F.layer_norm, 0),
    "rms_norm": (F.rms_norm, 1),
    "rms_norm_plain": (F.rms_norm, 0),
}


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("name", sorted(NORMS_WITH_PARAMS))
def test_on_a_gpu_a_norm_runs_the_formulas_the_cpu_runs(name, dtype, monkeypatch, numpy_kernels):
    """On CuPy arrays a norm runs its two formulas (nn/norm.py: LayerNormFn, RMSNormFn) as
    one CUDA kernel each (tensorlab/cuda_rows.py: run_cuda, the row program the C runner
    compiles, written with a thread block per row). On CuPy emulated by NumPy, whose CUDA
    kernels run on the CPU (tests/fake_cupy.py), the values and gradients equal the CPU's up
    to the order of each row's sums (a tree over the block's threads): within 8 float32 ulps
    (1e-6) of the largest entry, 1e-14 in float64, and one unit of bfloat16 (2⁻⁷: its
    inputs are computed in float32 and rounded once, where a last-bit difference can round
    the other way). In float64 the gradients pass gradcheck; each formula is one launch, and
    the parameters' gradients (sums over rows) are stored without a copy."""
    from tests import fake_cupy

    if dtype == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 on the CPU needs ml_dtypes")
    fn, n_params = NORMS_WITH_PARAMS[name]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((6, 16))] + [rng.standard_normal(16) for _ in range(n_params)]
    g = rng.standard_normal((6, 16))

    def run(device):
        for _ in range(2):  # counted the second time: the first makes the gemv's ones vectors
            ins = [tl.tensor(a, device=device).astype(dtype).requires_grad_() for a in arrays]
            grad = tl.tensor(g, device=device).astype(dtype)
            fake_cupy.KERNELS.clear()
            y = fn(*ins)
            forward = dict(fake_cupy.KERNELS)
            fake_cupy.KERNELS.clear()
            y.backward(grad)
            backward = dict(fake_cupy.KERNELS)
        return [y.numpy()] + [t.grad.numpy() for t in ins], (forward, backward)

    cpu, _ = run("cpu")
    fake_cupy.install(monkeypatch)
    gpu, launches = run("cuda")
    tol = {"float32": 1e-6, "float64": 1e-14, "bfloat16": 2.0**-7}[dtype]
    for a, b in zip(gpu, cpu):
        assert a.dtype == b.dtype
        a, b = a.astype(np.float64), b.astype(np.float64)
        np.testing.assert_allclose(a, b, rtol=0, atol=tol * np.abs(b).max())
    op = "LayerNormFn" if name.startswith("layer") else "RMSNormFn"
    casts = {"ndarray.astype"} if dtype == "bfloat16" else set()  # (widened outside)
    assert launches[0].get(f"k_{op}_forward") == 1, launches[0]  # one kernel
    assert set(launches[0]) <= {f"k_{op}_forward", *casts}, launches[0]
    assert launches[1].get(f"k_{op}_backward") == 1, launches[1]  # and the parameters' sums
    # the gains' and biases' gradients (sums over the rows) are kept as they come: no copy
    assert "ndarray.copy" not in launches[1], launches[1]
    if dtype == "float64":
        tl.gradcheck(fn, [tl.tensor(a, device="cuda", requires_grad=True) for a in arrays])


def test_rms_norm_definition():
    x = np.array([[3.0, 4.0]])
    y = F.rms_norm(t64(x, False), eps=0.0).data
    np.testing.assert_allclose(y, x / math.sqrt((9 + 16) / 2))


def test_layer_norm_output_statistics():
    x = tl.randn(5, 16) * 3 + 2
    y = F.layer_norm(x).data
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(y.var(-1), 1, atol=1e-3)


def test_layer_norm_bias_needs_a_weight():
    with pytest.raises(ValueError, match="needs a weight"):
        F.layer_norm(tl.randn(2, 3), None, tl.zeros(3))


def test_layer_norm_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)

    def pair(a):
        return t64(a), torch.tensor(a, dtype=torch.float64, requires_grad=True)

    x, tx = pair(rng.standard_normal((3, 5, 8)))
    w, tw = pair(rng.standard_normal(8))
    b, tb = pair(rng.standard_normal(8))
    g = rng.standard_normal((3, 5, 8))
    y = F.layer_norm(x, w, b)
    ty = torch.nn.functional.layer_norm(tx, (8,), tw, tb, eps=1e-5)
    np.testing.assert_allclose(y.data, ty.detach().numpy(), atol=1e-12)
    y.backward(t64(g, False))
    ty.backward(torch.tensor(g))
    for ours, theirs in ((x, tx), (w, tw), (b, tb)):
        np.testing.assert_allclose(ours.grad.data, theirs.grad.numpy(), atol=1e-10)


# ---------------------------------------------------------------------- the layers
@given(lead_shapes, st.integers(2, 5), st.booleans(), st.data())
def test_layer_norm_module(lead, d, bias, data):
    ln = randomize(nn.LayerNorm(d, bias=bias, dtype=np.float64))
    assert ln.w.shape == (d,) and (ln.b is None) == (not bias)
    x = t64(data.draw(values(lead + (d,))))
    check_module(ln, x)


@given(lead_shapes, st.integers(1, 5), st.data())
def test_rms_norm_module(lead, d, data):
    rms = randomize(nn.RMSNorm(d, dtype=np.float64))
    x = t64(data.draw(values(lead + (d,))))
    check_module(rms, x)
    xd = x.data
    expect = xd / np.sqrt((xd**2).mean(-1, keepdims=True) + 1e-6) * rms.w.data
    np.testing.assert_allclose(rms(x).data, expect, atol=1e-12)


def test_norm_defaults_start_as_identity_affine():
    ln, rms = nn.LayerNorm(8), nn.RMSNorm(8)
    assert (ln.w.data == 1).all() and (ln.b.data == 0).all() and (rms.w.data == 1).all()
    assert [n for n, _ in ln.named_parameters()] == ["w", "b"]


# ---------------------------------------------------------------------- the composed path
NORM_LAYERS = {
    "layer_norm": lambda d, dtype: nn.LayerNorm(d, dtype=dtype),
    "layer_norm_no_bias": lambda d, dtype: nn.LayerNorm(d, bias=False, dtype=dtype),
    "rms_norm": lambda d, dtype: nn.RMSNorm(d, dtype=dtype),
}


def run_norm(layer, x: np.ndarray, g: np.ndarray, dtype="float64"):
    """The layer's output and the gradients of x and every parameter for output gradient g."""
    for p in layer.parameters():
        p.grad = None
    xt = tl.tensor(x).astype(dtype).requires_grad_()
    y = layer(xt)
    y.backward(tl.tensor(g).astype(dtype))
    return [y.numpy(), xt.grad.numpy()] + [p.grad.numpy() for p in layer.parameters()]


@pytest.mark.parametrize("kind", sorted(NORM_LAYERS))
@given(x=rows_shapes.flatmap(values).map(spread_rows).map(rms_rows), data=st.data())
def test_norm_layers_fused_and_composed_agree(kind, x, data):
    """A norm layer on its fused path (one node) and on its composed path (``fused = False``,
    engine ops through hook_scale and hook_normalized): the same output and gradients of x and
    every parameter within 1e-10 in float64 (rows spread as above: both paths compute the same
    formula in another order, ≲ 1e-13 apart), and the composed path passes gradcheck and
    gradgradcheck."""
    layer = randomize(NORM_LAYERS[kind](x.shape[-1], np.float64))
    g = data.draw(values(x.shape))
    fused = run_norm(layer, x, g)
    layer.fused = False
    composed = run_norm(layer, x, g)
    for a, b in zip(fused, composed):
        np.testing.assert_allclose(a, b, atol=1e-10, rtol=0)
    params = list(layer.parameters())
    tl.gradcheck(lambda x, *ps: layer(x), [t64(x), *params])
    tl.gradgradcheck(lambda x, *ps: layer(x), [t64(x), *params])


@pytest.mark.parametrize("kind", sorted(NORM_LAYERS))
def test_composed_norm_of_bfloat16_is_the_fused_one_within_an_ulp(kind):
    """bfloat16 inputs: both paths compute in float32 and round once (the composed path
    through Tensor.astype), so the outputs differ by at most one bfloat16 ulp (the float32
    results differ by ~1e-7 relative, which can move a rounding boundary) and mostly not."""
    if tl.bfloat16 is None:
        pytest.skip("bfloat16 on the CPU needs ml_dtypes")
    rng = np.random.default_rng(0)
    x, g = rng.standard_normal((2, 5, 16)), rng.standard_normal((2, 5, 16))
    layer = randomize(NORM_LAYERS[kind](16, np.float32))
    fused = run_norm(layer, x, g, "bfloat16")
    layer.fused = False
    composed = run_norm(layer, x, g, "bfloat16")
    assert composed[0].dtype == tl.bfloat16
    y_f, y_c = fused[0].astype(np.float64), composed[0].astype(np.float64)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(y_f), 1e-30))) - 7)  # 8-bit significand
    assert (np.abs(y_f - y_c) <= ulp).all()
    assert (y_f != y_c).mean() < 0.05


@pytest.mark.parametrize("kind", sorted(NORM_LAYERS))
def test_norm_hook_points_see_and_replace_the_scale_and_the_normalized_input(kind):
    """On the composed path hook_scale sees σ (..., 1) and hook_normalized x̂ (..., d), as
    NumPy computes them; identity hooks change nothing, bit for bit; a hook that doubles σ
    halves x̂, and one that zeroes x̂ leaves the bias."""
    layer = randomize(NORM_LAYERS[kind](6, np.float64))
    layer.fused = False
    x = np.random.default_rng(1).standard_normal((2, 3, 6))
    centred = x - x.mean(-1, keepdims=True) if kind.startswith("layer") else x
    sigma = np.sqrt((centred**2).mean(-1, keepdims=True) + layer.eps)
    plain = layer(t64(x)).numpy()
    seen = {}
    handles = [
        getattr(layer, n).register_forward_hook(lambda m, i, out, n=n: seen.setdefault(n, out))
        for n in ("hook_scale", "hook_normalized")
    ]
    np.testing.assert_array_equal(layer(t64(x)).numpy(), plain)
    np.testing.assert_allclose(seen["hook_scale"].numpy(), sigma, rtol=1e-14)
    np.testing.assert_allclose(seen["hook_normalized"].numpy(), centred / sigma, rtol=1e-13)
    for h in handles:
        h.remove()
    bias = 0.0 if getattr(layer, "b", None) is None else layer.b.numpy()
    with layer.hook_scale.register_forward_hook(lambda m, i, out: out * 2):
        halved = layer(t64(x)).numpy()
    np.testing.assert_allclose(halved - bias, (plain - bias) / 2, rtol=1e-13, atol=1e-15)
    with layer.hook_normalized.register_forward_hook(lambda m, i, out: out * 0):
        np.testing.assert_array_equal(layer(t64(x)).numpy(), np.broadcast_to(bias, x.shape))


def test_a_fused_norm_refuses_its_hooks_and_composed_norms_opens_them():
    """A fused norm has no σ or x̂ to hook: hooking them raises, naming why and the way out;
    nn.composed_norms opens them for a block and puts the norms back afterwards, except one
    still hooked; fusing a hooked norm raises."""
    model = nn.Sequential(nn.LayerNorm(4), nn.RMSNorm(4))
    with pytest.raises(RuntimeError, match="norm is fused.*composed_norms"):
        model[0].hook_scale.register_forward_hook(lambda *a: None)
    with nn.composed_norms(model):
        assert not model[0].fused and not model[1].fused
        handle = model[1].hook_normalized.register_forward_hook(lambda *a: None)
    assert model[0].fused and not model[1].fused  # the hooked one stays composed
    with pytest.raises(RuntimeError, match="RMSNorm.fused = True: remove the hooks"):
        model[1].fused = True
    handle.remove()
    model[1].fused = True
    assert model[1].hook_scale.closed


@pytest.mark.parametrize("shape", [(2, 0), (0, 3), (0,), (2, 0, 0)], ids=str)
@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("kind", ["layer_norm", "rms_norm"])
def test_norms_of_zero_size_inputs_match_torch(kind, shape, affine):
    """An empty last axis (nothing to normalize) or no rows: an empty result and gradients,
    as PyTorch; the weight (and bias) of (0, 3) inputs get zero gradients. (rms_norm of an
    empty last axis once raised ZeroDivisionError: the mean of zero numbers.)"""
    torch = pytest.importorskip("torch")
    d = shape[-1]
    x = tl.zeros(*shape, dtype=np.float64, requires_grad=True)
    xt = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    n = 2 if kind == "layer_norm" else 1  # the weight, and layer norm's bias
    ours = [tl.ones(d, dtype=np.float64, requires_grad=True) for _ in range(n)]
    theirs = [torch.ones(d, dtype=torch.float64, requires_grad=True) for _ in range(n)]
    y = getattr(F, kind)(x, *(ours if affine else []))
    yt = getattr(torch.nn.functional, kind)(xt, (d,), *(theirs if affine else [None] * n))
    assert y.shape == tuple(yt.shape) == shape
    y.sum().backward()
    yt.sum().backward()
    assert x.grad.shape == shape
    if affine:
        for p, pt in zip(ours, theirs):
            np.testing.assert_array_equal(p.grad.numpy(), pt.grad.numpy())


@pytest.mark.parametrize("layer", [nn.LayerNorm, nn.RMSNorm])
@pytest.mark.parametrize("eps", [-1e-6, float("nan"), float("inf"), True, "1e-5", None], ids=repr)
def test_a_bad_eps_is_refused(layer, eps):
    """A negative ε makes rows of small variance NaN (√ of a negative), a NaN one every row:
    refused by name; ε = 0 is taken."""
    with pytest.raises(
        ValueError,
        match=re.escape(f"{layer.__name__}: eps={eps!r}: must be a finite number in [0, ∞)"),
    ):
        layer(4, eps=eps)
    assert layer(4, eps=0).eps == 0


def test_the_layers_default_eps_is_the_fields():
    """LayerNorm's ε defaults to 1e-5 (PyTorch's and GPT-2's), RMSNorm's to 1e-6 (Llama's).
    Rows with a variance of 1e-5 make ε a visible part of σ: a default off by 2× moves y
    by about 20%."""
    x = np.random.default_rng(0).standard_normal((3, 8)) * math.sqrt(1e-5)
    mu = x.mean(-1, keepdims=True)
    expected_ln = (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5)
    expected_rms = x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6)
    for layer, expected in ((nn.LayerNorm(8), expected_ln), (nn.RMSNorm(8), expected_rms)):
        y = layer(tl.tensor(x.astype(np.float32))).numpy()
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "call, message",
    [
        # a (2, 1) input and a (4,) weight once broadcast to (2, 4): a row of biases, silently
        (lambda: nn.LayerNorm(4)(tl.ones(2, 1)), "layer_norm: the input of shape \\(2, 1\\) has 1"),
        (lambda: nn.LayerNorm(4, fused=False)(tl.ones(2, 1)), "LayerNorm: the input of shape"),
        (lambda: nn.RMSNorm(4)(tl.ones(2, 1)), "rms_norm: .* but the weight has shape \\(4,\\)"),
        (lambda: nn.RMSNorm(4, fused=False)(tl.ones(3, 1)), "RMSNorm: the input of shape"),
        (lambda: F.layer_norm(tl.ones(2, 3), tl.ones(3), tl.ones(1)), "the bias has shape"),
        # a 0-d input was returned as it was, unnormalized (PyTorch refuses it too)
        (lambda: nn.LayerNorm(4)(tl.tensor(3.0)), "a 0-d input has no last axis to normalize"),
        (lambda: F.rms_norm(tl.tensor(3.0)), "rms_norm: a 0-d input has no last axis"),
    ],
)
def test_an_input_whose_last_axis_is_not_the_norms_is_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()
