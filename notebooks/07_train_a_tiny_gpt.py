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
# # 7. Train a tiny GPT; read its loss curve and its samples
#
# A character-level GPT (Radford et al., 2019, at toy size) learns to continue text. The
# training step is the plain one: forward, `loss.backward()`, an AdamW step (Loshchilov &
# Hutter, 2019). The interesting part is reading the result. A loss curve means little on its
# own, so we draw it against three lines computed by counting characters:
#
# - $\ln V$: the loss of a model that knows nothing (uniform over the $V$ characters);
# - $H(\text{next})$: the best loss without context, knowing only how common each character is;
# - $H(\text{next} \mid \text{current})$: the best loss knowing only the previous character (a
#   bigram table).
#
# A model below the third line is using more than one character of context.
#
# The run is short when the test suite runs this notebook (`TL_COURSE_SMALL=1`); unset it for
# a run that writes recognizable text (600 steps; about 20 s on two idle cores).
#
# **Objectives.** After this notebook you can write the two lines of a training step
# that are not autograd, AdamW's update and the gradient clip; read a loss curve against
# $\ln V$ and the two entropies counted from the text; and say what the model has learned
# when it crosses each line.
#
# **Study time:** about 40 minutes (the two exercises 20, reading the curve 20); the notebook
# runs in about 30 s (a few seconds with `TL_COURSE_SMALL=1`).
#
# Questions marked **Predict, then run** have their reasoning behind `reveal("name")`:
# predict first, then run, then reveal.

# %%
import os
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from grader import check, hint, reveal  # noqa: F401 (hint, reveal: for you to call)

import gpt
import nn
import tensorlab as tl
from gpt.tokenizers import CharTokenizer
from nn.optim import AdamW, clip_grad_norm_

SMALL = os.environ.get("TL_COURSE_SMALL") == "1"
STEPS, EVAL_EVERY = (20, 10) if SMALL else (600, 50)

here = Path.cwd().resolve()
found = [p / "data/tinyshakespeare.txt" for p in [here, *here.parents]]
found = [p for p in found if p.is_file()]
text = found[0].read_text(encoding="utf-8") if found else gpt.data.default_text()
text = text[:300_000]
print("corpus:", found[0] if found else "gpt.data.default_text() (CPython's docs)")

tok = CharTokenizer.train(text)
ids = np.asarray(tok.encode(text), dtype=np.int64)
split = int(0.9 * len(ids))
train_ids, val_ids = ids[:split], ids[split:]
V = tok.vocab_size

# %% [markdown]
# ## The three reference lines, by counting


# %%
def entropy(p):
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


counts = np.bincount(train_ids, minlength=V).astype(float)
pairs = np.zeros((V, V))
np.add.at(pairs, (train_ids[:-1], train_ids[1:]), 1)
h_uniform = np.log(V)
h_unigram = entropy(counts / counts.sum())
# H(next | current) = Σ_a p(a) H(next | a)
p_a = pairs.sum(axis=1) / pairs.sum()
h_bigram = sum(p_a[a] * entropy(pairs[a] / pairs[a].sum()) for a in range(V) if pairs[a].sum())
print(
    f"V = {V}: ln V = {h_uniform:.3f}, H(next) = {h_unigram:.3f}, "
    f"H(next | current) = {h_bigram:.3f} nats"
)

# %% [markdown]
# ## Inside the step: AdamW and the clip
#
# A training step is `loss.backward()`, then two things that are not autograd: the gradients
# are clipped (`nn.optim.clip_grad_norm_`: if they are too large together, all are shrunk by
# one factor), and AdamW (Loshchilov & Hutter, 2019; `nn/optim.py`) moves each weight using
# running averages of its gradient and of its gradient squared.
#
# **Exercise 1.** One AdamW step for one weight array `w` with gradient `g`, moments `m` and
# `v` (zeros before the first step) and step count `t` (1 at the first step): return the new
# `(w, m, v)`. `check` runs three steps against `nn.optim.AdamW`; `hint("adamw")` points to
# the docstring that states the update.


# %%
def adamw_step(w, g, m, v, t, lr, betas, eps, weight_decay):
    raise NotImplementedError  # return w, m, v after the step


print(check("adamw", adamw_step))

# %% [markdown]
# **Predict, then run.** One AdamW step (learning rate 0.01, no decay) on a weight whose
# gradient is $[10^{-3}, 1, 10^3]$: how far does each entry move? Then run, and
# `reveal("adam-first-step")`.

# %%
w = nn.Parameter(tl.tensor([0.0, 0.0, 0.0], dtype="float64"))
w.grad = tl.tensor([1e-3, 1.0, 1e3], dtype="float64")
AdamW([w], lr=0.01, weight_decay=0.0).step()
print("the weights after one step:", w.numpy())

# %% [markdown]
# **Exercise 2.** Clip a list of gradient arrays to a joint norm of at most `max_norm`:
# return the clipped arrays and the norm before clipping, as `clip_grad_norm_` does (it uses
# $10^{-6}$ where a division needs a guard against 0).


# %%
def clip_grad_norm(grads, max_norm):
    raise NotImplementedError  # return the clipped gradients, the norm before clipping


print(check("clip", clip_grad_norm))

# %% [markdown]
# ## The model and the loop
#
# **Predict, then run.** What will the first training loss be, roughly? Then run, and
# `reveal("first-loss")`.

# %%
tl.manual_seed(0)
config = gpt.GPTConfig(vocab_size=V, block_size=64, n_layer=2, n_head=4, d_model=64)
model = gpt.GPT(config)
optimizer = AdamW(model.parameters(), lr=3e-3)
rng = np.random.default_rng(0)
print(f"{sum(p.size for p in model.parameters()):,} parameters")
print(
    "sample before training:", repr(tok.decode(gpt.generate(model, tok.encode("\n"), 60, seed=0)))
)


def val_loss(n_batches=4):
    with tl.no_grad():
        r = np.random.default_rng(1)
        return float(
            np.mean(
                [
                    model(*map(tl.tensor, gpt.data.get_batch(val_ids, 64, 16, r)))[1].item()
                    for _ in range(n_batches)
                ]
            )
        )


losses, evals = [], []
start = time.time()
for step in range(STEPS + 1):
    if step % EVAL_EVERY == 0:
        evals.append((step, val_loss()))
    x, y = gpt.data.get_batch(train_ids, 64, 16, rng)
    _, loss = model(tl.tensor(x), tl.tensor(y))
    optimizer.zero_grad()
    loss.backward()
    clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())
print(
    f"{STEPS} steps in {time.time() - start:.0f} s; first loss {losses[0]:.3f} "
    f"(ln V = {h_uniform:.3f}), validation loss now {evals[-1][1]:.3f}"
)

# %% [markdown]
# ## Reading the curve

# %%
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot(losses, color="lightgray", lw=1, label="training batches")
ax.plot(*zip(*evals), "o-", color="C0", label="validation")
for h, name, c in [
    (h_uniform, "ln V: knows nothing", "C3"),
    (h_unigram, "H(next): letter frequencies", "C1"),
    (h_bigram, "H(next | current): one letter of context", "C2"),
]:
    ax.axhline(h, ls="--", color=c, lw=1)
    ax.text(len(losses) - 1, h, name, color=c, ha="right", va="bottom", fontsize=9)
ax.set(xlabel="step", ylabel="loss (nats per character)", title="a 2-layer character GPT")
ax.legend(loc="lower left")
fig.tight_layout()
plt.show()

for h, name in [(h_unigram, "H(next)"), (h_bigram, "H(next | current)")]:
    below = [s for s, v in evals if v < h]
    print(
        f"validation loss below {name} = {h:.3f}:", f"from step {below[0]}" if below else "not yet"
    )

# %% [markdown]
# What to look for:
#
# - **Step 0 sits on $\ln V$.** GPT-2's initialization (std 0.02) makes all logits nearly
#   equal, so the first loss is the uniform one. A first loss far above $\ln V$ means the
#   initialization is off, and the first hundred steps go into undoing it.
# - **The first drop is to the unigram line**: the cheapest thing to learn is how common
#   each character is (spaces, `e`, newlines). The model then passes the bigram line, and
#   whatever it gains below that line it gains from context longer than one character.
# - **Validation tracks training** while the model is this small and the data this large;
#   a gap that opens and grows is overfitting.
#
# ## Samples

# %%
for seed, prompt in enumerate(["\n", "ROMEO:" if found else "The "]):
    out = tok.decode(gpt.generate(model, tok.encode(prompt), 200, temperature=0.8, seed=seed))
    print(repr(prompt), "->")
    print(out)
    print("-" * 40)

# %% [markdown]
# A 20-step run (the test suite's) already puts spaces and line breaks about where they
# belong. The full 600-step run (validation loss 2.08 nats on tiny Shakespeare, below the
# bigram line from step 300) writes common words ("the", "of", "my", "your") and speaker
# names on a line of their own, ending in a colon. Notebook 8 opens a model up to see *how*
# it uses context.
