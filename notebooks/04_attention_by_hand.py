# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 4. Attention by hand: forward, backward, checked
#
# One causal attention head (Vaswani et al., 2017, "Attention is all you need", eq. 1), on
# $T = 5$ positions in float64:
#
# $$S = s\,QK^\top + P,\qquad A = \mathrm{softmax}_{\rm rows}(S),\qquad Y = AV,$$
#
# with the scale $s = 1/\sqrt{d_h}$ ($d_h$ = `d`, the width of a query) and the mask $P$ zero
# on and below the diagonal and $-\infty$ above it (position $i$ sees keys $j \le i$): the
# notation of `docs/derivations_nn.md`, section 9. You write the backward pass first; then
# the notebook works through it line by line in NumPy and holds every line to the gradient
# tensorlab computes for the same intermediate. The derivation is in that section too;
# `examples/backprop_attention.py` is the script version, which also goes through the
# projections $Q = XW_Q$, ...
#
# **Objectives.** After this notebook you can write a causal attention head's forward and
# backward in NumPy, say why the mask needs no backward code, and check a backward three ways
# (the engine, finite differences, a batched fused op).
#
# **Study time:** about 40 minutes, most of it the exercise; the notebook runs in a few seconds.
#
# Questions marked **Predict, then run** have their reasoning behind `reveal("name")`:
# predict first, then run, then reveal.

# %%
import math

import matplotlib.pyplot as plt
import numpy as np
from grader import check, hint, reveal  # noqa: F401 (hint, reveal: for you to call)

import nn.functional as F
import tensorlab as tl

T, d, d_v = 5, 4, 3
rng = np.random.default_rng(0)
Q, K, V = rng.standard_normal((T, d)), rng.standard_normal((T, d)), rng.standard_normal((T, d_v))
G = rng.standard_normal((T, d_v))  # the gradient arriving at Y: L = sum(Y * G)
causal = np.tri(T, dtype=bool)  # True where query i may see key j (j <= i)

# %% [markdown]
# ## Forward, twice
#
# By hand in NumPy, and in tensorlab's ops, keeping the gradient of every intermediate
# (`retain_grad`) so that each line of the backward can be compared with the engine's.

# %%
scale = 1 / math.sqrt(d)
S = np.where(causal, Q @ K.T * scale, -np.inf)
A = np.exp(S - S.max(axis=1, keepdims=True))
A /= A.sum(axis=1, keepdims=True)
Y = A @ V

q, k, v = (tl.tensor(a, requires_grad=True) for a in (Q, K, V))
s = tl.where(causal, (q @ k.mT) * scale, -np.inf)
a = s.softmax(axis=-1)
y = a @ v
for t in (s, a, y):
    t.retain_grad()
(y * tl.tensor(G)).sum().backward()
print("max |Y by hand - Y tensorlab| =", np.abs(Y - y.numpy()).max())
print("attention pattern A (row i: how query i spreads over keys j <= i):")
print(A.round(3))

# %% [markdown]
# **Exercise.** Before reading on (the next section works it out), write the whole head's
# backward as one function: given `g` ($= G$) and `q, k, v`, return `dq, dk, dv` (causal,
# scale $s = 1/\sqrt{d_h}$). Go back through the three forward lines one at a time: each is an op
# whose backward you have written in notebooks 1 and 3. The checker draws its own inputs and
# tells you which of the three is wrong, and where; `hint("attention")` when stuck.


# %%
def attention_backward(g, q, k, v):
    raise NotImplementedError  # return dq, dk, dv


print(check("attention", attention_backward))

# %% [markdown]
# ## Backward, one line per step
#
# The worked answer. Each forward line is an op whose rule we know from part 1 of the
# derivations:
#
# | forward | rule | backward |
# |---|---|---|
# | $Y = AV$ | matmul | $dV = A^\top G$, $dA = G V^\top$ |
# | $A = \mathrm{softmax}(S)$ | softmax, by rows | $dS = A\odot(dA - \mathrm{rowsum}(dA\odot A))$ |
# | $S = s\,QK^\top$ | matmul (and a scale) | $dQ = s\,dS\,K$, $dK = s\,dS^\top Q$ |

# %%
dV = A.T @ G
dA = G @ V.T
dS = A * (dA - (dA * A).sum(axis=1, keepdims=True))
dQ = dS @ K * scale
dK = dS.T @ Q * scale

for name, mine, engine in [
    ("dA", dA, a.grad),
    ("dS", dS, s.grad),
    ("dQ", dQ, q.grad),
    ("dK", dK, k.grad),
    ("dV", dV, v.grad),
]:
    print(f"{name}: max |by hand - tensorlab| = {np.abs(mine - engine.numpy()).max():.1e}")

# %% [markdown]
# They agree exactly here: the engine's ops evaluate the same formulas in the same order
# (in another order they would differ by rounding, about $10^{-16}$). Note what the table
# does *not* contain: any code for the mask.
#
# **Predict, then run.** What is $dS$ above the diagonal, where the mask stood? Then run, and
# `reveal("mask-grad")`.
#
# **Predict, then run.** What is $dQ_0$, the gradient of the first query? Then run, and
# `reveal("query-zero")`.

# %%
print("max |dS| above the diagonal:", np.abs(np.triu(dS, 1)).max())
print("dQ[0] =", dQ[0].round(12) + 0.0)
fig, axes = plt.subplots(1, 2, figsize=(7, 3))
for ax, m, title in [(axes[0], A, "A = softmax(S)"), (axes[1], dS, "dS")]:
    lim = np.abs(m).max()
    im = ax.imshow(m, cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set(title=title, xlabel="key j", ylabel="query i")
    fig.colorbar(im, ax=ax, shrink=0.8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Checked against finite differences
#
# Both of the above could share a mistake. Finite differences cannot: perturb one entry of
# $Q$ by $\pm\varepsilon$, rerun the forward, and divide the change in $L$ by $2\varepsilon$.


# %%
def loss(Q, K, V):
    S = np.where(causal, Q @ K.T * scale, -np.inf)
    A = np.exp(S - S.max(axis=1, keepdims=True))
    return float(((A / A.sum(axis=1, keepdims=True)) @ V * G).sum())


eps = 1e-6
numeric = np.zeros_like(Q)
for i in np.ndindex(Q.shape):
    Qp, Qm = Q.copy(), Q.copy()
    Qp[i] += eps
    Qm[i] -= eps
    numeric[i] = (loss(Qp, K, V) - loss(Qm, K, V)) / (2 * eps)
print(f"dQ: max |by hand - finite differences| = {np.abs(dQ - numeric).max():.1e}")

# %% [markdown]
# ## Many heads, many sequences
#
# A real model runs heads side by side: $Q$ of shape `(batch, heads, T, d)`. Nothing in the
# derivation changes; `@` and the row sums act on the last two axes and the leading axes just
# come along. tensorlab's fused op (`nn/attention.py: AttentionFn`, one node with the backward
# above written once) and the composed ops must agree with the NumPy backward, batched:

# %%
B, H = 2, 3
Qb, Kb, Vb = (rng.standard_normal((B, H, T, n)) for n in (d, d, d_v))
Gb = rng.standard_normal((B, H, T, d_v))
Sb = np.where(causal, Qb @ Kb.swapaxes(-1, -2) * scale, -np.inf)
Ab = np.exp(Sb - Sb.max(axis=-1, keepdims=True))
Ab /= Ab.sum(axis=-1, keepdims=True)
dAb = Gb @ Vb.swapaxes(-1, -2)
dSb = Ab * (dAb - (dAb * Ab).sum(axis=-1, keepdims=True))
by_hand = [dSb @ Kb * scale, dSb.swapaxes(-1, -2) @ Qb * scale, Ab.swapaxes(-1, -2) @ Gb]

for fused in (True, False):
    qb, kb, vb = (tl.tensor(x, requires_grad=True) for x in (Qb, Kb, Vb))
    if fused:
        yb = F.scaled_dot_product_attention(qb, kb, vb, causal=True)
    else:
        yb = tl.where(causal, (qb @ kb.mT) * scale, -np.inf).softmax(axis=-1) @ vb
    (yb * tl.tensor(Gb)).sum().backward()
    err = max(np.abs(h - t.grad.numpy()).max() for h, t in zip(by_hand, (qb, kb, vb)))
    print(f"{'fused' if fused else 'composed'} op vs by hand, (B, H, T) = {(B, H, T)}: {err:.1e}")

# %% [markdown]
# Where next: notebook 5 puts fused and composed side by side for layer norm, GELU and
# cross-entropy; `tensorlab.draw.backward_steps(loss)` (notebook 1) steps through the backward
# of anything, a whole GPT included.
