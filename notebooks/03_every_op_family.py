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
# # 3. The backward of every op family
#
# tensorlab has about sixty ops, but only a handful of *kinds* of backward. For each family
# this notebook puts the derivation (in one line; the full one is in `docs/derivations.md`)
# beside the code that implements it, printed from the op's class, and then checks the op
# against finite differences with `tl.gradcheck`. Where a family has an exercise, the exercise
# comes first and the engine's code after it: try it, and ask `hint("name")` when stuck.
#
# **Objectives.** After this notebook you can name the six kinds of backward (diagonal,
# spread, matrix product, reshuffle, scatter-add, full Jacobian per row), write one of each
# family, and find each in `tensorlab/ops/`.
#
# **Study time:** about 45 minutes, with the three exercises; the notebook runs in a few seconds.
#
# Questions marked **Predict, then run** have their reasoning behind `reveal("name")`:
# predict first, then run, then reveal.
#
# | family | the idea | section |
# |---|---|---|
# | elementwise | the Jacobian is diagonal: $da = g \odot f'(a)$ | 1 |
# | reductions | spread $g$ back over the reduced axes | 3 |
# | matmul | $dA = gB^\top$, $dB = A^\top g$ | 4 |
# | shape ops | the inverse reshuffle of $g$ | 6 |
# | indexing | scatter $g$ back to where it was read, adding repeats | 7 |
# | softmax | a full Jacobian per row, multiplied by $g$ without building it | 9 |

# %%
import inspect

import numpy as np
from grader import check, hint, reveal  # noqa: F401 (hint, reveal: for you to call)

import tensorlab as tl
from tensorlab.ops import elementwise, index, linalg, reduce, shape, softmax


def show(op):
    """The op's formula (its docstring) and its backward, as written in tensorlab/ops/."""
    print(inspect.getdoc(op).split("\n\n")[0])
    print("".join(inspect.getsourcelines(op.backward)[0]))


def x(*shape, positive=False):
    a = np.random.default_rng(sum(shape)).standard_normal(shape)
    return tl.tensor(np.abs(a) + 0.5 if positive else a, requires_grad=True)


# %% [markdown]
# ## Elementwise
#
# $y_j = f(a_j)$: output $j$ depends on input $j$ alone, so the Jacobian is diagonal and the
# vector-Jacobian product is one multiplication, $da = g \odot f'(a)$. When $f'$ can be
# written through the output (as $1 - y^2$ for tanh) the backward reuses `ctx.output`.

# %%
show(elementwise.Tanh)
show(elementwise.Mul)
for name, f, args in [
    ("tanh", lambda a: a.tanh(), [x(3, 4)]),
    ("sigmoid", lambda a: a.sigmoid(), [x(3, 4)]),
    ("a * b", lambda a, b: a * b, [x(3, 4), x(4)]),
    ("a / b", lambda a, b: a / b, [x(3, 4), x(3, 1, positive=True)]),
]:
    print(f"gradcheck {name:<8}", tl.gradcheck(f, args))

# %% [markdown]
# **Exercise.** The backward of $y = \log a$ (for $a > 0$).


# %%
def log_backward(g, a):
    raise NotImplementedError  # return dL/da


print(check("log", log_backward))

# %% [markdown]
# ## Reductions
#
# $y = \sum_{i} a_i$ over some axes: each $a_i$ moves $y$ one for one, so every entry receives
# the $g$ of the output it was summed into (`docs/derivations.md`, section 3).
#
# **Exercise.** The backward of `a.sum(axis=1)` for `a` of shape `(3, 5)`: `g` has shape `(3,)`.


# %%
def sum_rows_backward(g, a):
    raise NotImplementedError  # return dL/da, shape (3, 5)


print(check("sum_rows", sum_rows_backward))

# %% [markdown]
# The engine does it for any axes at once: $g$ reshaped with a 1 where each reduced axis was
# (`keepdims`), then broadcast back. Mean divides by the count; max sends $g$ to the maximum
# only, split evenly between ties.
#
# **Predict, then run.** For the max over each row of `[[1, 3, 3], [2, 0, 1]]` with $g = 1$,
# which entries of the first row get a gradient, and how much? Then run, and
# `reveal("max-tie")`.

# %%
show(reduce.Sum)
print(inspect.getsource(reduce._spread))
a = tl.tensor([[1.0, 3.0, 3.0], [2.0, 0.0, 1.0]], dtype="float64", requires_grad=True)
a.max(axis=1).sum().backward()
print("max over rows of", a.numpy().tolist(), "-> da =", a.grad.numpy().tolist())

# %% [markdown]
# The first row has a tie between two 3s: each gets half of $g$. The shares still add up to
# $g$, as they must, since moving both entries together moves the max one for one.

# %% [markdown]
# ## Matrix multiplication
#
# $Y = AB$, $Y_{ij} = \sum_k A_{ik}B_{kj}$. Then $\partial L/\partial A_{ik} = \sum_j g_{ij}
# B_{kj}$, which is the entry $(i, k)$ of $gB^\top$; likewise $dB = A^\top g$. Batch axes
# broadcast like any elementwise op, and the engine's `sum_to` undoes that.

# %%
show(linalg.MatMul)
print("gradcheck batched matmul", tl.gradcheck(lambda a, b: a @ b, [x(2, 3, 4), x(4, 5)]))

# %% [markdown]
# ## Shape ops
#
# Reshape, transpose, broadcast: each moves entries around without changing them, so the
# backward moves $g$ back: the inverse reshape, the inverse permutation, and for broadcast,
# the sum over the copies (`sum_to`). A linear map's backward is its transpose, and for a
# permutation of entries that is the inverse permutation.

# %%
show(shape.Reshape)
show(shape.Permute)
print("gradcheck permute", tl.gradcheck(lambda a: a.permute(2, 0, 1) * 1.5, [x(2, 3, 4)]))

# %% [markdown]
# ## Indexing: the backward is a scatter-add
#
# `a[idx]` reads entries; the backward writes $g$ back to the positions read, starting from
# zeros. An entry read twice gets both gradients added (`np.add.at`, not `out[idx] = g`,
# which would keep only the last one):

# %%
show(index.GetItem)
a = tl.tensor([10.0, 20.0, 30.0], dtype="float64", requires_grad=True)
a[np.array([0, 0, 2])].backward(np.array([1.0, 2.0, 3.0]))
print("a[[0, 0, 2]] with g = [1, 2, 3] -> da =", a.grad.numpy())

# %% [markdown]
# ## Softmax
#
# $y = \mathrm{softmax}(a)$, $y_j = e^{a_j} / \sum_k e^{a_k}$, mixes a whole row: every output
# depends on every input of its row, so the Jacobian is full, not diagonal. Differentiating
# the quotient gives $\partial y_j/\partial a_i = y_j(\delta_{ij} - y_i)$ (`docs/derivations.md`,
# section 9). Multiplying that by $g$ entry by entry would build a $5 \times 5$ matrix per row;
# write the sum over $j$ out and it simplifies.
#
# **Exercise.** Softmax by hand, forward and backward (`forward(s)` returns $y$; subtract the
# row maximum before `np.exp`, or a logit of 1000 overflows). For the backward, simplify
# $\sum_j g_j\,\partial y_j/\partial a_i$ (here $a$ is `s`) before you code it.


# %%
def softmax_forward(s):
    raise NotImplementedError  # return softmax of each row


def softmax_backward(g, s):
    raise NotImplementedError  # return dL/ds


print(check("softmax", softmax_backward, forward=softmax_forward))

# %% [markdown]
# The engine's softmax, which builds no Jacobian either:

# %%
show(softmax.Softmax)
print("gradcheck softmax", tl.gradcheck(lambda a: a.softmax(axis=-1), [x(3, 5)]))

# %% [markdown]
# **Predict, then run.** Whatever $g$ is, what does each row of the softmax's input gradient
# sum to? Then run, and `reveal("softmax-sum")`.

# %%
s = x(3, 5)
s.softmax(axis=-1).backward(np.random.default_rng(1).standard_normal((3, 5)))
print("row sums of ds:", s.grad.numpy().sum(axis=1))

# %% [markdown]
# Every other op in `tensorlab/ops/` is one of these patterns, or a composition of them
# (`docs/derivations.md` has the rest: einsum, gather, sort, scatter, cumulative sums).
# Notebook 4 strings matmul and softmax together into an attention head.
