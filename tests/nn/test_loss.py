"""nn/loss.py: the op CrossEntropyFn against its composed form for every reduction, with label
smoothing and ignored targets (values, first and second order, finite differences),
F.cross_entropy against a reference written here, by hand and against PyTorch, and mse_loss."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nn.functional as F
import tensorlab as tl
from nn.loss import CrossEntropyFn
from tests.strategies import assert_same, check_fused_op, rand64, t64, values


def cross_entropy_ref(z, t, ignore_index=-100, eps=0.0, reduction="mean"):
    C = z.shape[-1]
    logp = z.reshape(-1, C).log_softmax(axis=-1)
    flat = t.reshape(-1)
    valid = flat != ignore_index
    q = np.zeros(logp.shape)
    q[np.arange(flat.size), np.where(valid, flat, 0)] = 1 - eps
    q += eps / C
    q *= valid[:, None]
    loss = -(logp * t64(q, False)).sum(axis=-1)
    if reduction == "none":
        return loss.reshape(t.shape)
    return loss.sum() / max(int(valid.sum()), 1) if reduction == "mean" else loss.sum()


# ---------------------------------------------------------------------- the op
def reduce(op, z, t, params, reduction):
    """CrossEntropyFn's ``op`` (apply or composed) reduced as F.cross_entropy does: per row,
    or summed over the rows in the node (``summed=True``) and divided by the rows kept."""
    if reduction == "none":
        return op(z, t, **params)
    count = max(int((t.data != params["ignore_index"]).sum()), 1) if reduction == "mean" else 1
    return op(z, t, summed=True, **params) / count


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@given(
    lead=hnp.array_shapes(min_dims=1, max_dims=2, max_side=4),
    C=st.integers(2, 5),
    eps=st.sampled_from([0.0, 0.1, 0.3]),
    ignore_index=st.sampled_from([-100, 0]),
    scale=st.sampled_from([1.0, 0.25]),
    data=st.data(),
)
def test_cross_entropy_fn_matches_composed(reduction, lead, C, eps, ignore_index, scale, data):
    """CrossEntropyFn against CrossEntropyFn.composed: targets (N,) or (B, T), some (or all)
    of them ignored, either the default -100 or a real class (0), label smoothing 0, 0.1 and
    0.3, scale 1 and 1/4 (a mean's 1/M). Tolerance 1e-10 absolute: for logits ≤ 3 in size the
    loss, its gradient p - q and its second derivative (diag(p) - p pᵀ) are O(1) per row,
    computed in another order (a shifted exp-sum on arrays against log_softmax on Tensors), so
    they differ by rounding, ≲ 1e-14."""
    low = -1 if ignore_index == -100 else 0
    t = data.draw(hnp.arrays(np.int64, lead, elements=st.integers(low, C - 1)))
    t[t == -1] = -100
    z = t64(data.draw(values(lead + (C,), -3, 3)))
    t = tl.tensor(t)
    params = dict(ignore_index=ignore_index, label_smoothing=eps, scale=scale)
    check_fused_op(
        lambda z: reduce(CrossEntropyFn.apply, z, t, params, reduction),
        lambda z: reduce(CrossEntropyFn.composed, z, t, params, reduction),
        [z],
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_with_every_target_ignored(reduction):
    """No target left: the loss is 0 (for "mean" too: nothing to average, no 0/0) and so is
    every derivative, on both forms."""
    z = rand64(np.random.default_rng(0), 3, 4)
    t = np.full(3, 2)
    y = F.cross_entropy(z, t, ignore_index=2, label_smoothing=0.1, reduction=reduction)
    assert (y.numpy() == 0).all()
    (dz,) = tl.grad(y, [z], grad_outputs=t64(np.ones(y.shape), False))
    assert (dz.numpy() == 0).all()
    params = dict(ignore_index=2, label_smoothing=0.1)
    tt = tl.tensor(t)
    check_fused_op(
        lambda z: reduce(CrossEntropyFn.apply, z, tt, params, reduction),
        lambda z: reduce(CrossEntropyFn.composed, z, tt, params, reduction),
        [z],
    )


# ---------------------------------------------------------------------- the functions
@given(
    st.integers(1, 5),
    st.integers(2, 5),
    st.sampled_from([0.0, 0.1]),
    st.sampled_from(["mean", "sum", "none"]),
    st.booleans(),
    st.data(),
)
def test_cross_entropy_gradcheck_and_composed(N, C, eps, reduction, batched, data):
    shape = (N, 2) if batched else (N,)
    t = data.draw(hnp.arrays(np.int64, shape, elements=st.integers(-1, C - 1)))
    t[t == -1] = -100  # some ignored targets
    z = t64(data.draw(values(shape + (C,), -3, 3)))
    fused = lambda z: F.cross_entropy(z, t, label_smoothing=eps, reduction=reduction)
    composed = lambda z: cross_entropy_ref(z, t, eps=eps, reduction=reduction)
    tl.gradcheck(fused, [z])
    assert_same(fused, composed, [z])


def test_cross_entropy_gradgradcheck():
    rng = np.random.default_rng(0)
    z = rand64(rng, 4, 3)
    t = np.array([0, 2, -100, 1])
    for reduction in ("mean", "none"):
        tl.gradgradcheck(
            lambda z, r=reduction: F.cross_entropy(z, t, label_smoothing=0.1, reduction=r), [z]
        )


def test_cross_entropy_by_hand_and_errors():
    z = t64([[0.0, math.log(3.0)]], False)  # p = (1/4, 3/4)
    assert F.cross_entropy(z, np.array([1])).item() == pytest.approx(-math.log(0.75))
    assert F.cross_entropy(z, np.array([-100])).item() == 0.0  # nothing left to average
    with pytest.raises(ValueError):
        F.cross_entropy(z, np.array([1, 0]))
    with pytest.raises(ValueError):
        F.cross_entropy(z, np.array([1]), reduction="avg")


def test_mse_loss():
    rng = np.random.default_rng(0)
    a, b = rand64(rng, 3, 4), rand64(rng, 3, 4)
    np.testing.assert_allclose(F.mse_loss(a, b).item(), ((a.data - b.data) ** 2).mean())
    assert F.mse_loss(a, b, reduction="none").shape == (3, 4)
    tl.gradcheck(lambda a, b: F.mse_loss(a, b, reduction="sum"), [a, b])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch(reduction):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, 6, 7))
    z, tz = t64(a), torch.tensor(a, dtype=torch.float64, requires_grad=True)
    t = rng.integers(0, 7, size=(2, 6))
    t[0, :2] = -1
    kw = dict(ignore_index=-1, label_smoothing=0.2, reduction=reduction)
    y = F.cross_entropy(z, t, **kw)
    ty = torch.nn.functional.cross_entropy(tz.permute(0, 2, 1), torch.tensor(t), **kw)
    np.testing.assert_allclose(y.data, ty.detach().numpy(), atol=1e-12)
    g = rng.standard_normal(y.shape)
    y.backward(t64(g, False))
    ty.backward(torch.tensor(g))
    np.testing.assert_allclose(z.grad.data, tz.grad.numpy(), atol=1e-12)


@pytest.mark.parametrize("bad", [-1, 5, -100])
def test_a_target_outside_the_classes_is_refused_unless_ignored(bad):
    """A negative target used to wrap silently to the last class (issue 12)."""
    logits = tl.tensor(np.zeros((3, 5)), requires_grad=True)
    targets = np.array([0, bad, 2])
    if bad == -100:  # the default ignore_index: ignored, not an error
        assert np.isfinite(F.cross_entropy(logits, targets).item())
        return
    with pytest.raises(ValueError, match=f"target {bad} is not a class of the logits \\(0..4\\)"):
        F.cross_entropy(logits, targets)


@pytest.mark.parametrize(
    "targets, smoothing, error, words",
    [
        (
            np.array([0.0, 2.0]),
            0.0,
            TypeError,
            "targets must be integer class indices, not float64",
        ),
        (np.array([True, False]), 0.0, TypeError, "not bool"),
        (np.array([0, 2]), 1.5, ValueError, "label_smoothing must be in \\[0, 1\\], not 1.5"),
        (np.array([0, 2]), -0.1, ValueError, "label_smoothing must be in \\[0, 1\\], not -0.1"),
        (np.array([0, 2]), math.nan, ValueError, "label_smoothing must be in \\[0, 1\\], not nan"),
    ],
)
def test_targets_that_are_not_class_indices_and_bad_smoothing_are_refused(
    targets, smoothing, error, words
):
    """As PyTorch refuses them: float targets gave an IndexError from deep in the op, bool
    targets were read as classes 0 and 1, and a smoothing outside [0, 1] (a target
    distribution with negative entries) gave a loss without a word."""
    logits = tl.tensor(np.zeros((2, 3)), requires_grad=True)
    with pytest.raises(error, match=words):
        F.cross_entropy(logits, targets, label_smoothing=smoothing)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize(
    "reduction, eps", [("mean", 0.0), ("sum", 0.1), ("none", 0.0)], ids=["mean", "sum-eps", "none"]
)
def test_on_a_gpu_cross_entropy_is_its_cpu_form(reduction, eps, dtype, monkeypatch, numpy_kernels):
    """On CuPy arrays cross-entropy runs the formulas the CPU runs, each one CUDA kernel (a
    row formula: tensorlab/cuda_rows.py: run_cuda). On CuPy emulated by NumPy, whose CUDA
    kernels run on the CPU (tests/fake_cupy.py), the loss and the logits' gradient equal the
    CPU's up to the order of each row's sums (a tree over the block's threads), with an
    ignored target: within 1e-6 of the largest entry in float32 (a few ulps of sums of 7
    terms), 1e-14 in float64, one unit of bfloat16 (2⁻⁷: computed in float32 and rounded
    once, where a last-bit difference can round the other way). In float64 the gradients
    pass gradcheck."""
    from tests import fake_cupy

    if dtype == "bfloat16" and tl.bfloat16 is None:
        pytest.skip("bfloat16 on the CPU needs ml_dtypes")
    rng = np.random.default_rng(0)
    z = rng.standard_normal((2, 6, 7)) * 3
    t = rng.integers(0, 7, (2, 6))
    t[1, 2] = -100
    g = rng.standard_normal((2, 6)) if reduction == "none" else 0.7

    def run(device):
        logits = tl.tensor(z, device=device).astype(dtype).requires_grad_()
        targets = tl.tensor(t, device=device)
        loss = F.cross_entropy(logits, targets, label_smoothing=eps, reduction=reduction)
        loss.backward(tl.tensor(g, device=device).astype(loss.dtype))
        if dtype == "float64" and device == "cuda":
            fn = lambda x: F.cross_entropy(x, targets, label_smoothing=eps, reduction=reduction)  # noqa: E731
            tl.gradcheck(fn, [tl.tensor(z, device=device, requires_grad=True)])
        return loss.numpy(), logits.grad.numpy()

    cpu = run("cpu")
    fake_cupy.install(monkeypatch)
    fake_cupy.KERNELS.clear()
    gpu = run("cuda")
    assert fake_cupy.KERNELS["k_CrossEntropyFn_forward"] >= 1  # it ran on the (emulated) GPU
    tol = {"float32": 1e-6, "float64": 1e-14, "bfloat16": 2.0**-7}[dtype]
    for a, b in zip(gpu, cpu):
        assert a.dtype == b.dtype and np.isfinite(a.astype(np.float64)).all()
        a, b = a.astype(np.float64), b.astype(np.float64)
        np.testing.assert_allclose(a, b, rtol=0, atol=tol * np.abs(b).max())


def test_mse_loss_refuses_a_target_that_would_broadcast():
    """(3, 1) against (3,) broadcast to 9 pairs: a wrong loss with no error (it gave 1.667
    for these numbers, where the intended loss is 0). A single number is one target for all."""
    with pytest.raises(ValueError, match="target of shape \\(3,\\) is not the input's shape"):
        F.mse_loss(tl.tensor([[1.0], [2.0], [3.0]]), tl.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="reduction must be mean, sum or none"):
        F.mse_loss(tl.ones(2), tl.ones(2), reduction="max")
    assert F.mse_loss(tl.tensor([1.0, 3.0]), 2.0).item() == 1.0
    assert F.mse_loss(tl.tensor([[1.0, 3.0]]), [[1.0, 1.0]], reduction="sum").item() == 4.0
