"""gpt/circuits/factored.py: FactoredMatrix against the dense product."""

from __future__ import annotations

import numpy as np
import pytest

from gpt import circuits as C


@pytest.mark.parametrize("m,r,n", [(7, 3, 5), (6, 4, 6), (4, 6, 5), (9, 2, 9)])
def test_factored_matrix_matches_dense(m, r, n):
    rng = np.random.default_rng(m * 100 + r * 10 + n)
    A, B = rng.standard_normal((m, r)), rng.standard_normal((r, n))
    F, D = C.FactoredMatrix(A, B), A @ B
    assert F.shape == (m, n) and F.rank_bound == r
    np.testing.assert_allclose(F.full(), D)
    np.testing.assert_allclose(np.asarray(F), D)
    U, S, Vh = F.svd()
    k = min(m, n, r)
    np.testing.assert_allclose(S, np.linalg.svd(D, compute_uv=False)[:k], atol=1e-10)
    np.testing.assert_allclose((U * S) @ Vh, D, atol=1e-10)
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-10)
    np.testing.assert_allclose(F.norm(), np.linalg.norm(D))
    v, w = rng.standard_normal(n), rng.standard_normal(m)
    np.testing.assert_allclose(F @ v, D @ v)
    np.testing.assert_allclose(w @ F, w @ D)
    M, N = rng.standard_normal((n, 3)), rng.standard_normal((2, m))
    assert isinstance(F @ M, C.FactoredMatrix) and isinstance(N @ F, C.FactoredMatrix)
    np.testing.assert_allclose((F @ M).full(), D @ M)
    np.testing.assert_allclose((N @ F).full(), N @ D)
    G = C.FactoredMatrix(rng.standard_normal((n, 2)), rng.standard_normal((2, 4)))
    np.testing.assert_allclose((F @ G).full(), D @ G.full())
    np.testing.assert_allclose(F.T.full(), D.T)
    np.testing.assert_allclose((2 * F).full(), 2 * D)
    for i in range(m):
        np.testing.assert_allclose(F.row(i), D[i])
        np.testing.assert_allclose(F[i], D[i])
    for j in range(n):
        np.testing.assert_allclose(F.column(j), D[:, j])
    assert F[1, 2] == pytest.approx(D[1, 2])
    np.testing.assert_allclose(F[1:3].full(), D[1:3])
    np.testing.assert_allclose(F[:, [0, 2]].full(), D[:, [0, 2]])
    with pytest.raises(ValueError):
        C.FactoredMatrix(A, B.T if n != r else B[:-1])


@pytest.mark.parametrize("n,r", [(6, 3), (8, 8), (5, 1)])
def test_factored_eigenvalues_and_copying_score(n, r):
    rng = np.random.default_rng(n + r)
    F = C.FactoredMatrix(rng.standard_normal((n, r)), rng.standard_normal((r, n)))
    dense = np.linalg.eigvals(F.full())
    top = dense[np.argsort(-np.abs(dense))][:r]  # the other n - r are ~0
    np.testing.assert_allclose(np.sort_complex(F.eigenvalues()), np.sort_complex(top), atol=1e-8)
    np.testing.assert_allclose(np.abs(dense[np.argsort(-np.abs(dense))][r:]), 0, atol=1e-8)
    assert F.trace() == pytest.approx(np.trace(F.full()))
    expected = dense.sum().real / np.abs(dense).sum()
    assert F.copying_score() == pytest.approx(expected, abs=1e-8)
    # a positive semi-definite "copying" matrix scores 1, its negative -1
    P = C.FactoredMatrix(F.A, F.A.T)
    assert P.copying_score() == pytest.approx(1.0)
    assert (-1 * P).copying_score() == pytest.approx(-1.0)
    s = F.summary(k=2)
    assert s["shape"] == (n, n) and len(s["top_singular_values"]) == min(2, r)
    assert s["frobenius_norm"] == pytest.approx(np.linalg.norm(F.full()))
    with pytest.raises(ValueError, match="square"):
        C.FactoredMatrix(np.ones((3, 2)), np.ones((2, 4))).eigenvalues()
