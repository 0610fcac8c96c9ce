"""Tools for reading a GPT's circuits ("A Mathematical Framework for Transformer Circuits",
Elhage et al. 2021): activation caching and interventions through hook points, QK and OV
circuits as factored matrices, composition scores, zero-layer bigram statistics, and
induction-head scores.

Convention. The code multiplies row vectors from the left: a residual-stream vector is a row
x (1, d_model) and a layer computes x @ W. The paper writes column vectors and W x, so every
matrix here is the transpose of the paper's, and products read left to right in the order the
data flows:

=====================  ======================================  ===========================
circuit                here (row vectors)                       paper (column vectors)
=====================  ======================================  ===========================
QK, (vocab, vocab)     W_E W_Q^h (W_K^h)ᵀ W_Eᵀ                  W_Eᵀ W_QK^h W_E
OV, (vocab, vocab)     W_E W_V^h W_O^h W_U                      W_U W_O^h W_V^h W_E
=====================  ======================================  ===========================

The QK matrix is the same in both: entry [i, j] is the attention score (before the 1/√d_head
scale and the softmax) of a query token i for a key token j. The OV matrix here is the
transpose of the paper's: row i (the paper's column i) is what attending to token i adds to
the logits of every output token.

What the circuits include (``qk_circuit``, ``ov_circuit``):

- the direct path only: W_E for the stream a head reads, W_U for what it writes; for heads in
  layer ≥ 1 this leaves out what earlier layers wrote (see ``composition_scores``);
- token embeddings by default; ``"pos"`` selects the learned positional embeddings W_pos
  instead (``qk_circuit(..., query="pos", key="pos")`` is the positional QK term, and the
  mixed token/position terms are there too). With learned positions the full score of a query
  at (token i, position p) for a key at (token j, position s) is the sum of the four terms;
- no biases (b_Q, b_K, b_V, b_O): a model built with ``bias=False`` has none to leave out;
- norms: the gain of the block's pre-attention norm is folded into W_Q, W_K, W_V, and the
  final norm's gain into W_U. Each norm also divides by a per-position scale (the RMS, or the
  standard deviation after LayerNorm's centring), which is not a linear map and is left out,
  as are the centring and LayerNorm's bias: for a normed model the circuits are exact up to
  those. For residual vectors of zero mean and unit RMS (and ``bias=False``) they are exact,
  and so they are for a model built with ``norm="none"`` (and ``bias=False``).

Factored matrices. A circuit like W_E W_V^h W_O^h W_U is (vocab × vocab) but of rank at most
d_head, so it is kept as a :class:`FactoredMatrix` A @ B with A (vocab, d_head) and
B (d_head, vocab): its SVD, eigenvalues, norm, rows and columns come from the small factors.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterable

import numpy as np

import tensorlab as tl
from nn.module import HookPoint
from tensorlab import Tensor

__all__ = [
    "FactoredMatrix",
    "hook_names",
    "hooks",
    "run_with_cache",
    "run_with_hooks",
    "token_losses",
    "qk_circuit",
    "ov_circuit",
    "W_QK",
    "W_OV",
    "composition_scores",
    "bigram_table",
    "conditional_entropy",
    "bigram_kl",
    "model_bigram_logprobs",
    "repeated_tokens",
    "induction_scores",
    "previous_token_scores",
    "repeated_sequence_losses",
    "induction_report",
    "format_head_table",
]


# ====================================================================== hooks and caching
def hook_names(model) -> list[str]:
    """The names of every :class:`~nn.module.HookPoint` in ``model`` (module order)."""
    return [name for name, m in model.named_modules() if isinstance(m, HookPoint)]


def _select(model, names) -> dict[str, object]:
    """Modules chosen by ``names``: None (every hook point), one name, a list of names, or a
    predicate ``name -> bool`` over the hook point names. Explicit names may also be any
    other submodule (``"blocks.0.ln1"``), whose output is then what is cached or replaced."""
    modules = dict(model.named_modules())
    points = hook_names(model)
    if names is None:
        chosen = points
    elif callable(names):
        chosen = [n for n in points if names(n)]
    else:
        chosen = [names] if isinstance(names, str) else list(names)
        unknown = [n for n in chosen if n not in modules or n == ""]
        if unknown:
            raise KeyError(
                f"no module named {', '.join(map(repr, unknown))}; the hook points are: "
                + ", ".join(points)
            )
    return {n: modules[n] for n in chosen}


def _as_tokens(tokens) -> Tensor:
    if isinstance(tokens, Tensor):
        return tokens
    a = np.asarray(tokens)
    if a.ndim == 1:
        a = a[None]
    return tl.tensor(a.astype(np.int64))


def _to_numpy(x) -> np.ndarray:
    if isinstance(x, Tensor):
        return np.array(x.numpy(), copy=True)
    return np.array(x, copy=True)


@contextlib.contextmanager
def hooks(model, fwd_hooks: Iterable[tuple[str | Callable[[str], bool], Callable]] = ()):
    """Register forward hooks by name for the duration of a ``with`` block; they are removed
    on exit, also when the block raises.

    ``fwd_hooks``: pairs ``(name, fn)`` where name is a module name (usually a hook point) or
    a predicate over hook point names, and ``fn(activation)`` returns a replacement Tensor (or
    array) or None to leave the activation as it is. A function with two required positional
    parameters is called as ``fn(activation, name)`` (parameters with defaults don't count).
    """
    handles = []
    try:
        for name, fn in fwd_hooks:
            for n, module in _select(model, name).items():
                handles.append(module.register_forward_hook(_wrap_hook(fn, n)))
        yield model
    finally:
        for h in handles:
            h.remove()


def _wrap_hook(fn: Callable, name: str):
    try:
        params = inspect.signature(fn).parameters.values()
        n_pos = sum(
            p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
            for p in params
        )
        varargs = any(p.kind == p.VAR_POSITIONAL for p in params)
    except (TypeError, ValueError):
        n_pos, varargs = 1, False
    two = varargs or n_pos >= 2

    def hook(module, inputs, output):
        out = fn(output, name) if two else fn(output)
        if out is not None and not isinstance(out, Tensor):
            out = tl.tensor(np.asarray(out, dtype=output.dtype), device=output.device)
        return out

    return hook


@contextlib.contextmanager
def _eval_mode(model, grad: bool):
    was_training = model.training
    model.eval()
    try:
        if grad:
            yield
        else:
            with tl.no_grad():
                yield
    finally:
        model.train(was_training)


def run_with_cache(
    model, tokens, names=None, *, grad: bool = False
) -> tuple[Tensor, dict[str, np.ndarray]]:
    """Run ``model`` on ``tokens`` (B, T) (or one sequence (T,)) and record activations.

    Returns ``(logits, cache)``: the logits Tensor (B, T, vocab) and a dict from hook name to a
    NumPy copy of the activation, in the order the forward pass reached them, e.g.
    ``cache["blocks.1.attn.hook_pattern"]`` (B, H, T, T). ``names`` selects what to record:
    None (every hook point), a name or list of names, or a predicate ``name -> bool``.

    The model runs in eval mode (no dropout; restored afterwards) and without building a graph
    unless ``grad=True``; the hooks are removed afterwards, also on an error. Hooking an
    attention hook point makes that layer take its composed (unfused) path, so caching only
    the residual-stream hooks keeps the fast path.
    """
    cache: dict[str, np.ndarray] = {}

    def record(name):
        def fn(act):
            cache[name] = _to_numpy(act)

        return fn

    selected = _select(model, names)
    with hooks(model, [(n, record(n)) for n in selected]), _eval_mode(model, grad):
        logits, _ = model(_as_tokens(tokens))
    return logits, cache


def run_with_hooks(
    model,
    tokens,
    fwd_hooks: Iterable[tuple[str | Callable[[str], bool], Callable]] = (),
    *,
    grad: bool = False,
) -> Tensor:
    """Run ``model`` on ``tokens`` with temporary forward hooks (interventions) and return the
    logits (B, T, vocab). ``fwd_hooks``: pairs ``(name or predicate, fn)``; ``fn(activation)``
    returns the replacement or None (see :func:`hooks`). Eval mode, no graph unless ``grad``.

    Example: zero-ablate head 2 of layer 0::

        def ablate(z):           # z (B, T, H, d_head)
            z = z.numpy().copy(); z[:, :, 2] = 0; return z
        run_with_hooks(model, tokens, [("blocks.0.attn.hook_z", ablate)])
    """
    with hooks(model, fwd_hooks), _eval_mode(model, grad):
        logits, _ = model(_as_tokens(tokens))
    return logits


def token_losses(logits, tokens) -> np.ndarray:
    """Per-token cross-entropy (B, T-1): position t predicts token t+1."""
    lg = _to_numpy(logits).astype(np.float64)[:, :-1]
    tok = np.asarray(tokens.numpy() if isinstance(tokens, Tensor) else tokens)
    if tok.ndim == 1:
        tok = tok[None]
    lg = lg - lg.max(-1, keepdims=True)
    logp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    return -np.take_along_axis(logp, tok[:, 1:, None], axis=-1)[..., 0]


# ====================================================================== factored matrices
def _arr(x, dtype=np.float64) -> np.ndarray:
    if isinstance(x, Tensor):
        x = x.numpy()
    return np.asarray(x, dtype=dtype)


class FactoredMatrix:
    """The product ``A @ B`` of A (m, r) and B (r, n), kept factored.

    Nothing of size m × n is formed unless asked (:meth:`full`, or ``@`` with a dense m×n
    result the caller asked for). Useful when r ≪ m, n, as for a head's QK and OV circuits
    (r = d_head, m = n = vocab).

    - ``shape`` (m, n), ``rank_bound`` r, ``T`` (Bᵀ Aᵀ);
    - ``F @ v`` (vector) → A (B v) (m,); ``F @ M`` (matrix) → FactoredMatrix(A, B M);
      ``M @ F`` → FactoredMatrix(M A, B); ``F @ G`` (both factored) → factored, through the
      narrower inner factor;
    - ``svd()`` → U (m, k), S (k,), Vᵀ (k, n) from QR of the factors and the SVD of a small
      core; ``S`` the singular values; ``norm()`` the Frobenius norm;
    - ``eigenvalues()`` (square only): the nonzero eigenvalues of AB, which are those of BA
      (r × r);
    - ``row(i)``, ``column(j)``, ``F[i, j]``, ``F[rows]``, ``F[:, cols]`` without the product;
    - ``summary()``: singular values, copying score, norm.
    """

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
        return self.svd()[1]

    @property
    def U(self) -> np.ndarray:
        return self.svd()[0]

    @property
    def Vh(self) -> np.ndarray:
        return self.svd()[2]

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
            out["top_eigenvalues"] = [
                complex(e) if abs(e.imag) > 0 else float(e.real) for e in ev[:k]
            ]
        return out


# ====================================================================== circuits
def _attn(model, layer: int):
    n = len(model.blocks)
    if not -n <= layer < n:
        raise IndexError(f"layer {layer} is out of range for a model of {n} layers")
    return model.blocks[layer]


def _check_head(attn, head: int) -> None:
    if not 0 <= head < attn.n_head:
        raise IndexError(f"head {head} is out of range for {attn.n_head} heads")


def _gain(norm) -> np.ndarray | None:
    w = getattr(norm, "w", None)  # None: no final norm, or norm="none"
    return None if w is None else _arr(w)


def _head_weights(model, layer: int, head: int, fold_ln: bool = True):
    """W_Q, W_K, W_V (d_model, d_head) and W_O (d_head, d_model) of one head, float64, with
    the block's pre-attention norm gain folded into the input side."""
    block = _attn(model, layer)
    attn = block.attn
    _check_head(attn, head)
    WQ, WK, WV = (_arr(W[head]) for W in (attn.W_Q, attn.W_K, attn.W_V))
    WO = _arr(attn.W_O[head])
    g = _gain(block.ln1) if fold_ln and getattr(block, "placement", "pre") != "post" else None
    if g is not None:
        WQ, WK, WV = g[:, None] * WQ, g[:, None] * WK, g[:, None] * WV
    return WQ, WK, WV, WO


def _unembed(model, fold_ln: bool = True) -> np.ndarray:
    WU = _arr(model.W_U)
    g = _gain(model.ln_f) if fold_ln else None
    return WU if g is None else g[:, None] * WU


def _source(model, which: str) -> np.ndarray:
    if which == "token":
        return _arr(model.W_E)
    if which == "pos":
        if model.pos is None or not hasattr(model.pos, "W_pos"):
            raise ValueError(
                f"positional={model.config.positional!r} has no learned position table W_pos; "
                "the positional terms need positional='learned'"
            )
        return _arr(model.pos.W_pos)
    raise ValueError(f"expected 'token' or 'pos', got {which!r}")


def W_QK(model, layer: int, head: int, fold_ln: bool = True) -> FactoredMatrix:
    """The head's bilinear form on the residual stream, W_Q^h (W_K^h)ᵀ (d_model × d_model,
    rank ≤ d_head): score(query x, key y) = x W_QK yᵀ (before the 1/√d_head scale)."""
    WQ, WK, _, _ = _head_weights(model, layer, head, fold_ln)
    return FactoredMatrix(WQ, WK.T)


def W_OV(model, layer: int, head: int, fold_ln: bool = True) -> FactoredMatrix:
    """What the head writes for each residual vector it attends to: W_V^h W_O^h
    (d_model × d_model, rank ≤ d_head), as a row-vector map x ↦ x W_OV."""
    _, _, WV, WO = _head_weights(model, layer, head, fold_ln)
    return FactoredMatrix(WV, WO)


def qk_circuit(
    model,
    layer: int,
    head: int,
    query: str = "token",
    key: str = "token",
    scale: bool = False,
    fold_ln: bool = True,
) -> FactoredMatrix:
    """The QK circuit W_E W_Q^h (W_K^h)ᵀ W_Eᵀ (vocab × vocab) as A = W_E W_Q^h (vocab, d_head),
    B = (W_K^h)ᵀ W_Eᵀ (d_head, vocab): entry [i, j] is the score of query token i for key
    token j through the direct path (see the module docstring for what is included).

    ``query``/``key``: "token" (W_E) or "pos" (learned W_pos) for either side, so
    ``query="pos", key="pos"`` is the positional term (block_size × block_size).
    ``scale``: multiply by the attention's 1/√d_head, so entries are the pre-softmax logits.
    """
    WQ, WK, _, _ = _head_weights(model, layer, head, fold_ln)
    A = _source(model, query) @ WQ
    if scale:
        A = A * _attn(model, layer).attn.scale
    return FactoredMatrix(A, WK.T @ _source(model, key).T)


def ov_circuit(
    model, layer: int, head: int, source: str = "token", fold_ln: bool = True
) -> FactoredMatrix:
    """The OV circuit W_E W_V^h W_O^h W_U (vocab × vocab) as A = W_E W_V^h (vocab, d_head),
    B = W_O^h W_U (d_head, vocab): row i is the change in every output logit when the head
    attends fully to token i, through the direct path (the paper's W_U W_O^h W_V^h W_E,
    transposed). ``source="pos"`` uses W_pos for the attended vector instead of W_E."""
    _, _, WV, WO = _head_weights(model, layer, head, fold_ln)
    return FactoredMatrix(_source(model, source) @ WV, WO @ _unembed(model, fold_ln))


def composition_scores(model, fold_ln: bool = True) -> dict[str, np.ndarray]:
    """Q-, K- and V-composition scores between every head of an earlier layer and every head
    of a later one, as in the paper: ‖W_A W_B‖_F / (‖W_A‖_F ‖W_B‖_F), with W_B = W_OV of the
    earlier head and W_A the later head's W_QK (Q: its query side, K: its key side) or W_OV.

    In row-vector form: Q-composition ‖W_OV^{h0} W_QK^{h1}‖, K-composition
    ‖W_QK^{h1} (W_OV^{h0})ᵀ‖, V-composition ‖W_OV^{h0} W_OV^{h1}‖ (Frobenius norms do not see
    transposes, so these equal the paper's). Returns arrays "q", "k", "v" of shape
    (n_layer, n_head, n_layer, n_head): [l1, h1, l0, h0] for l0 < l1 (zero elsewhere).
    """
    L = len(model.blocks)
    H = model.config.n_head if L else 0
    qk = {(l, h): W_QK(model, l, h, fold_ln) for l in range(L) for h in range(H)}
    ov = {(l, h): W_OV(model, l, h, fold_ln) for l in range(L) for h in range(H)}
    norms = {key: (qk[key].norm(), ov[key].norm()) for key in qk}
    out = {c: np.zeros((L, H, L, H)) for c in "qkv"}
    for l1 in range(L):
        for h1 in range(H):
            for l0 in range(l1):
                for h0 in range(H):
                    o, q = ov[l0, h0], qk[l1, h1]
                    n_o, n_q = norms[l0, h0][1], norms[l1, h1][0]
                    n_v = norms[l1, h1][1]
                    out["q"][l1, h1, l0, h0] = (o @ q).norm() / (n_o * n_q)
                    out["k"][l1, h1, l0, h0] = (q @ o.T).norm() / (n_q * n_o)
                    out["v"][l1, h1, l0, h0] = (o @ ov[l1, h1]).norm() / (n_o * n_v)
    return out


# ====================================================================== zero layers: bigrams
def bigram_table(ids, vocab: int) -> np.ndarray:
    """Counts (vocab, vocab): ``table[a, b]`` = how often token b follows token a in ``ids``."""
    ids = np.asarray(ids, dtype=np.int64).ravel()
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(f"token ids must lie in [0, {vocab}), got [{ids.min()}, {ids.max()}]")
    table = np.zeros((vocab, vocab), np.int64)
    np.add.at(table, (ids[:-1], ids[1:]), 1)
    return table


def _conditional(table) -> tuple[np.ndarray, np.ndarray]:
    """p(a) (rows' share of all pairs) and p(b | a) (rows normalized; empty rows stay 0)."""
    t = np.asarray(table, dtype=np.float64)
    rows = t.sum(1)
    total = rows.sum()
    if total <= 0:
        raise ValueError("the bigram table is empty")
    cond = np.divide(t, rows[:, None], out=np.zeros_like(t), where=rows[:, None] > 0)
    return rows / total, cond


def conditional_entropy(table) -> float:
    """H(next | current) = -Σ_a p(a) Σ_b p(b|a) log p(b|a) in nats: the lowest mean
    cross-entropy any model that sees only the current token can reach on these pairs."""
    p_a, cond = _conditional(table)
    logc = np.log(cond, out=np.zeros_like(cond), where=cond > 0)
    return float(-(p_a[:, None] * cond * logc).sum())


def model_bigram_logprobs(model) -> np.ndarray:
    """log p_model(b | a) (vocab, vocab): the model's next-token distribution after each token
    a fed alone (a batch of one-token sequences at position 0). For a zero-layer model without
    positions this is its whole behaviour: log_softmax(W_E W_U) (up to the final norm)."""
    V = model.config.vocab_size
    logits, _ = run_with_cache(model, np.arange(V)[:, None], names=[])
    lg = _arr(logits)[:, 0]
    lg = lg - lg.max(-1, keepdims=True)
    return lg - np.log(np.exp(lg).sum(-1, keepdims=True))


def bigram_kl(model, table) -> float:
    """Σ_a p(a) KL(p(·|a) ‖ p_model(·|a)) in nats, weighting each current token by its share of
    the table's pairs: the gap between the model's cross-entropy on these pairs and the floor
    :func:`conditional_entropy` (cross-entropy = entropy + KL)."""
    p_a, cond = _conditional(table)
    logq = model_bigram_logprobs(model)
    logc = np.log(cond, out=np.zeros_like(cond), where=cond > 0)
    return float((p_a[:, None] * cond * (logc - logq)).sum())


# ====================================================================== induction heads
def repeated_tokens(
    batch: int,
    seq_len: int,
    low: int = 0,
    high: int = 64,
    seed: int = 0,
    bos: int | None = None,
    distinct: bool = True,
) -> np.ndarray:
    """``batch`` sequences [r, r] (optionally after a first token ``bos``) with r of
    ``seq_len`` random tokens from [low, high): (batch, 2·seq_len (+1)) int64.

    ``distinct``: draw r without repeats when the range allows, so every token of the second
    copy has exactly one earlier occurrence to look up (with a small vocabulary, repeats inside
    r would split even a perfect induction head's attention)."""
    if high - low <= 0:
        raise ValueError(f"empty token range [{low}, {high})")
    rng = np.random.default_rng(seed)
    if distinct and high - low >= seq_len:
        r = np.stack([rng.permutation(high - low)[:seq_len] for _ in range(batch)]) + low
    else:
        r = rng.integers(low, high, size=(batch, seq_len))
    out = np.concatenate([r, r], axis=1)
    if bos is not None:
        out = np.concatenate([np.full((batch, 1), bos), out], axis=1)
    return out.astype(np.int64)


def _patterns(model, tokens) -> np.ndarray:
    """Attention patterns of every layer, stacked: (n_layer, B, H, T, T)."""
    L = len(model.blocks)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(L)]
    logits, cache = run_with_cache(model, tokens, names=names)
    return np.stack([cache[n] for n in names]) if L else np.zeros((0,)), logits


def _induction_from(pat: np.ndarray, seq_len: int, offset: int) -> np.ndarray:
    """Mean attention (per layer, head) from each token of the second copy to the token after
    its earlier occurrence: query q = offset + seq_len + i, key q - seq_len + 1."""
    q = offset + seq_len + np.arange(seq_len)
    return pat[:, :, :, q, q - seq_len + 1].mean(axis=(1, 3))


def _default_seq_len(model, bos) -> int:
    return (model.config.block_size - (bos is not None)) // 2


def induction_scores(
    model,
    seq_len: int | None = None,
    batch: int = 8,
    low: int = 0,
    high: int | None = None,
    seed: int = 0,
    bos: int | None = None,
    distinct: bool = True,
) -> np.ndarray:
    """Induction score of every head (n_layer, n_head) on :func:`repeated_tokens`: the mean
    attention from each token in the second copy to the token right after its earlier copy
    (seq_len - 1 positions back). An induction head scores near 1, other heads near 0 (a
    uniform head scores about 1/position). ``seq_len`` defaults to half the block size;
    ``high`` to the vocabulary size."""
    return induction_report(model, seq_len, batch, low, high, seed, bos, distinct)["induction"]


def previous_token_scores(model, tokens=None, **kwargs) -> np.ndarray:
    """Mean attention to the previous position (per layer and head, (n_layer, n_head)) over
    every position t ≥ 1 of ``tokens`` (default: :func:`repeated_tokens` with ``kwargs``
    as for :func:`induction_scores`)."""
    if tokens is None:
        return induction_report(model, **kwargs)["previous_token"]
    pat, _ = _patterns(model, tokens)
    T = pat.shape[-1]
    t = np.arange(1, T)
    return pat[:, :, :, t, t - 1].mean(axis=(1, 3))


def repeated_sequence_losses(model, **kwargs) -> dict:
    """Per-position loss on :func:`repeated_tokens` (kwargs as for :func:`induction_scores`):
    "per_position" (T-1,) mean over the batch, and "first_half"/"second_half" means over the
    predictions of tokens in the first and second copy of r (the first token of each copy
    is left out: it cannot be predicted from context). A model that learns in context (an
    induction head) has a much lower second-half loss."""
    rep = induction_report(model, **kwargs)
    return {k: rep[k] for k in ("per_position", "first_half", "second_half")}


def induction_report(
    model,
    seq_len: int | None = None,
    batch: int = 8,
    low: int = 0,
    high: int | None = None,
    seed: int = 0,
    bos: int | None = None,
    distinct: bool = True,
) -> dict:
    """Everything from one run on repeated random tokens: "induction" and "previous_token"
    scores (n_layer, n_head), "per_position" loss (T-1,), "first_half" and "second_half" mean
    losses, and the "tokens" used."""
    seq_len = _default_seq_len(model, bos) if seq_len is None else seq_len
    high = model.config.vocab_size if high is None else high
    offset = 0 if bos is None else 1
    if 2 * seq_len + offset > model.config.block_size:
        raise ValueError(
            f"2·seq_len{' + 1' if offset else ''} = {2 * seq_len + offset} positions exceed "
            f"block_size={model.config.block_size}"
        )
    if seq_len < 2:
        raise ValueError(f"seq_len must be at least 2, got {seq_len}")
    tokens = repeated_tokens(batch, seq_len, low, high, seed, bos, distinct)
    pat, logits = _patterns(model, tokens)
    T = tokens.shape[1]
    t = np.arange(1, T)
    L, H = len(model.blocks), model.config.n_head
    per_pos = token_losses(logits, tokens).mean(0)  # entry t-1 predicts token t
    # tokens offset+1 .. offset+seq_len-1 (first copy), offset+seq_len+1 .. T-1 (second)
    first = per_pos[offset : offset + seq_len - 1].mean()
    second = per_pos[offset + seq_len :].mean()
    return {
        "induction": _induction_from(pat, seq_len, offset) if L else np.zeros((0, H)),
        "previous_token": pat[:, :, :, t, t - 1].mean(axis=(1, 3)) if L else np.zeros((0, H)),
        "per_position": per_pos,
        "first_half": float(first),
        "second_half": float(second),
        "tokens": tokens,
    }


def format_head_table(
    scores: np.ndarray,
    title: str = "",
    fmt: str = "{:6.3f}",
    row: str = "layer",
    col: str = "h",
) -> str:
    """A (rows, heads) array as a small text table; rows are labelled ``f"{row} {i}"`` and
    columns ``f"{col}{j}"`` (default: layers × heads)."""
    R, H = scores.shape
    width = len(f"{row} {R - 1}")
    lines = [title] if title else []
    lines.append(" " * width + " " + " ".join(f"{col + str(h):>6}" for h in range(H)))
    for i in range(R):
        lines.append(f"{row + ' ' + str(i):<{width}} " + " ".join(fmt.format(s) for s in scores[i]))
    return "\n".join(lines)
