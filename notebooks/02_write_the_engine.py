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
# # 2. Write the engine: a scalar autograd, then arrays
#
# Notebook 1 used tensorlab's `backward()`. Here you write one (in the spirit of Karpathy's
# micrograd), check it against tensorlab's `.grad`, and then read tensorlab's own loop beside
# yours.
#
# **Objectives.** After this notebook you can
# - write a `Value` that records, for each op, its parents and its local derivatives;
# - write `backward()`: a topological order, the output's gradient to start, the chain rule,
#   and gradients that add up for a value used twice;
# - undo broadcasting with `sum_to`, and carry the same walk over to arrays;
# - find each of those steps in `tensorlab/autograd.py`.
#
# **Study time:** about 45 minutes, most of it the three exercises; the notebook itself runs
# in a few seconds.
#
# As before, `check` grades an exercise and names what is wrong, `hint("value")` (any
# exercise's name) tells one level more each call, and the questions marked **Predict, then
# run** have their reasoning behind `reveal("name")`: predict first.

# %%
import inspect

import numpy as np
from grader import check, hint, reveal  # noqa: F401 (hint, reveal: for you to call)

import tensorlab as tl
from tensorlab import autograd

# %% [markdown]
# ## 1. A number that remembers how it was made
#
# Every op makes a new `Value` and records two things: its **parents** (the Values it was made
# from) and, for each parent, the **local derivative** of the new value with respect to that
# parent, a plain number computed during the forward. `__add__` is written: both local
# derivatives of $a + b$ are 1.
#
# **Exercise 1.** Write `__mul__` and `tanh` the same way, then `backward()`: it fills in
# `.grad` (that is $\partial L/\partial\,\text{node}$, with $L$ the Value `backward` is called
# on) on every Value in the graph. Three things make it right, and `check` tests each: the
# order in which nodes are visited, where the walk starts, and what happens to a Value used
# twice. `docs/autograd.md`, sections 2 and 3, is the reading.


# %%
class Value:
    def __init__(self, data, parents=(), local=()):
        self.data, self.grad = float(data), 0.0
        self.parents, self.local = parents, local  # local[i]: d(self) / d(parents[i])

    def __add__(self, other):
        return Value(self.data + other.data, (self, other), (1.0, 1.0))

    def __mul__(self, other):
        raise NotImplementedError  # your code: the product, its parents, its two local derivatives

    def tanh(self):
        raise NotImplementedError  # your code

    def backward(self):
        raise NotImplementedError  # your code: .grad of every Value this one was made from

    def __repr__(self):
        return f"Value({self.data:.4g}, grad={self.grad:.4g})"


print(check("value", Value))

# %% [markdown]
# **Predict, then run.** With $a = 3$, what is $\partial L/\partial a$ for $L = a \cdot a$?
# And what would an engine report that *replaced* `a.grad` at each use instead of adding to
# it? Write your two numbers down, run the cell (tensorlab, and yours if it is written), then
# `reveal("reuse")`.

# %%
a = tl.tensor(3.0, dtype="float64", requires_grad=True)
(a * a).backward()
print("tensorlab: dL/da =", a.grad.item())
try:
    mine = Value(3.0)
    (mine * mine).backward()
    print("yours:     dL/da =", mine.grad)
except NotImplementedError:
    print("yours: not written yet")

# %% [markdown]
# ## 2. Arrays: undoing broadcasting
#
# With arrays, one new thing happens. In `x + b` with `x` `(4, 3)` and `b` `(3,)`, NumPy
# copies `b` into every row; each copy receives its own gradient, and `b`'s gradient is their
# sum (`docs/derivations.md`, section 2). tensorlab does this in one place for every op,
# `Tensor.sum_to(shape)`: it takes the gradient in the shape of the op's output and sums it
# back to the shape of the input.
#
# **Predict, then run.** The gradient `g` arriving has shape `(2, 4, 3)` and the input had
# shape `(4, 1)`. Over which axes of `g` does `sum_to` sum, and into how many numbers? Then run
# the cell, and `reveal("sum-to-axes")`.

# %%
g = np.arange(24.0).reshape(2, 4, 3)
print("tensorlab:", tl.tensor(g).sum_to((4, 1)).numpy().ravel(), "shape (4, 1)")

# %% [markdown]
# **Exercise 2.** Write `sum_to(g, shape)` in NumPy: return the array of shape `shape` that
# `g` sums to. `check` tries it on six pairs of shapes against tensorlab's.


# %%
def sum_to(g, shape):
    raise NotImplementedError  # return an array of shape `shape`


print(check("sum_to", sum_to))

# %% [markdown]
# Now the engine for arrays. `Array` is `Value` with NumPy arrays inside, and one change: an
# op's local derivative is no longer a number but a function, a *vector-Jacobian product*
# (`vjp`), that turns the gradient of the op's output into a parent's share. It returns that
# share in the shape of the **output**, as tensorlab's ops do, because a broadcast parent was
# stretched to that shape.
#
# **Exercise 3.** Write `Array.backward`: your scalar walk, with the output's gradient now an
# array, and each share summed back to its parent's shape (your `sum_to`) before it is added.


# %%
class Array:
    def __init__(self, data, parents=(), vjps=()):
        self.data = np.asarray(data, dtype=np.float64)
        self.grad = np.zeros_like(self.data)
        self.parents, self.vjps = parents, vjps  # vjps[i]: g -> parents[i]'s share of g

    def __add__(self, other):
        return Array(self.data + other.data, (self, other), (lambda g: g, lambda g: g))

    def __mul__(self, other):
        a, b = self.data, other.data
        return Array(a * b, (self, other), (lambda g: g * b, lambda g: g * a))

    def __matmul__(self, other):
        a, b = self.data, other.data
        return Array(a @ b, (self, other), (lambda g: g @ b.T, lambda g: a.T @ g))

    def tanh(self):
        t = np.tanh(self.data)
        return Array(t, (self,), (lambda g: g * (1 - t * t),))

    def sum(self):
        shape = self.data.shape
        return Array(self.data.sum(), (self,), (lambda g: np.broadcast_to(g, shape),))

    def backward(self):
        raise NotImplementedError  # your code


print(check("array", Array))

# %% [markdown]
# ## 3. The real one
#
# tensorlab's loop is `_propagate` in `tensorlab/autograd.py`, printed below beside your
# `Value.backward`. Read them side by side:
#
# - the order: `topological_order` (an iterative depth-first search, so a chain of 100,000
#   ops does not overflow Python's recursion limit) makes the list that `_propagate` pops
#   from the end;
# - the start: the output's gradient is put in `pending` before the loop (`run_backward`);
# - the chain rule: `local_grads(node, g)` is every parent's share at once, your `vjps`, with
#   `sum_to` applied inside it;
# - accumulation: `_send` adds a share to what is already waiting for that node;
# - and a few things yours does not need: hooks and `.grad` (`arrive`), `stop` for
#   `tl.grad(..., inputs=...)`, and freeing each node's saved arrays as soon as it is done.

# %%
theirs = inspect.getsource(autograd._propagate).splitlines()
theirs += [""] + inspect.getsource(autograd._send).splitlines()
yours = inspect.getsource(Value.backward).splitlines()
width = max(len(line) for line in yours) + 3
for left, right in zip(yours + [""] * len(theirs), theirs):
    print(f"{left:<{width}}| {right}")

# %% [markdown]
# Where next: notebook 3 goes through the local backward of every op family in
# `tensorlab/ops/`, the `vjps` of the real engine.
