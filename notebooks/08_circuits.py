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
# # 8. Circuits: a bigram table, QK and OV, an induction head forming
#
# Notebook 7 read a model from the outside (its loss). This one reads the weights, following
# Elhage et al. (2021), "A mathematical framework for transformer circuits", and Olsson et al.
# (2022), "In-context learning and induction heads":
#
# 1. a model with **zero layers** can only be a bigram table, and training finds the table;
# 2. a two-layer attention-only model grows an **induction head** (seen "A B ... A", predict
#    "B") out of two heads in series, and does so abruptly;
# 3. its **QK** and **OV** circuits say, from the weights alone, where a head looks and what
#    it writes.
#
# Both trainings are the scripts in `examples/`, run from here (the full run takes about 20 s
# on two idle cores); with `TL_COURSE_SMALL=1` (the test suite) they are cut to a
# few seconds, and the head has no time to form.
#
# **Objectives.** After this notebook you can read a zero-layer model as a bigram table,
# watch an induction head form, read a head's QK and OV circuits from its weights, and
# compute each head's direct logit attribution through the final layer norm (graded against
# `gpt.circuits`).
#
# **Study time:** about 45 minutes (the exercise 15); the notebook runs in about 40 s (a few
# seconds with `TL_COURSE_SMALL=1`).
#
# Questions marked **Predict, then run** have their reasoning behind `reveal("name")`:
# predict first, then run, then reveal.

# %%
import os
import sys
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

here = Path.cwd().resolve()
ROOT = next(p for p in [here, *here.parents] if (p / "examples/induction_heads.py").is_file())
sys.path.insert(0, str(ROOT))

from grader import check, hint, reveal  # noqa: E402, F401 (hint, reveal: for you to call)

import examples.induction_heads as induction  # noqa: E402
import examples.zero_layer_bigram as bigram  # noqa: E402
from gpt import circuits  # noqa: E402

SMALL = os.environ.get("TL_COURSE_SMALL") == "1"

# %% [markdown]
# ## 1. Zero layers: the bigram table
#
# With no blocks, the logits for the next token are a function of the current token alone:
# $\text{logits} = W_E[\text{token}]\, W_U$. The whole model is the table
# $\mathrm{log\,softmax}(W_E W_U)$, and the best such table is the text's bigram
# statistics, whose loss is the conditional entropy $H(\text{next} \mid \text{current})$.
# The training loss decomposes exactly as that floor plus a KL divergence that training
# drives toward 0.
#
# **Predict, then run.** Which of the three lines of notebook 7 ($\ln V$, $H(\text{next})$,
# $H(\text{next} \mid \text{current})$) can this model's loss reach, and no lower? Then run,
# and `reveal("bigram-floor")`.

# %%
zero = bigram.main(["--quick"] if SMALL else ["--steps", "600"])

# %% [markdown]
# The table, read straight from the weights: after which characters is the model surest of
# the next one?

# %%
logp = circuits.model_bigram_logprobs(zero["model"])
text, _ = bigram.load_corpus(None, 30_000 if SMALL else 200_000)  # the text it trained on
tok = bigram.CharTokenizer.train(text)  # the same characters, the same ids
best = logp.max(axis=1)
for a in np.argsort(-best)[:5]:
    b = int(np.argmax(logp[a]))
    print(f"after {tok.decode([a])!r}: {tok.decode([b])!r} with p = {np.exp(best[a]):.2f}")

# %% [markdown]
# ## 2. Two layers, attention only: an induction head forms
#
# The training data are random tokens in which one stretch repeats the tokens some distance
# $D$ earlier, with $D$ spread over the whole block, so that nothing but pattern matching
# predicts the copy (`examples/induction_heads.py` explains the choice). We watch two numbers
# during training, measured on fresh sequences $[r, r]$ of random tokens repeated once:
#
# - the **induction score** of the best head: its mean attention from each token of the
#   second copy to the token *after* that token's first occurrence;
# - the loss on the **second copy** of $r$, which only in-context copying can lower (the
#   first copy is random: about $\ln 128 = 4.85$ nats).

# %%
steps = (
    ["--steps", "40", "--eval-every", "20"] if SMALL else ["--steps", "1200", "--eval-every", "100"]
)
run = induction.main([*steps, "--no-plots"])

# %%
watcher = run["watcher"]  # every evaluation's scores (gpt.circuits.CircuitWatcher)
fig, ax = plt.subplots(figsize=(7, 3.5))
ax.plot(*watcher.series("loss"), "o-", color="gray", label="training loss")
ax.plot(*watcher.series("repeat_loss"), "o-", label="loss, 2nd copy")
ax.set(xlabel="step", ylabel="loss (nats)")
ax2 = ax.twinx()
ax2.plot(*watcher.series("induction"), "s--", color="C3", label="best induction score")
ax2.plot(*watcher.series("previous_token"), "^--", color="C2", label="best previous-token score")
ax2.set(ylabel="score", ylim=(0, 1))
fig.legend(loc="upper center", ncol=2, fontsize=9)
fig.tight_layout(rect=(0, 0, 1, 0.86))
plt.show()

# %% [markdown]
# In the full run (1200 steps, seed 0) the curves move together and suddenly: the best
# induction score is 0.09 at step 500, 0.45 at step 600 and 0.84 at step 800; in the same 300
# steps the second copy's loss falls from 4.4 nats to 0.55 (the first copy's stays at about
# 5: it is random) and the best previous-token score climbs from 0.11 to 0.53, the two halves
# of the circuit forming at once (Olsson et al. call this the phase change).
#
# Here are the two heads at work on one $[r, r]$ sequence: the layer-0 **previous-token
# head** (each position looks one back) and the best layer-1 **induction head** (each
# position in the second copy looks at the token after its earlier occurrence: a diagonal
# offset by the length of $r$, one to the right of the "same token" diagonal).

# %%
rep = run["report"]
model = run["model"]
layer, head = 1, int(np.argmax(rep["induction"][1]))  # the best layer-1 head
prev = int(np.argmax(rep["previous_token"][0]))
fig, axes = plt.subplots(1, 2, figsize=(8, 4))
for ax, (l, h, what) in zip(axes, [(0, prev, "previous-token"), (layer, head, "induction")]):
    name = f"blocks.{l}.attn.hook_pattern"
    _, cache = circuits.run_with_cache(model, rep["tokens"][:1], names=name)
    ax.imshow(np.asarray(cache[name])[0, h], cmap="Blues", vmin=0, vmax=1)
    ax.set(title=f"layer {l} head {h} ({what})", xlabel="key position", ylabel="query position")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 3. QK and OV: reading the heads from their weights
#
# A head does two separate things (Elhage et al., 2021): the **QK circuit**
# $W_Q W_K^\top$ decides where it attends, the **OV circuit** $W_V W_O$ decides what it
# writes once it attends. Through the embedding and unembedding, the OV circuit
# $W_E W_V W_O W_U$ is a vocab-by-vocab table: row $i$ is the change in every output logit
# when the head attends to token $i$. A head that *copies* raises the logit of the token it
# attends to, so its table's diagonal stands out; the copying score is
# $\sum_i \lambda_i / \sum_i |\lambda_i|$ over the table's eigenvalues (near 1 for a head
# that copies, near -1 for one that suppresses what it sees, near 0 for neither).

# %%
for l in range(len(model.blocks)):
    scores = [circuits.ov_circuit(model, l, h).copying_score() for h in range(model.config.n_head)]
    print(f"layer {l}: OV copying scores by head", np.round(scores, 2))

# %% [markdown]
# In the full run all four layer-1 heads score 1.00: each raises the logit of the token it
# attends to, which is what an induction head must do with the "B" it finds. The layer-0
# heads range from -0.70 to 0.64: what the previous-token head writes is read by the layer-1
# keys, not by the unembedding, so its direct path to the logits has no reason to copy.
#
# And how the two layers connect. The induction head's *keys* must read what the
# previous-token head wrote ("the token before me was A"): that is **K-composition**, measured
# as $\lVert W_{QK}^{h_1} (W_{OV}^{h_0})^\top\rVert_F / (\lVert W_{QK}^{h_1}\rVert_F
# \lVert W_{OV}^{h_0}\rVert_F)$ for a layer-1 head $h_1$ and a layer-0 head $h_0$ (the table
# was printed by the run above; here for the best induction head). In the full run the
# previous-token head (layer 0 head 2, previous-token score 0.67) has the largest
# K-composition with every layer-1 head: 0.195 to 0.209, against 0.131 to 0.179 for the other
# three.

# %%
k = circuits.composition_scores(model)["k"][1, head, 0]
for h0, s in enumerate(k):
    tag = "  <- previous-token head" if h0 == prev else ""
    print(f"K-composition of layer-1 head {head} with layer-0 head {h0}: {s:.3f}{tag}")

# %% [markdown]
# ## 4. Which head writes the answer: direct logit attribution
#
# The final stream is a sum of what every component wrote (the embeddings, each head's
# output, each MLP), and the logits read it through the final layer norm and the unembedding.
# The norm divides by one number per position, $\sigma$; read $\sigma$ from the run (the
# cache's `ln_final.hook_scale`) and the whole readout is linear, so each head's output has
# its own share of each logit: its **direct logit attribution** (Elhage et al., 2021;
# `docs/interpretability.md`, section 4). `gpt.circuits.logit_attrs` computes it.
#
# **Exercise.** Write it for every head: given `model`, a `cache` from
# `circuits.run_with_cache` (each head's output is `cache[f"blocks.{l}.attn.hook_result"]`,
# (B, T, heads, d), before the output bias) and `tokens` (B, T), the token at each position
# whose logit to explain, return an array (layers · heads, B, T), layer-major. `check` runs it
# on a model with a final layer norm (gain `model.ln_final.w`, shift `model.ln_final.b`) and
# compares with `gpt.circuits.logit_attrs`.


# %%
def head_attributions(model, cache, tokens):
    raise NotImplementedError  # return (layers * heads, B, T)


print(check("dla", head_attributions))

# %% [markdown]
# **Predict, then run.** On the $[r, r]$ sequences, which head adds most to the logit of
# the right next token in the second copy: a layer-0 head or a layer-1 head? Then run (the
# induction model has no final norm, so its attribution is each head's output dotted with
# the unembedding), and `reveal("top-head")`.

# %%
tokens = rep["tokens"]
_, cache = circuits.run_with_cache(model, tokens)
stack, labels = circuits.stack_head_results(model, cache, return_labels=True)
attrs = circuits.logit_attrs(model, cache, stack, np.roll(tokens, -1, axis=1))
second = attrs[:, :, tokens.shape[1] // 2 : -1].mean(axis=(1, 2))  # the second copy
for label, a in sorted(zip(labels, second), key=lambda la: -la[1]):
    print(f"{label}: {a:+.2f} to the right next token's logit, on average")
