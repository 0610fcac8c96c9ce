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
# # 1. From a scalar to a tensor autograd
#
# Backpropagation is the chain rule applied in a clever order (Rumelhart, Hinton & Williams,
# 1986; the reverse mode of automatic differentiation goes back to Linnainmaa, 1970). This
# notebook builds it up in four steps, each run on tensorlab:
#
# 1. the chain rule on one number;
# 2. one op's backward, and the gradient it receives (`g`) and sends;
# 3. tensors and broadcasting: why the engine needs `sum_to`;
# 4. the order: a reverse topological sort of the graph.
#
# **Objectives.** After this notebook you can apply the chain rule by hand and read it as
# "gradient from above times local derivative"; write an op's backward and check it; say why
# a broadcast input's gradient is a sum; and say why the backward must run in reverse
# topological order.
#
# **Study time:** about 40 minutes, with the four exercises; the notebook runs in a few
# seconds. Questions marked **Predict, then run** have their reasoning behind
# `reveal("name")`: predict first, then run, then reveal.
#
# Cells marked **Exercise** ask you to write a backward in NumPy; `check` grades it against
# finite differences and tensorlab's own op and says what is wrong, without giving the answer.
# Stuck? `hint("tanh")` (any exercise's name) says where to read; call it again for the idea
# in words, a third time for the formula. The reference answers are in
# `notebooks/solutions.py`: try first.

# %%

import numpy as np
from grader import check, hint, reveal  # noqa: F401 (hint, reveal: for you to call)

import tensorlab as tl
from tensorlab.autograd import topological_order
from tensorlab.draw import backward_steps

# %% [markdown]
# ## 1. The chain rule on one number
#
# $L = \sigma(w x + b)^2$ with $x = 0.5$, $w = -1.5$, $b = 0.2$ and the sigmoid
# $\sigma(u) = 1/(1 + e^{-u})$. Name the steps $u = wx + b$, $y = \sigma(u)$, $L = y^2$. The
# sigmoid's derivative can be written through its output, $\sigma'(u) = y(1 - y)$, and the
# chain rule multiplies the local derivatives backwards from $L$:
#
# $$\frac{\partial L}{\partial w} = \underbrace{2y}_{\partial L/\partial y}\;
#   \underbrace{y(1 - y)}_{\partial y/\partial u}\;\underbrace{x}_{\partial u/\partial w}.$$
#
# **Predict, then run.** Which signs will $\partial L/\partial w$, $\partial L/\partial b$
# and $\partial L/\partial x$ have? Then run, and `reveal("sigmoid-sign")`.

# %%
x, w, b = 0.5, -1.5, 0.2
u = w * x + b
y = 1 / (1 + np.exp(-u))
dL_dy = 2 * y
dL_du = dL_dy * y * (1 - y)
by_hand = {"w": dL_du * x, "b": dL_du, "x": dL_du * w}

tw, tb, tx = (tl.tensor(v, dtype="float64", requires_grad=True) for v in (w, b, x))
L = (tw * tx + tb).sigmoid() ** 2
L.backward()
for name, t in [("w", tw), ("b", tb), ("x", tx)]:
    print(f"dL/d{name}: by hand {by_hand[name]:+.6f}   tensorlab {t.grad.item():+.6f}")

# %% [markdown]
# Read the hand computation again: each line used only the gradient from the line above
# ($\partial L/\partial y$, then $\partial L/\partial u$) and one *local* derivative. That is
# the whole design of the engine. Every op gets the gradient of the loss with respect to its
# output, called `g` everywhere in tensorlab, and returns the gradient with respect to each
# input. It never needs to know what came after it.
#
# ## 2. One op's backward
#
# An op in tensorlab is a `tl.Function` with a `forward` on raw arrays and a `backward` that
# turns `g` into one gradient per input. Here is multiplication, written from scratch:


# %%
class MyMul(tl.Function):
    def forward(ctx, a, b):  # NumPy arrays in, array out
        return a * b

    def backward(ctx, g):  # g = dL/dy; return dL/da, dL/db
        a, b = ctx.inputs
        return g * b, g * a


a = tl.tensor([1.0, 2.0, 3.0], dtype="float64", requires_grad=True)
b = tl.tensor([4.0, 5.0, 6.0], dtype="float64", requires_grad=True)
MyMul.apply(a, b).sum().backward()
print("da =", a.grad.numpy(), "(= b)   db =", b.grad.numpy(), "(= a)")

# %% [markdown]
# `tl.gradcheck` holds a backward to central finite differences,
# $(f(x + \varepsilon) - f(x - \varepsilon))/2\varepsilon$, entry by entry (in float64, where
# the difference is good to about $10^{-9}$; see `docs/autograd.md`, section 8):

# %%
print(tl.gradcheck(MyMul.apply, [a, b]))

# %% [markdown]
# **Exercise 1.** Write the backward of $y = \tanh(a)$ in NumPy: `g` is $\partial L/\partial y$
# and `a` the input; return $\partial L/\partial a$. Replace `raise NotImplementedError` and
# run the cell. (Stuck? Run `hint("tanh")` in a cell, and again for more.)


# %%
def tanh_backward(g, a):
    raise NotImplementedError  # your code: return dL/da


print(check("tanh", tanh_backward))

# %% [markdown]
# `check` draws a random input and a random `g`, and compares your answer with finite
# differences and with `Tanh.backward`. Once yours is right, flip its sign on purpose (or
# double it) to see how it reports a sign error (or a constant factor).
#
# **Exercise 2.** $y = a - b$: both gradients.


# %%
def sub_backward(g, a, b):
    raise NotImplementedError  # return dL/da, dL/db


print(check("sub", sub_backward))

# %% [markdown]
# ## 3. Tensors and broadcasting: `sum_to`
#
# Add an offset per row, of shape `(4, 1)`, to a batch of shape `(4, 3)`. NumPy copies the
# offset into every column; each copy sends back its own gradient, and **a value used $k$
# times receives the sum of its $k$ gradients** (`docs/derivations.md`, section 2). So the
# offset's gradient is the sum of `g` over the columns, kept as a column.
#
# **Predict, then run.** With `g = np.arange(12.0).reshape(4, 3)`, what is `offset.grad`?
# Then run, and `reveal("offset-grad")`.

# %%
X = tl.randn(4, 3, dtype="float64", requires_grad=True)
offset = tl.tensor([[0.1], [0.2], [0.3], [0.4]], dtype="float64", requires_grad=True)
g = np.arange(12.0).reshape(4, 3)
(X + offset).backward(g)
print("g summed over the columns:", g.sum(axis=1, keepdims=True).ravel())
print("offset.grad:              ", offset.grad.numpy().ravel(), offset.grad.shape)

# %% [markdown]
# The `Add` op itself returned `g` for both inputs, in the shape `(4, 3)`. The engine noticed
# that `(4, 3)` is not the offset's shape and called `Tensor.sum_to((4, 1))`: the **one**
# place where broadcasting is undone, so no op has to think about it. `trace_backward` prints
# what each op sent on after that step: `Add` received a `(4, 3)` gradient of ones (norm
# $\sqrt{12} = 3.46$) and sent the offset its row sums, `[3, 3, 3, 3]` as a column (norm 6):

# %%
with tl.trace_backward():
    (X + offset).sum().backward()

# %% [markdown]
# **Exercise 3.** Without the engine's help: write the backward of `a + b` for `a` `(4, 3)` and
# a bias `b` `(3,)` (one number per column this time) in NumPy, returning gradients in the
# inputs' shapes. (Forget the sum, or sum over the wrong axis, and the checker will tell you
# what it found.)


# %%
def add_broadcast_backward(g, a, b):
    raise NotImplementedError  # return dL/da (4, 3), dL/db (3,)


print(check("add_broadcast", add_broadcast_backward))

# %% [markdown]
# **Exercise 4.** Matrix multiplication, $Y = AB$ with $A$ `(2, 3)` and $B$ `(3, 4)`. The
# derivation (`docs/derivations.md`, section 4) works it out entry by entry, from
# $Y_{ij} = \sum_k A_{ik} B_{kj}$, and there is a shortcut to find the answer, and to remember
# it: $dA$ has $A$'s shape and $dB$ has $B$'s, and only a few products of $g$ `(2, 4)` with $A$
# or $B$ (transposed or not) come out in those shapes. A product whose shapes clash is reported
# with the two shapes.


# %%
def matmul_backward(g, a, b):
    raise NotImplementedError  # return dL/da, dL/db


print(check("matmul", matmul_backward))

# %% [markdown]
# ## 4. The order: reverse topological sort
#
# An op may only run its backward once its `g` is complete, that is, once every op that used
# its output has sent its share. Sorting the graph so that each node comes after its inputs
# and walking that list backwards guarantees it. Here `h` is used twice, so its gradient is
# the sum of two contributions (`docs/autograd.md`, section 3):


# %%
def two_layer_loss():
    tl.manual_seed(0)
    x_in = tl.randn(4, 3, dtype="float64")
    W1 = tl.randn(3, 5, dtype="float64", requires_grad=True)
    W2 = tl.randn(5, 2, dtype="float64", requires_grad=True)
    h = (x_in @ W1).tanh()
    W1.name, W2.name, h.name = "W1", "W2", "h"  # names show up in the pictures below
    return (h @ W2).sum() + (h * h).sum(), h


loss, h = two_layer_loss()
order = [n.name for n in topological_order([loss._ctx]) if not isinstance(n, tl.Tensor)]
print("forward (topological) order:", " -> ".join(order))
with tl.trace_backward():
    loss.backward()

# %% [markdown]
# The backward ran the list in reverse. `Tanh` ran only after both `MatMul` (of `h @ W2`) and
# `Mul` (of `h * h`) had sent it their gradients. The picture of the same graph, with each
# tensor's value and gradient (norms; the entries too for tensors of at most 6). Graphviz's
# `dot` program draws it where it is installed; elsewhere the notebook's browser draws it with
# viz.js (Graphviz compiled to WebAssembly, shipped inside tensorlab), so nothing to install.

# %%
loss, h = two_layer_loss()
h.retain_grad()  # keep the gradient of this intermediate tensor too
loss.backward(retain_graph=True)  # and every op's output value, for the picture
picture = tl.draw(loss, show_values=True, show_grad=True, rankdir="LR", graph_attr={"size": "9"})
picture  # noqa: B018 (a notebook displays its last expression)

# %% [markdown]
# ## Step through it
#
# `backward_steps` runs `backward()` and returns a page with one frame per node, in the order
# the engine ran them: the node at work in orange, the gradients it sends in red (with shape
# and norm), the nodes already done in green. Drag the slider or use the arrows. The page is
# self-contained: `page.save("backward.html")` writes a file any browser opens, Graphviz
# installed or not.

# %%
loss, h = two_layer_loss()
page = backward_steps(loss)
page  # noqa: B018

# %% [markdown]
# That is the whole engine: `tensorlab/autograd.py` sorts, walks and adds, and every op in
# `tensorlab/ops/` is a forward and a local backward like `MyMul`'s. In notebook 2 you write
# that engine yourself and read tensorlab's loop beside yours; notebook 3 goes through the
# backward of every op family.
