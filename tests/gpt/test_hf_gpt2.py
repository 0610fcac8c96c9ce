"""Hugging Face GPT-2 checkpoints (gpt/hf/gpt2.py): the weight mapping, the config mapping, errors.

Three independent checks of the mapping:

- a hand-written NumPy forward pass of HF's GPT-2 (Conv1D weights, q/k/v split by columns),
  run on a hand-built HF-layout checkpoint, against our model loaded from it;
- our model -> ``save_hf_gpt2`` -> ``from_pretrained`` round trips exactly;
- with ``transformers`` installed (a test-only dependency), ``GPT2LMHeadModel`` logits equal
  ours on checkpoints it wrote, and it reads the checkpoints ``save_hf_gpt2`` writes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tensorlab as tl
from gpt.config import GPTConfig
from gpt.hf import (
    HFCheckpointError,
    config_from_hf,
    from_pretrained,
    load_gpt2_weights,
    save_hf_gpt2,
)
from gpt.model import GPT
from nn import serialization
from nn.serialization import SerializationError

D, L, H, NPOS, V = 32, 2, 4, 16, 50
ATOL = 1e-5


def hf_config(**overrides) -> dict:
    cfg = {
        "model_type": "gpt2",
        "n_embd": D,
        "n_layer": L,
        "n_head": H,
        "n_positions": NPOS,
        "vocab_size": V,
        "n_inner": None,
        "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5,
        "tie_word_embeddings": True,
    }
    cfg.update(overrides)
    return cfg


def hf_state(cfg: dict, seed: int = 0, prefix: str = "transformer.") -> dict[str, np.ndarray]:
    """Random weights in HF GPT-2's layout (every bias and norm gain non-trivial)."""
    rng = np.random.default_rng(seed)
    d, f = cfg["n_embd"], cfg["n_inner"] or 4 * cfg["n_embd"]

    def r(*shape, loc=0.0):
        return (loc + 0.3 * rng.standard_normal(shape)).astype(np.float32)

    s = {"wte.weight": r(cfg["vocab_size"], d), "wpe.weight": r(cfg["n_positions"], d)}
    for i in range(cfg["n_layer"]):
        h = f"h.{i}."
        s |= {
            h + "ln_1.weight": r(d, loc=1.0),
            h + "ln_1.bias": r(d),
            h + "attn.c_attn.weight": r(d, 3 * d),
            h + "attn.c_attn.bias": r(3 * d),
            h + "attn.c_proj.weight": r(d, d),
            h + "attn.c_proj.bias": r(d),
            h + "ln_2.weight": r(d, loc=1.0),
            h + "ln_2.bias": r(d),
            h + "mlp.c_fc.weight": r(d, f),
            h + "mlp.c_fc.bias": r(f),
            h + "mlp.c_proj.weight": r(f, d),
            h + "mlp.c_proj.bias": r(d),
        }
    s |= {"ln_f.weight": r(d, loc=1.0), "ln_f.bias": r(d)}
    s = {prefix + k: v for k, v in s.items()}
    if not cfg["tie_word_embeddings"]:
        s["lm_head.weight"] = r(cfg["vocab_size"], d)
    return s


def write_checkpoint(path, cfg: dict, state: dict[str, np.ndarray]):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(cfg))
    serialization.save(state, path / "model.safetensors")
    return path


def reference_logits(state: dict[str, np.ndarray], cfg: dict, tokens: np.ndarray) -> np.ndarray:
    """HF GPT-2's forward pass (modeling_gpt2, eval mode), in float64 NumPy."""
    p = {k.removeprefix("transformer."): v.astype(np.float64) for k, v in state.items()}
    B, T = tokens.shape
    d, nh = cfg["n_embd"], cfg["n_head"]
    dh, eps = d // nh, cfg["layer_norm_epsilon"]

    def ln(x, name):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]

    def conv1d(x, name):  # HF Conv1D: weight (in, out)
        return x @ p[name + ".weight"] + p[name + ".bias"]

    def act(x):
        if cfg["activation_function"] == "gelu":
            from math import erf

            return 0.5 * x * (1 + np.vectorize(erf)(x / np.sqrt(2)))
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

    def heads(t):
        return t.reshape(B, T, nh, dh).transpose(0, 2, 1, 3)

    x = p["wte.weight"][tokens] + p["wpe.weight"][:T]
    future = np.triu(np.ones((T, T), bool), 1)
    for i in range(cfg["n_layer"]):
        q, k, v = np.split(conv1d(ln(x, f"h.{i}.ln_1"), f"h.{i}.attn.c_attn"), 3, axis=-1)
        scores = heads(q) @ heads(k).transpose(0, 1, 3, 2) / np.sqrt(dh)
        scores = np.where(future, -np.inf, scores)
        w = np.exp(scores - scores.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        z = (w @ heads(v)).transpose(0, 2, 1, 3).reshape(B, T, d)
        x = x + conv1d(z, f"h.{i}.attn.c_proj")
        hidden = act(conv1d(ln(x, f"h.{i}.ln_2"), f"h.{i}.mlp.c_fc"))
        x = x + conv1d(hidden, f"h.{i}.mlp.c_proj")
    x = ln(x, "ln_f")
    return x @ p.get("lm_head.weight", p["wte.weight"]).T


def ours(model: GPT, tokens: np.ndarray) -> np.ndarray:
    logits, _ = model(tokens)
    return logits.numpy()


TOKENS = np.random.default_rng(1).integers(0, V, size=(3, NPOS))


# ------------------------------------------------------------------ mapping, no transformers
@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"tie_word_embeddings": False},
        {"n_inner": 48, "activation_function": "gelu", "layer_norm_epsilon": 1e-3},
        {"activation_function": "gelu_pytorch_tanh", "n_layer": 1},
    ],
    ids=["tied", "untied", "n_inner-gelu-eps", "pytorch_tanh"],
)
def test_hand_built_checkpoint_matches_reference(tmp_path, overrides):
    cfg = hf_config(**overrides)
    state = hf_state(cfg)
    model = from_pretrained(write_checkpoint(tmp_path, cfg, state))
    assert model.config.tie_weights == cfg["tie_word_embeddings"]
    assert model.config.d_ff == (cfg["n_inner"] or 4 * D)
    assert not model.training
    np.testing.assert_allclose(ours(model, TOKENS), reference_logits(state, cfg, TOKENS), atol=ATOL)


def test_keys_without_prefix_and_mask_buffers(tmp_path):
    """GPT2Model checkpoints have no ``transformer.`` prefix; old ones store the causal mask
    (``attn.bias``, ``attn.masked_bias``), which is not a weight."""
    cfg = hf_config()
    state = hf_state(cfg, prefix="")
    for i in range(L):
        state[f"h.{i}.attn.bias"] = np.tril(np.ones((1, 1, NPOS, NPOS), np.float32))
        state[f"h.{i}.attn.masked_bias"] = np.array(-1e4, np.float32)
    state["lm_head.weight"] = state["wte.weight"].copy()  # a tied copy is allowed
    model = from_pretrained(write_checkpoint(tmp_path, cfg, state))
    np.testing.assert_allclose(ours(model, TOKENS), reference_logits(state, cfg, TOKENS), atol=ATOL)


def test_qkv_and_output_reshapes_are_per_head(tmp_path):
    """Head h's query weights are columns h·d_head ... (h+1)·d_head of c_attn's first block."""
    cfg = hf_config()
    state = hf_state(cfg)
    model = from_pretrained(write_checkpoint(tmp_path, cfg, state))
    attn = model.blocks[1].attn
    W = state["transformer.h.1.attn.c_attn.weight"]
    b = state["transformer.h.1.attn.c_attn.bias"]
    dh = D // H
    for h in range(H):
        cols = slice(h * dh, (h + 1) * dh)
        np.testing.assert_array_equal(attn.W_Q.numpy()[h], W[:, cols])
        np.testing.assert_array_equal(attn.W_K.numpy()[h], W[:, D:][:, cols])
        np.testing.assert_array_equal(attn.W_V.numpy()[h], W[:, 2 * D :][:, cols])
        np.testing.assert_array_equal(attn.b_V.numpy()[h], b[2 * D :][cols])
        np.testing.assert_array_equal(
            attn.W_O.numpy()[h], state["transformer.h.1.attn.c_proj.weight"][cols]
        )


@pytest.mark.parametrize("tie", [True, False])
def test_save_then_load_round_trip(tmp_path, tie):
    shape = dict(vocab_size=V, block_size=NPOS, n_layer=L, n_head=H, d_model=D)
    model = GPT(GPTConfig(**shape, activation="gelu_tanh", tie_weights=tie))
    for p in model.parameters():  # make biases and gains non-trivial
        noise = np.random.default_rng(2).standard_normal(p.shape).astype(np.float32)
        p.data = p.data + tl.tensor(noise).data
    save_hf_gpt2(model, tmp_path)
    loaded = from_pretrained(tmp_path)
    assert loaded.config == model.config
    for (n1, p1), (n2, p2) in zip(model.named_parameters(), loaded.named_parameters(), strict=True):
        assert n1 == n2
        np.testing.assert_array_equal(p1.numpy(), p2.numpy())
    model.eval()
    np.testing.assert_array_equal(ours(model, TOKENS), ours(loaded, TOKENS))


def test_export_never_replaces_a_training_runs_config(tmp_path):
    """Exporting into a training run's folder wrote the Hugging Face config.json over the
    run's own (its model and training settings), after which --resume failed with a
    KeyError; now refused, the folder untouched. A folder holding an earlier export is
    written over as before."""
    model = GPT(GPTConfig(vocab_size=V, block_size=NPOS, n_layer=L, n_head=H, d_model=D))
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{"model": {}, "train": {}}')
    (run / "ckpt.safetensors").write_bytes(b"a run's checkpoint")
    with pytest.raises(HFCheckpointError, match="holds a training run"):
        save_hf_gpt2(model, run)
    assert (run / "config.json").read_text() == '{"model": {}, "train": {}}'
    assert sorted(p.name for p in run.iterdir()) == ["ckpt.safetensors", "config.json"]
    save_hf_gpt2(model, tmp_path / "export")
    save_hf_gpt2(model, tmp_path / "export")  # again, over the first export
    assert from_pretrained(tmp_path / "export").config == model.config


def test_load_weights_into_existing_model_and_from_file(tmp_path):
    cfg = hf_config()
    state = hf_state(cfg)
    write_checkpoint(tmp_path, cfg, state)
    model = GPT(config_from_hf(cfg)).eval()
    assert load_gpt2_weights(model, tmp_path / "model.safetensors") is model
    np.testing.assert_allclose(ours(model, TOKENS), reference_logits(state, cfg, TOKENS), atol=ATOL)


def test_sharded_checkpoint(tmp_path):
    cfg = hf_config()
    state = hf_state(cfg)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    keys = sorted(state)
    shards = {
        "model-00001-of-00002.safetensors": keys[:10],
        "model-00002-of-00002.safetensors": keys[10:],
    }
    weight_map = {}
    for name, ks in shards.items():
        serialization.save({k: state[k] for k in ks}, tmp_path / name)
        weight_map |= dict.fromkeys(ks, name)
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    model = from_pretrained(tmp_path)
    np.testing.assert_allclose(ours(model, TOKENS), reference_logits(state, cfg, TOKENS), atol=ATOL)


def test_float16_weights_load_as_float32(tmp_path):
    cfg = hf_config()
    state = {k: v.astype(np.float16) for k, v in hf_state(cfg).items()}
    model = from_pretrained(write_checkpoint(tmp_path, cfg, state))
    assert model.embed.W.dtype == np.float32
    np.testing.assert_allclose(ours(model, TOKENS), reference_logits(state, cfg, TOKENS), atol=1e-4)


# ------------------------------------------------------------------ errors
def test_missing_directory_and_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        from_pretrained(tmp_path / "nowhere")
    (tmp_path / "config.json").write_text(json.dumps(hf_config()))
    with pytest.raises(FileNotFoundError, match=r"model\.safetensors.*config\.json"):
        from_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(FileNotFoundError, match="never unpickles"):
        from_pretrained(tmp_path)
    (tmp_path / "config.json").unlink()
    with pytest.raises(FileNotFoundError, match=r"config\.json"):
        from_pretrained(tmp_path)


def test_corrupt_files_name_the_file(tmp_path):
    cfg = hf_config()
    ckpt = write_checkpoint(tmp_path, cfg, hf_state(cfg))
    weights = ckpt / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-100])  # truncated
    with pytest.raises(SerializationError, match=r"model\.safetensors.*truncated"):
        from_pretrained(ckpt)
    weights.write_bytes(b"\x00")
    with pytest.raises(SerializationError, match=r"model\.safetensors"):
        from_pretrained(ckpt)
    (ckpt / "config.json").write_text("{not json")
    with pytest.raises(HFCheckpointError, match=r"config\.json: not valid JSON"):
        from_pretrained(ckpt)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"model_type": "bert"}, "model_type='bert' is not supported"),
        ({"activation_function": "quick_gelu"}, "activation_function='quick_gelu'"),
        ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx"),
        ({"add_cross_attention": True}, "add_cross_attention"),
        ({"n_head": 5}, "n_head=5: must divide d_model"),
        ({"n_embd": None}, "'n_embd' is missing"),
    ],
)
def test_unsupported_config_names_file_and_field(tmp_path, overrides, message):
    cfg = hf_config(**overrides)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(HFCheckpointError, match=r"config\.json: .*" + message):
        from_pretrained(tmp_path)


def test_missing_tensor_names_file_and_key(tmp_path):
    cfg = hf_config()
    state = hf_state(cfg)
    del state["transformer.h.1.mlp.c_fc.bias"]
    write_checkpoint(tmp_path, cfg, state)
    with pytest.raises(
        HFCheckpointError, match=r"model\.safetensors: tensor 'h\.1\.mlp\.c_fc\.bias'"
    ):
        from_pretrained(tmp_path)


def test_shape_mismatch_names_file_key_and_shapes(tmp_path):
    cfg = hf_config()
    state = hf_state(cfg)
    write_checkpoint(tmp_path, hf_config(n_positions=8), state)  # config disagrees with wpe
    with pytest.raises(
        HFCheckpointError,
        match=r"model\.safetensors: tensor 'transformer\.wpe\.weight' "
        r"has shape \(16, 32\).*\(8, 32\)",
    ):
        from_pretrained(tmp_path)


def test_untied_head_missing_or_differing(tmp_path):
    cfg = hf_config(tie_word_embeddings=False)
    state = hf_state(hf_config())  # no lm_head.weight
    write_checkpoint(tmp_path, cfg, state)
    with pytest.raises(HFCheckpointError, match="'lm_head.weight'"):
        from_pretrained(tmp_path)
    state["lm_head.weight"] = state["transformer.wte.weight"] + 1
    write_checkpoint(tmp_path, hf_config(), state)  # tied config, but the head differs
    with pytest.raises(HFCheckpointError, match="differs from wte.weight"):
        from_pretrained(tmp_path)


def test_unknown_tensors_strict(tmp_path):
    cfg = hf_config()
    state = hf_state(cfg) | {"score.weight": np.zeros((2, D), np.float32)}
    write_checkpoint(tmp_path, cfg, state)
    with pytest.raises(HFCheckpointError, match="'score.weight'.*strict=False"):
        from_pretrained(tmp_path)
    from_pretrained(tmp_path, strict=False)


# What GPT2Config gives a field config.json leaves out (the Hub's own gpt2/config.json has no
# tie_word_embeddings): tied, gelu_new, layer_norm_epsilon 1e-5, n_inner 4 * n_embd.
HF_GPT2_DEFAULTS = {"tie_weights": True, "activation": "gelu_tanh", "norm_eps": 1e-5, "d_ff": 4 * D}


def _minimal_config() -> dict:
    shape = ("model_type", "n_embd", "n_layer", "n_head", "n_positions", "vocab_size")
    return {k: hf_config()[k] for k in shape}


def test_fields_left_out_of_config_json_take_gpt2s_defaults(tmp_path):
    cfg = config_from_hf(_minimal_config())
    assert {k: getattr(cfg, k) for k in HF_GPT2_DEFAULTS} == HF_GPT2_DEFAULTS
    # and the tied checkpoint of that config loads (no lm_head.weight asked for)
    state = hf_state(hf_config())
    model = from_pretrained(write_checkpoint(tmp_path, _minimal_config(), state))
    np.testing.assert_allclose(
        ours(model, TOKENS), reference_logits(state, hf_config(), TOKENS), atol=ATOL
    )


def test_the_defaults_are_transformers_own():
    transformers = pytest.importorskip(
        "transformers", reason="transformers is a test-only extra", exc_type=ImportError
    )
    ref = transformers.GPT2Config(
        **{k: v for k, v in _minimal_config().items() if k != "model_type"}
    )
    assert ref.tie_word_embeddings == HF_GPT2_DEFAULTS["tie_weights"]
    assert ref.activation_function == "gelu_new"
    assert ref.layer_norm_epsilon == HF_GPT2_DEFAULTS["norm_eps"]
    assert (ref.n_inner or 4 * ref.n_embd) == HF_GPT2_DEFAULTS["d_ff"]


def test_save_rejects_non_gpt2_shapes(tmp_path):
    model = GPT(GPTConfig(vocab_size=V, block_size=NPOS, n_layer=1, d_model=D, norm="rmsnorm"))
    with pytest.raises(ValueError, match="norm='rmsnorm'"):
        save_hf_gpt2(model, tmp_path)


# ------------------------------------------------------------------ against transformers
@pytest.fixture(scope="module")
def transformers_gpt2():
    transformers = pytest.importorskip(
        "transformers", reason="transformers is a test-only extra", exc_type=ImportError
    )
    torch = pytest.importorskip("torch")
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    def make(seed: int = 0, **overrides):
        kw = dict(n_embd=D, n_layer=L, n_head=H, n_positions=NPOS, vocab_size=V)
        kw |= dict(bos_token_id=0, eos_token_id=0) | overrides
        torch.manual_seed(seed)
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**kw))
        with torch.no_grad():  # fresh HF init has zero biases and unit gains: perturb all
            for p in model.parameters():
                p.add_(0.3 * torch.randn_like(p))
        return model.eval().float()

    def logits(model, tokens):
        with torch.no_grad():
            return model(torch.from_numpy(tokens)).logits.numpy()

    return transformers, make, logits


@pytest.mark.parametrize(
    "overrides",
    [{}, {"tie_word_embeddings": False}, {"n_inner": 40, "activation_function": "gelu"}],
    ids=["tied", "untied", "n_inner-gelu"],
)
def test_logits_match_transformers(tmp_path, transformers_gpt2, overrides):
    _, make, logits = transformers_gpt2
    ref = make(**overrides)
    ref.save_pretrained(tmp_path, safe_serialization=True)
    model = from_pretrained(tmp_path)
    assert model.config.tie_weights == ref.config.tie_word_embeddings
    np.testing.assert_allclose(ours(model, TOKENS), logits(ref, TOKENS), atol=ATOL, rtol=1e-5)


def test_gpt2model_checkpoint_without_prefix(tmp_path, transformers_gpt2):
    """A bare ``GPT2Model`` (no ``transformer.`` prefix, no head) loads with the tied head."""
    _, make, logits = transformers_gpt2
    ref = make(seed=1)
    ref.transformer.save_pretrained(tmp_path, safe_serialization=True)
    keys = serialization.load(tmp_path / "model.safetensors")
    assert not any(k.startswith("transformer.") for k in keys)
    model = from_pretrained(tmp_path)
    np.testing.assert_allclose(ours(model, TOKENS), logits(ref, TOKENS), atol=ATOL, rtol=1e-5)


@pytest.mark.parametrize("tie", [True, False])
def test_transformers_reads_what_we_write(tmp_path, transformers_gpt2, tie):
    transformers, make, logits = transformers_gpt2
    ref = make(seed=2, tie_word_embeddings=tie)
    ref.save_pretrained(tmp_path / "hf", safe_serialization=True)
    model = from_pretrained(tmp_path / "hf")
    save_hf_gpt2(model, tmp_path / "ours")
    back = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "ours").eval()
    np.testing.assert_allclose(logits(back, TOKENS), logits(ref, TOKENS), atol=1e-6, rtol=0)
