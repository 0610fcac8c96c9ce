"""The mutations that ``benchmarks/mutation.py`` applies, one at a time.

Each is a plausible one-line bug of the kind a person makes: a wrong sign, an off-by-one, a
wrong axis, a dropped term or factor, swapped arguments, a wrong scale, an inverted condition.
``(name, snippet, replacement, what the bug is)``: the snippet must occur exactly once in its
file (it may span lines to be unique; the change itself stays on one line). A mutation that no
longer matches the source (the code moved on) is reported as an error, not skipped quietly:
update it here.

``TESTS[file]`` are the test paths a mutant of that file runs against, in stages: the focused
file first (fast to fail), then the package's whole test folder, and for the code with
GPU-only branches a last stage on CuPy emulated by NumPy (a stage's leading ``NAME=value``
words are environment variables). A mutant survives only if every stage passes.
"""

# the last stage of the files with GPU-only branches: CuPy emulated by NumPy reaches them
ON_FAKE_CUDA = (
    "TENSORLAB_TEST_DEVICE=fake-cuda tests/tensorlab/test_float16.py "
    "tests/tensorlab/test_autograd.py"
)
TESTS = {
    "tensorlab/ops/elementwise.py": [
        "tests/tensorlab/test_elementwise.py",
        "tests/tensorlab",
        ON_FAKE_CUDA,
    ],
    "tensorlab/ops/reduce.py": ["tests/tensorlab/test_reduce.py", "tests/tensorlab"],
    "tensorlab/ops/softmax.py": ["tests/tensorlab/test_softmax.py", "tests/tensorlab"],
    "tensorlab/ops/shape.py": ["tests/tensorlab/test_shape.py", "tests/tensorlab"],
    "tensorlab/ops/index.py": [
        "tests/tensorlab/test_index.py",
        "tests/tensorlab",
        ON_FAKE_CUDA,
    ],
    # (autocast's cast of the products' inputs lives in linalg.py, its tests in test_amp.py)
    "tensorlab/ops/linalg.py": [
        "tests/tensorlab/test_linalg.py",
        "tests/tensorlab",
        "tests/nn/test_amp.py",
    ],
    "tensorlab/autograd.py": ["tests/tensorlab/test_autograd.py", "tests/tensorlab"],
    "nn/linear.py": ["tests/nn/test_linear.py", "tests/nn"],
    "nn/norm.py": ["tests/nn/test_norm.py tests/tensorlab/test_fused_op.py", "tests/nn"],
    "nn/activation.py": [
        "tests/nn/test_activation.py tests/tensorlab/test_fused_op.py",
        "tests/nn",
    ],
    "nn/loss.py": ["tests/nn/test_loss.py tests/tensorlab/test_fused_op.py", "tests/nn"],
    "nn/embedding.py": ["tests/nn/test_embedding.py", "tests/nn"],
    "nn/attention.py": ["tests/nn/test_attention.py", "tests/nn"],
    # attention's GPU runner: its kernels run on the CPU by tests/cuda_emulator.py
    "nn/flash_attention.cu": ["tests/nn/test_flash_attention.py"],
    "nn/flash_attention.py": ["tests/nn/test_flash_attention.py"],
    "nn/optim.py": ["tests/nn/test_optim.py", "tests/nn"],
    "nn/checks.py": [
        "tests/nn/test_optim.py tests/nn/test_norm.py tests/nn/test_linear.py "
        "tests/gpt/test_config.py"
    ],
    "nn/amp.py": ["tests/nn/test_amp.py", "tests/nn"],
    "tensorlab/c_runner.py": ["tests/tensorlab/test_c_runner.py", "tests/tensorlab tests/nn"],
    "tensorlab/cuda_rows.py": [
        "tests/tensorlab/test_cuda_rows.py tests/tensorlab/test_fused_compiles.py "
        "tests/tensorlab/test_fused_op.py",
        "tests/tensorlab tests/nn",
    ],
    "tensorlab/fused.py": [
        "tests/tensorlab/test_fused.py",
        "tests/tensorlab tests/nn/test_optim.py",
    ],
    "tensorlab/backend.py": [
        "tests/tensorlab/test_float16.py",
        "tests/tensorlab",
        ON_FAKE_CUDA,
    ],
    "gpt/tokenizers/offsets.py": [
        "tests/gpt/tokenizers/test_offsets_of_unknown_tokens.py "
        "tests/gpt/tokenizers/test_offsets_and_visualizer.py tests/gpt/tokenizers/test_spelling.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/precompiled.py": [
        "tests/gpt/tokenizers/test_pipeline_parity.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/base.py": [
        "tests/gpt/tokenizers/test_byte_bpe.py tests/gpt/tokenizers/test_wordpiece.py "
        "tests/gpt/tokenizers/test_wordpiece_definitions.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/models.py": [
        "tests/gpt/tokenizers/test_hf_models.py tests/gpt/tokenizers/test_byte_bpe.py "
        "tests/gpt/tokenizers/test_unigram.py tests/gpt/tokenizers/test_unigram_definitions.py "
        "tests/gpt/tokenizers/test_wordpiece.py tests/gpt/tokenizers/test_wordpiece_definitions.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/pre_tokenizers.py": [
        "tests/gpt/tokenizers/test_pre_tokenizers.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/circuits/resid.py": [
        "tests/gpt/circuits/test_resid_decomposition.py",
        "tests/gpt/circuits",
    ],
    "nn/init.py": [
        "tests/nn/test_init.py",
        "tests/nn tests/gpt/test_hf_gpt2.py tests/gpt/test_hf_llama.py",
    ],
    "nn/module.py": [
        "tests/nn/test_module.py",
        "tests/nn tests/gpt/test_hf_gpt2.py tests/gpt/test_hf_llama.py",
    ],
    "gpt/config.py": ["tests/gpt/test_config.py", "tests/gpt --ignore=tests/gpt/tokenizers"],
    "gpt/hf/checkpoint.py": [
        "tests/gpt/test_hf_gpt2.py tests/gpt/test_hf_llama.py",
        "tests/gpt --ignore=tests/gpt/tokenizers",
    ],
    "gpt/hf/gpt2.py": [
        "tests/gpt/test_hf_gpt2.py",
        "tests/gpt --ignore=tests/gpt/tokenizers",
    ],
    "gpt/hf/llama.py": [
        "tests/gpt/test_hf_llama.py",
        "tests/gpt --ignore=tests/gpt/tokenizers",
    ],
    "gpt/generate.py": ["tests/gpt/test_generate.py", "tests/gpt --ignore=tests/gpt/tokenizers"],
    "gpt/data.py": ["tests/gpt/test_data.py", "tests/gpt --ignore=tests/gpt/tokenizers"],
    "gpt/tokenizers/bpe.py": [
        "tests/gpt/tokenizers/test_byte_bpe.py tests/gpt/tokenizers/test_hf_format_writing.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/cli.py": [
        "tests/gpt/tokenizers/test_tokenizer_metrics.py",
        "tests/gpt/tokenizers tests/gpt/test_cli.py",
    ],
    "tensorlab/tensor.py": [
        "tests/tensorlab/test_tensor.py tests/tensorlab/test_reduce.py "
        "tests/tensorlab/test_shape.py tests/tensorlab/test_index.py "
        "tests/tensorlab/test_linalg.py",
        "tests/tensorlab",
        ON_FAKE_CUDA,
    ],
    "nn/serialization.py": [
        "tests/nn/test_serialization.py",
        "tests/nn tests/gpt/test_train.py tests/gpt/test_hf_gpt2.py",
    ],
    "tensorlab/gradcheck.py": ["tests/tensorlab/test_gradcheck.py", "tests/tensorlab"],
    "tensorlab/transforms.py": ["tests/tensorlab/test_transforms.py", "tests/tensorlab"],
    "tensorlab/checkpoint.py": [
        "tests/tensorlab/test_checkpoint.py",
        "tests/tensorlab tests/gpt/test_model.py",
    ],
    "nn/dropout.py": ["tests/nn/test_dropout.py", "tests/nn"],
    "gpt/model.py": [
        "tests/gpt/test_model.py",
        "tests/gpt --ignore=tests/gpt/tokenizers",
    ],
    "gpt/seq2seq.py": ["tests/gpt/test_seq2seq.py", "tests/gpt --ignore=tests/gpt/tokenizers"],
    "gpt/generate_seq2seq.py": [
        "tests/gpt/test_seq2seq.py",
        "tests/gpt --ignore=tests/gpt/tokenizers",
    ],
    "gpt/train.py": [
        "tests/gpt/test_train.py tests/gpt/test_run_trust.py",
        "tests/gpt --ignore=tests/gpt/tokenizers",
    ],
    "gpt/run_folder.py": [
        "tests/gpt/test_run_trust.py",
        "tests/gpt --ignore=tests/gpt/tokenizers",
    ],
    "gpt/token_files.py": [
        "tests/gpt/test_token_files.py",
        "tests/gpt --ignore=tests/gpt/tokenizers",
    ],
    "gpt/circuits/qk_ov.py": ["tests/gpt/circuits/test_qk_ov_circuits.py", "tests/gpt/circuits"],
    "gpt/circuits/induction.py": [
        "tests/gpt/circuits/test_induction_scores.py",
        "tests/gpt/circuits",
    ],
    "gpt/circuits/patching.py": ["tests/gpt/circuits/test_patching.py", "tests/gpt/circuits"],
    "gpt/circuits/factored.py": [
        "tests/gpt/circuits/test_factored_matrix.py",
        "tests/gpt/circuits",
    ],
    "gpt/circuits/detectors.py": ["tests/gpt/circuits/test_detectors.py", "tests/gpt/circuits"],
    "gpt/circuits/bigram.py": [
        "tests/gpt/circuits/test_bigram_circuits.py",
        "tests/gpt/circuits",
    ],
    "nn/distributed.py": [
        "tests/nn/test_distributed.py",
        "tests/nn tests/gpt/test_train.py",
    ],
    "gpt/circuits/hooks.py": ["tests/gpt/circuits/test_circuit_hooks.py", "tests/gpt/circuits"],
    "notebooks/grader.py": ["tests/test_grader.py"],
    "tensorlab/numpy_protocol.py": [
        "tests/tensorlab/test_numpy_protocol.py",
        "tests/tensorlab",
    ],
    "tensorlab/trace.py": ["tests/tensorlab/test_trace.py", "tests/tensorlab"],
    "gpt/circuits/watch.py": [
        "tests/gpt/circuits/test_views_and_watch.py",
        "tests/gpt/circuits",
    ],
    "gpt/watch.py": ["tests/gpt/test_watch.py", "tests/gpt --ignore=tests/gpt/tokenizers"],
    "gpt/report.py": ["tests/gpt/test_report.py", "tests/gpt --ignore=tests/gpt/tokenizers"],
    "gpt/compare.py": ["tests/gpt/test_compare.py", "tests/gpt --ignore=tests/gpt/tokenizers"],
    "tensorlab/creation.py": [
        "tests/tensorlab/test_tensor.py tests/tensorlab/test_default_device.py",
        "tests/tensorlab",
    ],
    "tensorlab/function.py": ["tests/tensorlab/test_autograd.py", "tests/tensorlab"],
    "tensorlab/method_functions.py": [
        "tests/tensorlab/test_method_functions.py",
        "tests/tensorlab",
    ],
    "gpt/tokenizers/char.py": [
        "tests/gpt/tokenizers/test_char_tokenizer.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/metrics.py": [
        "tests/gpt/tokenizers/test_tokenizer_metrics.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/unigram.py": [
        "tests/gpt/tokenizers/test_unigram.py tests/gpt/tokenizers/test_unigram_without_unk.py "
        "tests/gpt/tokenizers/test_unigram_definitions.py "
        "tests/gpt/tokenizers/test_hf_format_writing.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/wordpiece.py": [
        "tests/gpt/tokenizers/test_wordpiece.py "
        "tests/gpt/tokenizers/test_wordpiece_decoding.py "
        "tests/gpt/tokenizers/test_wordpiece_definitions.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/__main__.py": ["tests/gpt/test_cli.py", "tests/gpt --ignore=tests/gpt/tokenizers"],
    "gpt/circuits/views.py": ["tests/gpt/circuits/test_views_and_watch.py", "tests/gpt/circuits"],
    "gpt/plots.py": ["tests/gpt/test_plots.py", "tests/gpt --ignore=tests/gpt/tokenizers"],
    "tensorlab/draw.py": ["tests/tensorlab/test_draw.py", "tests/tensorlab tests/nn"],
    "gpt/tokenizers/alignment.py": [
        "tests/gpt/tokenizers/test_normalizer_alignment.py "
        "tests/gpt/tokenizers/test_offsets_and_visualizer.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/batching.py": [
        "tests/gpt/tokenizers/test_post_processors_and_batching.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/decoders.py": [
        "tests/gpt/tokenizers/test_normalizers_and_decoders.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/fields.py": [
        "tests/gpt/tokenizers/test_files_and_fields.py tests/gpt/tokenizers/test_bad_input.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/files.py": [
        "tests/gpt/tokenizers/test_files_and_fields.py "
        "tests/gpt/tokenizers/test_tokenizer_files.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/normalizers.py": [
        "tests/gpt/tokenizers/test_normalizers_and_decoders.py "
        "tests/gpt/tokenizers/test_normalizer_alignment.py "
        "tests/gpt/tokenizers/test_pipeline_parity.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/tokenizer.py": [
        "tests/gpt/tokenizers/test_pipeline_added_tokens.py "
        "tests/gpt/tokenizers/test_post_processors_and_batching.py "
        "tests/gpt/tokenizers/test_hf_format_writing.py "
        "tests/gpt/tokenizers/test_tokenizer_files.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/post_processors.py": [
        "tests/gpt/tokenizers/test_post_processors_and_batching.py",
        "tests/gpt/tokenizers",
    ],
    "gpt/tokenizers/visualize.py": [
        "tests/gpt/tokenizers/test_offsets_and_visualizer.py",
        "tests/gpt/tokenizers",
    ],
    "tensorlab/blas_threads.py": [
        "tests/tensorlab/test_blas_threads.py",
        "tests/tensorlab tests/nn/test_distributed.py",
    ],
}

MUTANTS = {
    "tensorlab/numpy_protocol.py": [
        (
            "reflected-operands-swapped",
            "        return op.apply(_lift(a, b), b)",
            "        return op.apply(b, _lift(a, b))",
            "array - x computes x - array (the reflected operands swapped)",
        ),
        (
            "reduce-over-all",
            'kwargs.get("axis", 0), kwargs.get("keepdims", False)',
            'kwargs.get("axis", None), kwargs.get("keepdims", False)',
            "np.add.reduce(x) sums every axis, not axis 0",
        ),
        (
            "sort-descending",
            "stable=None: a.sort(axis).values",
            "stable=None: a.sort(axis, True).values",
            "np.sort of a Tensor sorts in descending order",
        ),
    ],
    "tensorlab/trace.py": [
        (
            "norm-squared",
            "return float(np.sqrt((np.asarray(t.numpy(), dtype=np.float64) ** 2).sum()))",
            "return float((np.asarray(t.numpy(), dtype=np.float64) ** 2).sum())",
            "trace_backward: the squared norm printed as the norm",
        ),
        (
            "summary-squared",
            "norm = float(np.sqrt((a**2).sum()))",
            "norm = float((a**2).sum())",
            "a node's summary prints the squared norm as the norm",
        ),
        (
            "summary-entries-off-by-one",
            "if 0 < a.size <= entries else None",
            "if 0 < a.size < entries else None",
            "a tensor of exactly `entries` entries is summarized without them",
        ),
    ],
    "gpt/watch.py": [
        (
            "ratio-over-new-weight",
            "n: _norm(p.data - before[n]) / max(_norm(before[n]), 1e-12)",
            "n: _norm(p.data - before[n]) / max(_norm(p.data), 1e-12)",
            "the update ratio divides by the weight after the step",
        ),
        (
            "grad-norm-clipped",
            "unclip = max(1.0, (total + 1e-6) / cfg.grad_clip)",
            "unclip = 1.0",
            "the recorded gradient norms are the clipped ones",
        ),
        (
            "dead-once",
            'block["mlp_dead"] = float((pre <= 0).all(0).mean())',
            'block["mlp_dead"] = float((pre <= 0).any(0).mean())',
            "a unit counts as dead when it is not positive at one position",
        ),
        (
            "saturated-one-side",
            "(abs(pre) > SATURATED).all(0)",
            "(pre > SATURATED).all(0)",
            "a unit far in the negative tail is not counted as saturated",
        ),
        (
            "entropy-over-heads",
            "return h.mean(axis=(0, 2))",
            "return h.mean(axis=(0, 1))",
            "the entropy is averaged over heads instead of queries",
        ),
        (
            "resume-keeps-stale",
            'if r["iter"] <= trainer.iter]',
            "if True]",
            "a resumed run keeps the records past its checkpoint",
        ),
        (
            "watch-one-early",
            "if not self.every or (self.t.iter + 1) % self.every:",
            "if not self.every or self.t.iter % self.every:",
            "the step before each watched one is recorded",
        ),
    ],
    "gpt/report.py": [
        (
            "collapse-one-head",
            "if ent.size and (ent < COLLAPSED).mean() >= 0.5:",
            "if ent.size and (ent < COLLAPSED).any():",
            "one sharp head flags collapsed attention",
        ),
        (
            "flags-first-record",
            "out, last = [], watch[-1]",
            "out, last = [], watch[0]",
            "the end-of-run rules read the first record",
        ),
        (
            "biases-are-matrices",
            '{k: v for k, v in record["update_ratio"].items() if k.rsplit(".", 1)[-1][0] == "W"}',
            'dict(record["update_ratio"])',
            "biases and gains count as weight matrices in the update-ratio rules",
        ),
    ],
    "gpt/compare.py": [
        (
            "hf-port-flipped",
            '"<h.{i}.ln_2"',
            '"h.{i}.ln_2"',
            "GPT-2's resid_mid read at ln_2's output, not its input",
        ),
        (
            "qkv-third-ignored",
            "[..., int(third), :] if third else x",
            "[..., 0, :] if third else x",
            "every one of GPT-2's q, k, v read as q",
        ),
        (
            "gradients-forward-order",
            "params = reversed([n for n, _ in model.named_parameters()])",
            "params = [n for n, _ in model.named_parameters()]",
            "the gradients are searched from the embedding, not from the loss",
        ),
        (
            "no-floor",
            "return [Difference(n, d, d / max(s, floor)) for n, d, s in rows]",
            "return [Difference(n, d, d / max(s, 1e-38)) for n, d, s in rows]",
            "a gradient that cancels to zero is compared at its own rounding noise",
        ),
        (
            "nan-agrees",
            "if not r.relative <= self.rtol",
            "if r.relative > self.rtol",
            "a NaN activation counts as agreeing",
        ),
        (
            "scale-of-diff",
            "_largest(abs(b)[abs(b) < np.inf])",
            "_largest(abs(a - b))",
            "the difference is divided by itself",
        ),
    ],
    "gpt/circuits/watch.py": [
        (
            "k-comp-mean",
            '"k_composition": k.max(-1) if k.size else np.zeros((L, H)),',
            '"k_composition": k.mean(-1) if k.size else np.zeros((L, H)),',
            "circuit_scores: the mean K-composition over earlier heads, not the largest",
        ),
        (
            "repeat-loss-first-half",
            '"repeat_loss": rep["second_half"],',
            '"repeat_loss": rep["first_half"],',
            "circuit_scores: repeat_loss from the first copy",
        ),
        (
            "first-step-skipped",
            "if step % self.every and not (self.first and step == 1) and not force:",
            "if step % self.every and not force:",
            "CircuitWatcher: first=True does not record step 1",
        ),
    ],
    "notebooks/grader.py": [
        (
            "first-input-only",
            "for name, yours, w, num in zip(ex.inputs, grads, want, numeric):",
            "for name, yours, w, num in zip(ex.inputs[:1], grads, want, numeric):",
            "the grader checks only the first input's gradient (a wrong dW passes)",
        ),
        (
            "forward-unchecked",
            "    ok = _close(y, want)\n    if ok.all():",
            "    ok = _close(y, want)\n    if True:",
            "the grader passes a wrong forward",
        ),
        (
            "broadcast-axis-unshifted",
            "            axes.append(lead + i)",
            "            axes.append(i)",
            "the broadcast hint names the wrong axis when a leading axis was added too",
        ),
        (
            "hint-skips-a-level",
            "level = min(_HINTS_SHOWN.get(exercise, 0) + 1, len(HINT_LEVELS))",
            "level = min(_HINTS_SHOWN.get(exercise, 0) + 2, len(HINT_LEVELS))",
            "hint: the second call states the formula (the idea in words skipped)",
        ),
        (
            "stub-states-the-rule",
            'for a hint, hint("{exercise}") (each call tells more)',
            "hint: {ex.rule}",
            "a stub's verdict gives the answer before any attempt",
        ),
        (
            "any-factor-a-missing-scale",
            "if abs(abs(c) / value - 1) < 0.01:",
            "if abs(abs(c) / value - 1) < 0.5:",
            "a factor of 1.5 is called a missing 1/N or 1/√d",
        ),
        (
            "matmul-hint-first-product",
            "return _Traced.products[-1]",
            "return _Traced.products[0]",
            "the shape hint names the function's first product, not the one that failed",
        ),
    ],
    "gpt/circuits/hooks.py": [
        (
            "defaults-count-as-positional",
            "p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty",
            "p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)",
            "a hook fn(x, scale=2.0) is called with the hook's name as its scale",
        ),
        (
            "token-loss-unshifted",
            "return nn.functional.cross_entropy(logits[:, :-1], tok[:, 1:])",
            "return nn.functional.cross_entropy(logits, tok)",
            "incl_bwd's default metric: position t scored on token t, not t + 1",
        ),
        (
            "constant-not-a-leaf",
            "return act if act.requires_grad else act.detach().requires_grad_()",
            "return act",
            "incl_bwd: the gradient at a constant activation (sinusoidal positions) given as 0",
        ),
    ],
    "gpt/circuits/factored.py": [
        (
            "core-untransposed",
            "return Qa, Ra @ Rb.T, Qb",
            "return Qa, Ra @ Rb, Qb",
            "FactoredMatrix: the core R_A R_B instead of R_A R_B^T (wrong SVD and norm)",
        ),
        (
            "copying-abs",
            "return float(ev.sum().real / denom) if denom > 0 else 0.0",
            "return float(np.abs(ev).sum() / denom) if denom > 0 else 0.0",
            "copying score: |lambda| summed on top too, so always 1",
        ),
        (
            "trace-sums-all",
            'return float(np.einsum("ij,ji->", self.A, self.B))',
            'return float(np.einsum("ij,jk->", self.A, self.B))',
            "trace: the sum of every entry of AB, not of its diagonal",
        ),
        (
            "scalar-both-factors",
            "return FactoredMatrix(self.A * float(c), self.B)",
            "return FactoredMatrix(self.A * float(c), self.B * float(c))",
            "F * c scales by c squared",
        ),
    ],
    "gpt/circuits/detectors.py": [
        (
            "induction-shift-back",
            "out[:, 1:] = dup[:, :-1]",
            "out[:, :-1] = dup[:, 1:]",
            "induction pattern: the token before the earlier copy, not after",
        ),
        (
            "duplicate-includes-self",
            "return np.tril(t[:, None] == t[None, :], k=-1).astype(np.float64)",
            "return np.tril(t[:, None] == t[None, :], k=0).astype(np.float64)",
            "duplicate-token pattern counts the query itself",
        ),
        (
            "mean-over-every-query",
            "scores[i] = mass.transpose(1, 0, 2)[:, rows].mean(-1)",
            "scores[i] = mass.transpose(1, 0, 2).reshape(mass.shape[1], -1).mean(-1)",
            "detect_head: averaged over every query, not those with a target",
        ),
        (
            "not-renormalized",
            "mass = np.divide(on_target, total, out=np.zeros_like(total), where=total > 0)",
            "mass = on_target",
            "exclude_bos / exclude_current_token: what is left not renormalized",
        ),
    ],
    "gpt/circuits/bigram.py": [
        (
            "pairs-cross-sequences",
            "np.add.at(table, (ids[..., :-1].ravel(), ids[..., 1:].ravel()), 1)",
            "np.add.at(table, (ids.ravel()[:-1], ids.ravel()[1:]), 1)",
            "bigram_table: a pair from one sequence's end to the next one's start",
        ),
        (
            "entropy-unweighted",
            "return float(-(p_a[:, None] * cond * logc).sum())",
            "return float(-(cond * logc).sum())",
            "conditional entropy: rows not weighted by p(a)",
        ),
        (
            "kl-reversed",
            "return float((p_a[:, None] * cond * (logc - logq)).sum())",
            "return float((p_a[:, None] * cond * (logq - logc)).sum())",
            "bigram_kl: the sign of the log ratio flipped",
        ),
    ],
    "nn/distributed.py": [
        (
            "summed",
            "MPI, scale = self.MPI, 1.0 / self.size",
            "MPI, scale = self.MPI, 1.0",
            "gradients summed over the ranks, not averaged",
        ),
        (
            "missing-grad-stale",
            "                if p.grad is None:\n                    view[...] = 0.0",
            "                if p.grad is None:\n                    pass",
            "a parameter without a gradient sends the bucket's last step's numbers",
        ),
    ],
    "tensorlab/gradcheck.py": [
        (
            "one-sided",
            "jac[:, i] = (plus - minus) / (2 * eps)",
            "jac[:, i] = (plus - minus) / eps",
            "gradcheck: the central difference not halved",
        ),
        (
            "nan-passes",
            "bad = ~(err <= atol + rtol * np.abs(n))",
            "bad = err > atol + rtol * np.abs(n)",
            "gradcheck: a NaN gradient compares False, so it passes",
        ),
        (
            "first-input-only",
            "for x, a in zip(wrt, analytic):",
            "for x, a in zip(wrt[:1], analytic):",
            "gradcheck: only the first input's Jacobian is compared",
        ),
        (
            "float32-accepted",
            "x.requires_grad and x.dtype != np.float64:",
            "x.requires_grad and x.dtype == np.float16:",
            "gradcheck: float32 inputs checked (rounding swamps the differences)",
        ),
        (
            "gradgrad-inputs-detached",
            "inputs + list(grad_outputs),",
            "[x.detach() if isinstance(x, Tensor) else x for x in inputs] + list(grad_outputs),",
            "gradgradcheck: the second derivative in x never checked, only the one in v",
        ),
    ],
    "tensorlab/transforms.py": [
        (
            "jacobian-transposed",
            "block = stack(rows[j]).reshape(o.shape + x.shape)",
            "block = stack(rows[j]).T.reshape(o.shape + x.shape)",
            "jacobian: rows and columns swapped (J transposed for a square Jacobian)",
        ),
        (
            "vhp-first-not-graph",
            'return outs[0], _fill(_vjp_of(outs, xs, [one], True), xs, strict, fn, "input")',
            'return outs[0], _fill(_vjp_of(outs, xs, [one], False), xs, strict, fn, "input")',
            "vhp and hessian: the gradient is not recorded, so its derivative is zero",
        ),
        (
            "default-v-two",
            "return (Tensor._wrap(like[0].data * 0 + 1),)",
            "return (Tensor._wrap(like[0].data * 0 + 2),)",
            "vjp: the default v of a one-entry output is 2, not 1",
        ),
        (
            "strict-ignored",
            '            if strict:\n                raise RuntimeError(f"{fn}: {what} {i}',
            '            if False:\n                raise RuntimeError(f"{fn}: {what} {i}',
            "strict=True: an input the function ignores gets zeros without an error",
        ),
        (
            "create-graph-detached",
            "return tuple(ts) if create_graph else tuple(t.detach() for t in ts)",
            "return tuple(t.detach() for t in ts)",
            "create_graph=True: the results come back detached",
        ),
    ],
    "tensorlab/checkpoint.py": [
        (
            "rng-not-rewound",
            "for device, state in states.items():\n"
            "        backend.set_generator_state(state, device)",
            "for device, state in states.items():\n        pass",
            "checkpoint: the recomputation draws a different dropout mask",
        ),
        (
            "rng-consumed",
            "for device, state in before.items():\n"
            "            backend.set_generator_state(state, device)",
            "for device, state in before.items():\n            pass",
            "checkpoint: the recomputation advances the generators (later draws change)",
        ),
        (
            "outside-missed",
            "            if id(t) not in args:\n                found.append(t)",
            "            if False:\n                found.append(t)",
            "checkpoint: parameters read inside fn get no gradient",
        ),
    ],
    "nn/dropout.py": [
        (
            "mask-not-scaled",
            "return keep * like.dtype.type(1.0 / (1.0 - p))",
            "return keep * like.dtype.type(1.0)",
            "dropout: kept entries not scaled by 1/(1 - p)",
        ),
        (
            "keep-inverted",
            "keep = generator(device_of(like)).random(shape, dtype=draw) >= p",
            "keep = generator(device_of(like)).random(shape, dtype=draw) < p",
            "dropout: entries kept with probability p instead of 1 - p",
        ),
        (
            "eval-drops",
            "if not training or p == 0.0:",
            "if p == 0.0:",
            "dropout: still drops in eval mode",
        ),
    ],
    "gpt/model.py": [
        (
            "flops-window-ignored",
            "span = min(cfg.block_size, cfg.sliding_window or cfg.block_size)",
            "span = cfg.block_size",
            "flops_per_token ignores the sliding window",
        ),
        (
            "flops-tied-head-dropped",
            "n = model.num_parameters() - tables + cfg.vocab_size * cfg.d_model",
            "n = model.num_parameters() - tables",
            "flops_per_token leaves out a tied unembedding's product",
        ),
        (
            "flops-backward-once",
            "return 3 * fwd if training else fwd",
            "return 2 * fwd if training else fwd",
            "flops_per_token counts the backward as one forward, not two",
        ),
        (
            "post-norm-inside",
            "return norm(resid + hook(f(resid)))",
            "return resid + hook(norm(f(resid)))",
            "post-norm: the norm on the sublayer's output, not on the sum",
        ),
        (
            "sandwich-out-dropped",
            "return resid + hook(norm_out(f(norm(resid))))",
            "return resid + hook(f(norm(resid)))",
            "sandwich: the sublayer's output norm never applied",
        ),
        (
            "parallel-sequential",
            "m = self.hook_mlp_out(self.ln2_out(self.mlp(self.ln2(resid))))",
            "m = self.hook_mlp_out(self.ln2_out(self.mlp(self.ln2(resid + a))))",
            "parallel (GPT-J): the MLP reads the stream after attention",
        ),
        (
            "residual-init-unscaled",
            "gpt2_residual_init_(block.attn.W_O, max(cfg.n_layer, 1), cfg.init_std)",
            "gpt2_residual_init_(block.attn.W_O, 1, cfg.init_std)",
            "init: W_O not scaled by 1/sqrt(2 n_layer)",
        ),
        (
            "cache-length-set",
            "cache.length += T",
            "cache.length = T",
            "cached generation: positions restart after each new token",
        ),
        (
            "pos-offset-zero",
            "resid = resid + self.hook_pos_embed(self.pos(resid, offset=offset))",
            "resid = resid + self.hook_pos_embed(self.pos(resid, offset=0))",
            "cached generation: new tokens get position 0",
        ),
        (
            "block-size-strict",
            "if offset + T > cfg.block_size:",
            "if offset + T >= cfg.block_size:",
            "a full block_size sequence refused",
        ),
        (
            "checkpoint-ignored",
            "resid = tl.checkpoint(block, resid)",
            "resid = block(resid)",
            "checkpoint_activations=True keeps every activation (the flag does nothing)",
        ),
    ],
    "gpt/seq2seq.py": [
        (
            "embed-scale-d",
            "self.scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0",
            "self.scale = cfg.d_model if cfg.scale_embeddings else 1.0",
            "embeddings scaled by d_model, not sqrt(d_model)",
        ),
        (
            "reorder-keys-kept",
            "c.k, c.v = tl.as_tensor(c.k.data[r]), tl.as_tensor(c.v.data[r])",
            "c.k, c.v = tl.as_tensor(c.k.data), tl.as_tensor(c.v.data[r])",
            "beam search: the self-attention keys not reordered with the beams",
        ),
        (
            "pad-counted",
            "ignore_index=self.config.pad_id,",
            "ignore_index=-100,",
            "the loss counts padding targets",
        ),
        (
            "decoder-offset-zero",
            "resid = self.drop(x + self.pos(x, offset=cache.length if cache is not None else 0))",
            "resid = self.drop(x + self.pos(x, offset=0))",
            "cached decoding: every new token gets position 0",
        ),
        (
            "glorot-half",
            "a = math.sqrt(6.0 / (fan_in + fan_out))",
            "a = math.sqrt(3.0 / (fan_in + fan_out))",
            "init: the Glorot bound sqrt(3/(fan_in+fan_out))",
        ),
    ],
    "gpt/generate_seq2seq.py": [
        (
            "lp-over-five",
            "return ((5.0 + length) / 6.0) ** alpha",
            "return ((5.0 + length) / 5.0) ** alpha",
            "length penalty: (5 + |Y|)/5, not /6",
        ),
        (
            "eos-beyond-k",
            "if rank < k:",
            "if rank < 2 * k:",
            "beam search: an eos ranked past the beam still ends a hypothesis",
        ),
        (
            "exhaustive-ignored",
            "reach /= max_lp if exhaustive else lp_now",
            "reach /= lp_now",
            "beam search: exhaustive=True stops by the current length penalty",
        ),
        (
            "eos-dropped",
            "finished[b].append((s / lp_now, [*seqs[b, beam].tolist(), eos]))",
            "finished[b].append((s / lp_now, [*seqs[b, beam].tolist()]))",
            "greedy/beam output: the eos left out",
        ),
        (
            "logprob-shifted",
            "tgt_in = np.array([[cfg.bos_id, *hyp[:-1]]])",
            "tgt_in = np.array([[cfg.bos_id, *hyp[1:]]])",
            "sequence_logprob: the decoder input is not the hypothesis shifted right",
        ),
    ],
    "gpt/train.py": [
        (
            "accum-unscaled",
            "self.scaler.scale(loss if k == 1 else loss * (1.0 / k)).backward()",
            "self.scaler.scale(loss).backward()",
            "gradient accumulation: K micro-batches add up K times the gradient",
        ),
        (
            "best-any",
            'best = self.history and self.history[-1]["iter"] == self.iter and val < self.best_val',
            'best = self.history and self.history[-1]["iter"] == self.iter',
            "best.safetensors replaced by a worse evaluation",
        ),
        (
            "resume-decay-kept",
            'decay["weight_decay"] = self.cfg.weight_decay',
            'decay["weight_decay"] = decay["weight_decay"]',
            "resume: the checkpoint's weight decay wins over the run's config",
        ),
        (
            "log-tail-duplicated",
            'if r.get("iter", math.inf) < since]',
            'if r.get("iter", math.inf) <= since]',
            "resume: a log record kept twice",
        ),
        (
            "eval-batches-fixed",
            "rng = np.random.default_rng([cfg.seed, it, len(name)])",
            "rng = np.random.default_rng([cfg.seed, len(name)])",
            "evaluation: the same batches at every iteration",
        ),
        (
            "lr-one-ahead",
            "lr = learning_rate(self.iter, cfg)",
            "lr = learning_rate(self.iter + 1, cfg)",
            "the schedule's learning rate one step ahead",
        ),
    ],
    "gpt/run_folder.py": [
        (
            "stale-any-tmp",
            'if any(p.name.lstrip(".").startswith(name + ".") for name in RUN_FILES)',
            "if True",
            "a new run deletes every .tmp file in the folder, not only its own",
        ),
        (
            "overwrite-keeps-old",
            "            for name in RUN_FILES:\n"
            "                (self.path / name).unlink(missing_ok=True)",
            "            for name in RUN_FILES:\n                pass",
            "--overwrite leaves the old run's files (an old best.safetensors)",
        ),
        (
            "unlock-anyones",
            'if self._read_lock() == {"pid": os.getpid(), "host": socket.gethostname()}:',
            "if True:",
            "unlock removes another process's lock",
        ),
        (
            "other-host-gone",
            'if os.name != "posix" or not owner or owner["host"] != socket.gethostname():',
            'if os.name != "posix" or not owner:',
            "a lock from another machine is taken over when its pid is free here",
        ),
        (
            "stale-live-removed",
            "if self._read_lock(aside) == owner:",
            "if True:",
            "a live lock, renamed aside in a race, is deleted",
        ),
        (
            "load-vocab-unchecked",
            "if tokenizer.vocab_size != config.vocab_size:",
            "if False:",
            "gpt.load pairs a model with a tokenizer of another vocabulary",
        ),
    ],
    "gpt/token_files.py": [
        (
            "uint16-overflow",
            'dtype = np.dtype("<u2") if tok.vocab_size <= 1 << 16 else np.dtype("<u4")',
            'dtype = np.dtype("<u2") if tok.vocab_size <= 1 << 17 else np.dtype("<u4")',
            "prepare: ids past 65535 stored in uint16 (wrapped)",
        ),
        (
            "block-mid-line",
            "block += f.readline()",
            'block += ""',
            "prepare: blocks cut mid-line (a word encoded in two pieces)",
        ),
        (
            "count-unchecked",
            "if len(ids) != counts[name]:",
            "if False:",
            "load: a truncated token file accepted",
        ),
        (
            "split-val-first",
            "split_at = int(chars * (1 - val_fraction))",
            "split_at = int(chars * val_fraction)",
            "prepare: the split point at val_fraction (train and val sizes swapped)",
        ),
    ],
    "gpt/circuits/qk_ov.py": [
        (
            "post-norm-folded",
            'g = getattr(block.ln1, "w", None) if fold_ln and not block.post else None',
            'g = getattr(block.ln1, "w", None) if fold_ln else None',
            "post-norm models: ln1's gain folded into the head's input",
        ),
        (
            "k-comp-untransposed",
            'out["k"][l1, h1, l0, h0] = (q @ o.T).norm() / (n_q * n_o)',
            'out["k"][l1, h1, l0, h0] = (q @ o).norm() / (n_q * n_o)',
            "K-composition: W_QK W_OV instead of W_QK W_OV^T",
        ),
        (
            "v-comp-norm",
            'out["v"][l1, h1, l0, h0] = (o @ ov[l1, h1]).norm() / (n_o * n_v)',
            'out["v"][l1, h1, l0, h0] = (o @ ov[l1, h1]).norm() / (n_o * n_q)',
            "V-composition normalized by the later head's W_QK norm",
        ),
        (
            "unembed-unfolded",
            "W_U = folded_unembed(model)[0] if fold_ln else _arr(model.W_U)",
            "W_U = _arr(model.W_U)",
            "OV circuit: the final norm's gain not folded into W_U",
        ),
        (
            "qk-scale-divided",
            "A = A * _attn(model, layer).attn.scale",
            "A = A / _attn(model, layer).attn.scale",
            "QK circuit scale=True: multiplied by sqrt(d_head)",
        ),
    ],
    "gpt/circuits/induction.py": [
        (
            "key-the-copy",
            "return pat[:, :, :, q, q - seq_len + 1].mean(axis=(1, 3))",
            "return pat[:, :, :, q, q - seq_len].mean(axis=(1, 3))",
            "induction score: attention to the earlier copy itself (a duplicate-token head)",
        ),
        (
            "second-half-from-boundary",
            "second = per_pos[offset + seq_len :].mean()",
            "second = per_pos[offset + seq_len - 1 :].mean()",
            "second-half loss includes the unpredictable first token of the copy",
        ),
    ],
    "gpt/circuits/patching.py": [
        (
            "pattern-axes-swapped",
            "    if last in HEAD_FIRST:\n        return 2, 1",
            "    if last in HEAD_FIRST:\n        return 1, 2",
            "patching the pattern by position patches heads (and the reverse)",
        ),
        (
            "attribution-sign",
            "diff = np.subtract(clean_act, act, out=np.zeros_like(act), where=~same)",
            "diff = np.subtract(act, clean_act, out=np.zeros_like(act), where=~same)",
            "attribution patching: corrupted minus clean",
        ),
        (
            "attribution-untransposed",
            "out[layer] = kept.T if keep != sorted(keep) else kept",
            "out[layer] = kept",
            "attribution patching of the pattern by pos_head: (head, pos) stored as (pos, head)",
        ),
        (
            "kv-heads-ignored",
            'heads = getattr(model.config, "n_kv_head", None) if kv else None',
            "heads = None",
            "GQA: keys and values swept over the query heads",
        ),
    ],
    "nn/amp.py": [
        (
            "unscale-not-divided",
            "scale_kernel.each((grads,), 1.0 / self.scale_value)",
            "scale_kernel.each((grads,), 1.0)",
            "GradScaler: gradients left scaled by S",
        ),
        (
            "found-inf-inverted",
            "found = not math.isfinite(float(sum_of_squares(grads)))",
            "found = math.isfinite(float(sum_of_squares(grads)))",
            "GradScaler: skips the good steps and takes the overflowed ones",
        ),
    ],
    "tensorlab/c_runner.py": [
        (
            "c-rows-lead-from-0d",
            "key=lambda s: (s != (), math.prod(s), len(s))",
            "key=lambda s: (math.prod(s), len(s))",
            "a rows kernel's rows taken from a 0-d argument beside empty arrays",
        ),
        (
            "c-max-drops-nan",
            'out.append(f"      nan{node.n} |= v != v;")',
            'out.append(f"      nan{node.n} |= 0;")',
            "the C row maximum skips a NaN (NumPy's is NaN)",
        ),
        (
            "c-gather-unchecked-high",
            'out.append(f"      if (c < 0 || c >= d) {self.outside_row(',
            'out.append(f"      if (c < 0) {self.outside_row(',
            "the C gather reads past the row for an index ≥ d",
        ),
        (
            "c-mean-bessel",
            '                scale = f" * ({t})(1.0 / (double)d)"',
            '                scale = f" * ({t})(1.0 / (double)(d - 1))"',
            "the C mean divides by d - 1",
        ),
        (
            "c-broadcast-row-stride",
            "(a sum's g)\n        return a, 0",
            "(a sum's g)\n        return a, 1",
            "a per-row argument broadcast from one number read as if it held one number per row",
        ),
        (
            "c-gain-row-stride",
            'if (kind == "E" and a.ndim == 1) or kind == "S":\n            return a, 0',
            'if (kind == "E" and a.ndim == 1) or kind == "S":\n            return a, d',
            "a (d,) gain read as if it were a (R, d) array (its row stride d, not 0)",
        ),
        (
            "c-copy-not-written-back",
            "a[...] = view.reshape(a.shape)",
            "pass",
            "an in-place update through a copy never reaches the caller's array",
        ),
        (
            "c-guards-ignored",
            "return not self.guards or all(bool(numbers[i]) == truth for i, truth in self.guards)",
            "return True",
            "a trace reused for the other branch of a number (label smoothing 0 vs 0.1)",
        ),
        (
            "c-tail-sum-unmasked",
            "out.append(f\"      {acc} += {f'keep ? {value} : 0' if keep else value};\")",
            'out.append(f"      {acc} += {value};")',
            "a row's tail adds again the columns the whole vectors already added",
        ),
        (
            "c-tail-stores-nothing",
            "self.stored = stored  # (the second loop stores the same outputs)",
            "pass",
            "a row's tail computes an output under a reduction but does not store it",
        ),
        (
            "c-exp-unclamped",
            'EXPF = "tl_expf"  # the float exp the code calls',
            'EXPF = "expf"  # the float exp the code calls',
            "float32 exp is the C library's expf (a tiny number, not 0, below -87)",
        ),
        (
            "c-exp-late-infinity",
            "e = x >= 88.72283935546875f ? INFINITY : e;",
            "e = x > 88.75f ? INFINITY : e;",
            "float32 e^x just above 128 ln 2 is 2^128's exponent bits plus a mantissa: a NaN",
        ),
        (
            "c-exp-one-ln2",
            "  r = __builtin_fmaf(k, 2.12194440e-4f, r);",
            "  r = __builtin_fmaf(k, 0.0f, r);",
            "float32 e^x reduced by ln 2's leading part only (r off by k times 2e-4)",
        ),
        (
            "c-each-one-size",
            "sizes = np.array([row[0].size for row in rows], np.int64)",
            "sizes = np.array([rows[0][0].size for row in rows], np.int64)",
            ".each runs every tensor over the first one's number of entries",
        ),
        (
            "c-each-sum-first-chunk",
            'part = ", ".join(f"({ctype}*)at[{k}] + o, m"',
            'part = ", ".join(f"({ctype}*)at[{k}], m"',
            ".each_sum adds the first 1024 numbers of a tensor again for each later 1024",
        ),
        (
            "c-read-only-written",
            "        if not views[k][0].flags.writeable:\n            return NOT_COMPILED",
            "        if False:\n            return NOT_COMPILED",
            "an in-place kernel writes into an array NumPy holds read-only",
        ),
        (
            "half-saved-rounded",
            "            n = len(self.dtypes) - keep",
            "            n = len(self.dtypes)",
            "a CUDA row kernel on half arrays rounds what its forward saves for the backward",
        ),
        (
            "half-per-row-rounded",
            'rounded if i < n and kind == "E" and dtype == np.float32 else dtype',
            "rounded if i < n and dtype == np.float32 else dtype",
            "a CUDA row kernel on half arrays rounds one number per row too (a loss in bfloat16)",
        ),
        (
            "half-not-read-by-writer",
            "    halves = writer.HALF if writer is not None and kernel.widen else {}",
            "    halves = {}",
            "a row kernel's half arrays are not read by its CUDA form (CuPy's operations run it)",
        ),
    ],
    "tensorlab/cuda_rows.py": [
        (
            "cuda-mean-bessel",
            '\n            scale = f" * ({t})(1.0 / (double)d)"',
            '\n            scale = f" * ({t})(1.0 / (double)(d - 1))"',
            "the CUDA mean divides by d - 1",
        ),
        (
            "cuda-block-sum-half",
            "    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];",
            "    if (threadIdx.x < s && s > 1) part[threadIdx.x] += part[threadIdx.x + s];",
            "the CUDA block sum stops before adding its last two partial sums",
        ),
        (
            "cuda-max-nan-dropped",
            "tl_block_sum(nan{node.n}) ? ({t})NAN : {acc}",
            "{acc}",
            "the CUDA row maximum ignores NaN (NumPy's max is NaN)",
        ),
        (
            "cuda-one-thread-columns",
            "for (long long j = threadIdx.x; j < d; j += blockDim.x) {",
            "for (long long j = threadIdx.x; j < d && j < blockDim.x; j += blockDim.x) {",
            "the CUDA row loop covers only the first THREADS columns",
        ),
    ],
    "tensorlab/fused.py": [
        (
            "largest-half-not-first",
            "ref = max(arrays, key=lambda a: (a.size, a.dtype in HALF))",
            "ref = max(arrays, key=lambda a: a.size)",
            "a float32 array as large as a half one sets the outputs' dtype (cross-entropy's "
            "backward on bfloat16 logits: float32 gradient, CuPy's operations on a GPU)",
        ),
        (
            "half-runner-rounds-saved",
            "    n = len(out_dtypes) - keep",
            "    n = len(out_dtypes)",
            "half runner: what a forward saves for its backward rounded to the half type",
        ),
        (
            "half-runner-not-taken",
            "        if half is not None and not self.rows:",
            "        if False:",
            "fused kernel on half arrays on a GPU: casts launched on either side of the kernel",
        ),
        (
            "half-runner-rounds-other-shapes",
            "half if rounds and i < n and np.dtype(d) == np.float32 else np.dtype(d)",
            "half if i < n and np.dtype(d) == np.float32 else np.dtype(d)",
            "half runner: outputs of another shape than the inputs' rounded too",
        ),
        (
            "sum-rows-mean",
            "return backend.matmul(self._ones_of(x, x.shape[0]), x, dtype=dtype)",
            "return backend.matmul(self._ones_of(x, x.shape[0]), x, dtype=dtype) / x.shape[0]",
            "the namespace's row sum: a mean (db of a bias scaled by 1/rows)",
        ),
        (
            "mean-last-bessel",
            "total = total * (1.0 / x.shape[axis])",
            "total = total * (1.0 / (x.shape[axis] - 1))",
            "the namespace's mean: divides by d - 1",
        ),
        (
            "table-block-start",
            "first_block[block_tensor]) * CHUNK",
            "first_block[block_tensor]) * (CHUNK - 1)",
            ".each: blocks overlap (each starts CHUNK - 1 after the last)",
        ),
        (
            "table-blocks-floor",
            "per_tensor = -(-sizes // CHUNK)",
            "per_tensor = sizes // CHUNK",
            ".each: a tensor's partial last chunk gets no block",
        ),
        (
            "strided-in-table",
            "if all(a.flags.c_contiguous for a in row):",
            "if True:",
            ".each: a strided array's first address and size put in the table",
        ),
        (
            "rows-by-dtype-str",
            "by_dtypes.setdefault(tuple(a.dtype for a in row), []).append(row)",
            "by_dtypes.setdefault(tuple(a.dtype.str for a in row), []).append(row)",
            ".each: rows grouped by dtype.str, bfloat16's bare <V2",
        ),
        (
            "each-sum-one-partial",
            "total = _plus(total, partial.sum())",
            "total = _plus(total, partial[0])",
            ".each_sum: only the first block's partial sum counted",
        ),
        (
            "each-sum-strided-dropped",
            "            total = _plus(total, value.sum(dtype=np.float64))",
            "            total = total",
            ".each_sum: rows summed on their own (strided, or NumPy's) left out",
        ),
        (
            "erf-horner",
            "for c in _A[3::-1]:",
            "for c in _A[3:0:-1]:",
            "erf (float32): Horner drops a₁",
        ),
        (
            "erf-gauss-sign",
            "np.exp(-(a * a))",
            "np.exp(a * a)",
            "erf (float32): e^(+z²) for e^(-z²)",
        ),
        (
            "block-last-row-unwritten",
            "spans = [slice(i, i + step) for i in range(0, n, step)]",
            "spans = [slice(i, i + step - (step > 1)) for i in range(0, n, step)]",
            "NumPy runner: the last row of every block is never computed",
        ),
        (
            "half-not-rounded-back",
            "    return a.astype(half)\n",
            "    return a\n",
            "NumPy runner: a half input answered in float32",
        ),
        (
            "each-sum-no-type-header",
            "    headers += _scalar.format_type_decls(types)\n    source = (",
            '    headers += ""\n    source = (',
            ".each sources: no header for bfloat16 (does not compile)",
        ),
    ],
    "tensorlab/backend.py": [
        (
            "batched-half-not-widened",
            "    return _half_cublas(a, b, dtype, out)",
            "    return xp.matmul(a, b).astype(dtype)",
            "matmul: a batched bfloat16 product on CuPy summed in bfloat16 (CuPy's own)",
        ),
        (
            "cublas-a-first",
            "one.ctypes.data, b.data.ptr, kind, ld_b, stride_b, a.data.ptr, kind, ld_a, stride_a,",
            "one.ctypes.data, a.data.ptr, kind, ld_b, stride_a, b.data.ptr, kind, ld_a, stride_b,",
            "cuBLAS's strided batched product: a passed first (its layout read by rows)",
        ),
        (
            "cublas-single-matrix-stride",
            "            x, stride = x.reshape(rows, cols), 0",
            "            x, stride = x.reshape(rows, cols), cols",
            "cuBLAS's strided batched product: a shared matrix read with a stride",
        ),
        (
            "cublas-transposed-as-rows",
            "            if x.flags.f_contiguous and not x.flags.c_contiguous:",
            "            if False:",
            "cuBLAS's product: a matrix stored by columns copied by rows (one launch more)",
        ),
        (
            "cublas-transposed-leading-dimension",
            "                return x, cublas.CUBLAS_OP_T, max(rows, 1), stride",
            "                return x, cublas.CUBLAS_OP_T, max(cols, 1), stride",
            "cuBLAS's product: a matrix stored by columns read with its column count as ld",
        ),
        (
            "one-entry-half-not-widened",
            "    if xp is np or (a.size == k and b.size == k):  # (one entry: CuPy's half",
            "    if xp is np:  # (one entry: CuPy's half",
            "matmul: a one-entry float16 product on CuPy summed in float16 (its reduction kernel)",
        ),
    ],
    "gpt/tokenizers/offsets.py": [
        (
            "added-span-first-char",
            "            placed.append((found[0], start, end))",
            "            placed.append((found[0], start, start + 1))",
            "offsets: an added token covers only its first character",
        ),
        (
            "token-ends-at-first-char",
            "last_char = char_of[min(max(b - 1, a), len(char_of) - 1)]",
            "last_char = char_of[min(a, len(char_of) - 1)]",
            "offsets: a token ends where its first character ends",
        ),
        (
            "prefix-space-key",
            '    return any(s.get("add_prefix_space", True) is True for s in trimming)',
            '    return any(s.get("trim_offsets", True) is True for s in trimming)',
            "_trimming: add_prefix_space read from the trim_offsets field",
        ),
        (
            "sequence-not-entered",
            '    steps = (post.get("processors") or []) if _type(post) == "Sequence" else [post]',
            "    steps = [post]",
            "_trimming: a ByteLevel post-processor inside a Sequence is not seen",
        ),
    ],
    "gpt/tokenizers/models.py": [
        (
            "cut-junction-first-char",
            "                joins[b[0]].add(a[-1])",
            "                joins[b[0]].add(a[0])",
            "MergeModel._cutter: a merge's junction read from its left part's first character",
        ),
        (
            "cut-after-dropped",
            "        if self.unk_token is not None:\n            tails =",
            "        if True:\n            tails =",
            "MergeModel._cutter: cuts after an unknown character that may be dropped",
        ),
        (
            "cut-byte-tail",
            '({">"} if self.byte_fallback else set())',
            "set()",
            "MergeModel._cutter: a merge after a byte token does not stop a cut",
        ),
        (
            "cut-before-superset",
            "        cut_before = [y for y in known if joins[y] <= J]",
            "        cut_before = [y for y in known if joins[y] >= J]",
            "MergeModel._cutter: cuts before characters that more than J is merged in front of",
        ),
        (
            "cut-after-any-token",
            '            cut_after = f"[{chars(known - J)}]"',
            '            cut_after = f"[{chars(known)}]"',
            "MergeModel._cutter: cuts after a token that is merged in front of the cut character",
        ),
        (
            "cut-with-suffix",
            "        if self.prefix or self.suffix or self.ignore_merges:",
            "        if self.prefix or self.ignore_merges:",
            "MergeModel._cutter: cuts a word whose last character is spelled with a suffix",
        ),
        (
            "cut-ignore-merges",
            "        if self.prefix or self.suffix or self.ignore_merges:",
            "        if self.prefix or self.suffix:",
            "MergeModel._cutter: cuts words that ignore_merges takes whole",
        ),
        (
            "merges-stale-kept",
            "        if current is None or current[1] != new_id:",
            "        if current is None:",
            "apply_merges: a stale heap entry merges whatever pair now stands at its place",
        ),
        (
            "merges-latest-first",
            "            heap.append((r[0], pos, r[1]))",
            "            heap.append((-r[0], pos, r[1]))",
            "apply_merges: the latest-learned merge first (was bpe.encode-priority, issue 21)",
        ),
        (
            "merges-rightmost-tie",
            "            heap.append((r[0], pos, r[1]))",
            "            heap.append((r[0], -pos, r[1]))",
            "apply_merges: ties between equal pairs go to the rightmost (negative positions)",
        ),
        (
            "merges-left-at-pos",
            "                heapq.heappush(heap, (r[0], left, r[1]))",
            "                heapq.heappush(heap, (r[0], pos, r[1]))",
            "apply_merges: the new pair on the left is pushed at the merged position",
        ),
        (
            "merges-no-right-push",
            "            r = ranks.get((new_id, ids[after]))",
            "            r = None",
            "apply_merges: the new pair on the right of a merge is never considered",
        ),
        (
            "duplicate-merge-rank",
            "self.ranks[(vocab[a], vocab[b])] = (rank, vocab[merged])",
            "self.ranks.setdefault((vocab[a], vocab[b]), (rank, vocab[merged]))",
            "MergeModel: a merge listed twice keeps its first rank",
        ),
        (
            "viterbi-tie-shorter",
            "                if base + s > best[j]:",
            "                if base + s >= best[j]:",
            "UnigramModel.viterbi: ties go to the later cut (the shorter last piece)",
        ),
        (
            "edges-window-short",
            "for j in range(i + 1, min(len(word), i + self.max_piece_chars) + 1):",
            "for j in range(i + 1, min(len(word), i + self.max_piece_chars - 1) + 1):",
            "UnigramModel._edges_from: the longest pieces are never lattice edges",
        ),
        (
            "unk-score-bonus",
            "self.unk_score = min((s for _, s in pieces), default=0.0) - UNK_PENALTY",
            "self.unk_score = min((s for _, s in pieces), default=0.0) + UNK_PENALTY",
            "UnigramModel: an unknown character scores above the least likely piece, not below",
        ),
        (
            "unk-edge-if-any-piece",
            "                has_single = has_single or j == i + 1",
            "                has_single = True",
            "UnigramModel._edges_from: no unknown edge where a longer piece starts there",
        ),
        (
            "sample-alpha-ignored",
            "                into[j].append((i, alpha * s))",
            "                into[j].append((i, s))",
            "UnigramModel.sample: alpha never sharpens or flattens the distribution",
        ),
        (
            "sample-weight-no-edge",
            "            weights = [math.exp(logf[i] + s - logf[j]) for i, s in options]",
            "            weights = [math.exp(logf[i] - logf[j]) for i, s in options]",
            "UnigramModel.sample: the backward walk weighs a cut by the mass before it, not "
            "the edge",
        ),
        (
            "sample-forward-max",
            "logf[j] = m if m == -math.inf else m + math.log(sum(math.exp(x - m) for x in xs))",
            "logf[j] = m",
            "UnigramModel.sample: forward pass takes the best path, not the sum over paths",
        ),
        (
            "max-word-inclusive",
            "        if len(word) > self.max_word_chars:",
            "        if len(word) >= self.max_word_chars:",
            "WordPieceModel: a word of exactly max_word_chars characters becomes [UNK]",
        ),
        (
            "window-short",
            "            end = min(n, start + self.max_piece_chars)",
            "            end = min(n, start + self.max_piece_chars - 1)",
            "WordPieceModel: the longest vocabulary entry never matched at a word start",
        ),
    ],
    "gpt/tokenizers/pre_tokenizers.py": [
        (
            "char-merged-next-greedy",
            '"MergedWithNext": "{C}?{N}+|{C}",',
            '"MergedWithNext": "{C}*{N}+|{C}",',
            "char_splitting: MergedWithNext glues a run of matches to the next piece",
        ),
        (
            "char-contiguous-single",
            '"Contiguous": "{C}+|{N}+",',
            '"Contiguous": "{C}|{N}+",',
            "char_splitting: Contiguous keeps neighbouring matches apart",
        ),
        (
            "char-at-start-kept",
            "    return text[s:e], at_start and s == 0, None if origin is None else origin[s:e]",
            "    return text[s:e], at_start, None if origin is None else origin[s:e]",
            "_cut: every piece of the first piece marked as the text's start",
        ),
        (
            "prepended-from-last",
            "out.append((new, a, o[:1] * (len(new) - len(o)) + o))",
            "out.append((new, a, o + o[-1:] * (len(new) - len(o))))",
            "per_piece: a character put in front of a piece counted as coming from its end",
        ),
        (
            "prefix-space-twice",
            'per_piece(lambda t, _: t if t.startswith(" ") else " " + t)',
            'per_piece(lambda t, _: " " + t)',
            "ByteLevel(add_prefix_space): a leading space doubled",
        ),
        (
            "legacy-prefix-space-first",
            'return "always" if p("add_prefix_space", "bool", True) else "never"',
            'return "first" if p("add_prefix_space", "bool", True) else "never"',
            "reading an old Metaspace (add_prefix_space): true read as prepend_scheme first",
        ),
        (
            "metaspace-first-always",
            'prepend = prepend_scheme == "always" or (prepend_scheme == "first" and first)',
            'prepend = prepend_scheme == "always" or prepend_scheme == "first"',
            "metaspace: prepend_scheme='first' prepends to every piece, not the text's first",
        ),
    ],
    "gpt/tokenizers/precompiled.py": [
        (
            "plain-run-start-kept",
            "                a += 1  # its first character may end the cluster before it",
            "                a += 0  # its first character may end the cluster before it",
            "Precompiled: a plain run's first character rewritten alone (LF after CR)",
        ),
        (
            "plain-run-end-kept",
            "                b -= 1  # its last character may begin a cluster",
            "                b -= 0  # its last character may begin a cluster",
            "Precompiled: a plain run's last character rewritten without its combining marks",
        ),
        (
            "plain-run-with-cr",
            '_PLAIN = regex.compile(r"[\\p{GCB=Other}\\p{GCB=Control}\\p{GCB=LF}]{32,}")',
            '_PLAIN = regex.compile(r"[\\p{GCB=Other}\\p{GCB=Control}\\p{GCB=LF}\\r]{32,}")',
            "Precompiled: CR inside plain runs (CR LF is one cluster)",
        ),
        (
            "plain-run-with-marks",
            '_PLAIN = regex.compile(r"[\\p{GCB=Other}\\p{GCB=Control}\\p{GCB=LF}]{32,}")',
            '_PLAIN = regex.compile(r"[\\p{GCB=Other}\\p{GCB=Control}\\p{GCB=LF}\\p{GCB=Extend}]{32,}")',  # noqa: E501
            "Precompiled: combining marks inside plain runs (a mark joins the character before)",
        ),
        (
            "label-mask",
            "if c == 0 or pos >= len(trie) or trie[pos] & 0x800000FF != c:",
            "if c == 0 or pos >= len(trie) or trie[pos] & 0xFF != c:",
            "Precompiled trie: a unit's leaf flag ignored when matching its label",
        ),
        (
            "longest-prefix",
            "start = values[0]",
            "start = values[-1]",
            "Precompiled: the longest key's replacement (SentencePiece's rule, not the library's)",
        ),
        (
            "cluster-size",
            "_SHORT = 6  # clusters below this many UTF-8 bytes are looked up whole",
            "_SHORT = 16  # clusters below this many UTF-8 bytes are looked up whole",
            "Precompiled: longer clusters looked up whole",
        ),
        (
            "extra-chars-span",
            "[spans[min(a + k, b - 1)] for k in range(len(new))]",
            "[spans[a] for k in range(len(new))]",
            "Precompiled alignment: every rewritten character gets the first one's span",
        ),
    ],
    "gpt/circuits/resid.py": [
        (
            "scale-without-eps",
            "return np.sqrt(resid.var(-1, keepdims=True) + norm.eps)",
            "return np.sqrt(resid.var(-1, keepdims=True))",
            "apply_ln_to_stack: the layer norm's eps left out of the scale",
        ),
        (
            "not-centred",
            "return stack - stack.mean(-1, keepdims=True) if isinstance(norm, nn.LayerNorm) "
            "else stack",
            "return stack",
            "apply_ln_to_stack: a LayerNorm's components not centred",
        ),
        (
            "unembed-gain-unfolded",
            "return (W_U if w is None else _arr(w)[:, None] * W_U), b_U",
            "return W_U, b_U",
            "folded_unembed: the final norm's gain not folded into W_U",
        ),
        (
            "incorrect-added",
            "dirs = dirs - residual_directions(model, incorrect)",
            "dirs = dirs + residual_directions(model, incorrect)",
            "logit_attrs: the incorrect token's direction added, not subtracted",
        ),
        (
            "sigma-from-stream",
            "scale = _norm_scale(norm, resid) if cached is None else _arr(cached)",
            "scale = _norm_scale(norm, resid)",
            "apply_ln_to_stack: σ from the stream when the run patched it",
        ),
    ],
    "tensorlab/ops/elementwise.py": [
        (
            "sigmoid-tanh-form",
            "    e = xp.negative(a, out=xp.empty_like(a))",
            "    return xp.add(0.5 * xp.tanh(0.5 * a), 0.5, out=xp.empty_like(a))",
            "sigmoid as ½(1 + tanh(a/2)): the digits of sigmoid(a) ≪ 1 lost",
        ),
        (
            "pow-zero-base-nan",
            "ga = select(flat, 0.0, g * b * select(flat, 1.0, a) ** (b - 1))",
            "ga = g * b * a ** (b - 1)",
            "Pow: da at a = 0, b = 0 is 0 · 0^(-1) = NaN, not PyTorch's limit 0",
        ),
        ("sub-db-sign", "return g, (-g if", "return g, (g if", "Sub: db = +g"),
        (
            "mul-swapped",
            "return (g * b if a.requires_grad else None), (g * a if b.requires_grad",
            "return (g * a if a.requires_grad else None), (g * b if b.requires_grad",
            "Mul: da and db swapped (g·a, g·b)",
        ),
        ("div-db-sign", "gb = -g * ctx.output / b", "gb = g * ctx.output / b", "Div: db sign"),
        (
            "pow-scalar-exponent",
            "return g * (p * a ** (p - 1))",
            "return g * (p * a**p)",
            "PowScalar: a^p instead of a^(p-1)",
        ),
        ("pow-scalar-2", "return g * (2 * a)", "return g * a", "PowScalar p=2: factor 2 dropped"),
        (
            "pow-db-drop-y",
            "gb = select(flat, 0.0, g * ctx.output * select(flat, 1.0, a).log())",
            "gb = select(flat, 0.0, g * select(flat, 1.0, a).log())",
            "Pow: db lost y",
        ),
        ("sqrt-scale", "return g / (2 * ctx.output)", "return g / ctx.output", "Sqrt: 1/(2y)"),
        (
            "cos-sign",
            "return -g * ctx.inputs[0].sin()",
            "return g * ctx.inputs[0].sin()",
            "Cos: da = +g sin(a)",
        ),  # fmt: skip
        ("tanh-square", "return g * (1 - y * y)", "return g * (1 - y)", "Tanh: 1 - y, not 1 - y²"),
        ("sigmoid-drop-y", "return g * (y * (1 - y))", "return g * (1 - y)", "Sigmoid: y dropped"),
        (
            "sigmoid-sign",
            "    e += 1\n    return xp.reciprocal(e, out=e)",
            "    e -= 1\n    return xp.reciprocal(e, out=e)",
            "Sigmoid forward: 1/(e^(-a) - 1) instead of 1/(1 + e^(-a))",
        ),
        (
            "relu-at-zero",
            "return select(ctx.inputs[0].data <= 0, 0.0, g)",
            "return select(ctx.inputs[0].data < 0, 0.0, g)",
            "ReLU: gradient 1 at exactly 0",
        ),
        (
            "tie-mask-full",
            "half = select(a == b, g * 0.5, g)",
            "half = g",
            "Maximum/Minimum: a tie gives both inputs the full gradient",
        ),
        (
            "minimum-swapped",
            "return _tie_split(ctx, g, b.data, a.data)",
            "return _tie_split(ctx, g, a.data, b.data)",
            "Minimum: the split of Maximum (swapped args)",
        ),
        (
            "clip-upper-open",
            "inside &= a <= ctx.hi",
            "inside &= a < ctx.hi",
            "Clip: no gradient at exactly hi",
        ),
        (
            "where-db-swapped",
            "gb = select(ctx.cond, 0.0, g)",
            "gb = select(ctx.cond, g, 0.0)",
            "Where: db sent where cond is true",
        ),
        (
            "where-dtype-not-kept",
            "return xp_of(a).where(cond, a, b).astype(np.result_type(a.dtype, b.dtype), "
            "copy=False)",
            "return xp_of(a).where(cond, a, b)",
            "where: CuPy's float32 for two bfloat16 arrays kept",
        ),
    ],
    "tensorlab/ops/reduce.py": [
        (
            "spread-no-reshape",
            "ctx.axis is not None and ctx.axis != tuple(range(len(ctx.axis))):",
            "ctx.axis is not None and False:",
            "a reduction's g broadcast as it is, also where a reduced axis is not a leading one",
        ),
        (
            "spread-reshape-leading",
            "ctx.axis != tuple(range(len(ctx.axis))):",
            "ctx.axis != tuple(range(1, len(ctx.axis) + 1)):",
            "a reduction's g not reshaped where its reduced axes are not the leading ones",
        ),
        (
            "prod-zeros-axes-not-restored",
            "    if not a.ndim:\n        return back",
            "    if a.ndim:\n        return back",
            "prod's leave-one-out products keep the reduced axes last (right for trailing axes)",
        ),
        (
            "var-no-dof-warns",
            "if ctx.count - ddof <= 0:",
            "if ctx.count - ddof < 0:",
            "var with N = ddof left to NumPy (NaN, with its warning)",
        ),
        (
            "mean-scale",
            "return _spread(ctx, g / ctx.count if ctx.count else g)",
            "return _spread(ctx, g)",
            "Mean: backward not divided by N",
        ),  # fmt: skip
        (
            "extremum-ties",
            "per_tie = 1.0 / hit.sum(axis=ctx.axis, keepdims=True)",
            "per_tie = 1.0 + 0 * hit.sum(axis=ctx.axis, keepdims=True)",
            "Max/Min: every tie gets the whole gradient",
        ),
        ("var-ddof", "dof = ctx.count - ctx.ddof", "dof = ctx.count", "Var/Std: ddof ignored"),
        (
            "prod-drop-div",
            "return _spread(ctx, g) * _spread(ctx, ctx.output) / a",
            "return _spread(ctx, g) * _spread(ctx, ctx.output)",
            "Prod: y instead of y / a_i",
        ),
        (
            "cumsum-no-flip",
            "return g.flip(ctx.axis).cumsum(ctx.axis).flip(ctx.axis)",
            "return g.cumsum(ctx.axis)",
            "Cumsum: running sum of g from the wrong end",
        ),
        (
            "logsumexp-unnormalised",
            "return _spread(ctx, g) * (a - y).exp()",
            "return _spread(ctx, g) * a.exp()",
            "LogSumExp: exp(a) instead of softmax(a)",
        ),
    ],
    "tensorlab/ops/softmax.py": [
        (
            "softmax-drop-y",
            "return y * (g - (g * y).sum(axis=ctx.axis, keepdims=True))",
            "return y * (g - g.sum(axis=ctx.axis, keepdims=True))",
            "Softmax backward: Σ g instead of Σ g·y",
        ),
        (
            "softmax-axis",
            "e /= e.sum(axis=axis, keepdims=True)",
            "e /= e.sum(axis=-1, keepdims=True)",
            "Softmax forward: normalised over the last axis whatever axis is",
        ),
        (
            "log-softmax-no-exp",
            "return g - ctx.output.exp() * g.sum(axis=ctx.axis, keepdims=True)",
            "return g - ctx.output * g.sum(axis=ctx.axis, keepdims=True)",
            "LogSoftmax backward: y instead of exp(y)",
        ),
        (
            "log-softmax-axis",
            "y = shifted - xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))",
            "y = shifted - xp.log(xp.exp(shifted).sum(axis=-1, keepdims=True))",
            "log_softmax_array: wrong axis for the sum",
        ),
    ],
    "tensorlab/ops/shape.py": [
        (
            "sum-to-reshaped-view",
            "return total if total.shape == shape else total.reshape(shape)",
            "return total.reshape(shape)",
            "SumTo: the rows' sum reshaped to its own shape (a view: copied when kept as .grad)",
        ),
        (
            "permute-not-inverse",
            "inverse[ax % len(ctx.axes)] = i",
            "inverse[i] = ax % len(ctx.axes)",
            "Permute backward: the permutation instead of its inverse",
        ),
        (
            "sum-to-lead",
            "if n == 1 and a.shape[lead + i] != 1",
            "if n == 1 and a.shape[i] != 1",
            "SumTo: axis compared without the leading offset",
        ),
        (
            "roll-back-sign",
            "isinstance(ctx.shifts, tuple) else -ctx.shifts",
            "isinstance(ctx.shifts, tuple) else ctx.shifts",
            "Roll backward: rolled forward again",
        ),
        ("concat-start", "start += n", "start = n", "Concatenate backward: slice offsets reset"),
        (
            "stack-neg-axis",
            'ctx.axis = axis_index("stack", axis, arrays[0].ndim + 1)',
            "ctx.axis = axis % arrays[0].ndim",
            "Stack: a negative axis is off by one",
        ),
    ],
    "tensorlab/ops/index.py": [
        (
            "scatter-first-run",
            "xp.concatenate((xp.ones(1, bool), s[1:] != s[:-1]))",
            "xp.concatenate((xp.zeros(1, bool), s[1:] != s[:-1]))",
            "scatter_add_rows: the first run of indices is lost",
        ),
        (
            "gather-broadcasts",
            "return a[_along_axis_index(xp_of(a), index, axis)]",
            "return xp_of(a).take_along_axis(a, index, axis=axis)",
            "Gather: an index smaller than a on the other axes is broadcast, not a corner",
        ),
        (
            "scatter-assign",
            "        if _is_basic(key):\n            out = xp_of(a).zeros",
            "        if True:\n            out = xp_of(a).zeros",
            "ScatterAdd: repeated indices overwrite instead of adding",
        ),
        (
            "triangle-k",
            "return Triangle.apply(g, k=ctx.k, upper=ctx.upper)",
            "return Triangle.apply(g, k=0, upper=ctx.upper)",
            "tril/triu backward: diagonal k lost",
        ),
        (
            "triangle-flipped",
            "return Triangle.apply(g, k=ctx.k, upper=ctx.upper)",
            "return Triangle.apply(g, k=ctx.k, upper=not ctx.upper)",
            "tril/triu backward: the other triangle of g",
        ),
        (
            "scatter-half-not-widened",
            "    a, half = in_float32(a)\n    xp = xp_of(a)",
            "    half = None\n    xp = xp_of(a)",
            "scatter-add: float16 summed in float16 (stalls at 2048), bfloat16 refused by CuPy",
        ),
        (
            "triangle-dtype-not-kept",
            "return y.astype(a.dtype, copy=False)  # (CuPy: bfloat16 -> float32)",
            "return y  # (CuPy: bfloat16 -> float32)",
            "tril/triu: CuPy's float32 for bfloat16 kept",
        ),
    ],
    "tensorlab/ops/linalg.py": [
        (
            "linear-dw-scale",
            "return da, product_b(a.mT, g)",
            "return da, product_b(a.mT / a.shape[-2], g)",
            "matmul_grads: db averaged over rows (MatMul's and LinearFn's dW)",
        ),
        (
            "autocast-casts-nothing",
            "return dtype != to and dtype != np.float64 and is_float(dtype)",
            "return dtype == to and dtype != np.float64 and is_float(dtype)",
            "under autocast the float32 operands of a product stay float32 (no half precision)",
        ),
        (
            "matmul-da-transpose",
            "da = product_a(g, b.mT) if need_a else None",
            "da = product_a(g, b) if need_a else None",
            "matmul_grads: da = g b",
        ),
        (
            "matmul-folded-db",
            "return da, product_b(a.reshape(rows, k).mT, g.reshape(rows, m))",
            "return da, product_b(a[..., 0, :, :].mT, g[..., 0, :, :])",
            "MatMul: batched a with 2-D b keeps only the first batch entry's db",
        ),
        (
            "einsum-known",
            "known = set(ctx.out).union(*other_subs)",
            "known = set(ctx.out)",
            "Einsum backward: contracted letters forgotten",
        ),
        (
            "einsum-implicit",
            "if letters.count(c) == 1)",
            "if letters.count(c) >= 1)",
            "einsum implicit output keeps repeated letters",
        ),
    ],
    "tensorlab/autograd.py": [
        (
            "grad-scalar-in-place",
            "or isinstance(t.grad.data, np.generic)  # (a NumPy scalar",
            "or False  # (a NumPy scalar",
            "a gradient held as a NumPy scalar is 'added into' in place, and the sum is lost",
        ),
        (
            "grad-aliases-root",
            "self.stored: set[int] = {id(g.data) for g in root_grads}",
            "self.stored: set[int] = set()",
            "a leaf's .grad is the caller's root gradient, which the next backward adds into",
        ),
        (
            "grad-aliases-hook",
            "self.stored.add(id(g.data))  # (a hook's result may be held by the hook)",
            "pass",
            "a leaf's .grad is the tensor a hook returned, which the next backward adds into",
        ),
        (
            "send-overwrite",
            "pending[k] = g if prev is None else prev + g",
            "pending[k] = g",
            "a second consumer's gradient replaces the first",
        ),
        (
            "order-forward",
            "node = pop()",
            "node = pop(0)",
            "the loop runs leaves first",
        ),
        (
            "grad-to-constants",
            "if gi is not None and t.requires_grad:",
            "if gi is not None:",
            "gradients also flow into tensors that do not require grad",
        ),
        (
            "no-output-version-check",
            "    if node.saves_output:\n        out = node._output_ref()",
            "    if not node.saves_output:\n        out = node._output_ref()",
            "a saved output changed in place is not noticed",
        ),
        (
            "no-dtype-cast",
            "if gi.data.dtype is not dtype and gi.data.dtype != dtype:",
            "if gi.data.dtype is not dtype and gi.data.dtype == dtype:",
            "a gradient keeps the promoted dtype",
        ),
        (
            "owned-shared",
            "if g.data.base is None and id(g.data) not in stored and",
            "if g.data.base is None and",
            "two leaves store the same gradient array",
        ),
        (
            "grad-no-accumulate",
            "t.grad = t.grad + g",
            "t.grad = g",
            ".grad is replaced, not added to",
        ),
    ],
    "nn/linear.py": [
        (
            "linear-init-fan",
            "uniform((d_in, d_out), 1.0 / math.sqrt(d_in)",
            "uniform((d_in, d_out), 1.0 / math.sqrt(d_out)",
            "Linear: init bound from fan-out",
        ),
        (
            "linear-autocast-grads-rounded",
            "gx = xp.empty(xa.shape, x.dtype) if x.requires_grad else None",
            "gx = xp.empty(xa.shape, g2.dtype) if x.requires_grad else None",
            "LinearFn under autocast: dx rounded to the half type (then widened)",
        ),
        (
            "linear-autocast-unrounded-operands",
            'xa, Wa = ctx.operands if ctx.params.get("dtype") else (x.data, W.data)',
            "xa, Wa = x.data, W.data",
            "LinearFn under autocast: the backward multiplies by the float32 x and W",
        ),
        (
            "linear-autocast-bias-grad-half",
            "gb = array_math(g2).sum(g2, axis=0, dtype=ctx.inputs[2].dtype) if need_b else None",
            "gb = array_math(g2).sum(g2, axis=0) if need_b else None",
            "LinearFn under autocast: db summed into the half type",
        ),
        (
            "linear-grads-not-written-in-place",
            "partial(matmul, out=None if out is None else out.reshape(shape))",
            "partial(matmul)",
            "LinearFn: dx and dW left as the empty arrays meant to receive them",
        ),
    ],
    "nn/norm.py": [
        (
            "weight-size-unchecked",
            "if t is not None and t.shape != (d,):",
            "if t is not None and t.ndim != 1:",
            "a (4,) weight on a 1-wide last axis broadcasts to a row of biases",
        ),
        (
            "backward-uncentred",
            "dx = rstd * (gh - mean_gh - xhat",
            "dx = rstd * (gh - xhat",
            "layer norm's backward formula leaves out -mean(ĝ)",
        ),
        (
            "dx-drop-xhat",
            "return rstd * (gh - xhat * xp.mean(gh * xhat, axis=-1, keepdims=True)), g * xhat",
            "return rstd * (gh - xhat * xp.mean(gh, axis=-1, keepdims=True)), g * xhat",
            "RMS norm's backward formula: mean(ĝ) instead of mean(ĝ x̂)",
        ),
        (
            "dgamma-gh",
            "        return dx, g * xhat, g",
            "        return dx, gh * xhat, g",
            "layer norm's backward formula: dγ from ĝ = g γ instead of g",
        ),
        (
            "rms-no-square",
            "rstd = 1.0 / hook_scale(xp.sqrt(xp.mean(x * x, axis=-1, keepdims=True) + eps))",
            "rstd = 1.0 / hook_scale(xp.sqrt(xp.mean(xp.abs(x), axis=-1, keepdims=True) + eps))",
            "RMS norm's forward formula: mean |x| instead of mean x²",
        ),
        (
            "eps-outside-sqrt",
            "rstd = 1.0 / hook_scale(xp.sqrt(xp.mean(xc * xc, axis=-1, keepdims=True) + eps))",
            "rstd = 1.0 / hook_scale(xp.sqrt(xp.mean(xc * xc, axis=-1, keepdims=True)) + eps)",
            "layer norm's forward formula: σ = √var + ε",
        ),
    ],
    "nn/activation.py": [
        (
            "gated-dff-floor",
            "return 8 * math.ceil(8 * d_model / 3 / 8) if gated else 4 * d_model",
            "return 8 * math.floor(8 * d_model / 3 / 8) if gated else 4 * d_model",
            "a gated MLP's d_ff rounds down to a multiple of 8, not up",
        ),
        (
            "gelu-cdf-sign",
            "        return g * (cdf + x * pdf)",
            "        return g * (cdf - x * pdf)",
            "GELU backward formula: Φ(x) - x φ(x)",
        ),
        (
            "gelu-tanh-3k",
            "du = _TANH_C * (1.0 + 3 * _TANH_K * x * x)",
            "du = _TANH_C * (1.0 + _TANH_K * x * x)",
            "GELU tanh backward formula: k instead of 3k",
        ),
        (
            "gelu-kernel-pdf-half",
            "pdf = xp.exp(-0.5 * x * x) * _INV_SQRT_2PI",
            "pdf = xp.exp(-x * x) * _INV_SQRT_2PI",
            "GELU backward formula: e^(-x²) instead of e^(-x²/2)",
        ),
        (
            "gelu-tanh-forward-cube",
            "        t = xp.tanh(_TANH_C * (x + _TANH_K * x * x * x))\n        return 0.5 * x",
            "        t = xp.tanh(_TANH_C * (x + _TANH_K * x * x))\n        return 0.5 * x",
            "GELU tanh forward formula: k x² instead of k x³",
        ),
        (
            "silu-sign",
            "return g * s * (1.0 + x * (1.0 - s))",
            "return g * s * (1.0 - x * (1.0 - s))",
            "SiLU backward formula: 1 - x(1 - σ)",
        ),
        (
            "elu-slope",
            "return g * xp.where(x > 0, 1.0, alpha * xp.exp(xp.where(x > 0, 0.0, x)))",
            "return g * xp.where(x > 0, 1.0, xp.exp(xp.where(x > 0, 0.0, x)))",
            "ELU backward formula: eˣ instead of α eˣ",
        ),
        (
            "elu-kink-minimum",
            "alpha * xp.expm1(xp.where(x > 0, 0.0, x))",
            "alpha * xp.expm1(xp.minimum(x, 0.0))",
            "ELU forward formula: minimum(x, 0), whose tie at 0 halves the composed slope",
        ),
        (
            "gated-act-after",
            "h = gate * self.hook_pre_linear(linear(x, self.W_in, self.b_in))",
            "h = self.act(gate) * self.hook_pre_linear(linear(x, self.W_in, self.b_in))",
            "FeedForward gated: the activation applied twice",
        ),
    ],
    "nn/loss.py": [
        (
            "mse-target-broadcasts",
            "if shape not in ((), input.shape):",
            "if len(shape) > input.ndim:",
            "mse_loss averages the broadcast pairs of an (N, 1) input and an (N,) target",
        ),
        (
            "ce-smoothing-sign",
            "loss = loss - label_smoothing * xp.mean(z, axis=-1)",
            "loss = loss + label_smoothing * xp.mean(z, axis=-1)",
            "cross-entropy forward formula: the smoothing term added",
        ),
        (
            "ce-smoothing-grad-scale",
            "dz -= w * (label_smoothing / z.shape[-1])",
            "dz -= w * label_smoothing",
            "cross-entropy backward formula: ε instead of ε/C",
        ),
        (
            "ce-mean-count",
            "xp.count_nonzero(t != ignore_index)",
            "t.size + 0 * t.sum()",
            "cross-entropy mean: divides by ignored rows too",
        ),
        (
            "ce-mean-scale-backward",
            "w = xp.where(t != ignore_index, scale * g, 0.0)[..., None]",
            "w = xp.where(t != ignore_index, g, 0.0)[..., None]",
            "cross-entropy backward: the mean's 1/M left out of the gradient",
        ),
        (
            "ce-ignore-forward",
            "return xp.where(t != ignore_index, scale * loss, 0.0), e",
            "return scale * loss, e",
            "cross-entropy forward formula: ignored rows count",
        ),
        (
            "ce-ignore-backward",
            "w = xp.where(t != ignore_index, scale * g, 0.0)[..., None]",
            "w = scale * g[..., None]",
            "cross-entropy backward formula: ignored rows get a gradient",
        ),
        (
            "ce-summed-forward",
            "return loss.sum() if summed else loss\n\n    @classmethod",
            "return loss[:1].sum() if summed else loss\n\n    @classmethod",
            "cross-entropy summed in its node: only the first row counted",
        ),
        (
            "ce-target-bound",
            "((t < 0) | (t >= C))]",
            "((t < 0) | (t > C))]",
            "cross_entropy: target C passes the check",
        ),
    ],
    "nn/embedding.py": [
        (
            "rope-table-not-grown",
            "if cached is None or cached[0].shape[0] < n:",
            "if cached is None:",
            "RoPE's first 64-position table is never grown",
        ),
        (
            "embedding-bound",
            "if lo < 0 or hi >= V:",
            "if lo < 0 or hi > V:",
            "embedding: index V passes the check",
        ),
        (
            "sinusoid-cos",
            "pe[:, 1::2] = np.cos(t * omega[: d // 2])",
            "pe[:, 1::2] = np.sin(t * omega[: d // 2])",
            "sinusoidal table: sin in the odd columns",
        ),
        (
            "rotary-backward-sign",
            'sin=-p["sin"], half',
            'sin=p["sin"], half',
            "RotaryFn backward: rotates by +θ",
        ),
        (
            "rotary-forward-sign",
            "ya[...] = a * cos - b * sin",
            "ya[...] = a * cos + b * sin",
            "RotaryFn forward: not a rotation",
        ),
        (
            "relbias-align",
            "i = xp.arange(T_q)[:, None] + (T_k - T_q)",
            "i = xp.arange(T_q)[:, None]",
            "RelativePositionBias: queries not aligned to the last keys",
        ),
        (
            "learned-pos-offset",
            "return table[offset : offset + T]",
            "return table[:T]",
            "Learned and sinusoidal positions: offset ignored",
        ),
        (
            "rotary-theta",
            "dtype=np.float64) / d_head)",
            "dtype=np.float64) / (d_head // 2))",
            "RotaryEmbedding: θ_i exponent over d/2",
        ),
        # issue 20: the rotate-half layout and RoPE scaling
        (
            "half-pair-swapped",
            "return p, p[..., 0, :], p[..., 1, :]",
            "return p, p[..., 1, :], p[..., 0, :]",
            "RotaryFn half layout: pair members swapped (rotation by -θ)",
        ),
        (
            "linear-scaling-times",
            "return theta / f",
            "return theta * f",
            "rope_frequencies linear: θ·f instead of θ/f",
        ),
        (
            "llama3-blend-reversed",
            "return (1 - w) * theta / f + w * theta",
            "return w * theta / f + (1 - w) * theta",
            "rope_frequencies llama3: blend weight reversed (fast rotations scaled)",
        ),
        (
            "llama3-order-equal",
            'not scaling["high_freq_factor"] > scaling["low_freq_factor"]',
            'not scaling["high_freq_factor"] >= scaling["low_freq_factor"]',
            "check_rope_scaling: high_freq_factor = low_freq_factor accepted (w divides by 0)",
        ),
    ],
    "nn/flash_attention.cu": [
        (
            "flash-no-rescale",
            "        l *= c;",
            "        l *= 1;",
            "the online softmax keeps the row sum of an old maximum when a tile raises it",
        ),
        (
            "flash-second-sync",
            "o[e] += p * V_tile[r][e];\n      }\n    }\n    __syncthreads();",
            "o[e] += p * V_tile[r][e];\n      }\n    }\n    ;",
            "the forward loads the next tile while other threads still read this one",
        ),
        (
            "flash-window-first-key",
            "  if (window >= 0) *lo = max(0LL, r0 + offset - window + 1);",
            "  if (window >= 0) *lo = max(0LL, r0 + offset - window + 2);",
            "a block's first row skips the first key of its sliding window",
        ),
        (
            "flash-dkdv-first-query",
            "  *lo = max(0LL, c0 - offset);",
            "  *lo = max(0LL, c0 - offset + 1);",
            "dk and dv miss the first query that sees a block's first key",
        ),
        (
            "flash-dv-no-dropout",
            "grad_v[e] += A * M * G_tile[r][e];",
            "grad_v[e] += A * G_tile[r][e];",
            "dV ignores the dropout mask on the pattern",
        ),
        (
            "flash-gqa-one-head",
            "(hk + 1) * G; ++h)  // the query heads that read this head\n  for",
            "hk * G + 1; ++h)  // the query heads that read this head\n  for",
            "dk and dv of a shared key/value head count only the first query head of its group",
        ),
        (
            "flash-mma-gqa-one-head",
            "(hk + 1) * G; ++h)  // the query heads that read this head\n    for",
            "hk * G + 1; ++h)  // the query heads that read this head\n    for",
            "tensor cores: a shared key/value head's dk, dv count only its first query head",
        ),
        (
            "flash-mma-b-cols",
            "  b[0] = pair_of(c[0], c[ld]);",
            "  b[0] = pair_of(c[0], c[1]);",
            "tensor cores: a right operand read along a row where it runs down a column",
        ),
        (
            "flash-mma-no-rescale",
            "      O[n][2] *= rescale[1];",
            "      O[n][2] *= rescale[0];",
            "tensor cores: a row's output rescaled by the other row's factor",
        ),
        (
            "flash-mma-quad-max",
            "      top[x] = fmaxf(top[x], __shfl_xor_sync(0xffffffffu, top[x], 2));",
            "      top[x] = fmaxf(top[x], __shfl_xor_sync(0xffffffffu, top[x], 4));",
            "tensor cores: a row's maximum taken with another row's lanes",
        ),
        (
            "flash-mma-dq-delta",
            "            dS = exp_of(s - m[x]) * inv_l[x] * (dA[n][e] * M - Di[x]);",
            "            dS = exp_of(s - m[x]) * inv_l[x] * (dA[n][e] * M - Di[0]);",
            "tensor cores: dq uses the first row's D for both of a lane's rows",
        ),
        (
            "flash-mma-dkdv-scale",
            "store(out_k + n * 8 + 2 * lt + e, dK[n][2 * x + e] * scale);",
            "store(out_k + n * 8 + 2 * lt + e, dK[n][2 * x + e]);",
            "tensor cores: dk without the scale s",
        ),
        (
            "flash-dq-no-delta",
            "        const ACC dS = A * (dA - Di);",
            "        const ACC dS = A * dA;",
            "dq's softmax gradient drops D = rowsum(G ⊙ Y)",
        ),
    ],
    "nn/flash_attention.py": [
        (
            "flash-tile-too-big",
            "    while tile > 1 and tile * (2 * d + 2 * d_v + 5) * itemsize > SHARED_BYTES:",
            "    while tile > 1 and tile * (2 * d + 2 * d_v) * itemsize > SHARED_BYTES:",
            "the tile ignores the backward's three per-row numbers and padding",
        ),
        (
            "flash-mask-strides",
            "    return a, tuple(np.int64(s // a.itemsize) for s in a.strides)",
            "    return a, tuple(np.int64(s // 4) for s in a.strides)",
            "mask, bias and dropout strides counted in float32 elements whatever the type",
        ),
    ],
    "nn/attention.py": [
        (
            "gqa-mean-not-sum",
            "(H_kv, G, a.shape[-1])).sum(axis=-2)",
            "(H_kv, G, a.shape[-1])).mean(axis=-2)",
            "AttentionFn: a shared key/value head's gradient averages its query heads' shares",
        ),
        (
            "softmax-grad-no-rowsum",
            "softmax_grad_in_place(dA, D_b, E, inv_b)  # dA becomes s dS",
            "softmax_grad_in_place(dA, 0.0, E, inv_b)  # dA becomes s dS",
            "attention's backward drops rowsum(G ⊙ Y) from the softmax gradient",
        ),
        (
            "causal-diagonal",
            "keep = xp.tri(T_q, T_k, T_k - T_q, dtype=bool)",
            "keep = xp.tri(T_q, T_k, 0, dtype=bool)",
            "causal_keep: not aligned to the last keys (cache)",
        ),
        (
            "ds-drop-a",
            "dA -= D\n    dA *= E",
            "dA -= D * E\n    dA *= E",
            "AttentionFn: (dA - D) ⊙ E with D weighted by E again",
        ),
        (
            "dk-no-transpose",
            "dk_b = _matmul_into(dS.swapaxes(-1, -2), _heads_first(q_b), k_b.shape, dtype)",
            "dk_b = _matmul_into(dS, _heads_first(q_b), k_b.shape, dtype)",
            "AttentionFn: dK = dS Q",
        ),
        (
            "dv-no-dropout",
            "P = E if M_b is None else E * M_b\n        dv_b",
            "P = E\n        dv_b",
            "AttentionFn: dV ignores the dropout mask",
        ),
        (
            "scale-d-model",
            "self.scale = 1.0 / math.sqrt(dh)",
            "self.scale = 1.0 / math.sqrt(d_model)",
            "MultiHeadAttention: 1/√d_model",
        ),
        (
            "attn-dropout-off",
            "p = self.dropout if self.training else 0.0",
            "p = 0.0",
            "MultiHeadAttention: no dropout on the pattern",
        ),
        (
            "padding-inverted",
            "keep = ~kpm.astype(bool)[:, None, None, :]",
            "keep = kpm.astype(bool)[:, None, None, :]",
            "key_padding_mask: attends only to padding",
        ),
        (
            "composed-no-scale",
            "S = (q @ k.mT) * scale",
            "S = q @ k.mT",
            "attention_composed: unscaled scores",
        ),
        (
            "rotary-cache-offset",
            "past = 0 if cache is None else cache.seen",
            "past = 0",
            "MultiHeadAttention: rotary positions restart with a cache",
        ),
        # issue 20: grouped-query attention, sliding windows, the half-precision path
        (
            "gqa-group-interleaved",
            "copies = t.reshape(before + (1,) + after).broadcast_to(before + (G,) + after)",
            "copies = t.reshape(before[:-1] + (1,) + before[-1:] + after).broadcast_to("
            "before[:-1] + (G,) + before[-1:] + after)",
            "GQA: copies broadcast before the heads' axis (query head h reads h % H_kv)",
        ),
        (
            "qkv-bias-ignored",
            'on = bias in (True, "qkv") if name != "b_O" else bias in (True, "out")',
            'on = bias is True if name != "b_O" else bias in (True, "out")',
            "MultiHeadAttention: bias='qkv' ignored (Qwen2's q, k, v biases not made)",
        ),
        (
            "window-one-wider",
            "keep &= ~xp.tri(T_q, T_k, T_k - T_q - window, dtype=bool)",
            "keep &= ~xp.tri(T_q, T_k, T_k - T_q - window - 1, dtype=bool)",
            "causal_keep: a window of W + 1 keys",
        ),
        (
            "cache-keeps-window",
            "keep = slice(k.shape[-3] - (window - 1), None)",
            "keep = slice(k.shape[-3] - window, None)",
            "KVCache: keeps W positions (one a later query cannot see)",
        ),
        (
            "seen-from-length",
            "self.seen += k.shape[-3]",
            "self.seen = len(self) + k.shape[-3]",
            "KVCache: seen counted from the (windowed) cache, so it stops advancing",
        ),
        (
            "rotary-offset-cache-length",
            "past = 0 if cache is None else cache.seen",
            "past = 0 if cache is None else len(cache)",
            "MultiHeadAttention: rotary positions from the windowed cache's length",
        ),
        (
            "blocks-last-key-left-out",
            "slice(first(r0), r1 + offset)) for",
            "slice(first(r0), r1 + offset - 1)) for",
            "query_blocks: a block leaves out the key of its last query",
        ),
        (
            "blocks-window-starts-late",
            "max(0, r0 + offset - window + 1)",
            "max(0, r0 + offset - window + 2)",
            "query_blocks: a block leaves out the first key its first query's window sees",
        ),
        (
            "blocks-shares-not-summed",
            "view += share",
            "view[...] = share",
            "AttentionFn: a key's and a value's gradients keep only the last block's share",
        ),
        (
            "blocks-totals-misplaced",
            "xp.concatenate(sums, axis=-2)",
            "xp.concatenate(sums[::-1], axis=-2)",
            "AttentionFn: the blocks' row sums l put back in the reverse order",
        ),
        (
            "blocks-broadcast-rows-cut",
            "..., rows if a.shape[-2] != 1 else slice(None), keys",
            "..., rows, keys",
            "_cut: a mask or bias broadcast along the queries is cut to the block's rows",
        ),
        (
            "dead-rows-window-ignored",
            "allowed = causal_keep(xp, T_q, T_k, window) if causal else None",
            "allowed = causal_keep(xp, T_q, T_k) if causal else None",
            "the composed path's dead rows ignore the sliding window (NaN where it empties a row)",
        ),
        (
            "half-not-upcast",
            "xp, (q, half) = xp_of(q), in_float32(q)",
            "xp, (q, half) = xp_of(q), (q, None)",
            "AttentionFn: float16/bfloat16 inputs computed in their own dtype",
        ),
    ],
    "nn/checks.py": [
        (
            "hyper-inf-accepted",
            "ok = ok and (math.isfinite(v) or not finite)",
            "ok = ok",
            "check_real: an infinite learning rate or ε accepted",
        ),
        (
            "count-zero-accepted",
            "check_int(name, n, 1, owner=owner)",
            "check_int(name, n, 0, owner=owner)",
            "check_count: a layer of 0 features accepted",
        ),
        (
            "check-int-lo-exclusive",
            "if not _is_int(v) or v < lo or",
            "if not _is_int(v) or v <= lo or",
            "check_int refuses its lower bound (n_layer=0, vocab_size=1)",
        ),
        (
            "open-lo-closed",
            "ok = (v > lo if open_lo else v >= lo) and",
            "ok = (v >= lo) and",
            "an open lower end accepts the bound itself (norm_eps=0, rope_base=0)",
        ),
        (
            "open-hi-closed",
            "(v < hi if open_hi else v <= hi)",
            "(v <= hi)",
            "an open upper end accepts the bound itself (dropout=1)",
        ),
    ],
    "nn/optim.py": [
        (
            "clip-scales-up",
            "if scale < 1.0 or math.isnan(scale):",
            "if scale < 2.0 or math.isnan(scale):",
            "clip_grad_norm_: a norm a little below max_norm scaled up to it",
        ),
        ("sgd-dampening", "buf += (1 - damp) * d", "buf += d", "SGD: dampening ignored"),
        (
            "hyper-groups-unchecked",
            "        self.check_group(group)\n        self.param_groups.append(group)",
            "        self.param_groups.append(group)",
            "optimizers: a param group's own hyperparameters unchecked",
        ),
        (
            "sgd-nesterov-mu",
            "d = d + mu * buf if nesterov else buf",
            "d = d + buf if nesterov else buf",
            "SGD nesterov: μ dropped",
        ),
        (
            "adam-v-correction",
            "bias = lr / (1 - b1**t), math.sqrt(1 - b2**t)",
            "bias = lr / (1 - b1**t), 1 - b2**t",
            "Adam: v̂ correction without the square root",
        ),
        (
            "adam-m-correction",
            "bias = lr / (1 - b1**t), math.sqrt(1 - b2**t)",
            "bias = lr, math.sqrt(1 - b2**t)",
            "Adam: no m̂ correction",
        ),
        (
            "adamw-decay-lr",
            "decay, l2 = (1 - lr * wd, 0.0) if self.decoupled",
            "decay, l2 = (1 - wd, 0.0) if self.decoupled",
            "AdamW: decay not scaled by lr",
        ),
        ("adam-l2-sign", "g = g + l2 * w", "g = g - l2 * w", "Adam L2: sign"),
        ("adam-kernel-v", "v += g * g * c2", "v += g * c2", "Adam GPU kernel: v from g, not g²"),
        (
            "clip-norm-sqrt",
            "norm = math.sqrt(float(sum_of_squares(grads)))",
            "norm = float(sum_of_squares(grads))",
            "clip_grad_norm_: the squared norm",
        ),
        (
            "adam-each-step-count",
            "bias = lr / (1 - b1**t), math.sqrt(1 - b2**t)",
            "bias = lr / (1 - b1 ** max(t, 2)), math.sqrt(1 - b2 ** max(t, 2))",
            "fused Adam over many tensors: bias corrections of step 2 at step 1",
        ),
        (
            "sum-of-squares-no-square",
            "    return g * g",
            "    return g",
            "sum_of_squares: Σ g instead of Σ g²",
        ),
        (
            "square-kernel-float32",
            "    g = g.astype(xp.float64)\n    return g * g",
            "    g = g.astype(xp.float32)\n    return g * g",
            "sum_of_squares on a GPU: squares in float32 (overflow above 1.8e19)",
        ),
        (
            "warmup-from-zero",
            "return lr * (step + 1) / (warmup + 1)",
            "return lr * step / warmup",
            "cosine_with_warmup: warmup starts at 0",
        ),
        (
            "cosine-ratio",
            "r = (step - warmup) / (total - warmup)",
            "r = step / total",
            "cosine_with_warmup: decay measured from step 0",
        ),
        (
            "decay-vectors",
            "(decay if p.ndim >= 2 else no_decay)",
            "(decay if p.ndim >= 1 else no_decay)",
            "param_groups_for_decay: biases and gains decay",
        ),
    ],
    "gpt/generate.py": [
        (
            "top-k-off-by-one",
            "z = np.where(z < kth, -np.inf, z)",
            "z = np.where(z <= kth, -np.inf, z)",
            "top-k keeps k - 1",
        ),
        (
            "top-p-off-by-one",
            "keep = order[: int(np.searchsorted(cum, top_p) + 1)]",
            "keep = order[: int(np.searchsorted(cum, top_p))]",
            "top-p drops the token that reaches p",
        ),
        (
            "temperature-times",
            "z = logits / temperature",
            "z = logits * temperature",
            "temperature multiplies",
        ),  # fmt: skip
        (
            "window-refresh",
            "            context = ids[-self.block :]",
            "            context = ids[-(self.block - 1) :]",
            "cached path refreshes from block - 1 tokens (issue 21)",
        ),
        (
            "cache-skip-one",
            "context = ids[self.seen :]",
            "context = ids[self.seen + 1 :]",
            "cached path skips a new token",
        ),
        (
            "top-k-partition-index",
            "kth = np.partition(z, -top_k)[-top_k]",
            "kth = np.partition(z, top_k)[-top_k]",
            "top-k cuts at the wrong entry of the partition (right only on short rows, sorted)",
        ),
        (
            "cache-reruns-the-window",
            "new = len(ids) - self.seen",
            "new = len(ids) + self.seen",
            "the cached path re-runs the whole window at every call (same logits, T× the work)",
        ),
    ],
    "gpt/data.py": [
        (
            "batch-start-bound",
            "starts = rng.integers(0, len(ids) - block_size, size=batch_size)",
            "starts = rng.integers(0, len(ids) - block_size + 1, size=batch_size)",
            "get_batch: a window may run past the end",
        ),
        (
            "batch-unshifted",
            "return chunk[:, :-1], chunk[:, 1:]",
            "return chunk[:, :-1], chunk[:, :-1]",
            "get_batch: targets not shifted (issue 21)",
        ),
        (
            "split-fraction",
            "n = int(len(ids) * (1 - val_fraction))",
            "n = int(len(ids) * val_fraction)",
            "split_ids: the validation share goes to training",
        ),
        (
            "check-length",
            "if len(ids) < block_size + 1:",
            "if len(ids) < block_size:",
            "check_length: block_size tokens accepted",
        ),
    ],
    "gpt/tokenizers/bpe.py": [
        (
            "vocab-bytes-swapped",
            "vocab[256 + k] = vocab[a] + vocab[b]",
            "vocab[256 + k] = vocab[b] + vocab[a]",
            "training: merged token's bytes in the wrong order",
        ),
        (
            "train-specials",
            "n_merges = vocab_size - 256 - len(specials)",
            "n_merges = vocab_size - 256",
            "training: special tokens not counted in vocab_size",
        ),
        (
            "writer-bpe-prefix-space",
            'byte_level = {"type": "ByteLevel", "add_prefix_space": add_prefix_space}',
            'byte_level = {"type": "ByteLevel", "add_prefix_space": False}',
            "ByteBPE: its add_prefix_space not written into its file",
        ),
    ],
    "nn/serialization.py": [
        (
            "npz-bfloat16-as-bytes",
            "if np.lib.format.descr_to_dtype(descr) != a.dtype:",
            "if np.lib.format.descr_to_dtype(descr).itemsize != a.dtype.itemsize:",
            ".npz takes any dtype of the right width: bfloat16 is written as raw <V2 records",
        ),
        (
            "duplicates-unchecked",
            "json.loads(text, object_pairs_hook=_no_duplicates)",
            "json.loads(text)",
            "a name twice in one header is accepted (the last one wins)",
        ),
        (
            "write-not-contiguous",
            'np.asarray(a, dtype=dtype, order="C")',
            "np.asarray(a, dtype=dtype)",
            "a transposed or sliced array is written from its raw memory",
        ),
        (
            "temp-file-kept",
            "    except BaseException:\n        if os.path.exists(tmp):",
            "    except BaseException:\n        if False:",
            "a failed write leaves its temporary file",
        ),
        (
            "misfit-swapped",
            "missing = [k for k in own if k not in saved]",
            "missing = [k for k in saved if k not in own]",
            "load_checkpoint: missing keys listed as the unexpected ones",
        ),
        (
            "tensor-ref-extra-keys",
            "if len(tree) != 1 or not isinstance(name, str):",
            "if not isinstance(name, str):",
            "a tensor reference with extra keys is accepted",
        ),
        (
            "overlap-not-named",
            "        if begin != end:\n",
            "        if begin > end:\n",
            "two tensors sharing bytes are not named in the message",
        ),
        (
            "optimizer-entry-type",
            'not isinstance(state.get("optimizer"), dict)',
            '"optimizer" not in state',
            "load_checkpoint: an optimizer entry that is not a dict reaches the optimizer",
        ),
    ],
    "nn/init.py": [
        (
            "empty-nested-restore",
            "        _skip[0] = before\n",
            "        _skip[0] = False\n",
            "empty_parameters: leaving an inner block ends the outer one too",
        ),
        (
            "empty-fill-writes",
            "    if _skip[0]:\n        return tensor\n",
            "    if False:\n        return tensor\n",
            "empty_parameters: in-place fills still draw and write numbers",
        ),
    ],
    "nn/module.py": [
        (
            "evaluating-top-mode",
            'object.__setattr__(m, "training", was_training)',
            'object.__setattr__(m, "training", modes_before[0][1])',
            "nn.evaluating: every submodule gets the top module's mode back, not its own",
        ),
        (
            "assign-any-dtype",
            "return value.dtype == like.dtype and device_of(value) == like.device",
            "return device_of(value) == like.device",
            "load_state_dict(assign=True) takes an array of another dtype as it is",
        ),
        (
            "assign-always",
            "fits = assign and _is_array_like(value, t)",
            "fits = _is_array_like(value, t)",
            "load_state_dict shares the caller's arrays without assign=True",
        ),
    ],
    "gpt/config.py": [
        (
            "kv-divides-unchecked",
            "if self.n_head % self.n_kv_head:",
            "if self.n_head % self.n_kv_head > 1:",
            "n_kv_head that leaves a remainder of 1 (n_head=4, n_kv_head=3) is accepted",
        ),
        (
            "s2s-final-norm-inverted",
            'self.final_norm = self.norm_placement != "post"',
            'self.final_norm = self.norm_placement == "post"',
            "Seq2SeqConfig's automatic final norm is on for post-norm and off for pre-norm",
        ),
        (
            "s2s-pad-at-src-vocab",
            "if self.pad_id >= self.src_vocab_size:",
            "if self.pad_id > self.src_vocab_size:",
            "pad_id equal to src_vocab_size is accepted",
        ),
    ],
    "gpt/hf/checkpoint.py": [
        (
            "tied-head-unchecked",
            'if not np.array_equal(head, out["embed.W"]):',
            "if False:",
            "from_pretrained: a tied checkpoint's stored lm_head is taken without comparing it",
        ),
        (
            "strict-ignored",
            "if strict and unused:",
            "if unused:",
            "strict=False still refuses unused tensors",
        ),
        (
            "save-untransposed",
            "out[key] = array.T if transposed else array",
            "out[key] = array",
            "save_hf_*: an nn.Linear weight written as (in, out), not (out, in)",
        ),
        (
            "export-over-run-partial",
            "if run.ckpt.exists() or run.log.exists():",
            "if run.ckpt.exists() and run.log.exists():",
            "an export replaces the config.json of a run folder that has a log but no "
            "checkpoint yet",
        ),
        (
            "bf16-refused",
            'if not (array.dtype.kind == "f" or array.dtype.name == "bfloat16"):',
            'if not (array.dtype.kind == "f"):',
            "a bfloat16 checkpoint is refused",
        ),
    ],
    "gpt/hf/gpt2.py": [
        (
            "c-attn-qk-swapped",
            'tuple(b + f"attn.W_{n}" for n in "qkv")',
            'tuple(b + f"attn.W_{n}" for n in "kqv")',
            "c_attn's query and key columns read in the wrong order",
        ),
        (
            "tie-default-false",
            'tie_weights=bool(hf.get("tie_word_embeddings", True)),',
            'tie_weights=bool(hf.get("tie_word_embeddings", False)),',
            "a GPT-2 config.json without tie_word_embeddings is read as untied (HF's default "
            "is tied)",
        ),
        (
            "eps-default",
            'norm_eps=float(get("layer_norm_epsilon", default=1e-5)),',
            'norm_eps=float(get("layer_norm_epsilon", default=1e-6)),',
            "a GPT-2 config.json without layer_norm_epsilon gets 1e-6, not HF's 1e-5",
        ),
        (
            "gpt2model-refused",
            'ARCHITECTURES = {"gpt2": ("GPT2LMHeadModel", "GPT2Model")}',
            'ARCHITECTURES = {"gpt2": ("GPT2LMHeadModel",)}',
            "a GPT2Model checkpoint (no LM head prefix) is refused",
        ),
        (
            "lm-head-untransposed",
            'rows.append(("lm_head.weight", (V, d), ("W_U",), True))',
            'rows.append(("lm_head.weight", (V, d), ("W_U",), False))',
            "an untied GPT-2 lm_head is read and written as (d, V), not (V, d)",
        ),
        (
            "unsupported-inverted",
            "if name in hf and bool(hf[name]) != wanted:",
            "if name in hf and bool(hf[name]) == wanted:",
            "the supported value of scale_attn_weights etc. is refused, the unsupported one taken",
        ),
    ],
    "gpt/hf/llama.py": [
        (
            "gate-reads-up",
            '(h + "mlp.gate_proj.weight", (f, d), b + "mlp.W_gate"),',
            '(h + "mlp.up_proj.weight", (f, d), b + "mlp.W_gate"),',
            "tensor_names: W_gate read from up_proj (gate_proj left over)",
        ),
        (
            "lm-head-untransposed",
            'n.endswith(("proj.weight", "lm_head.weight"))',
            'n.endswith("proj.weight")',
            "tensor_names: lm_head taken as (d, V) without its transpose (a reshape fits)",
        ),
        (
            "tie-default-true",
            'tie_weights=bool(hf.get("tie_word_embeddings", False))',
            'tie_weights=bool(hf.get("tie_word_embeddings", True))',
            "config_from_hf: a config without tie_word_embeddings is tied (GPT-2's default)",
        ),
    ],
    "tensorlab/tensor.py": [
        (
            "split-negative-sizes",
            "if not all(is_int(s) and s >= 0 for s in sizes):",
            "if not all(is_int(s) for s in sizes):",
            "split: a negative size accepted (pieces overlap)",
        ),
        (
            "axis-wraps",
            "    if not -ndim <= axis < ndim:\n        valid",
            "    if not -ndim <= axis < ndim and False:\n        valid",
            "axis_index: an axis out of range wraps around to another axis",
        ),
        (
            "lift-int-beside-bool",
            'numeric = isinstance(x, bool) or like.data.dtype.kind != "b"',
            'numeric = isinstance(x, bool) and like.data.dtype.kind != "b"',
            "mask + 1 stays boolean (an int beside a boolean tensor takes its dtype)",
        ),
        (
            "lift-float-into-int",
            "dtype = like.data.dtype if floating else DEFAULT_DTYPE",
            "dtype = like.data.dtype",
            "an integer tensor times 0.5 truncates the 0.5 to the tensor's integer dtype",
        ),
        (
            "neg-axis",
            "return (axis_index(op, axis, ndim),)",
            "return (axis,)",
            "axes_index (the reductions, flip, squeeze): a negative axis is not normalised",
        ),
        (
            "axis-one-past-end",
            "if not -ndim <= axis < ndim:",
            "if not -ndim <= axis <= ndim:",
            "axis == ndim is accepted and wraps around to axis 0",
        ),
        (
            "rsub-swapped",
            "Tensor.__rsub__ = lambda self, other: Sub.apply(_lift(other, self), self)",
            "Tensor.__rsub__ = lambda self, other: Sub.apply(self, _lift(other, self))",
            "2 - x computes x - 2",
        ),
        (
            "rtruediv-swapped",
            "Tensor.__rtruediv__ = lambda self, other: Div.apply(_lift(other, self), self)",
            "Tensor.__rtruediv__ = lambda self, other: Div.apply(self, _lift(other, self))",
            "2 / x computes x / 2",
        ),
        (
            "rmatmul-swapped",
            "return _lift(other, self).__matmul__(self)",
            "return self.__matmul__(_lift(other, self))",
            "array @ x computes x @ array",
        ),
        (
            "le-strict",
            "__le__ = _comparison(np.less_equal)",
            "__le__ = _comparison(np.less)",
            "x <= y is x < y",
        ),
        (
            "T-identity",
            "axes=tuple(range(self.ndim - 1, -1, -1))",
            "axes=tuple(range(self.ndim))",
            ".T leaves the axes in place",
        ),
        (
            "detach-own-counter",
            "        t._vc = self._vc\n        return t",
            "        t._vc = [0]\n        return t",
            "detach() gets its own version counter: an in-place change through it goes unnoticed",
        ),
        (
            "inplace-not-counted",
            "        self._vc[0] += 1",
            "        self._vc[0] += 0",
            "in-place changes do not bump the version counter",
        ),
        (
            "add-alpha-ignored",
            'self._update("add_", operator.iadd, other if alpha == 1.0 else alpha * other)',
            'self._update("add_", operator.iadd, other)',
            "add_(other, alpha) ignores alpha",
        ),
        (
            "argsort-desc-n-axis0",
            "n = a.shape[axis] if a.ndim else 1",
            "n = a.shape[0] if a.ndim else 1",
            "descending argsort maps indices back with axis 0's length, not the sorted axis's",
        ),
        (
            "topk-smallest",
            "idx = self.argsort(ax, descending=largest).data",
            "idx = self.argsort(ax, descending=not largest).data",
            "topk returns the smallest entries (largest inverted)",
        ),
        (
            "topk-k-equals-n-refused",
            "if not 0 <= k <= n:",
            "if not 0 <= k < n:",
            "topk refuses k equal to the axis length",
        ),
        (
            "flatten-end-kept",
            "(math.prod(s[start : end + 1]),) + s[end + 1 :]",
            "(math.prod(s[start:end]),) + s[end:]",
            "flatten keeps the end axis as a separate axis",
        ),
        (
            "expand-minus-one-unaligned",
            "s if s != -1 else self.shape[i - len(shape) + self.ndim]",
            "s if s != -1 else self.shape[i]",
            "expand's -1 reads the size at its own position, not right-aligned with the new axes",
        ),
        (
            "tile-reps-left-aligned",
            "reps = (1,) * (n - len(reps)) + tuple(reps)",
            "reps = tuple(reps) + (1,) * (n - len(reps))",
            "missing tile reps are padded on the right, not the left",
        ),
        (
            "unsqueeze-range",
            'axis = axis_index("unsqueeze", axis, self.ndim + 1)',
            'axis = axis_index("unsqueeze", axis, self.ndim)',
            "unsqueeze(-1) inserts before the last axis (its range has one position too few)",
        ),
        (
            "chunk-floor",
            "return split(self, -(-n // chunks) if n else [0] * chunks, axis)",
            "return split(self, n // chunks or 1 if n else [0] * chunks, axis)",
            "chunk's piece size rounds down, giving more pieces than asked",
        ),
        (
            "index-add-alpha-dropped",
            "        if alpha != 1.0:\n            source = source * alpha",
            "        if alpha == 1.0:\n            source = source * alpha",
            "index_add ignores alpha",
        ),
        (
            "masked-fill-inverted",
            "return where(mask, value, self)",
            "return where(mask, self, value)",
            "masked_fill fills where the mask is false",
        ),
        (
            "split-start-fixed",
            "        start += s\n",
            "        start = s\n",
            "split's third piece on start at the previous piece's size, not the running sum",
        ),
        (
            "init-float64-array-narrowed",
            "if dtype is None and not was_array and data.dtype == np.float64:",
            "if dtype is None and data.dtype == np.float64:",
            "a float64 NumPy array becomes float32 in Tensor(): float64 gradchecks run in float32",
        ),
        (
            "gather-index-larger-allowed",
            "k > m for i, (k, m) in enumerate(zip(idx.shape, self.shape)) if i != axis",
            "k > m + 1 for i, (k, m) in enumerate(zip(idx.shape, self.shape)) if i != axis",
            "gather accepts an index one larger than self on another axis",
        ),
        (
            "argsort-bfloat16-not-widened",
            "        if a.dtype == BFLOAT16:  # sorted as float32",
            "        if a.dtype is None:  # sorted as float32",
            "argsort: bfloat16 handed to CuPy's sort, which refuses it",
        ),
        (
            "copy-from-host-not-moved",
            '        self.data[...] = to_device(src, self.device) if hasattr(src, "dtype") '
            "else src",
            "        self.data[...] = src",
            "copy_: a host array written into a device array (CuPy refuses it)",
        ),
    ],
    "gpt/tokenizers/cli.py": [
        (
            "train-overwrites",
            "if Path(args.out).exists() and not args.overwrite:",
            "if Path(args.out).exists() and args.overwrite:",
            "tokenizer-train: an existing --out is replaced without --overwrite",
        ),
    ],
    "tensorlab/creation.py": [
        (
            "arange-int-if-any",
            "is_int = all(isinstance(v, int | np.integer) for v in (start, stop, step))",
            "is_int = any(isinstance(v, int | np.integer) for v in (start, stop, step))",
            "arange(0, 1.5, 0.5) is made int64 because one bound is an int",
        ),
        (
            "randint-high-inclusive",
            "integers(low, high, size=sizes_of((shape,)))",
            "integers(low, high + 1, size=sizes_of((shape,)))",
            "randint draws from [low, high], high included",
        ),
        (
            "like-dtype-ignored",
            "return _make(getattr(xp, fn)(t.data, *args, dtype=dtype or t.dtype), requires_grad)",
            "return _make(getattr(xp, fn)(t.data, *args, dtype=t.dtype), requires_grad)",
            "zeros_like/ones_like/full_like ignore dtype",
        ),
        (
            "tensor-default-device-ignored",
            "device = device or default_device()",
            "device = device",
            "tl.tensor ignores the default device",
        ),
        (
            "dlpack-device-type",
            "if device_type == 1:  # kDLCPU",
            "if device_type == 2:  # kDLCPU",
            "from_dlpack sends a CPU producer to CuPy",
        ),
        (
            "randn-like-device",
            "return randn(*t.shape, dtype=dtype or t.dtype, device=t.device,",
            "return randn(*t.shape, dtype=dtype or t.dtype, device=None,",
            "randn_like ignores the tensor's device",
        ),
        (
            "eye-m-dropped",
            "return _make(xp_for(device).eye(n, m, dtype=dtype), requires_grad)",
            "return _make(xp_for(device).eye(n, n, dtype=dtype), requires_grad)",
            "eye(n, m) is square",
        ),
    ],
    "tensorlab/function.py": [
        (
            "view-of-view-own-counter",
            "if data is src or (base is not None and (base is src or base is src.base)):",
            "if data is src or (base is not None and base is src):",
            "a view of a view gets its own version counter: changes through it go unnoticed",
        ),
        (
            "scope-outermost",
            "ctx.scope = modes.scope_stack[-1]",
            "ctx.scope = modes.scope_stack[0]",
            "a node records the outermost named_scope, not the innermost",
        ),
        (
            "scope-not-nested",
            'stack.append(f"{outer}.{name}" if outer else name)',
            "stack.append(name)",
            "nested named_scopes do not join with a dot",
        ),
        (
            "switch-shared-on-recursion",
            "        return copy.copy(self)",
            "        return self",
            "a recursive call of a no_grad-decorated function overwrites the saved mode",
        ),
        (
            "forward-error-always-devices",
            "if len(devices) > 1:",
            "if len(devices) >= 1:",
            "every forward error is reported as tensors on different devices",
        ),
        (
            "anomaly-any-finite",
            "not bool(xp_of(data).isfinite(data).all())",
            "not bool(xp_of(data).isfinite(data).any())",
            "detect_anomaly misses a NaN unless every entry is non-finite",
        ),
        (
            "creation-site-outermost",
            "frame = (user or stack)[-1]",
            "frame = (user or stack)[0]",
            "the anomaly's creation site is the outermost user frame, not the line making the op",
        ),
        (
            "versions-of-first-input",
            "ctx._versions = tuple([t._vc[0] for t in inputs])",
            "ctx._versions = tuple([inputs[0]._vc[0] for t in inputs])",
            "every input's saved version is the first input's: changes to others go unnoticed",
        ),
    ],
    "tensorlab/method_functions.py": [
        ("var-is-std", "var = Tensor.var", "var = Tensor.std", "tl.var is the standard deviation"),
        ("triu-is-tril", "triu = Tensor.triu", "triu = Tensor.tril", "tl.triu is tril"),
        (
            "matmul-swapped",
            "    return a @ b",
            "    return b @ a",
            "tl.matmul(a, b) computes b @ a",
        ),
    ],
    "gpt/tokenizers/char.py": [
        (
            "unk-special-twice",
            '        if unknown == "replace" and CHAR_UNK not in specials:',
            '        if unknown == "replace":',
            "CharTokenizer: <unk> added again when the special tokens already name it",
        ),
        (
            "train-unk-counted-twice",
            '(unknown == "replace" and CHAR_UNK not in specials)',
            '(unknown == "replace")',
            "CharTokenizer.train: room for <unk> kept even when it is among the special tokens",
        ),
        (
            "tie-first-seen",
            "            keep = sorted(counts, key=lambda c: (-counts[c], c))[:n_chars]",
            "            keep = sorted(counts, key=lambda c: -counts[c])[:n_chars]",
            "CharTokenizer.train: equally frequent characters kept in order of first appearance",
        ),
        (
            "exact-size-refused",
            "            if n_chars > len(counts):",
            "            if n_chars >= len(counts):",
            "CharTokenizer.train: a vocab_size that takes every character is refused",
        ),
        (
            "skip-raises",
            'unk = None if unknown == "skip" else CHAR_UNK',
            'unk = None if unknown == "error" else CHAR_UNK',
            "CharTokenizer: unknown='skip' raises, and 'error' skips",
        ),
    ],
    "gpt/tokenizers/metrics.py": [
        (
            "rare-inclusive",
            "rare_share=sum(1 for c in counts.values() if c < rare_below)",
            "rare_share=sum(1 for c in counts.values() if c <= rare_below)",
            "report: a token seen exactly rare_below times counts as rare",
        ),
        (
            "sample-six-strict",
            "if len(line.split()) >= 6]",
            "if len(line.split()) > 6]",
            "sample_line: a line of exactly six words is passed over",
        ),
        (
            "sample-cut-first-space",
            '        line = line[: line.rfind(" ", 0, max_chars) if',
            '        line = line[: line.find(" ", 0, max_chars) if',
            "sample_line: a long line cut at its first space, not its last before max_chars",
        ),
        (
            "empty-text-divides",
            "    n = max(len(ids), 1)",
            "    n = len(ids)",
            "report: empty text divides by zero tokens",
        ),
    ],
    "gpt/tokenizers/unigram.py": [
        (
            "prune-alt-total-sign",
            "            log_total_alt = np.log(total + freq * (n_alt - 1))",
            "            log_total_alt = np.log(total + freq * (n_alt + 1))",
            "_prune: the total count after removing a piece grows by n_alt + 1 times its uses",
        ),
        (
            "prune-alt-own-count",
            "            alt_terms = np.log(freq[alts] + freq[owners])",
            "            alt_terms = np.log(freq[alts])",
            "_prune: an alternative piece's count does not take over the removed piece's uses",
        ),
        (
            "fit-prune-at-once",
            "            keep = max(target, int(n_alive * shrink))",
            "            keep = min(target, int(n_alive * shrink))",
            "Unigram.fit: one pruning round goes straight to the target size",
        ),
        (
            "seed-singletons",
            "        score[(self.sid_freq < 2) & ~required] = -np.inf",
            "        score[(self.sid_freq < 1) & ~required] = -np.inf",
            "Unigram.fit: substrings seen only once enter the seed vocabulary",
        ),
        (
            "np-viterbi-tie-last",
            "        first = is_max[np.concatenate([[True], group[1:] != group[:-1]])]",
            "        first = is_max[np.concatenate([group[1:] != group[:-1], [True]])]",
            "_viterbi (training): ties go to the last edge into a node (the shortest piece)",
        ),
        (
            "em-backward-from-start",
            "alpha[start] + w + beta[end]",
            "alpha[start] + w + beta[start]",
            "_em_step: an edge's posterior reads the backward sum at its start node",
        ),
        (
            "writer-unigram-decoder-scheme",
            'trained_json(specials, None, pre, meta | {"split": True}, model)',
            'trained_json(specials, None, pre, meta | {"split": True, "prepend_scheme": "always"}, '
            "model)",
            "Unigram: its decoder written with prepend_scheme always",
        ),
    ],
    "gpt/tokenizers/base.py": [
        ("train-count-freq", "counts[old] -= f", "counts[old] -= 1", "training: frequency ignored"),
        (
            "tokcount-new-reset",
            "            tok_count[c] += n_ab",
            "            tok_count[c] = n_ab",
            "WordPiece likelihood: a token spelled by two merges counts only the latest merge",
        ),
        (
            "tokcount-b-after-del",
            "            tok_count[b] -= n_ab",
            "            tok_count[b] -= counts.get(pair, 0)",
            "WordPiece likelihood: the right part's count read after the pair was deleted (0)",
        ),
        (
            "repush-without-b",
            "pairs_of.get(a, set()) | pairs_of.get(b, set()) | pairs_of.get(c, set())",
            "pairs_of.get(a, set()) | pairs_of.get(c, set())",
            "WordPiece likelihood: pairs with the right part keep the score from before the merge",
        ),
        (
            "stale-entry-used",
            "        if counts.get(pair, 0) <= 0 or -neg != score(pair):",
            "        if counts.get(pair, 0) <= 0:",
            "learn_merges: a heap entry with an outdated score is merged",
        ),
    ],
    "gpt/__main__.py": [
        (
            "file-over-flags",
            "wanted = {**from_file, **given}",
            "wanted = {**given, **from_file}",
            "train --config FILE --flag: the file's value wins over the flag",
        ),
        (
            "no-tie-ignored",
            'given["tie_weights"] = False',
            'given["tie_weights"] = True',
            "--no-tie keeps the unembedding tied",
        ),
        (
            "resume-flags-ignored",
            "tcfg = TrainConfig.from_dict({**base_train, **train})",
            "tcfg = TrainConfig.from_dict({**train, **base_train})",
            "--resume --max-iters N: the saved max_iters wins, so the run is not extended",
        ),
        (
            "resume-old-out-dir",
            'skip = ("resume", "overwrite", "out_dir")',
            'skip = ("resume", "overwrite")',
            "a moved run folder resumes (and writes) at the folder its config names",
        ),
        (
            "sample-best-inverted",
            '"best" if args.best else "ckpt"',
            '"ckpt" if args.best else "best"',
            "sample --best reads the newest checkpoint and plain sample the best one",
        ),
        (
            "exit-code-1",
            "        return error(e, _one_line(e), 2)",
            "        return error(e, _one_line(e), 1)",
            "a bad flag exits with 1, not argparse's usage code 2",
        ),
    ],
    "gpt/circuits/views.py": [
        (
            "script-close-unescaped",
            'payload = json.dumps(data).replace("</", "<\\\\/")',
            "payload = json.dumps(data)",
            "a token holding </script> ends the page's script early",
        ),
        (
            "nonsquare-accepted",
            "if pat.ndim != 3 or pat.shape[1] != pat.shape[2]:",
            "if pat.ndim != 3:",
            "a non-square pattern is accepted",
        ),
        (
            "weights-rounded-coarse",
            '"patterns": np.round(pat, 4).tolist()',
            '"patterns": np.round(pat, 1).tolist()',
            "attention weights rounded to 1 decimal, not 4",
        ),
        (
            "title-unescaped",
            "page = _PAGE.format(title=html.escape(title), data=payload)",
            "page = _PAGE.format(title=title, data=payload)",
            "the title is put in the page unescaped",
        ),
    ],
    "gpt/plots.py": [
        (
            "xy-labels-swapped",
            "ax.set_xticks(range(Tk), labels[-Tk:], rotation=90, fontsize=fs)",
            "ax.set_xticks(range(Tk), labels[:Tk], rotation=90, fontsize=fs)",
            "a rectangular pattern's key ticks name the first Tk tokens, not the last",
        ),
        (
            "heatmap-text-transposed",
            'ax.text(h, layer, f"{s[layer, h]:.2f}", ha="center", va="center", color="w")',
            'ax.text(layer, h, f"{s[layer, h]:.2f}", ha="center", va="center", color="w")',
            "head_scores writes each score in the transposed cell",
        ),
        (
            "bar-offset-dropped",
            'ax.bar(np.arange(H) + layer * w, s[layer], width=w, label=f"layer {layer}")',
            'ax.bar(np.arange(H), s[layer], width=w, label=f"layer {layer}")',
            "head_scores' bars of every layer are drawn on top of each other",
        ),
        (
            "vmax-unclipped",
            "vmin=0.0, vmax=max(1e-9, float(pat.max()))",
            "vmin=0.0, vmax=1.0",
            "an attention heatmap's colour scale ignores the pattern's maximum",
        ),
    ],
    "tensorlab/draw.py": [
        (
            "walk-constants-drawn",
            "                for t in ctx.inputs\n                if t.requires_grad\n",
            "                for t in ctx.inputs\n                if True\n",
            "constant inputs (no gradient) are drawn as leaves",
        ),
        (
            "collapse-prefix-unanchored",
            'if scope == prefix or scope.startswith(prefix + "."):',
            "if scope.startswith(prefix):",
            "collapse=['blocks.1'] also swallows blocks.10, blocks.11 ...",
        ),
        (
            "collapse-depth-off-by-one",
            "if len(parts) >= depth:",
            "if len(parts) > depth:",
            "collapse_depth=d leaves the scopes of exactly d parts uncollapsed",
        ),
        (
            "backward-edges-forward",
            "g.edge(*((b, a) if backward else (a, b)), label=label",
            "g.edge(*((a, b) if backward else (a, b)), label=label",
            "the backward drawing's edges point the way of the forward pass",
        ),
        (
            "collapsed-op-count",
            "boxes[k[1:]] += 1",
            "boxes[k[1:]] = 1",
            "a collapsed module's box says (1 ops) whatever it holds",
        ),
        (
            "steps-edge-id-reversed",
            '"edge": f"e_{target}_{me}",',
            '"edge": f"e_{me}_{target}",',
            "the step-through page highlights an edge id that does not exist (direction reversed)",
        ),
        (
            "frames-script-unescaped",
            'data = json.dumps(self.frames).replace("</", "<\\\\/")',
            "data = json.dumps(self.frames)",
            "a tensor name holding </script> ends the page's script early",
        ),
        (
            "steps-auto-never-dot",
            'return render == "dot" or (render == "auto" and _dot_on_path())',
            'return render == "dot"',
            'backward_steps(render="auto") leaves the picture to viz.js even where dot is '
            "installed",
        ),
        (
            "drawing-needs-dot-again",
            "            if not _dot_on_path():  # the browser draws it",
            "            if False:  # the browser draws it",
            "without dot a notebook gets no drawing (graphviz's display fails) instead of viz.js's",
        ),
        (
            "viz-not-embedded",
            'VIZ="" if here else _viz_js(),',
            'VIZ="",',
            "a step page the browser must draw lacks viz.js: its picture never appears",
        ),
    ],
    "gpt/tokenizers/alignment.py": [
        (
            "cluster-by-mark-only",
            "            while end < len(text) and joins(text[end]):",
            "            while end < len(text) and not _starts_cluster(text[end]):",
            "by_clusters: 'ﾞ', which NFKC makes a combining mark, starts a cluster of its own",
        ),
        (
            "replaced-span-first-char",
            "                where = spans[end - 1]",
            "                where = spans[start]",
            "replaced: a replacement aligned with the match's first character, not its last",
        ),
        (
            "prepended-span-last",
            "return prefix + text, [spans[0]] * len(prefix) + spans",
            "return prefix + text, [spans[-1]] * len(prefix) + spans",
            "prepended: the prefix aligned with the text's last character",
        ),
        (
            "match-up-from-start",
            "        k = before.rfind(c, 0, j)",
            "        k = before.find(c, 0, j)",
            "_match_up: an unchanged character matched with its first copy, not its last",
        ),
        (
            "stripped-left-needs-right",
            "        while left and start < end and is_space(text[start]):",
            "        while left and right and start < end and is_space(text[start]):",
            "stripped: strip_left ignored unless strip_right is set too",
        ),
    ],
    "gpt/tokenizers/batching.py": [
        (
            "longest-first-tie-to-pair",
            "keep1, keep2 = (short_keep, long_keep) if n1 <= n2 else (long_keep, short_keep)",
            "keep1, keep2 = (short_keep, long_keep) if n1 < n2 else (long_keep, short_keep)",
            "truncate longest_first: equal lengths give the odd extra id to the first text",
        ),
        (
            "longest-first-no-max",
            "long_keep = short if short > limit else max(short, limit - short)",
            "long_keep = short if short > limit else limit - short",
            "truncate longest_first: the longer text may end up shorter than the shorter one",
        ),
        (
            "cut-left-off-by-one",
            'return ids[:n] if direction == "right" else ids[len(ids) - n :]',
            'return ids[:n] if direction == "right" else ids[len(ids) - n + 1 :]',
            "truncate direction=left: keeps one id too few",
        ),
        (
            "multiple-of-adds-whole",
            "length += params.multiple_of - length % params.multiple_of",
            "length += params.multiple_of",
            "pad: a length not a multiple grows by a whole multiple, not to the next multiple",
        ),
        (
            "left-pad-mask-on-right",
            "masks.append([0] * n + [1] * len(ids))",
            "masks.append([1] * len(ids) + [0] * n)",
            "pad direction=left: the attention mask still marks the padding on the right",
        ),
        (
            "truncation-json-strategies-swapped",
            '    "only_first": "OnlyFirst",\n    "only_second": "OnlySecond",',
            '    "only_first": "OnlySecond",\n    "only_second": "OnlyFirst",',
            "truncation_json: only_first written as OnlySecond and back",
        ),
        (
            "padding-json-no-multiple",
            '"pad_to_multiple_of": params.multiple_of,',
            '"pad_to_multiple_of": None,',
            "padding_json: pad_to_multiple_of not written",
        ),
    ],
    "gpt/tokenizers/decoders.py": [
        (
            "byte-level-drop-invalid",
            'return [data.decode("utf-8", errors="replace")]',
            'return [data.decode("utf-8", errors="ignore")]',
            "ByteLevel decoder: invalid UTF-8 dropped instead of becoming U+FFFD",
        ),
        (
            "byte-level-any-char",
            "        if all(c in table for c in t):",
            "        if any(c in table for c in t):",
            "ByteLevel decoder: a token with one byte-alphabet character read as byte-level",
        ),
        (
            "cleanup-do-not",
            '(" do not", " don\'t"),',
            '(" do not", "don\'t"),',
            "WordPiece cleanup: ' do not' loses the space before it",
        ),
        (
            "cleanup-order",
            '    (" \' ", "\'"),\n    (" n\'t", "n\'t"),',
            '    (" n\'t", "n\'t"),\n    (" \' ", "\'"),',
            "WordPiece cleanup: two replacements applied in another order than the library's",
        ),
        (
            "metaspace-never-strips",
            't.replace(replacement, "" if k == 0 and prepend_scheme != "never" else " ")',
            't.replace(replacement, "" if k == 0 else " ")',
            "Metaspace decoder: prepend_scheme='never' still drops the first token's spaces",
        ),
        (
            "byte-token-uppercase-only",
            '_BYTE_TOKEN = regex.compile(r"<0x(\\+[0-9A-Fa-f]|[0-9A-Fa-f]{2})>")',
            '_BYTE_TOKEN = regex.compile(r"<0x([0-9A-F]{2})>")',
            "ByteFallback: '<0x6a>' not read as a byte (the library reads hex digits either case)",
        ),
        (
            "byte-fallback-one-replacement",
            'out += ["\\ufffd"] * len(run)',
            'out += ["\\ufffd"]',
            "ByteFallback: an invalid run gives one U+FFFD, not one per byte token",
        ),
        (
            "strip-stop-by-start",
            "        for _ in range(stop):",
            "        for _ in range(start):",
            "Strip decoder: the end stripped start times instead of stop times",
        ),
        (
            "bpe-suffix-last-space",
            '[t.replace(suffix, "" if k == last else " ") for k, t in enumerate(tokens)]',
            '[t.replace(suffix, " ") for k, t in enumerate(tokens)]',
            "BPEDecoder: the last token's suffix becomes a trailing space",
        ),
        (
            "decode-first-prefix-stripped",
            "            if k > 0:\n                t = t[len(prefix) :]",
            "            if k >= 0:\n                t = t[len(prefix) :]",
            "WordPiece decoder: the first piece loses its ## or gets a space before it",
        ),
    ],
    "gpt/tokenizers/fields.py": [
        (
            "int-accepts-bool",
            '"int": (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),',
            '"int": (lambda v: isinstance(v, int), "an integer"),',
            "check: true/false accepted as an integer",
        ),
        (
            "null-not-missing",
            'if value is None and "null" not in kinds.split("|"):',
            'if value is None and "null" in kinds.split("|"):',
            "get: a null field refused instead of taking its default, and null-able ones lose it",
        ),
        (
            "nesting-off-by-one",
            "    if depth > MAX_NESTING:",
            "    if depth > MAX_NESTING + 1:",
            "part_type: one level deeper than MAX_NESTING accepted",
        ),
    ],
    "gpt/tokenizers/normalizers.py": [
        (
            "strip-accents-nonspacing-only",
            '_MARK = regex.compile(r"\\p{M}")',
            '_MARK = regex.compile(r"\\p{Mn}")',
            "StripAccents: only nonspacing marks dropped (the library drops every mark: Mc, Me)",
        ),
        (
            "lowercase-final-sigma",
            "lambda p: per_cluster(lower_chars)",
            "lambda p: per_cluster(str.lower)",
            "Lowercase: str.lower's final-sigma rule (the library lowercases each character alone)",
        ),
        (
            "prepend-empty-text",
            "return Normalizer(lambda text: prefix + text if text else text, alignment.prepended",
            "return Normalizer(lambda text: prefix + text, alignment.prepended",
            "Prepend: the prefix put before text a previous step emptied",
        ),
        (
            "strip-right-leading",
            '            text = _TRAILING_SPACE.sub("", text)',
            '            text = _LEADING_SPACE.sub("", text)',
            "Strip: strip_right removes the leading whitespace again, not the trailing",
        ),
        (
            "strip-sides-swapped",
            "alignment.stripped(_SPACE.fullmatch, left, right)",
            "alignment.stripped(_SPACE.fullmatch, right, left)",
            "Strip: the aligned form strips the other sides (offsets off, ids right)",
        ),
        (
            "sequence-skips-first",
            "chain([s.apply for s in steps])",
            "chain([s.apply for s in steps[1:]])",
            "Sequence: its first normalizer never runs",
        ),
        (
            "replace-regex-keeps-match",
            "[(s, e, content) for s, e in find(text)]",
            "[(s, s, content) for s, e in find(text)]",
            "Replace(Regex): the matched text kept after its replacement",
        ),
        (
            "bert-cjk-no-leading-space",
            'text = _CJK.sub(r" \\1 ", text)',
            'text = _CJK.sub(r"\\1 ", text)',
            "bert_normalize: a CJK ideograph gets a space after it only",
        ),
        (
            "bert-accents-not-with-lowercase",
            "if strip_accents or (strip_accents is None and lowercase):",
            "if strip_accents:",
            "bert_normalize: strip_accents=None no longer strips accents when lowercasing",
        ),
        (
            "bert-drops-cr",
            "(?![\\t\\n\\r])[\\p{Cc}",
            "(?![\\t\\n])[\\p{Cc}",
            "bert_normalize: a carriage return dropped as a control character, not made a space",
        ),
        (
            "bert-marks-all",
            '_MARKS = regex.compile(r"\\p{Mn}")',
            '_MARKS = regex.compile(r"\\p{M}")',
            "bert_normalize: strip_accents drops spacing marks (Mc) too; BERT drops only Mn",
        ),
    ],
    "gpt/tokenizers/tokenizer.py": [
        (
            "added-shortest-first",
            "alternatives = sorted(by_content, key=len, reverse=True)",
            "alternatives = sorted(by_content, key=len)",
            "split_added: of two added tokens at one place the shorter wins",
        ),
        (
            "lstrip-past-previous-token",
            "space = _SPACE_BEFORE.search(text, pos, start)",
            "space = _SPACE_BEFORE.search(text, 0, start)",
            "split_added: lstrip swallows whitespace an earlier token's rstrip already took",
        ),
        (
            "first-after-added-token",
            "                first = start == 0\n",
            "                first = True\n",
            "segments: the text after an added token counted as the text's first piece",
        ),
        (
            "skip-special-inverted",
            "if not (skip_special_tokens and i in self._special_by_id)",
            "if not (skip_special_tokens and i not in self._special_by_id)",
            "decode(skip_special_tokens=True) drops the ordinary tokens, keeps the special ones",
        ),
        (
            "spread-end-without-space",
            "spans[-1] = (spans[-1][0], start + len(chunk))",
            "spans[-1] = (spans[-1][0], start + len(content))",
            "_spread: an rstrip token's offsets leave out the whitespace it swallowed",
        ),
        (
            "write-not-atomic",
            'atomic_write(path, lambda f: f.write(text.encode("utf-8")))',
            'open(path, "wb").write(text.encode("utf-8"))',
            "Tokenizer.save: writes the target in place (a crash leaves half a file)",
        ),
        (
            "writer-added-not-special",
            "    special: bool = True",
            "    special: bool = False",
            "added_token_json: the trainers' special tokens written as ordinary added tokens",
        ),
    ],
    "gpt/tokenizers/post_processors.py": [
        (
            "n-added-counts-items",
            "return sum(len(item) for item in items if isinstance(item, list))",
            "return sum(1 for item in items if isinstance(item, list))",
            "Template.n_added: a special token of several ids counted as one",
        ),
        (
            "pair-template-for-empty-pair",
            "for item in self.single if b is None else self.pair:",
            "for item in self.single if not b else self.pair:",
            "Template: an empty second text encoded with the single template",
        ),
        (
            "roberta-one-sep",
            'return Template([[cls], "A", [sep]], [[cls], "A", [sep, sep], "B", [sep]])',
            'return Template([[cls], "A", [sep]], [[cls], "A", [sep], "B", [sep]])',
            "RobertaProcessing: one </s> between the texts of a pair, not two",
        ),
        (
            "n-added-single-for-pair",
            "items = self.pair if pair_ else self.single",
            "items = self.single",
            "Template.n_added: truncation of a pair leaves room for the single template only",
        ),
    ],
    "gpt/tokenizers/visualize.py": [
        (
            "adjacent-tokens-merged",
            "while k < len(placed) and placed[k][1][0] < end:",
            "while k < len(placed) and placed[k][1][0] <= end:",
            "segments: a token that starts where the last one ends is shown together with it",
        ),
        (
            "shared-end-shrinks",
            "end = max(end, placed[k][1][1])",
            "end = placed[k][1][1]",
            "segments: tokens sharing a character end where the last of them ends, not the "
            "furthest",
        ),
        (
            "empty-token-dropped",
            "out[-1][1].extend(ids)  # a token covering nothing joins its neighbour",
            "pass  # a token covering nothing joins its neighbour",
            "segments: a token that covers no text is left out of the picture",
        ),
        (
            "terminal-one-colour",
            "        code = ANSI_COLOURS[colour % len(ANSI_COLOURS)]\n        colour += 1",
            "        code = ANSI_COLOURS[colour % len(ANSI_COLOURS)]\n        colour += 0",
            "to_terminal gives every token the same colour",
        ),
        (
            "chars-per-token-inverted",
            "per_token = len(text) / n_tokens if n_tokens else 0.0",
            "per_token = n_tokens / len(text) if n_tokens else 0.0",
            "the HTML page prints tokens per character as characters per token",
        ),
        (
            "html-piece-unescaped",
            "shown = html.escape(_visible(piece))",
            "shown = _visible(piece)",
            "the HTML page puts the text's '<' and '&' in unescaped",
        ),
    ],
    "tensorlab/blas_threads.py": [
        (
            "not-restored",
            "        if prev is not None:\n            set_blas_threads(prev)",
            "        if prev is None:\n            set_blas_threads(prev)",
            "blas_threads(n) leaves n threads set after the block",
        ),
        (
            "one-refused",
            "if int(n) < 1:",
            "if int(n) <= 1:",
            "set_blas_threads(1), one thread per process, is refused",
        ),
        (
            "returns-new-count",
            "        lib[0](ctypes.c_int(int(n)))\n    return prev",
            "        lib[0](ctypes.c_int(int(n)))\n    return n",
            "set_blas_threads returns the count it set, not the one it replaced",
        ),
    ],
}

# Survivors that have been looked at, and the verdict. They still count as survived.
REVIEWED = {
    "autograd.grad-to-constants": (
        "equivalent: a gradient sent to a tensor that does not require grad waits in `pending` "
        "under a node that topological_order never lists, so it is never read; trace_backward "
        "filters such inputs itself. Only wasted work (and detect_anomaly would check it)."
    ),
    "generate_seq2seq.eos-beyond-k": (
        "equivalent: the loop over the 2k best extensions stops at the k-th live one, so it "
        "reaches rank k only past an eos of a better rank at the same step (same length, same "
        "length penalty); the extra hypothesis scores below that one and never changes the "
        "best ended score or the result."
    ),
    "base.tokcount-new-reset": (
        "equivalent: a merge rewrites every occurrence of its pair at once, so no later merge "
        "spells a token an earlier merge made (none in 20,000 random trainings, prefix '##' or "
        "''), and a merged text that is a special token's has count 0, so tok_count[c] is 0"
    ),
}
