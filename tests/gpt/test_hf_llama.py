"""gpt/hf/llama.py through gpt.hf.from_pretrained: Llama, Qwen2 and Mistral folders.

The parity tests build small randomly initialised models with ``transformers`` (a test-only
reference; they skip without it), save them with ``save_pretrained``, load them here, and
compare logits and greedy generation with and without the key/value cache against
``transformers``' own ``generate``. Every model has grouped-query attention (4 query heads,
2 or 1 key/value heads); each architecture adds its own switches: Llama 3.1's RoPE scaling,
a tied variant with biases and a head size other than hidden_size / heads (``head_dim``),
Qwen2's q/k/v biases, Mistral's sliding window, shorter than the generated sequence. The
refusal tests need no reference: they write config.json by hand.
"""

from __future__ import annotations

import copy
import json
import os

import numpy as np
import pytest

import gpt
import tensorlab as tl
from gpt.hf import HFCheckpointError, from_pretrained

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

COMMON = dict(
    vocab_size=97,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,
}
CASES = {
    "llama-llama3-rope": ("Llama", dict(rope_scaling=LLAMA3_ROPE, rope_theta=500000.0)),
    "llama-mqa-bias-tied": (
        "Llama",
        dict(attention_bias=True, mlp_bias=True, tie_word_embeddings=True, num_key_value_heads=1),
    ),
    "llama-linear-rope": ("Llama", dict(rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "llama-head-dim-16": ("Llama", dict(head_dim=16)),  # H·d_h = 64 ≠ hidden_size 32
    "qwen2": ("Qwen2", dict()),
    "mistral-window-5": ("Mistral", dict(sliding_window=5)),
}
IDS = np.random.default_rng(0).integers(0, 97, (2, 12))
# Logits: float32 on both sides through two layers, summed in different orders; measured
# differences are ≤ 4e-7 on logits of size ~1, so 1e-5 leaves 25× room and still catches any
# wrong layout (a swapped RoPE layout or an untransposed weight moves logits by ~0.1).
ATOL = 1e-5


def reference_libraries():
    """transformers and torch, or a skip that names the missing one."""
    torch = pytest.importorskip("torch", reason="transformers needs torch")
    transformers = pytest.importorskip("transformers", reason="transformers is the reference")
    return transformers, torch


def reference_model(kind: str, extra: dict, seed: int = 0):
    transformers, torch = reference_libraries()
    torch.manual_seed(seed)
    # (a deep copy: transformers writes rope_theta into the rope_scaling dict it is given)
    config = getattr(transformers, f"{kind}Config")(**copy.deepcopy({**COMMON, **extra}))
    model = getattr(transformers, f"{kind}ForCausalLM")(config).eval()
    with torch.no_grad():  # move norms and biases off their initial ones and zeros
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def reference_logits(model, ids) -> np.ndarray:
    import torch

    with torch.no_grad():
        return model(torch.tensor(ids)).logits.float().numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_logits_and_greedy_generation_match_transformers(tmp_path, case):
    _, torch = reference_libraries()

    kind, extra = CASES[case]
    ref = reference_model(kind, extra)
    ref.save_pretrained(tmp_path)
    model = from_pretrained(tmp_path)
    cfg = model.config
    assert (cfg.n_head, cfg.n_kv_head, cfg.rope_layout) == (
        4,
        extra.get("num_key_value_heads", 2),
        "half",
    )
    assert cfg.sliding_window == extra.get("sliding_window")
    assert cfg.d_head == extra.get("head_dim", 8)
    with tl.no_grad():
        logits, _ = model(tl.tensor(IDS))
    np.testing.assert_allclose(logits.numpy(), reference_logits(ref, IDS), atol=ATOL)

    prompt, n = IDS[0, :3], 20  # 23 positions: past Mistral's window of 5
    expected = ref.generate(
        torch.tensor(prompt[None]),
        attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
        max_new_tokens=n,
        min_new_tokens=n,  # no early stop at the end-of-text id
        do_sample=False,
    )[0].tolist()
    for use_cache in (True, False):
        got = gpt.generate(model, prompt.tolist(), n, temperature=0, use_cache=use_cache)
        assert got == expected, f"use_cache={use_cache}"


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_sharded_half_precision_checkpoint_loads_exactly(tmp_path, dtype):
    """A bfloat16 or float16 checkpoint in several shards: every tensor is widened to float32
    exactly, so the logits equal transformers' from the same files read as float32."""
    if dtype == "bfloat16":
        pytest.importorskip("ml_dtypes", reason="bfloat16 arrays need ml_dtypes")
    transformers, torch = reference_libraries()

    ref = reference_model("Llama", {})
    ref.to(getattr(torch, dtype)).save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("model-*.safetensors"))) > 1
    model = from_pretrained(tmp_path)
    widened = transformers.LlamaForCausalLM.from_pretrained(tmp_path, dtype=torch.float32)
    for name, p in widened.named_parameters():
        assert p.dtype == torch.float32, name
    with tl.no_grad():
        logits, _ = model(tl.tensor(IDS))
    np.testing.assert_allclose(logits.numpy(), reference_logits(widened.eval(), IDS), atol=ATOL)


def test_loading_draws_no_random_numbers(tmp_path):
    """from_pretrained builds the model under nn.init.empty_parameters: nothing is drawn
    from the generator (the random initialisation would be overwritten anyway)."""
    ref = reference_model("Qwen2", {})
    ref.save_pretrained(tmp_path)
    tl.manual_seed(0)
    expected = tl.randn(3).numpy()
    tl.manual_seed(0)
    from_pretrained(tmp_path)
    np.testing.assert_array_equal(tl.randn(3).numpy(), expected)


def test_tokenizer_file_gives_the_same_ids(tmp_path):
    """A Llama-style tokenizer.json (SentencePiece-like BPE: a "▁" prepended and spaces
    replaced by it, byte fallback, a BOS template) and a Qwen2-style one (byte-level BPE with a
    split regex) saved with a model folder load with identical ids, special tokens included."""
    tokenizers = pytest.importorskip("tokenizers", reason="the tokenizers library is the reference")
    transformers = pytest.importorskip("transformers", reason="transformers saves the folder")
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers

    text = gpt.data.default_text()[:30_000]
    probes = ["Hello world, it's 2026!", "  two  spaces\tand tab", "naïve café 中文 🤗"]
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]

    llama = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    llama.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
    )
    llama.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    special = ["<unk>", "<s>", "</s>"]
    llama.train_from_iterator(
        [text], trainers.BpeTrainer(vocab_size=400, special_tokens=special + byte_tokens)
    )
    llama.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )

    qwen = tokenizers.Tokenizer(models.BPE())
    qwen.normalizer = normalizers.NFC()
    qwen.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(
                tokenizers.Regex(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"),
                "isolated",
            ),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    qwen.decoder = decoders.ByteLevel()
    qwen.train_from_iterator(
        [text],
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=["<|endoftext|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )

    for name, tok in (("llama", llama), ("qwen2", qwen)):
        folder = tmp_path / name
        fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tok)
        fast.save_pretrained(folder)
        ours = gpt.hf.tokenizer_from_pretrained(folder)
        for probe in probes:
            want = fast(probe)["input_ids"]
            assert ours.encode(probe, add_special_tokens=True) == want, (name, probe)
            assert ours.decode(want) == fast.decode(want), (name, probe)


# ---------------------------------------------------------------------- refusals, by name
def llama_config(**overrides) -> dict:
    cfg = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        **COMMON,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
    }
    cfg.update(overrides)
    return {k: v for k, v in cfg.items() if v is not None}


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"hidden_act": "gelu"}, "hidden_act='gelu' is not supported"),
        (
            {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}},
            "rope_type='yarn' is not supported",
        ),
        ({"attention_bias": True}, "attention_bias=True with mlp_bias=False is not supported"),
        (
            {
                "model_type": "qwen2",
                "architectures": ["Qwen2ForCausalLM"],
                "use_sliding_window": True,
            },
            "use_sliding_window=true is not supported",
        ),
        ({"architectures": ["LlamaForSequenceClassification"]}, "only LlamaForCausalLM loads"),
        ({"num_key_value_heads": 3}, "n_kv_head=3: must divide n_head=4"),
        ({"rms_norm_eps": None}, "'rms_norm_eps' is missing"),
    ],
)
def test_unsupported_options_are_refused_by_name(tmp_path, overrides, message):
    (tmp_path / "config.json").write_text(json.dumps(llama_config(**overrides)))
    with pytest.raises(HFCheckpointError, match=r"config\.json: .*" + message.replace("(", r"\(")):
        from_pretrained(tmp_path)


def test_config_of_transformers_4_spelling():
    """Older config.json files spell RoPE as rope_theta + rope_scaling (with "type")."""
    cfg = gpt.hf.config_from_hf(
        llama_config(
            rope_parameters=None,
            rope_theta=500000.0,
            rope_scaling={**LLAMA3_ROPE, "rope_type": None, "type": "llama3"},
        )
    )
    assert cfg.rope_base == 500000.0 and cfg.rope_scaling == LLAMA3_ROPE
    assert (cfg.norm, cfg.activation, cfg.positional, cfg.tie_weights) == (
        "rmsnorm",
        "swiglu",
        "rope",
        False,
    )


def test_a_tensor_of_the_wrong_shape_or_an_extra_one_is_named(tmp_path):
    ref = reference_model("Llama", {})
    ref.save_pretrained(tmp_path)
    from nn import serialization

    weights = tmp_path / "model.safetensors"
    state = serialization.load(weights)
    state["model.layers.1.self_attn.k_proj.weight"] = np.zeros((32, 32), np.float32)
    serialization.save(state, weights)
    with pytest.raises(
        HFCheckpointError, match=r"k_proj.weight' has shape \(32, 32\).*needs \(16, 32\)"
    ):
        from_pretrained(tmp_path)
    state["model.layers.1.self_attn.k_proj.weight"] = np.zeros((16, 32), np.float32)
    state["model.layers.0.self_attn.rotary_extra"] = np.zeros(3, np.float32)
    serialization.save(state, weights)
    with pytest.raises(HFCheckpointError, match="1 tensor.*rotary_extra"):
        from_pretrained(tmp_path)
    assert from_pretrained(tmp_path, strict=False).config.n_kv_head == 2


def test_a_tied_checkpoint_with_a_stored_lm_head_must_repeat_the_embedding(tmp_path):
    """tie_word_embeddings=true with an lm_head.weight in the file (some exporters write the
    redundant copy): an equal copy loads (logits as transformers', ATOL above), one that
    differs in a single entry is refused by name instead of being silently dropped."""
    from nn import serialization

    ref = reference_model("Llama", dict(tie_word_embeddings=True))
    ref.save_pretrained(tmp_path)
    weights = tmp_path / "model.safetensors"
    state = {k: np.array(v) for k, v in serialization.load(weights).items()}
    assert "lm_head.weight" not in state  # transformers leaves the copy out
    state["lm_head.weight"] = state["model.embed_tokens.weight"].copy()
    serialization.save(state, weights)
    with tl.no_grad():
        logits, _ = from_pretrained(tmp_path)(tl.tensor(IDS))
    np.testing.assert_allclose(logits.numpy(), reference_logits(ref, IDS), atol=ATOL)
    state["lm_head.weight"][3, 5] += 1.0
    serialization.save(state, weights)
    with pytest.raises(
        HFCheckpointError,
        match=r"'lm_head.weight' differs from model.embed_tokens.weight.*tie_word_embeddings",
    ):
        from_pretrained(tmp_path)


@pytest.mark.slow
def test_load_llama_example_runs_and_shows_the_window(tmp_path):
    """examples/load_llama.py --demo: a random Mistral-style folder made with transformers,
    loaded, generated from, and one head's pattern printed and saved; the pattern's rows show
    the sliding window of 4 (each query sees at most 4 positions)."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("transformers", reason="the demo folder is made with transformers")
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [
            sys.executable,
            str(root / "examples" / "load_llama.py"),
            "--demo",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "n_kv_head=2" in out.stdout and "sliding_window=4" in out.stdout
    assert (tmp_path / "random-mistral" / "config.json").exists()  # under --out, not in /tmp
    grid = out.stdout.split("in percent:\n")[1].splitlines()
    rows = [[int(v) for v in line.split() if v.isdigit()] for line in grid]  # labels are quoted
    rows = rows[: len(rows[0])]  # one row per prompt token, then the "saved" lines
    assert len(rows) >= 5 and all(len(row) == len(rows) for row in rows)
    assert all(sum(v > 0 for v in row) <= 4 for row in rows)  # the window of 4
    assert sum(v > 0 for v in rows[-1]) == 4  # the last query sees exactly 4 positions
    assert (tmp_path / "llama_pattern.png").is_file() or "matplotlib" in out.stdout
    assert (tmp_path / "llama_attention.html").is_file()


# ---------------------------------------------------------------------- writing
LLAMA_SHAPED = dict(
    vocab_size=97,
    block_size=64,
    n_layer=2,
    n_head=4,
    n_kv_head=2,
    d_model=32,
    d_ff=48,
    activation="swiglu",
    norm="rmsnorm",
    positional="rope",
    rope_layout="half",
    bias=False,
    tie_weights=False,
)
WRITTEN = {
    "llama": dict(rope_scaling=dict(LLAMA3_ROPE), rope_base=500000.0),
    "qwen2": dict(qkv_bias=True),
    "mistral": dict(sliding_window=5),
    "llama-tied-biases": dict(bias=True, tie_weights=True, n_kv_head=1),
}


@pytest.mark.parametrize("case", list(WRITTEN))
def test_save_hf_llama_is_read_back_exactly_and_by_transformers(tmp_path, case):
    """A Llama-shaped GPT written by save_hf_llama: from_pretrained gives back every parameter
    exactly, and transformers reads the folder (its architecture chosen by the config) with the
    same logits (ATOL, as above)."""
    from gpt.config import GPTConfig
    from gpt.hf import save_hf_llama
    from gpt.model import GPT

    tl.manual_seed(0)
    model = GPT(GPTConfig(**{**LLAMA_SHAPED, **WRITTEN[case]})).eval()
    rng = np.random.default_rng(1)
    for p in model.parameters():  # norms and biases off their initial ones and zeros
        p.data += tl.tensor(rng.standard_normal(p.shape).astype(np.float32) * 0.05).data
    save_hf_llama(model, tmp_path)
    back = from_pretrained(tmp_path)
    assert back.config == model.config
    for (name, p), q in zip(model.named_parameters(), back.parameters()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=name)

    transformers, torch = reference_libraries()
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    expected = case.split("-")[0]
    assert type(ref).__name__.lower().startswith(expected)
    with torch.no_grad():
        want = ref(torch.tensor(IDS)).logits.numpy()
    with tl.no_grad():
        got, _ = model(tl.tensor(IDS))
    np.testing.assert_allclose(got.numpy(), want, atol=ATOL)


def test_save_hf_llama_refuses_a_model_of_another_shape(tmp_path):
    from gpt.config import GPTConfig
    from gpt.hf import save_hf_llama
    from gpt.model import GPT

    model = GPT(GPTConfig(**{**LLAMA_SHAPED, "rope_layout": "interleaved", "norm": "layernorm"}))
    with pytest.raises(ValueError, match="not Llama-shaped: norm='layernorm'.*rope_layout"):
        save_hf_llama(model, tmp_path)
    assert not (tmp_path / "model.safetensors").exists()
