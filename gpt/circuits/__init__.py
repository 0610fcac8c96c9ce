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

Convention: row vectors, so every matrix is the transpose of the paper's and products read
left to right in the order the data flows (QK = W_E W_Q^h (W_K^h)ᵀ W_Eᵀ, OV = W_E W_V^h W_O^h
W_U, row i what attending to token i adds to every logit); the table against the paper's
column vectors, and what the circuits include and leave out: docs/interpretability.md,
section 8.
"""

from gpt.circuits.bigram import bigram_kl, bigram_table, conditional_entropy, model_bigram_logprobs
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
