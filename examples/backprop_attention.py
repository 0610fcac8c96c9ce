"""Backpropagation through one attention head, three ways.

One causal attention head on a sequence of T = 5 tokens, in float64:

    Q = X W_Q,   K = X W_K,   V = X W_V          (X: T × d_model, W_*: d_model × d_head)
    S = Q Kᵀ/√d_h + P                            (P: 0 on and below the diagonal, -∞ above)
    A = softmax(S) row by row,   Y = A V,   L = Σ Y ⊙ G   (so dL/dY = G, a fixed random array)

with d_h = d_head and the notation of docs/README.md (dX := ∂L/∂X, of X's shape). We print A
and dS, both T × T (dS is 0 wherever A is, above the diagonal), then compute dQ, dK, dV (and
dW_Q, dW_K, dW_V, dX) three ways and compare them:

1. by hand in NumPy, following docs/derivations_nn.md ("Scaled dot-product attention"):
   dV = Aᵀ G,  dA = G Vᵀ,  dS = A ⊙ (dA - rowsum(dA ⊙ A)),  dQ = dS K/√d_h,  dK = dSᵀ Q/√d_h;
2. by tensorlab's autograd, both through the fused node F.scaled_dot_product_attention and
   through the composed ops (matmul, where, softmax, matmul);
3. by central finite differences, (L(x + Δ) - L(x - Δ)) / 2Δ for every entry.

Run: python examples/backprop_attention.py   (about a second)

notebooks/04_attention_by_hand.py walks through the same head one backward line at a time,
against the engine's gradient of each intermediate, and on to many heads and sequences at
once; its exercise has you write the whole head's backward and grades it.
"""

from __future__ import annotations

import math

import numpy as np

import nn.functional as F
import tensorlab as tl

T, D_MODEL, D_HEAD = 5, 6, 4
EPS = 1e-6  # the finite-difference step Δ
# The largest differences we accept (tests/test_docs.py holds the example to them): the
# hand-written backward and autograd evaluate the same formulas up to rounding (~1e-16 per
# operation), and a central difference in float64 with Δ = 1e-6 is good to ~1e-9.
TOLERANCES = {"hand vs autograd": 1e-12, "vs finite differences": 1e-7}


# ---------------------------------------------------------------------- 1. by hand
def forward(X, W_Q, W_K, W_V, G):
    """The head's forward pass; returns the loss L and what the backward needs."""
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V
    scale = 1.0 / math.sqrt(Q.shape[-1])
    S = Q @ K.T * scale
    S = np.where(np.tri(T, dtype=bool), S, -np.inf)  # causal: query i sees keys j ≤ i
    A = np.exp(S - S.max(axis=-1, keepdims=True))
    A /= A.sum(axis=-1, keepdims=True)  # masked entries: exp(-∞) = 0
    Y = A @ V
    return float((Y * G).sum()), (Q, K, V, A, scale)


def backward(X, W_Q, W_K, W_V, G, saved):
    """The backward pass written out, one line per step of the derivation."""
    Q, K, V, A, scale = saved
    dY = G  # L = Σ Y ⊙ G
    dV = A.T @ dY
    dA = dY @ V.T
    dS = A * (dA - (dA * A).sum(axis=-1, keepdims=True))  # softmax VJP, row by row
    dQ = dS @ K * scale
    dK = dS.T @ Q * scale
    grads = {"dQ": dQ, "dK": dK, "dV": dV, "dA": dA, "dS": dS}
    # through the projections Q = X W_Q etc.: dW = Xᵀ dQ, and X collects all three paths
    grads["dW_Q"], grads["dW_K"], grads["dW_V"] = X.T @ dQ, X.T @ dK, X.T @ dV
    grads["dX"] = dQ @ W_Q.T + dK @ W_K.T + dV @ W_V.T
    return grads


# ---------------------------------------------------------------------- 2. by autograd
def autograd_grads(X, W_Q, W_K, W_V, G, fused: bool):
    """dL/d(Q, K, V, W_Q, W_K, W_V, X) from tensorlab (fused node or composed ops)."""
    leaves = [tl.tensor(a, dtype=np.float64, requires_grad=True) for a in (X, W_Q, W_K, W_V)]
    x, wq, wk, wv = leaves
    q, k, v = x @ wq, x @ wk, x @ wv
    for t in (q, k, v):
        t.retain_grad()  # keep the gradients of these intermediate tensors too
    if fused:
        y = F.scaled_dot_product_attention(q, k, v, causal=True)
    else:
        s = (q @ k.mT) * (1.0 / math.sqrt(D_HEAD))
        s = tl.where(np.tri(T, dtype=bool), s, -np.inf)
        y = s.softmax(axis=-1) @ v
    loss = (y * tl.tensor(G, dtype=np.float64)).sum()
    loss.backward()
    names = ["dQ", "dK", "dV", "dX", "dW_Q", "dW_K", "dW_V"]
    return dict(zip(names, [t.grad.numpy() for t in (q, k, v, x, wq, wk, wv)]))


# ---------------------------------------------------------------------- 3. by finite differences
def numeric_grad(f, a: np.ndarray) -> np.ndarray:
    """Central differences of the scalar f() with respect to every entry of ``a`` (in place)."""
    out = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        orig = a[i]
        a[i] = orig + EPS
        plus = f()
        a[i] = orig - EPS
        minus = f()
        a[i] = orig
        out[i] = (plus - minus) / (2 * EPS)
    return out


def numeric_grads(X, W_Q, W_K, W_V, G):
    """dQ, dK, dV by perturbing Q, K, V; dX, dW_* by perturbing X, W_*."""
    Q, K, V = X @ W_Q, X @ W_K, X @ W_V

    def loss_qkv():
        S = np.where(np.tri(T, dtype=bool), Q @ K.T / math.sqrt(D_HEAD), -np.inf)
        A = np.exp(S - S.max(axis=-1, keepdims=True))
        A /= A.sum(axis=-1, keepdims=True)
        return float((A @ V * G).sum())

    def loss_params():
        return forward(X, W_Q, W_K, W_V, G)[0]

    out = {"dQ": numeric_grad(loss_qkv, Q), "dK": numeric_grad(loss_qkv, K)}
    out["dV"] = numeric_grad(loss_qkv, V)
    for name, a in (("dX", X), ("dW_Q", W_Q), ("dW_K", W_K), ("dW_V", W_V)):
        out[name] = numeric_grad(loss_params, a)
    return out


# ---------------------------------------------------------------------- the story
def _max_diff(a: dict, b: dict) -> float:
    return max(float(np.abs(a[k] - b[k]).max()) for k in a if k in b)


def main(verbose: bool = True) -> dict[str, float]:
    """Run the comparison; return the largest difference between each pair of methods."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((T, D_MODEL))
    W_Q, W_K, W_V = (rng.standard_normal((D_MODEL, D_HEAD)) / math.sqrt(D_MODEL) for _ in "qkv")
    G = rng.standard_normal((T, D_HEAD))

    loss, saved = forward(X, W_Q, W_K, W_V, G)
    hand = backward(X, W_Q, W_K, W_V, G, saved)
    fused = autograd_grads(X, W_Q, W_K, W_V, G, fused=True)
    composed = autograd_grads(X, W_Q, W_K, W_V, G, fused=False)
    numeric = numeric_grads(X, W_Q, W_K, W_V, G)

    diffs = {
        "hand vs autograd (fused)": _max_diff(hand, fused),
        "hand vs autograd (composed)": _max_diff(hand, composed),
        "autograd fused vs composed": _max_diff(fused, composed),
        "hand vs finite differences": _max_diff(hand, numeric),
        "autograd (fused) vs finite differences": _max_diff(fused, numeric),
    }
    above = float(np.abs(np.triu(hand["dS"], 1)).max())
    if verbose:
        print(f"one causal attention head: T={T}, d_model={D_MODEL}, d_head={D_HEAD}, float64")
        print(f"loss L = sum(Y * G) = {loss:.6f}\n")
        A = saved[3]
        with np.printoptions(precision=4, suppress=True, floatmode="fixed"):
            print("the pattern A (row i: query i's weights over keys j; each row sums to 1):")
            print(A)
            print("dS = A ⊙ (dA - rowsum(dA ⊙ A)), the gradient at the scores (rows sum to 0):")
            print(hand["dS"] + 0.0)  # (+ 0.0 prints -0 as 0)
            print()
        print(f"{'entry':<12}{'by hand':>16}{'autograd':>16}{'finite diff':>16}")
        for name, idx in [
            ("dQ", (0, 0)),
            ("dQ", (3, 2)),
            ("dK", (0, 1)),
            ("dK", (4, 0)),
            ("dV", (1, 3)),
            ("dV", (4, 2)),
            ("dW_Q", (2, 1)),
            ("dX", (4, 5)),
        ]:
            label = f"{name}[{idx[0]},{idx[1]}]"
            print(
                f"{label:<12}{hand[name][idx]:>16.10f}{fused[name][idx]:>16.10f}"
                f"{numeric[name][idx]:>16.10f}"
            )
        print("\nlargest |difference| over dQ, dK, dV, dW_Q, dW_K, dW_V, dX:")
        for pair, d in diffs.items():
            print(f"  {pair:<40}{d:.2e}")
        print(
            f"\ncausal mask: max |dS| above the diagonal = {above} "
            "(A = 0 there, so dS = A ⊙ (...) = 0:"
        )
        print("the mask needs no code of its own in the backward)")
        print(
            "query 0 sees only key 0: its softmax row is the constant [1, 0, ...], so "
            f"dQ[0] = {hand['dQ'][0].round(12) + 0.0}"
        )
    diffs["max |dS| above the diagonal"] = above
    return diffs


if __name__ == "__main__":
    main()
