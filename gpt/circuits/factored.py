"""FactoredMatrix: a low-rank product A @ B kept as its two factors, with its SVD,
eigenvalues, norm, rows and columns computed from them (as for a head's QK and OV circuits,
(vocab × vocab) of rank ≤ d_head)."""

from __future__ import annotations

import numpy as np

from tensorlab import Tensor


def _arr(x, dtype=np.float64) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


class FactoredMatrix:
    """The product ``A @ B`` of A (m, r) and B (r, n), kept factored: nothing of size m × n
    is formed unless asked (:meth:`full`). ``F @ v`` is A (B v); ``F @ M``, ``M @ F`` and
    ``F @ G`` (through the narrower inner factor) stay factored; ``F[i, j]``, ``F[rows]``,
    ``F[:, cols]``, :meth:`row` and :meth:`column` skip the product; :meth:`svd`,
    :meth:`norm` and :meth:`eigenvalues` work on r × r cores."""

    def __init__(self, A, B, dtype=np.float64):
        A, B = _arr(A, dtype), _arr(B, dtype)
        if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
            raise ValueError(
                f"FactoredMatrix needs A (m, r) and B (r, n), got {A.shape} and {B.shape}"
            )
        self.A, self.B = A, B
        self._svd = None

    # ---------------------------------------------------------------- basics
    @property
    def shape(self) -> tuple[int, int]:
        return (self.A.shape[0], self.B.shape[1])

    @property
    def rank_bound(self) -> int:
        return self.A.shape[1]

    @property
    def T(self) -> FactoredMatrix:
        return FactoredMatrix(self.B.T, self.A.T)

    def full(self) -> np.ndarray:
        """The dense product A @ B (m, n)."""
        return self.A @ self.B

    # numpy then defers ``ndarray @ F`` to __rmatmul__ instead of densifying F
    __array_ufunc__ = None

    def __array__(self, dtype=None, copy=None):
        return self.full() if dtype is None else self.full().astype(dtype)

    def __repr__(self) -> str:
        m, n = self.shape
        return f"FactoredMatrix(shape=({m}, {n}), rank<={self.rank_bound})"

    # ---------------------------------------------------------------- products
    def __matmul__(self, other):
        if isinstance(other, FactoredMatrix):
            if self.shape[1] != other.shape[0]:
                raise ValueError(f"shapes {self.shape} and {other.shape} do not chain")
            if self.rank_bound <= other.rank_bound:
                return FactoredMatrix(self.A, (self.B @ other.A) @ other.B)
            return FactoredMatrix(self.A @ (self.B @ other.A), other.B)
        M = _arr(other)
        if M.ndim == 1:
            return self.A @ (self.B @ M)
        return FactoredMatrix(self.A, self.B @ M)

    def __rmatmul__(self, other):
        M = _arr(other)
        if M.ndim == 1:
            return (M @ self.A) @ self.B
        return FactoredMatrix(M @ self.A, self.B)

    def __mul__(self, c: float) -> FactoredMatrix:
        return FactoredMatrix(self.A * float(c), self.B)

    __rmul__ = __mul__

    # ---------------------------------------------------------------- lookups
    def row(self, i: int) -> np.ndarray:
        """Row i of the product, A[i] @ B (n,)."""
        return self.A[i] @ self.B

    def column(self, j: int) -> np.ndarray:
        """Column j of the product, A @ B[:, j] (m,)."""
        return self.A @ self.B[:, j]

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key, slice(None))
        if len(key) != 2:
            raise IndexError("a FactoredMatrix has two axes")
        r, c = key
        A, B = self.A[r], self.B[:, c]
        if A.ndim == 1 and B.ndim == 1:
            return float(A @ B)
        if A.ndim == 1 or B.ndim == 1:
            return A @ B
        return FactoredMatrix(A, B)

    # ---------------------------------------------------------------- spectra
    def _core(self):
        """QR of both factors: A = Q_A R_A, Bᵀ = Q_B R_B, so A B = Q_A (R_A R_Bᵀ) Q_Bᵀ with
        orthonormal columns in Q_A, Q_B; the core R_A R_Bᵀ is at most r × r."""
        Qa, Ra = np.linalg.qr(self.A)
        Qb, Rb = np.linalg.qr(self.B.T)
        return Qa, Ra @ Rb.T, Qb

    def svd(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Thin SVD ``U, S, Vh`` with A B = U diag(S) Vh: U (m, k), S (k,) descending,
        Vh (k, n), k = min(r, m, n); through the SVD of the small core (see ``_core``)."""
        if self._svd is None:
            Qa, core, Qb = self._core()
            Uc, S, Vhc = np.linalg.svd(core, full_matrices=False)
            self._svd = (Qa @ Uc, S, Vhc @ Qb.T)
        return self._svd

    @property
    def S(self) -> np.ndarray:
        """The singular values, descending."""
        return self.svd()[1]

    def norm(self) -> float:
        """Frobenius norm ‖A B‖_F = ‖core‖_F (the Q factors have orthonormal columns)."""
        return float(np.linalg.norm(self._core()[1]))

    def eigenvalues(self) -> np.ndarray:
        """The eigenvalues of BA (r × r), sorted by decreasing magnitude: the nonzero ones are
        exactly the nonzero eigenvalues of AB (the rest of AB's are zero). Square only."""
        m, n = self.shape
        if m != n:
            raise ValueError(f"eigenvalues need a square matrix, this one is {m}×{n}")
        ev = np.linalg.eigvals(self.B @ self.A)
        return ev[np.argsort(-np.abs(ev), kind="stable")]

    def trace(self) -> float:
        """tr(AB) = tr(BA)."""
        return float(np.einsum("ij,ji->", self.A, self.B))

    def copying_score(self) -> float:
        """Σ λ / Σ |λ| over the eigenvalues λ of the (square) matrix, as in the paper: near 1
        when the matrix mostly copies (positive eigenvalues: an OV circuit raising the logit
        of the token attended to), near -1 for the opposite, near 0 for neither."""
        ev = self.eigenvalues()
        denom = np.abs(ev).sum()
        return float(ev.sum().real / denom) if denom > 0 else 0.0

    def summary(self, k: int = 5) -> dict:
        """A small report: shape, rank bound, top-k singular values, Frobenius norm, and for
        square matrices the copying score and the top-k eigenvalues."""
        out = {
            "shape": self.shape,
            "rank_bound": self.rank_bound,
            "top_singular_values": self.S[:k].tolist(),
            "frobenius_norm": self.norm(),
        }
        if self.shape[0] == self.shape[1]:
            ev = self.eigenvalues()
            out["copying_score"] = self.copying_score()
            out["top_eigenvalues"] = [complex(e) if e.imag else float(e.real) for e in ev[:k]]
        return out
