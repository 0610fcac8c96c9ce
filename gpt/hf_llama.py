"""Hugging Face Llama-family checkpoints (``LlamaForCausalLM``, ``Qwen2ForCausalLM``,
``MistralForCausalLM``) as a :class:`gpt.model.GPT`: the config and the names of the weights.

The three share one shape: pre-norm RMSNorm blocks, rotary positions in the "rotate half"
layout, grouped-query attention, a SwiGLU MLP, no positional table, and usually an untied
unembedding. They differ in small switches: Qwen2 puts biases on q, k and v only, Llama may
put them on all four projections (``attention_bias``), Mistral attends over a sliding window.

How the names map (HF stores ``nn.Linear`` weights as (out, in), we keep ``x @ W`` with
W (in, out): every matrix is a transpose and then a reshape)::

    model.embed_tokens.weight            (V, d)         -> embed.W            (V, d)
    model.layers.{i}.input_layernorm     (d,)           -> blocks.{i}.ln1.w
    ...self_attn.q_proj.weight           (H·d_h, d)     -> blocks.{i}.attn.W_q  (d, H, d_h)
    ...self_attn.k_proj / v_proj.weight  (H_kv·d_h, d)  -> blocks.{i}.attn.W_k, W_v (d, H_kv, d_h)
    ...self_attn.{q,k,v}_proj.bias       (·d_h,)        -> blocks.{i}.attn.b_q, b_k, b_v
    ...self_attn.o_proj.weight           (d, H·d_h)     -> blocks.{i}.attn.W_O  (H, d_h, d)
    ...post_attention_layernorm          (d,)           -> blocks.{i}.ln2.w
    ...mlp.gate_proj.weight              (d_ff, d)      -> blocks.{i}.mlp.W_gate (d, d_ff)
    ...mlp.up_proj.weight                (d_ff, d)      -> blocks.{i}.mlp.W_in   (d, d_ff)
    ...mlp.down_proj.weight              (d, d_ff)      -> blocks.{i}.mlp.W_out  (d_ff, d)
    model.norm.weight                    (d,)           -> ln_final.w
    lm_head.weight                       (V, d)         -> W_U (d, V); absent when tied

The MLP is down(silu(gate(x)) ⊙ up(x)), which is :class:`nn.FeedForward`'s gated form with
W_gate = gateᵀ and W_in = upᵀ. Rotary embeddings pair dimension i with i + d_h/2 in these
checkpoints (``rope_layout="half"``), so the q and k weights load as they are, with no
permutation of their rows.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from gpt.config import ConfigError, ConfigNote, GPTConfig
from nn.embedding import ROPE_SCALINGS

ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "mistral": "MistralForCausalLM",
}


def config_from_llama(hf: dict, path: str | os.PathLike, field, error) -> GPTConfig:
    """The :class:`GPTConfig` of a Llama, Qwen2 or Mistral ``config.json`` (parsed).
    ``field(name, *fallbacks, default=None)`` reads a field (refusing a missing one by name)
    and ``error(path, message)`` makes the exception for a field we cannot follow."""
    model_type = hf.get("model_type")

    act = field("hidden_act", default="silu")
    if act not in ("silu", "swish"):
        raise error(path, f"hidden_act={act!r} is not supported (a {model_type} MLP is SwiGLU)")
    attention_bias = bool(hf.get("attention_bias", False))
    mlp_bias = bool(hf.get("mlp_bias", False))
    if model_type == "qwen2":  # q, k, v biases and nothing else
        bias, qkv_bias = False, True
    elif attention_bias != mlp_bias:
        raise error(
            path,
            f"attention_bias={attention_bias} with mlp_bias={mlp_bias} is not supported "
            "(tensorlab's bias switch covers the attention output and the MLP together)",
        )
    else:
        bias = qkv_bias = attention_bias
    window = None
    if model_type == "mistral":
        window = hf.get("sliding_window")
    elif model_type == "qwen2" and hf.get("use_sliding_window"):
        raise error(
            path,
            "use_sliding_window=true is not supported (Qwen2 slides only in some layers)",
        )
    if hf.get("layer_types") and any(t != "full_attention" for t in hf["layer_types"]):
        if not (model_type == "mistral" and set(hf["layer_types"]) == {"sliding_attention"}):
            raise error(path, f"layer_types={hf['layer_types']!r}: per-layer kinds unsupported")
    theta, scaling = _rope(hf, path, error)
    d_model, n_head = field("hidden_size"), field("num_attention_heads")
    try:
        with warnings.catch_warnings():  # the shape is the checkpoint's, notes are moot
            warnings.simplefilter("ignore", ConfigNote)
            return GPTConfig(
                vocab_size=field("vocab_size"),
                block_size=field("max_position_embeddings"),
                n_layer=field("num_hidden_layers"),
                n_head=n_head,
                n_kv_head=field("num_key_value_heads", default=n_head),
                d_model=d_model,
                d_head=hf.get("head_dim") or None,
                d_ff=field("intermediate_size"),
                activation="swiglu",
                norm="rmsnorm",
                norm_placement="pre",
                norm_eps=float(field("rms_norm_eps")),
                positional="rope",
                rope_base=float(theta),
                rope_layout="half",
                rope_scaling=scaling,
                sliding_window=window,
                bias=bias,
                qkv_bias=qkv_bias,
                dropout=0.0,
                tie_weights=bool(hf.get("tie_word_embeddings", False)),
                final_norm=True,
                init_std=float(hf.get("initializer_range", 0.02)),
            )
    except ConfigError as e:
        raise error(path, f"invalid {model_type} config ({e})") from None


def _rope(hf: dict, path, error) -> tuple[float, dict | None]:
    """RoPE's base θ and scaling from either spelling of the config: transformers 5's
    ``rope_parameters`` (θ inside it), or 4's ``rope_theta`` + ``rope_scaling``."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and "rope_type" not in params and "type" not in params:
        raise error(path, "rope_parameters per layer type are not supported")
    params = dict(params or hf.get("rope_scaling") or {})
    theta = params.pop("rope_theta", None) or hf.get("rope_theta") or 10000.0
    kind = params.pop("rope_type", None) or params.pop("type", None) or "default"
    if kind == "default":
        return theta, None
    keys = ROPE_SCALINGS
    if kind not in keys:
        raise error(
            path, f"RoPE scaling rope_type={kind!r} is not supported (default, linear, llama3)"
        )
    return theta, {"rope_type": kind, **{k: params.get(k) for k in keys[kind]}}


def convert_llama_state(take, cfg: GPTConfig, model_type: str) -> dict[str, np.ndarray]:
    """The state dict of ``GPT(cfg)`` from a Llama-family checkpoint. ``take(name, shape)``
    returns the tensor ``name`` as float32 after checking its shape (see
    :func:`gpt.hf.convert_hf_state`), ``take.used`` the names taken so far."""
    d, H, Hkv, dh, f, V = (
        cfg.d_model,
        cfg.n_head,
        cfg.n_kv_head,
        cfg.d_head,
        cfg.d_ff,
        cfg.vocab_size,
    )

    def linear_weight(name, d_out, d_in):  # (out, in) -> (in, out): a transposed view, no copy
        return take(name, (d_out, d_in)).T

    out = {"embed.W": take("model.embed_tokens.weight", (V, d))}
    for i in range(cfg.n_layer):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        out[b + "ln1.w"] = take(h + "input_layernorm.weight", (d,))
        for name, heads in (("q", H), ("k", Hkv), ("v", Hkv)):
            W = linear_weight(h + f"self_attn.{name}_proj.weight", heads * dh, d)
            out[b + f"attn.W_{name}"] = W.reshape(d, heads, dh)
            if cfg.qkv_bias:
                out[b + f"attn.b_{name}"] = take(h + f"self_attn.{name}_proj.bias", (heads * dh,))
        out[b + "attn.W_O"] = linear_weight(h + "self_attn.o_proj.weight", d, H * dh).reshape(
            H, dh, d
        )
        if cfg.bias:
            out[b + "attn.b_O"] = take(h + "self_attn.o_proj.bias", (d,))
        out[b + "ln2.w"] = take(h + "post_attention_layernorm.weight", (d,))
        out[b + "mlp.W_gate"] = linear_weight(h + "mlp.gate_proj.weight", f, d)
        out[b + "mlp.W_in"] = linear_weight(h + "mlp.up_proj.weight", f, d)
        out[b + "mlp.W_out"] = linear_weight(h + "mlp.down_proj.weight", d, f)
        if cfg.bias:
            out[b + "mlp.b_gate"] = take(h + "mlp.gate_proj.bias", (f,))
            out[b + "mlp.b_in"] = take(h + "mlp.up_proj.bias", (f,))
            out[b + "mlp.b_out"] = take(h + "mlp.down_proj.bias", (d,))
    out["ln_final.w"] = take("model.norm.weight", (d,))
    if not cfg.tie_weights:
        out["W_U"] = linear_weight("lm_head.weight", V, d)
    return out


def config_to_llama(cfg: GPTConfig) -> dict:
    """The Hugging Face ``config.json`` of a Llama-shaped :class:`GPTConfig` (the inverse of
    :func:`config_from_llama`): Mistral when it has a sliding window, Qwen2 when only q, k and
    v have biases, else Llama. Raises ValueError naming what none of them can express."""
    problems = [
        f"{name}={getattr(cfg, name)!r} (these checkpoints have {wanted!r})"
        for name, wanted in [
            ("norm", "rmsnorm"),
            ("norm_placement", "pre"),
            ("positional", "rope"),
            ("rope_layout", "half"),
            ("activation", "swiglu"),
            ("parallel", False),
            ("attn_only", False),
            ("final_norm", True),
        ]
        if getattr(cfg, name) != wanted
    ]
    if cfg.sliding_window is not None and (cfg.bias or cfg.qkv_bias):
        problems.append("a sliding window with biases (Mistral has none)")
    if cfg.bias and not cfg.qkv_bias:
        problems.append("an output bias without q/k/v biases")
    if problems:
        raise ValueError("this model is not Llama-shaped: " + "; ".join(problems))
    if cfg.sliding_window is not None:
        model_type, extra = "mistral", {"sliding_window": cfg.sliding_window}
    elif cfg.qkv_bias and not cfg.bias:
        model_type, extra = "qwen2", {"use_sliding_window": False}
    else:
        model_type, extra = "llama", {"attention_bias": cfg.bias, "mlp_bias": cfg.bias}
    rope = {"rope_type": "default"} if cfg.rope_scaling is None else dict(cfg.rope_scaling)
    return {
        "architectures": [ARCHITECTURES[model_type]],
        "model_type": model_type,
        "vocab_size": cfg.vocab_size,
        "max_position_embeddings": cfg.block_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.d_ff,
        "num_hidden_layers": cfg.n_layer,
        "num_attention_heads": cfg.n_head,
        "num_key_value_heads": cfg.n_kv_head,
        "head_dim": cfg.d_head,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.norm_eps,
        "rope_theta": cfg.rope_base,  # transformers 4's spelling,
        "rope_scaling": None if cfg.rope_scaling is None else rope,
        "rope_parameters": {**rope, "rope_theta": cfg.rope_base},  # and 5's
        "tie_word_embeddings": cfg.tie_weights,
        "initializer_range": cfg.init_std,
        "attention_dropout": 0.0,
        "use_cache": True,
        **extra,
    }


def llama_state_to_hf(sd: dict[str, np.ndarray], cfg: GPTConfig) -> dict[str, np.ndarray]:
    """A ``GPT`` state dict (NumPy arrays) under Hugging Face's Llama-family names, each matrix
    transposed back to (out, in): the inverse of :func:`convert_llama_state`."""
    d, H, dh = cfg.d_model, cfg.n_head, cfg.d_head

    def t(a):  # (in, out) -> (out, in)
        return a.reshape(a.shape[0], -1).T

    out = {"model.embed_tokens.weight": sd["embed.W"], "model.norm.weight": sd["ln_final.w"]}
    for i in range(cfg.n_layer):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        out[h + "input_layernorm.weight"] = sd[b + "ln1.w"]
        out[h + "post_attention_layernorm.weight"] = sd[b + "ln2.w"]
        for name in "qkv":
            out[h + f"self_attn.{name}_proj.weight"] = t(sd[b + f"attn.W_{name}"])
            if cfg.qkv_bias:
                out[h + f"self_attn.{name}_proj.bias"] = sd[b + f"attn.b_{name}"]
        out[h + "self_attn.o_proj.weight"] = sd[b + "attn.W_O"].reshape(H * dh, d).T
        out[h + "mlp.gate_proj.weight"] = t(sd[b + "mlp.W_gate"])
        out[h + "mlp.up_proj.weight"] = t(sd[b + "mlp.W_in"])
        out[h + "mlp.down_proj.weight"] = t(sd[b + "mlp.W_out"])
        if cfg.bias:
            out[h + "self_attn.o_proj.bias"] = sd[b + "attn.b_O"]
            out[h + "mlp.gate_proj.bias"] = sd[b + "mlp.b_gate"]
            out[h + "mlp.up_proj.bias"] = sd[b + "mlp.b_in"]
            out[h + "mlp.down_proj.bias"] = sd[b + "mlp.b_out"]
    if not cfg.tie_weights:
        out["lm_head.weight"] = sd["W_U"].T
    return out
