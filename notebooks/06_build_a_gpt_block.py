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
# # 6. Build a GPT block, forward and backward
#
# Notebooks 4 and 5 wrote the pieces: attention, layer norm, GELU. Notebook 7 trains
# `gpt.GPT`, which stacks *blocks*. This notebook assembles one block from engine ops, checks
# it against `gpt.model.Block` loaded with the same weights, and then takes its two sublayers
# backward by hand, in the spirit of Karpathy's "backprop ninja": every intermediate written
# out, every gradient derived and checked. The reading is
# [docs/transformer.md](../docs/transformer.md): section 1 (forward, with shapes) before the
# first exercise, section 3 (backward, with shapes) before the other two.
#
# **Objectives.** After this notebook you can
# - embed tokens and positions, and follow the residual stream through a block;
# - write causal multi-head attention, the MLP, layer norm and the residual adds as engine
#   ops, and match GPT-2's pre-norm block number for number;
# - derive the backward of the MLP and of multi-head attention, one line per forward line.
#
# **Study time:** about 60 minutes (the block's forward 20, each backward 20); the notebook
# runs in a few seconds.

# %%
import warnings

import numpy as np
from grader import check, hint, reveal  # noqa: F401 (hint, reveal: for you to call)

import gpt
import tensorlab as tl
from gpt import circuits

warnings.simplefilter("ignore")  # (a toy model: gpt.GPTConfig notes its unusual shape)
tl.manual_seed(0)
config = gpt.GPTConfig(
    vocab_size=16, block_size=8, n_layer=1, n_head=2, d_head=4, d_model=8, activation="gelu_tanh"
)
model = gpt.GPT(config)
tokens = np.array([[3, 1, 4, 1, 5, 9]])
T = tokens.shape[1]

# %% [markdown]
# ## 1. Into the residual stream
#
# A token id picks a row of the embedding $W_E$ (vocab, d); its position picks a row of
# $W_{pos}$ (block_size, d); the stream starts as their sum, $x_t = W_E[\text{token}_t] +
# W_{pos}[t]$, and every block reads it and adds to it. The embedding lookup is an engine op
# (indexing), whose backward scatters $g$ back to the rows that were read (notebook 3).

# %%
x = model.W_E[tokens[0]] + model.pos.W_pos[:T]
_, cache = circuits.run_with_cache(model, tokens)
print("stream entering block 0:", x.shape)
print("max |yours - the model's|:", np.abs(x.numpy() - cache["blocks.0.hook_resid_pre"][0]).max())

# %% [markdown]
# **Predict, then run.** How many parameters does one block have, with $d = 8$ and an MLP
# of width $4d$? Write a formula in $d$, then run the cell and `reveal("block-params")`.

# %%
block = model.blocks[0]
for name, p in block.named_parameters():
    print(f"{name:<12}{str(p.shape):<12}{p.size:>5}")
print("total:", sum(p.size for p in block.parameters()))

# %% [markdown]
# ## 2. The block, from engine ops
#
# **Exercise 1.** Write GPT-2's block as a function of the stream `x` (T, d) and a dict `p` of
# the block's parameters, named as above (`p["ln1.w"]`, `p["attn.W_q"]`, ...), all Tensors:
# a pre-norm attention sublayer, then a pre-norm MLP sublayer, each added to the stream.
# Use engine ops only (`@`, `+`, `.softmax`, `tl.where`, `.reshape`, `.transpose`, `.tanh`,
# ...), so that the engine can take its backward. Shapes: `attn.W_q` is (d, heads, d_head),
# its bias `attn.b_q` is flat (heads · d_head,); `attn.W_O` is (heads, d_head, d); the MLP's
# GELU is the tanh form (notebook 5). `check` loads a `gpt.model.Block` with random weights,
# feeds both the same `x` and compares the outputs, then the gradients of `x` and of every
# parameter; it names a missing residual, mask or scale, or post-norm, if it sees one.


# %%
def block_forward(x, p):
    raise NotImplementedError  # return the stream after the block, (T, d)


verdict = check("gpt_block", block_forward)
print(verdict)

# %% [markdown]
# Once it is right, yours runs on the model's own block too (float32 this time):

# %%
if verdict:
    params = dict(block.named_parameters())
    y_mine, y_model = block_forward(x, params), block(x.reshape(1, T, -1))
    print("max |yours - gpt.model.Block|:", np.abs(y_mine.numpy() - y_model.numpy()[0]).max())
else:
    print("(the block is not written yet)")

# %% [markdown]
# **Predict, then run.** Change only the last token. Which of the block's output positions
# change? Run the cell (the model's own block), then `reveal("last-position")`.

# %%
other = tokens.copy()
other[0, -1] = 7
with tl.no_grad():
    ys = [block(model.W_E[t] + model.pos.W_pos[:T]).numpy()[0] for t in (tokens, other)]
print("max |change| at each position:", np.abs(ys[0] - ys[1]).max(axis=-1).round(4))

# %% [markdown]
# ## 3. The backward, by hand
#
# The engine took the block's backward for you. Now take it yourself, sublayer by sublayer.
# The method: write the forward one line per op, keeping every intermediate; then go back
# from the last line to the first, one gradient per intermediate, each in the shape of what
# it is the gradient of. Every line is a backward you have written already (a product,
# a broadcast add, GELU, the attention head of notebook 4).
#
# **Exercise 2.** The MLP, $y = \mathrm{gelu}(x W_{in} + b_{in}) W_{out} + b_{out}$, for
# `x` (4, 6) and a hidden width of 8: return `dx, dW_in, db_in, dW_out, db_out`.


# %%
def mlp_backward(g, x, W_in, b_in, W_out, b_out):
    raise NotImplementedError  # return dx, dW_in, db_in, dW_out, db_out


print(check("mlp", mlp_backward))

# %% [markdown]
# **Exercise 3.** Causal multi-head attention without biases: `x` (5, 6), two heads of
# width 3. Head $h$ projects $q_h = x W_q[:, h]$ (and $k_h$, $v_h$ alike), runs the causal
# head of notebook 4 to get $z_h$ (5, 3), and the output sums the heads through $W_O$:
# $y = \sum_h z_h W_O[h]$. Return `dx, dW_q, dW_k, dW_v, dW_O`. Reuse your
# `attention_backward` from notebook 4 for each head (paste it here), or write it again;
# `np.einsum` keeps the head axis readable.


# %%
def heads_backward(g, x, W_q, W_k, W_v, W_O):
    raise NotImplementedError  # return dx, dW_q, dW_k, dW_v, dW_O


print(check("heads", heads_backward))

# %% [markdown]
# With these two, layer norm's backward (notebook 5) and one more rule, the block's whole
# backward is done: a residual add $x + f(x)$ hands $g$ to both branches, and $x$'s gradient
# is $g$ plus what comes back through $f$. That "plus $g$" is why gradients reach the first
# layers of a deep stack undiminished (docs/transformer.md, section 5, the residual highway).
#
# Where next: notebook 7 trains a stack of these blocks on text and reads its loss curve.
