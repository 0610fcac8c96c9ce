"""Hugging Face checkpoints: read a local ``save_pretrained`` directory into
:class:`gpt.model.GPT` (GPT-2 here; Llama, Qwen2 and Mistral through :mod:`gpt.hf_llama`),
and write a GPT-2 one back.

A checkpoint directory holds ``config.json`` and ``model.safetensors`` (or a sharded
``model.safetensors.index.json`` with its shards). Nothing here touches the network, unpickles
a file, or imports torch: the weights are read by :mod:`nn.serialization`.

How the names map (HF GPT-2 uses ``Conv1D`` layers, whose weights are stored (in, out), the
same orientation as our ``x @ W``; so every matrix is a reshape, never a transpose)::

    wte.weight                 (V, d)        -> embed.W            (V, d)
    wpe.weight                 (n_pos, d)    -> pos.W_pos          (n_pos, d)
    h.{i}.ln_1.weight / .bias  (d,)          -> blocks.{i}.ln1.w / .b
    h.{i}.attn.c_attn.weight   (d, 3d)       -> blocks.{i}.attn.W_q, W_k, W_v (d, H, d_head)
    h.{i}.attn.c_attn.bias     (3d,)         -> blocks.{i}.attn.b_q, b_k, b_v (d,)
    h.{i}.attn.c_proj.weight   (d, d)        -> blocks.{i}.attn.W_O   (H, d_head, d)
    h.{i}.attn.c_proj.bias     (d,)          -> blocks.{i}.attn.b_O
    h.{i}.ln_2.weight / .bias  (d,)          -> blocks.{i}.ln2.w / .b
    h.{i}.mlp.c_fc.weight      (d, d_ff)     -> blocks.{i}.mlp.W_in  (and .bias -> b_in)
    h.{i}.mlp.c_proj.weight    (d_ff, d)     -> blocks.{i}.mlp.W_out (and .bias -> b_out)
    ln_f.weight / .bias        (d,)          -> ln_final.w / .b
    lm_head.weight             (V, d)        -> W_U (d, V), transposed; only when untied

``c_attn``'s 3d output columns are [queries | keys | values], each d wide with the heads
side by side: the row-major layout of our W_q, W_k, W_v (d, H, d_head) put next to each
other. Keys may carry a ``transformer.`` prefix (``GPT2LMHeadModel``) or not (``GPT2Model``);
the attention buffers ``attn.bias`` / ``attn.masked_bias`` that old checkpoints store (the
causal mask) are ignored.

    model = gpt.hf.from_pretrained("path/to/gpt2")       # config.json + model.safetensors
    model = gpt.hf.from_pretrained("path/to/llama")      # LlamaForCausalLM, Qwen2, Mistral
    gpt.hf.save_hf_gpt2(model, "out/")                   # loadable by transformers too
    gpt.hf.save_hf_llama(model, "out/")                  # a Llama-shaped GPT, likewise

The model is built with :func:`nn.init.empty_parameters` (no random initialisation that the
checkpoint would overwrite) and every parameter is then loaded from the file.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np

from gpt import hf_llama
from gpt.config import ConfigError, ConfigNote, GPTConfig
from gpt.model import GPT
from nn import serialization
from nn.init import empty_parameters
from tensorlab.backend import to_device

__all__ = [
    "HFCheckpointError",
    "config_from_hf",
    "config_to_hf",
    "from_pretrained",
    "load_gpt2_weights",
    "load_hf_state",
    "convert_hf_state",
    "save_hf_gpt2",
    "save_hf_llama",
    "tokenizer_from_pretrained",
]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
INDEX_NAME = "model.safetensors.index.json"

# HF activation_function -> our activation name. gelu_new, gelu_pytorch_tanh and gelu_fast are
# the same tanh approximation written three ways.
ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
_TO_HF_ACTIVATION = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}

# Non-persistent buffers some GPT-2 checkpoints carry: the causal mask and its fill value.
_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")


class HFCheckpointError(ValueError):
    """A Hugging Face checkpoint we cannot load; the message names the file and the key."""

    def __init__(self, path, what: str):
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {what}")


# ------------------------------------------------------------------ config
def _read_json(path: Path) -> dict:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (a Hugging Face checkpoint needs one)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise HFCheckpointError(path, f"not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise HFCheckpointError(path, f"expected a JSON object, got a {type(data).__name__}")
    return data


def _model_type(hf: dict, path) -> str:
    model_type = hf.get("model_type", "gpt2")
    known = ("gpt2", *hf_llama.ARCHITECTURES)
    if model_type not in known:
        raise HFCheckpointError(
            path,
            f"model_type={model_type!r} is not supported (supported: {', '.join(known)})",
        )
    architectures = hf.get("architectures") or []
    wanted = "GPT2LMHeadModel" if model_type == "gpt2" else hf_llama.ARCHITECTURES[model_type]
    allowed = (wanted, "GPT2Model") if model_type == "gpt2" else (wanted,)
    for arch in architectures:
        if arch not in allowed:
            raise HFCheckpointError(
                path, f"architectures={architectures!r}: only {wanted} loads for {model_type}"
            )
    return model_type


def config_from_hf(hf: dict, path: str | os.PathLike = CONFIG_NAME) -> GPTConfig:
    """The :class:`GPTConfig` of a Hugging Face ``config.json`` (already parsed): GPT-2, or a
    Llama, Qwen2 or Mistral causal LM (:func:`gpt.hf_llama.config_from_llama`).

    Dropout is set to 0 (the checkpoint is loaded for inference; HF's three dropout rates
    ``embd_pdrop``/``attn_pdrop``/``resid_pdrop`` have no single equivalent). Raises
    :class:`HFCheckpointError` naming ``path`` and the field for anything the checkpoint does
    not do the way :class:`gpt.model.GPT` does.
    """
    model_type = _model_type(hf, path)

    def field(name, *fallbacks, default=None):
        for key in (name, *fallbacks):
            if hf.get(key) is not None:
                return hf[key]
        if default is not None:
            return default
        raise HFCheckpointError(path, f"config field {name!r} is missing")

    if model_type != "gpt2":
        return hf_llama.config_from_llama(hf, path, field, HFCheckpointError)

    act = field("activation_function", default="gelu_new")
    if act not in ACTIVATIONS:
        raise HFCheckpointError(
            path,
            f"activation_function={act!r} is not supported (known: {', '.join(ACTIVATIONS)})",
        )
    unsupported = {
        "scale_attn_weights": (True, "attention scores are always scaled by 1/sqrt(d_head)"),
        "scale_attn_by_inverse_layer_idx": (False, "no per-layer score scaling"),
        "add_cross_attention": (False, "a decoder-only GPT has no cross-attention"),
    }
    for name, (wanted, why) in unsupported.items():
        if name in hf and bool(hf[name]) != wanted:
            raise HFCheckpointError(
                path, f"config field {name}={hf[name]!r} is unsupported ({why})"
            )
    d_model = field("n_embd", "hidden_size")
    try:
        with warnings.catch_warnings():  # the shape is the checkpoint's, notes are moot
            warnings.simplefilter("ignore", ConfigNote)
            return GPTConfig(
                vocab_size=field("vocab_size"),
                block_size=field("n_positions", "n_ctx"),
                n_layer=field("n_layer", "num_hidden_layers"),
                n_head=field("n_head", "num_attention_heads"),
                d_model=d_model,
                d_ff=hf.get("n_inner") or None,  # None: 4 * d_model, as in HF
                activation=ACTIVATIONS[act],
                norm="layernorm",
                norm_placement="pre",
                norm_eps=float(field("layer_norm_epsilon", default=1e-5)),
                positional="learned",
                bias=True,
                dropout=0.0,
                tie_weights=bool(hf.get("tie_word_embeddings", True)),
                final_norm=True,
                init_std=float(hf.get("initializer_range", 0.02)),
            )
    except ConfigError as e:
        raise HFCheckpointError(path, f"invalid GPT-2 config ({e})") from None


def config_to_hf(cfg: GPTConfig) -> dict:
    """The Hugging Face ``config.json`` of a GPT-2-shaped :class:`GPTConfig` (the inverse of
    :func:`config_from_hf`). Raises ValueError naming what GPT-2 cannot express."""
    problems = []
    for name, wanted in [
        ("norm", "layernorm"),
        ("norm_placement", "pre"),
        ("positional", "learned"),
        ("bias", True),
        ("parallel", False),
        ("attn_only", False),
        ("final_norm", True),
    ]:
        if getattr(cfg, name) != wanted:
            problems.append(f"{name}={getattr(cfg, name)!r} (GPT-2 has {wanted!r})")
    if cfg.activation not in _TO_HF_ACTIVATION:
        problems.append(f"activation={cfg.activation!r}")
    if cfg.n_head * cfg.d_head != cfg.d_model:
        problems.append(f"n_head * d_head = {cfg.n_head * cfg.d_head} != d_model={cfg.d_model}")
    if problems:
        raise ValueError("this model is not GPT-2-shaped: " + "; ".join(problems))
    return {
        "architectures": ["GPT2LMHeadModel"],
        "model_type": "gpt2",
        "vocab_size": cfg.vocab_size,
        "n_positions": cfg.block_size,
        "n_embd": cfg.d_model,
        "n_layer": cfg.n_layer,
        "n_head": cfg.n_head,
        "n_inner": None if cfg.d_ff == 4 * cfg.d_model else cfg.d_ff,
        "activation_function": _TO_HF_ACTIVATION[cfg.activation],
        "layer_norm_epsilon": cfg.norm_eps,
        "initializer_range": cfg.init_std,
        "tie_word_embeddings": cfg.tie_weights,
        "resid_pdrop": cfg.dropout,
        "embd_pdrop": cfg.dropout,
        "attn_pdrop": cfg.dropout,
        "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False,
        "reorder_and_upcast_attn": False,
        "use_cache": True,
    }


# ------------------------------------------------------------------ weights
def _weight_files(path: Path) -> list[Path]:
    """The safetensors file(s) of a checkpoint directory (or the file itself)."""
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such checkpoint directory or file")
    if (path / WEIGHTS_NAME).is_file():
        return [path / WEIGHTS_NAME]
    if (path / INDEX_NAME).is_file():
        index = _read_json(path / INDEX_NAME)
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise HFCheckpointError(path / INDEX_NAME, "no 'weight_map' of tensor -> shard file")
        shards = [path / name for name in dict.fromkeys(weight_map.values())]
        for shard in shards:
            if not shard.is_file():
                raise FileNotFoundError(f"{shard}: shard listed in {path / INDEX_NAME} is missing")
        return shards
    present = sorted(p.name for p in path.iterdir())
    hint = ""
    if any(name.endswith((".bin", ".pt", ".pth", ".ckpt")) for name in present):
        hint = (
            "; it holds only pickled PyTorch weights, which tensorlab never unpickles: "
            "convert them once with transformers (model.save_pretrained(dir, "
            "safe_serialization=True))"
        )
    raise FileNotFoundError(
        f"{path / WEIGHTS_NAME}: no such file (the directory has {', '.join(present) or 'nothing'})"
        + hint
    )


def load_hf_state(path: str | os.PathLike) -> tuple[dict[str, np.ndarray], dict[str, Path]]:
    """Every tensor of a checkpoint (directory or ``.safetensors`` file), and the file each
    came from. Corrupt files raise :class:`nn.serialization.SerializationError` naming them."""
    state: dict[str, np.ndarray] = {}
    source: dict[str, Path] = {}
    for file in _weight_files(Path(path)):
        loaded = serialization.load(file)
        if not isinstance(loaded, dict) or not all(
            isinstance(v, np.ndarray) for v in loaded.values()
        ):
            raise HFCheckpointError(file, "not a flat name -> tensor safetensors file")
        for key, array in loaded.items():
            state[key] = array
            source[key] = file
    return state, source


def _strip_prefix(key: str) -> str:
    return key[len("transformer.") :] if key.startswith("transformer.") else key


def _is_float(dtype: np.dtype) -> bool:
    """float16/32/64, or bfloat16 (an ``ml_dtypes`` type NumPy files under kind 'V')."""
    return dtype.kind == "f" or dtype.name == "bfloat16"


def convert_hf_state(
    state: dict[str, np.ndarray],
    cfg: GPTConfig,
    source: str | os.PathLike | dict[str, Path] = WEIGHTS_NAME,
    strict: bool = True,
    model_type: str = "gpt2",
) -> dict[str, np.ndarray]:
    """Hugging Face tensors of a ``model_type`` checkpoint -> a ``GPT(cfg).state_dict()``-shaped
    dict (float32; float16 and bfloat16 tensors are widened exactly).

    ``source`` names the file (or maps each key to its file) for error messages. With
    ``strict`` a tensor this mapping does not use raises (it would mean another architecture
    or a head we drop); GPT-2's causal-mask buffers and rotary ``inv_freq`` buffers are always
    ignored.
    """
    name = "a GPT-2" if model_type == "gpt2" else f"a {model_type}"

    def where(key):
        return source.get(key, WEIGHTS_NAME) if isinstance(source, dict) else source

    hf = {}
    for key, array in state.items():
        short = _strip_prefix(key) if model_type == "gpt2" else key
        if short.endswith(_IGNORED_SUFFIXES) and short.startswith("h."):
            continue
        if short.endswith(".rotary_emb.inv_freq"):  # a table HF recomputes from the config
            continue
        hf[short] = (key, array)
    used: set[str] = set()
    d, H, f, V = cfg.d_model, cfg.n_head, cfg.d_ff, cfg.vocab_size

    def take(short: str, shape: tuple[int, ...]) -> np.ndarray:
        if short not in hf:
            path = source if not isinstance(source, dict) else next(iter(source.values()), "")
            also = f" (or 'transformer.{short}')" if model_type == "gpt2" else ""
            raise HFCheckpointError(
                path,
                f"tensor {short!r}{also} is missing; {name} checkpoint "
                f"with n_layer={cfg.n_layer} needs it",
            )
        key, array = hf[short]
        if tuple(array.shape) != shape:
            raise HFCheckpointError(
                where(key),
                f"tensor {key!r} has shape {tuple(array.shape)}, but config.json "
                f"(d_model={d}, n_head={H}, n_kv_head={cfg.n_kv_head}, d_head={cfg.d_head}, "
                f"d_ff={f}, vocab_size={V}, block_size={cfg.block_size}) needs {shape}",
            )
        if not _is_float(array.dtype):
            raise HFCheckpointError(where(key), f"tensor {key!r} has dtype {array.dtype}")
        used.add(short)
        return np.asarray(array, dtype=np.float32)

    if model_type != "gpt2":
        out = hf_llama.convert_llama_state(take, cfg, model_type)
        if cfg.tie_weights and "lm_head.weight" in hf:
            _check_tied(hf, "lm_head.weight", out["embed.W"], used, where, "model.embed_tokens")
        return _refuse_unused(hf, used, strict, where, out)

    out = {
        "embed.W": take("wte.weight", (V, d)),
        "pos.W_pos": take("wpe.weight", (cfg.block_size, d)),
    }
    for i in range(cfg.n_layer):
        h, b = f"h.{i}.", f"blocks.{i}."
        out[b + "ln1.w"] = take(h + "ln_1.weight", (d,))
        out[b + "ln1.b"] = take(h + "ln_1.bias", (d,))
        W = take(h + "attn.c_attn.weight", (d, 3 * d))
        bias = take(h + "attn.c_attn.bias", (3 * d,))
        for j, name in enumerate("qkv"):
            out[b + f"attn.W_{name}"] = W[:, j * d : (j + 1) * d].reshape(d, H, d // H)
            out[b + f"attn.b_{name}"] = bias[j * d : (j + 1) * d]
        out[b + "attn.W_O"] = take(h + "attn.c_proj.weight", (d, d)).reshape(H, d // H, d)
        out[b + "attn.b_O"] = take(h + "attn.c_proj.bias", (d,))
        out[b + "ln2.w"] = take(h + "ln_2.weight", (d,))
        out[b + "ln2.b"] = take(h + "ln_2.bias", (d,))
        out[b + "mlp.W_in"] = take(h + "mlp.c_fc.weight", (d, f))
        out[b + "mlp.b_in"] = take(h + "mlp.c_fc.bias", (f,))
        out[b + "mlp.W_out"] = take(h + "mlp.c_proj.weight", (f, d))
        out[b + "mlp.b_out"] = take(h + "mlp.c_proj.bias", (d,))
    out["ln_final.w"] = take("ln_f.weight", (d,))
    out["ln_final.b"] = take("ln_f.bias", (d,))

    if cfg.tie_weights:
        if "lm_head.weight" in hf:
            _check_tied(hf, "lm_head.weight", out["embed.W"], used, where, "wte")
    else:
        out["W_U"] = np.ascontiguousarray(take("lm_head.weight", (V, d)).T)
    return _refuse_unused(hf, used, strict, where, out)


def _check_tied(hf, head_name, embed, used, where, embed_name) -> None:
    """A stored unembedding of a tied model must be a redundant copy of the embedding."""
    key, head = hf[head_name]
    used.add(head_name)
    if head.shape != embed.shape or not np.array_equal(np.asarray(head, np.float32), embed):
        raise HFCheckpointError(
            where(key),
            f"tensor {key!r} differs from {embed_name}.weight, but config.json says "
            "tie_word_embeddings=true",
        )


def _refuse_unused(hf, used, strict, where, out):
    unused = sorted(hf[s][0] for s in set(hf) - used)
    if strict and unused:
        shown = ", ".join(map(repr, unused[:8])) + (" ..." if len(unused) > 8 else "")
        raise HFCheckpointError(
            where(unused[0]),
            f"{len(unused)} tensor(s) this mapping does not use: {shown} "
            "(another architecture or head? pass strict=False to ignore them)",
        )
    return out


def load_gpt2_weights(model: GPT, path: str | os.PathLike, strict: bool = True) -> GPT:
    """Copy a Hugging Face GPT-2 checkpoint's weights (directory or ``.safetensors`` file)
    into ``model``, whose config must have the checkpoint's shapes. Returns ``model``."""
    state, source = load_hf_state(path)
    converted = convert_hf_state(state, model.config, source, strict=strict)
    model.load_state_dict(converted)
    return model


def from_pretrained(path: str | os.PathLike, strict: bool = True) -> GPT:
    """A :class:`gpt.model.GPT` with the config and weights of a local Hugging Face checkpoint
    directory (``config.json`` + ``model.safetensors``, or sharded with
    ``model.safetensors.index.json``): ``GPT2LMHeadModel``, ``LlamaForCausalLM``,
    ``Qwen2ForCausalLM`` or ``MistralForCausalLM``, float32, float16 or bfloat16 (computed in
    float32). In eval mode. Anything else is refused by name."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a directory (expected config.json + {WEIGHTS_NAME})")
    hf = _read_json(path / CONFIG_NAME)
    cfg = config_from_hf(hf, path / CONFIG_NAME)
    with empty_parameters():  # every parameter is about to be loaded
        model = GPT(cfg)
    state, source = load_hf_state(path)
    model_type = _model_type(hf, path / CONFIG_NAME)
    # the converted arrays are fresh (read from the files just now): taken as they are
    model.load_state_dict(convert_hf_state(state, cfg, source, strict, model_type), assign=True)
    return model.eval()


# ------------------------------------------------------------------ writing
def save_hf_gpt2(model: GPT, path: str | os.PathLike) -> None:
    """Write ``model`` as a Hugging Face GPT-2 checkpoint directory (``config.json`` +
    ``model.safetensors`` with ``transformer.``-prefixed keys), which both
    :func:`from_pretrained` and ``transformers.GPT2LMHeadModel.from_pretrained`` read."""
    cfg = model.config
    hf_config = config_to_hf(cfg)
    d, f = cfg.d_model, cfg.d_ff
    sd = {k: to_device(p.data, "cpu") for k, p in model.named_parameters()}
    arrays = {"wte.weight": sd["embed.W"], "wpe.weight": sd["pos.W_pos"]}
    for i in range(cfg.n_layer):
        h, b = f"h.{i}.", f"blocks.{i}."
        arrays[h + "ln_1.weight"] = sd[b + "ln1.w"]
        arrays[h + "ln_1.bias"] = sd[b + "ln1.b"]
        qkv = [b + f"attn.{{}}_{name}" for name in "qkv"]
        Ws = [sd[n.format("W")].reshape(d, d) for n in qkv]
        arrays[h + "attn.c_attn.weight"] = np.concatenate(Ws, 1)
        arrays[h + "attn.c_attn.bias"] = np.concatenate([sd[n.format("b")] for n in qkv])
        arrays[h + "attn.c_proj.weight"] = sd[b + "attn.W_O"].reshape(d, d)
        arrays[h + "attn.c_proj.bias"] = sd[b + "attn.b_O"]
        arrays[h + "ln_2.weight"] = sd[b + "ln2.w"]
        arrays[h + "ln_2.bias"] = sd[b + "ln2.b"]
        arrays[h + "mlp.c_fc.weight"] = sd[b + "mlp.W_in"].reshape(d, f)
        arrays[h + "mlp.c_fc.bias"] = sd[b + "mlp.b_in"]
        arrays[h + "mlp.c_proj.weight"] = sd[b + "mlp.W_out"].reshape(f, d)
        arrays[h + "mlp.c_proj.bias"] = sd[b + "mlp.b_out"]
    arrays["ln_f.weight"] = sd["ln_final.w"]
    arrays["ln_f.bias"] = sd["ln_final.b"]
    arrays = {"transformer." + k: v for k, v in arrays.items()}
    if not cfg.tie_weights:
        arrays["lm_head.weight"] = sd["W_U"].T
    _write_folder(path, arrays, hf_config)


def save_hf_llama(model: GPT, path: str | os.PathLike) -> None:
    """Write a Llama-shaped ``model`` (RMSNorm, rotate-half RoPE, SwiGLU, pre-norm; any
    ``n_kv_head``) as a Hugging Face ``LlamaForCausalLM`` folder, or ``MistralForCausalLM`` with
    a sliding window, or ``Qwen2ForCausalLM`` with q/k/v-only biases (float32 safetensors and
    ``config.json``), which both :func:`from_pretrained` and ``transformers`` read."""
    cfg = model.config
    hf_config = hf_llama.config_to_llama(cfg)
    sd = {k: to_device(p.data, "cpu") for k, p in model.named_parameters()}
    _write_folder(path, hf_llama.llama_state_to_hf(sd, cfg), hf_config)


def _write_folder(path, arrays: dict[str, np.ndarray], hf_config: dict) -> None:
    """``model.safetensors`` (float32, contiguous) and ``config.json`` in ``path``, each
    written atomically."""
    from gpt.run_folder import RunFolder

    arrays = {k: np.ascontiguousarray(v, np.float32) for k, v in arrays.items()}
    out = Path(path)
    run = RunFolder(out)
    if run.ckpt.exists() or run.log.exists():  # its config.json is the run's, not ours
        raise HFCheckpointError(
            out,
            "holds a training run, whose config.json this would replace; export into "
            "another folder",
        )
    out.mkdir(parents=True, exist_ok=True)
    # transformers insists on a "format" entry in the metadata
    serialization.atomic_write(
        out / WEIGHTS_NAME,
        lambda fh: serialization._write_safetensors(fh, arrays, {"format": "pt"}),
    )
    text = json.dumps(hf_config, indent=2) + "\n"
    serialization.atomic_write(out / CONFIG_NAME, lambda fh: fh.write(text.encode("utf-8")))


# ------------------------------------------------------------------ tokenizer
def tokenizer_from_pretrained(path: str | os.PathLike):
    """The tokenizer of a Hugging Face checkpoint directory: ``tokenizer.json`` if present,
    else GPT-2's ``vocab.json`` + ``merges.txt``."""
    from gpt.tokenizers import load_gpt2, load_hf

    path = Path(path)
    if (path / "tokenizer.json").is_file():
        return load_hf(path / "tokenizer.json")
    if (path / "vocab.json").is_file() and (path / "merges.txt").is_file():
        return load_gpt2(path / "vocab.json", path / "merges.txt")
    raise FileNotFoundError(f"{path}: no tokenizer.json, and no vocab.json + merges.txt")
