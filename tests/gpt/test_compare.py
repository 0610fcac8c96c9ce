"""gpt.compare, the divergence finder (gpt/compare.py): the first hook point whose activations
differ, in forward order, and the first parameter whose gradient differs, in backward order;
against a tensorlab model and against transformers' GPT-2 and Llama; and ``python -m gpt
compare``."""

from __future__ import annotations

import numpy as np
import pytest

import gpt
import tensorlab as tl
from gpt.__main__ import main
from gpt.circuits import hooks
from gpt.compare import RTOL, compare
from gpt.hf import from_pretrained, save_hf_gpt2
from nn.attention import composed_attention

IDS = np.random.default_rng(0).integers(0, 50, (2, 12))


def small_gpt(seed=0, **overrides) -> gpt.GPT:
    tl.manual_seed(seed)
    cfg = dict(vocab_size=50, n_layer=4, n_head=4, d_model=32, block_size=16)
    return gpt.GPT(gpt.GPTConfig(**{**cfg, **overrides}))


def copy_of(model: gpt.GPT) -> gpt.GPT:
    twin = gpt.GPT(model.config)
    twin.load_state_dict(model.state_dict())
    return twin


def test_a_model_compared_with_itself_and_with_a_copy_is_clean():
    model = small_gpt()
    for reference in (model, copy_of(model)):
        result = compare(model, reference, IDS)
        assert result.first is None and result.first_gradient is None
        assert all(r.max_abs == 0 for r in result.activations + result.gradients)
        # every hook point the forward passes, in forward order, then the logits
        names = [r.name for r in result.activations]
        assert names[:3] == ["hook_embed", "hook_pos_embed", "blocks.0.hook_resid_pre"]
        assert names[-2:] == ["blocks.3.hook_resid_post", "logits"]
        assert len(result.gradients) == len(list(model.parameters()))
        assert "all 47 agree within rtol 1e-04" in str(result)


def test_a_perturbed_weight_of_block_2s_mlp_is_named_first():
    model = small_gpt()
    reference = copy_of(model)
    reference.blocks[2].mlp.W_in.data[0, 0] += 0.1
    result = compare(model, reference, IDS)
    first = result.first
    assert first.name == "blocks.2.mlp.hook_pre" and first.relative > 1e-3
    k = result.activations.index(first)
    before = result.activations[:k]
    assert [r.max_abs for r in before] == [0.0] * k  # the same ops on the same numbers
    assert before[-1].name == "blocks.2.hook_resid_mid"
    text = str(result)
    assert "first difference at blocks.2.mlp.hook_pre" in text
    assert f"{k} before it agree (hook_embed … blocks.2.hook_resid_mid)" in text
    assert "blocks.2.mlp.hook_pre" in result.table().split("✗")[0].splitlines()[-1]


def test_a_difference_in_the_backward_alone_is_named_in_backward_order():
    """The forward agrees; the gradient reaching block 1's MLP output is 1% off, so block 1's
    MLP is the first parameter (from the loss back) whose gradient differs."""
    model = small_gpt()
    off = hooks(model, bwd_hooks=[("blocks.1.hook_mlp_out", lambda g: g * 1.01)])
    result = compare(model, model, IDS, contexts=(None, off))
    assert result.first is None
    first = result.first_gradient
    assert first.name == "blocks.1.mlp.b_out", result.table()
    later = result.gradients[: result.gradients.index(first)]
    assert all(r.name.startswith(("ln_final", "blocks.3", "blocks.2")) for r in later)
    assert all(r.max_abs == 0 for r in later)


def test_a_nan_is_a_difference():
    model = small_gpt()
    nan = hooks(model, [("blocks.1.hook_mlp_out", lambda act: act * np.nan)])
    result = compare(model, model, IDS, contexts=(None, nan))
    assert result.first.name == "blocks.1.hook_mlp_out"
    assert "relative nan" in str(result)


def test_bfloat16_autocast_differs_only_at_a_float32_tolerance():
    model = small_gpt()
    tight = compare(model, model, IDS, contexts=(None, tl.autocast("bfloat16")))
    # the embedding is looked up, not multiplied: the first matrix product is the first change
    assert tight.first.name == "blocks.0.attn.hook_q"
    assert tight.first_gradient is not None
    loose = compare(
        model, model, IDS, contexts=(None, tl.autocast("bfloat16")), rtol=RTOL["bfloat16"]
    )
    assert loose.first is None and loose.first_gradient is None, loose.table()
    assert max(r.relative for r in loose.activations) > 10 * RTOL["float32"]


def test_fused_and_composed_attention_agree_on_the_points_both_pass():
    """The composed path has hook_attn_scores and hook_pattern, the fused one not: each side
    is hooked where its own path passes, so composing one side changes nothing else."""
    model = small_gpt()
    result = compare(model, model, IDS, contexts=(None, composed_attention(model)))
    assert result.first is None and result.first_gradient is None, result.table()
    assert not any("pattern" in r.name for r in result.activations)
    assert model.blocks[0].attn.hook_pattern.closed  # the fused path is back afterwards


# ------------------------------------------------------------------ against transformers
HF = {
    "GPT2": (
        dict(n_embd=32, n_layer=3, n_head=4, n_positions=16, vocab_size=50),
        "transformer.h.1.attn.c_attn",
    ),
    "Llama": (
        dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=3,
            num_attention_heads=4,
            num_key_value_heads=2,
            vocab_size=50,
            max_position_embeddings=32,
        ),
        "model.layers.1.self_attn.q_proj",
    ),
}


def transformers_model(kind: str):
    torch = pytest.importorskip("torch", reason="transformers needs torch")
    transformers = pytest.importorskip("transformers", reason="transformers is the reference")
    torch.manual_seed(0)
    config = getattr(transformers, f"{kind}Config")(**HF[kind][0])
    head = "GPT2LMHeadModel" if kind == "GPT2" else "LlamaForCausalLM"
    model = getattr(transformers, head)(config)
    with torch.no_grad():  # norms and biases off their initial ones and zeros
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model, torch


@pytest.mark.parametrize("kind", list(HF))
def test_a_transformers_model_and_its_load_compare_clean_until_one_is_perturbed(tmp_path, kind):
    reference, torch = transformers_model(kind)
    reference.save_pretrained(tmp_path)
    model = from_pretrained(tmp_path)
    result = compare(model, reference, IDS)
    assert result.first is None and result.first_gradient is None, result.table()
    per_block = 11 if kind == "GPT2" else 12  # GPT-2 has hook_pos_embed, Llama hook_pre_linear
    assert len(result.activations) == 1 + (kind == "GPT2") + 3 * per_block + 1
    assert len(result.gradients) == len(list(model.parameters()))
    with torch.no_grad():
        reference.get_submodule(HF[kind][1]).weight[0, 0] += 0.5
    first = compare(model, reference, IDS).first
    assert first.name.startswith("blocks.1.attn."), first


# ------------------------------------------------------------------ the command line
def test_compare_command(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("to be, or not to be, that is the question. " * 30)
    run = str(tmp_path / "run")
    small = ["--block-size", "16", "--n-layer", "1", "--d-model", "16", "--n-head", "2"]
    train = ["train", "--text", str(text), "--out-dir", run, "--max-iters", "2", *small]
    assert main([*train, "--eval-iters", "1", "--sample-tokens", "1"]) == 0
    capsys.readouterr()
    assert main(["compare", run, run, "--text", "to be or not"]) == 0
    out = capsys.readouterr().out
    assert "activations (forward order): all" in out and "gradients (backward order): all" in out
    assert main(["compare", run, run, "--text", "t"]) == 2
    assert "--text t: is under 2 tokens" in capsys.readouterr().err
    pytest.importorskip("transformers", reason="a Hugging Face folder as B runs in transformers")
    save_hf_gpt2(gpt.load(run)[0], tmp_path / "hf")
    assert main(["compare", run, str(tmp_path / "hf"), "--text", "to be or not", "--table"]) == 0
    out = capsys.readouterr().out
    assert "blocks.0.mlp.hook_pre" in out and "✗" not in out
