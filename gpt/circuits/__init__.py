"""Tools for reading a GPT's circuits ("A Mathematical Framework for Transformer Circuits",
Elhage et al. 2021), with TransformerLens's names: activation and gradient caching and
interventions through hook points, the residual stream taken apart (logit lens, direct logit
attribution), activation and attribution patching, QK and OV circuits as factored matrices,
composition scores, zero-layer bigram statistics, head detectors, and a training callback
that watches circuits form. docs/interpretability.md walks through them.

    import gpt.circuits as C
    logits, cache = C.run_with_cache(model, tokens)
    OV = C.ov_circuit(model, layer=1, head=0)      # a FactoredMatrix (vocab × vocab)
    print(C.format_head_table(C.induction_scores(model), "induction scores"))

One file a job:

- ``hooks.py``: hook points by name, ``run_with_cache`` (``incl_bwd=True``: gradients too),
  ``run_with_hooks``, ``token_losses``, ``mean_token_loss``;
- ``resid.py``: ``decompose_resid``, ``stack_head_results``, ``stack_neuron_results``,
  ``full_resid_decomposition``, ``accumulated_resid``, ``apply_ln_to_stack`` (a norm folded,
  giving a ``NormedStack``), ``logit_lens``, ``logit_attrs`` (direct logit attribution, the
  final norm applied inside, as in TransformerLens);
- ``patching.py``: ``patch_activation``, ``activation_patching`` (sweeps),
  ``attribution_patching``;
- ``detectors.py``: ``detect_head`` (previous-token, duplicate-token, induction, or a
  pattern of one's own) on any prompt;
- ``watch.py``: ``CircuitWatcher``, a training callback, and ``circuit_scores``;
- ``views.py``: ``attention_html``, an interactive attention view that works offline;
- ``factored.py``: :class:`FactoredMatrix`, a low-rank product A @ B kept factored;
- ``qk_ov.py``: the heads' weights as circuits: ``W_QK``, ``W_OV``, ``qk_circuit``,
  ``ov_circuit``, ``composition_scores``;
- ``bigram.py``: zero-layer statistics: ``bigram_table``, ``conditional_entropy``,
  ``model_bigram_logprobs``, ``bigram_kl``;
- ``induction.py``: induction and previous-token scores on repeated random tokens, the
  repeated-sequence losses, and ``format_head_table``.

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

from gpt.circuits.bigram import (
    bigram_kl,
    bigram_table,
    conditional_entropy,
    model_bigram_logprobs,
)
from gpt.circuits.detectors import (
    detect_head,
    duplicate_token_pattern,
    induction_pattern,
    previous_token_pattern,
)
from gpt.circuits.factored import FactoredMatrix
from gpt.circuits.hooks import (
    hook_names,
    hooks,
    mean_token_loss,
    run_with_cache,
    run_with_hooks,
    token_losses,
)
from gpt.circuits.induction import (
    format_head_table,
    induction_report,
    induction_scores,
    previous_token_scores,
    repeated_sequence_losses,
    repeated_tokens,
)
from gpt.circuits.patching import activation_patching, attribution_patching, patch_activation
from gpt.circuits.qk_ov import W_OV, W_QK, composition_scores, ov_circuit, qk_circuit
from gpt.circuits.resid import (
    NormedStack,
    accumulated_resid,
    apply_ln_to_stack,
    decompose_resid,
    final_resid,
    folded_unembed,
    full_resid_decomposition,
    logit_attrs,
    logit_lens,
    residual_directions,
    stack_head_results,
    stack_neuron_results,
)
from gpt.circuits.views import attention_html
from gpt.circuits.watch import CircuitWatcher, circuit_scores
