"""The check every op test runs: forward against NumPy, gradient against finite differences.

Tolerances. ``tl.gradcheck`` compares the autograd Jacobian with central differences
(f(x + ε) - f(x - ε)) / 2ε in float64 with its defaults ε = 1e-6, atol = 1e-5, rtol = 1e-3.
The truncation error of a central difference is ~ε²·|f'''| ≈ 1e-12 and the rounding error is
~1e-16·|f| / ε ≈ 1e-10 for the bounded, well-conditioned inputs the strategies draw (values in
[-2, 2], kept away from kinks and ties). Both are five orders of magnitude below atol, so a
failure means a wrong derivative, not noise: the tolerances are never loosened to pass a test.

The forward is compared with the NumPy expression in float64 at rtol = 1e-10: the two compute
the same formula up to rounding (a few ulps), except where the engine uses a reformulation for
stability (sigmoid via tanh, log-softmax via max shift), which still agrees far below 1e-10.
"""

from __future__ import annotations

import numpy as np

import tensorlab as tl


def leaf(array, requires_grad: bool = True) -> tl.Tensor:
    """A float64 leaf owning a contiguous copy of ``array`` (gradcheck perturbs it in place)."""
    return tl.tensor(np.array(array, dtype=np.float64), requires_grad=requires_grad)


def check_op(fn, np_fn, *arrays, gradgrad: bool = False, rtol: float = 1e-10, atol=1e-12):
    """Assert ``fn(*tensors)`` equals ``np_fn(*arrays)`` and passes gradcheck (and
    gradgradcheck when asked). Returns the output tensor."""
    inputs = [leaf(a) for a in arrays]
    out = fn(*inputs)
    expected = np.asarray(np_fn(*[np.array(a, dtype=np.float64) for a in arrays]))
    assert isinstance(out, tl.Tensor)
    assert out.shape == expected.shape, (out.shape, expected.shape)
    assert out.dtype == np.float64
    assert out.requires_grad
    np.testing.assert_allclose(out.numpy(), expected, rtol=rtol, atol=atol)
    assert tl.gradcheck(fn, inputs)
    if gradgrad:
        assert tl.gradgradcheck(fn, inputs)
    return out
