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
# # 5. Layer norm, GELU, cross-entropy: one fused node or many small ones
#
# Layer norm (Ba, Kiros & Hinton, 2016) can be written with the engine's primitives: a mean,
# a subtraction, a square, another mean, a power, two multiplications and an addition. The
# engine then derives its backward for free, one small op at a time. `nn` also has it as one
# *fused* node, `nn/norm.py: LayerNormFn`, whose backward is a closed form worked out on
# paper (`docs/derivations_nn.md`, section 5): fewer nodes, fewer temporary arrays. Both
# forms live side by side: every fused op keeps its composed form as `composed`.
#
# This notebook runs both forms of three layers on the same inputs and compares the numbers,
# the size of the graphs, and the steps of the backward.
#
# **Objectives.** After this notebook you can say what a fused op is and why it keeps a
# composed form, read a backward step by step with `trace_backward`, and write the backward of
# layer norm, GELU and cross-entropy.
#
# **Study time:** about 50 minutes, most of it the three exercises; the notebook runs in a few
# seconds.
#
# Questions marked **Predict, then run** have their reasoning behind `reveal("name")`:
# predict first, then run, then reveal.

# %%
import numpy as np
from grader import check, hint, reveal  # noqa: F401 (hint, reveal: for you to call)

import nn.functional as F
import tensorlab as tl
from nn.activation import GELUTanhFn
from nn.loss import CrossEntropyFn
from nn.norm import LayerNormFn
from tensorlab.autograd import topological_order

rng = np.random.default_rng(0)
x0 = rng.standard_normal((4, 8))
gamma0, beta0 = 1 + 0.1 * rng.standard_normal(8), 0.1 * rng.standard_normal(8)
targets = np.array([1, 0, 7, 3])


def ops_in_graph(y):
    return [n.name for n in topological_order([y._ctx]) if not isinstance(n, tl.Tensor)]


# Each layer: (fused, composed), both taking the same Tensors.
layers = {
    "layer norm": (
        lambda x, gamma, beta: F.layer_norm(x, gamma, beta),
        lambda x, gamma, beta: LayerNormFn.composed(x, gamma, beta, eps=1e-5),
    ),
    "GELU (tanh)": (
        lambda x, gamma, beta: F.gelu(x, approximate="tanh"),
        lambda x, gamma, beta: GELUTanhFn.composed(x),
    ),
    "cross-entropy": (
        lambda x, gamma, beta: F.cross_entropy(x, targets),
        lambda x, gamma, beta: CrossEntropyFn.composed(x, tl.tensor(targets)).mean(),
    ),
}

# %% [markdown]
# ## Same numbers
#
# Each form gets the same inputs and the same gradient from above, $g$ (drawn once per
# layer: comparing two backward passes fed different $g$ compares nothing).
#
# **Predict, then run.** How far apart will the two forms' outputs and gradients be? Then
# run, and `reveal("fused-error")`.
#
# **Predict, then run.** How many nodes will each graph have, fused and composed? Then run,
# and `reveal("node-count")`.

# %%
graphs = {}
print(f"{'layer':<15}{'nodes':>12}{'max |Δy|':>11}{'max |Δ dx|':>12}{'max |Δ dγ|':>12}")
for name, forms in layers.items():
    results = []
    g_out = None
    for form in forms:
        x, gamma, beta = (tl.tensor(a, requires_grad=True) for a in (x0, gamma0, beta0))
        y = form(x, gamma, beta)
        graphs.setdefault(name, []).append(ops_in_graph(y))
        if g_out is None:
            g_out = rng.standard_normal(y.shape)
        y.backward(g_out)
        grads = [t.grad.numpy() if t.grad is not None else np.zeros(t.shape) for t in (x, gamma)]
        results.append((y.numpy(), *grads))
    (yf, dxf, dgf), (yc, dxc, dgc) = results
    nodes = f"{len(graphs[name][0])} vs {len(graphs[name][1])}"
    print(
        f"{name:<15}{nodes:>12}{np.abs(yf - yc).max():>11.1e}"
        f"{np.abs(dxf - dxc).max():>12.1e}{np.abs(dgf - dgc).max():>12.1e}"
    )

# %% [markdown]
# Now fused and composed agree to rounding ($10^{-16}$ to $10^{-15}$ in float64), with one
# node against 8 or 9. The composed graphs, op by op:

# %%
for name, (fused, composed) in graphs.items():
    print(f"{name:<15}fused: {' '.join(fused)}")
    print(f"{'':<15}composed: {' '.join(composed)}")

# %% [markdown]
# ## The backward, step by step
#
# `trace_backward` prints one line per node as the engine runs it. The fused layer norm is a
# single step that receives $g$ and sends $dx$, $d\gamma$, $d\beta$; the composed one takes
# nine small steps, and you can watch $dx$ assembled from three paths: the direct one, the
# one through the mean, the one through the variance.

# %%
for form in layers["layer norm"]:
    x, gamma, beta = (tl.tensor(a, requires_grad=True) for a in (x0, gamma0, beta0))
    with tl.trace_backward():
        form(x, gamma, beta).backward(np.ones((4, 8)))
    print()

# %% [markdown]
# ## Both are right: finite differences
#
# Agreement between the two forms could hide a mistake they share (the composed form is also
# what the fused op differentiates for second derivatives, see `docs/autograd.md`,
# section 5). `tl.gradcheck` holds each to central finite differences:

# %%
for name, forms in layers.items():
    for label, form in zip(("fused", "composed"), forms):
        args = [tl.tensor(a, requires_grad=True) for a in (x0, gamma0, beta0)]
        ok = tl.gradcheck(form, args)  # (GELU and cross-entropy ignore γ and β)
        print(f"{name:<15}{label:<10}gradcheck: {ok}")

# %% [markdown]
# **Exercises.** The fused backward is the formula you write by hand. Three of them (each is
# derived in `docs/derivations_nn.md`; try first, and ask `hint("layer_norm")`, and so on,
# when stuck: where to read, then the idea, then the formula):
#
# - layer norm: `dx, dgamma, dbeta` for `x` `(3, 6)`, `gamma` and `beta` `(6,)`,
#   $\varepsilon = 10^{-5}$;
# - GELU, tanh form (GPT-2's): `dx`;
# - cross-entropy (mean over rows): `dlogits`, with `targets` an integer array.


# %%
def layer_norm_backward(g, x, gamma, beta):
    raise NotImplementedError  # return dx, dgamma, dbeta


print(check("layer_norm", layer_norm_backward))


# %%
def gelu_tanh_backward(g, x):
    raise NotImplementedError  # return dx


print(check("gelu_tanh", gelu_tanh_backward))


# %%
def cross_entropy_backward(g, logits, targets):
    raise NotImplementedError  # return dlogits


print(check("cross_entropy", cross_entropy_backward))

# %% [markdown]
# Cross-entropy is the showpiece of fusing: the composed graph takes a log-softmax (an
# exponential, a sum, a log) and picks entries, and its backward retraces all of it, yet the
# fused backward is one subtraction, $\mathrm{softmax}(z) - \mathrm{onehot}(t)$, because the
# log and the exponential cancel (`docs/derivations_nn.md`, section 1).
