"""Llama-family checkpoints (``LlamaForCausalLM``, ``Qwen2ForCausalLM``,
``MistralForCausalLM``): the config and the names of the weights.

The three share one shape: pre-norm RMSNorm blocks, rotary positions in the "rotate half"
layout, grouped-query attention, a SwiGLU MLP, no positional table, and usually an untied
unembedding. They differ in small switches: Qwen2 puts biases on q, k and v only, Llama may
put them on all four projections (``attention_bias``), Mistral attends over a sliding window.

How the names map: :func:`tensor_names`. HF stores ``nn.Linear`` weights as (out, in), we keep
``x @ W`` with W (in, out): every matrix is a transpose and then a reshape. The MLP is
down(silu(gate(x)) ⊙ up(x)), which is :class:`nn.FeedForward`'s gated form with W_gate = gateᵀ
and W_in = upᵀ. Rotary embeddings pair dimension i with i + d_h/2 in these checkpoints
(``rope_layout="half"``), so the q and k weights load as they are, with no permutation of their
rows. The rotary ``inv_freq`` buffers some checkpoints store (a table recomputed from the
config) are ignored.
"""

from __future__ import annotations

from functools import partial

from gpt.config import GPTConfig
from gpt.hf.checkpoint import HFCheckpointError, field, make_config, refuse_unless
from nn.embedding import ROPE_SCALINGS

NAME = "Llama"
ARCHITECTURES = {
    "llama": ("LlamaForCausalLM",),
    "qwen2": ("Qwen2ForCausalLM",),
    "mistral": ("MistralForCausalLM",),
}
PREFIX = ""  # the names above are whole
IGNORED = (".rotary_emb.inv_freq",)


def config_from_hf(hf: dict, path) -> GPTConfig:
    """The :class:`GPTConfig` of a Llama, Qwen2 or Mistral ``config.json`` (parsed)."""
    get = partial(field, hf, path)
    model_type = hf.get("model_type")
    act = get("hidden_act", default="silu")
    if act not in ("silu", "swish"):
        raise HFCheckpointError(
            path, f"hidden_act={act!r} is not supported (a {model_type} MLP is SwiGLU)"
        )
    attention_bias = bool(hf.get("attention_bias", False))
    mlp_bias = bool(hf.get("mlp_bias", False))
    if model_type == "qwen2":  # q, k, v biases and nothing else
        bias, qkv_bias = False, True
    elif attention_bias != mlp_bias:
        raise HFCheckpointError(
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
        raise HFCheckpointError(
            path, "use_sliding_window=true is not supported (Qwen2 slides only in some layers)"
        )
    if hf.get("layer_types") and any(t != "full_attention" for t in hf["layer_types"]):
        if not (model_type == "mistral" and set(hf["layer_types"]) == {"sliding_attention"}):
            raise HFCheckpointError(
                path, f"layer_types={hf['layer_types']!r}: per-layer kinds unsupported"
            )
    theta, scaling = _rope(hf, path)
    n_head = get("num_attention_heads")
    return make_config(
        hf,
        path,
        model_type,
        vocab_size=get("vocab_size"),
        block_size=get("max_position_embeddings"),
        n_layer=get("num_hidden_layers"),
        n_head=n_head,
        n_kv_head=get("num_key_value_heads", default=n_head),
        d_model=get("hidden_size"),
        d_head=hf.get("head_dim") or None,
        d_ff=get("intermediate_size"),
        activation="swiglu",
        norm="rmsnorm",
        norm_eps=float(get("rms_norm_eps")),
        positional="rope",
        rope_base=float(theta),
        rope_layout="half",
        rope_scaling=scaling,
        sliding_window=window,
        bias=bias,
        qkv_bias=qkv_bias,
        tie_weights=bool(hf.get("tie_word_embeddings", False)),
    )


def _rope(hf: dict, path) -> tuple[float, dict | None]:
    """RoPE's base θ and scaling from either spelling of the config: transformers 5's
    ``rope_parameters`` (θ inside it), or 4's ``rope_theta`` + ``rope_scaling``."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and "rope_type" not in params and "type" not in params:
        raise HFCheckpointError(path, "rope_parameters per layer type are not supported")
    params = dict(params or hf.get("rope_scaling") or {})
    theta = params.pop("rope_theta", None) or hf.get("rope_theta") or 10000.0
    kind = params.pop("rope_type", None) or params.pop("type", None) or "default"
    if kind == "default":
        return theta, None
    if kind not in ROPE_SCALINGS:
        raise HFCheckpointError(
            path, f"RoPE scaling rope_type={kind!r} is not supported (default, linear, llama3)"
        )
    return theta, {"rope_type": kind, **{k: params.get(k) for k in ROPE_SCALINGS[kind]}}


def config_to_hf(cfg: GPTConfig) -> dict:
    """The Hugging Face ``config.json`` of a Llama-shaped :class:`GPTConfig` (the inverse of
    :func:`config_from_hf`): Mistral when it has a sliding window, Qwen2 when only q, k and
    v have biases, else Llama. Raises ValueError naming what none of them can express."""
    problems = []
    if cfg.sliding_window is not None and (cfg.bias or cfg.qkv_bias):
        problems.append("a sliding window with biases (Mistral has none)")
    if cfg.bias and not cfg.qkv_bias:
        problems.append("an output bias without q/k/v biases")
    wanted = {
        "norm": "rmsnorm",
        "positional": "rope",
        "rope_layout": "half",
        "activation": "swiglu",
    }
    refuse_unless(cfg, NAME, wanted, problems)
    if cfg.sliding_window is not None:
        model_type, extra = "mistral", {"sliding_window": cfg.sliding_window}
    elif cfg.qkv_bias and not cfg.bias:
        model_type, extra = "qwen2", {"use_sliding_window": False}
    else:
        model_type, extra = "llama", {"attention_bias": cfg.bias, "mlp_bias": cfg.bias}
    rope = {"rope_type": "default"} if cfg.rope_scaling is None else dict(cfg.rope_scaling)
    return {
        "architectures": list(ARCHITECTURES[model_type]),
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


def tensor_names(cfg: GPTConfig) -> list[tuple[str, tuple[int, ...], tuple[str, ...], bool]]:
    """(HF name, HF shape, our name(s), transposed) for every tensor of the checkpoint
    (:mod:`gpt.hf.checkpoint` reads it both ways). Every ``nn.Linear`` weight is transposed."""
    d, f, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    H, Hkv, dh = cfg.n_head, cfg.n_kv_head, cfg.d_head
    rows = [
        ("model.embed_tokens.weight", (V, d), "embed.W"),
        ("model.norm.weight", (d,), "ln_final.w"),
    ]
    for i in range(cfg.n_layer):
        h, b = f"model.layers.{i}.", f"blocks.{i}."
        rows += [
            (h + "input_layernorm.weight", (d,), b + "ln1.w"),
            (h + "post_attention_layernorm.weight", (d,), b + "ln2.w"),
            (h + "self_attn.o_proj.weight", (d, H * dh), b + "attn.W_O"),
            (h + "mlp.gate_proj.weight", (f, d), b + "mlp.W_gate"),
            (h + "mlp.up_proj.weight", (f, d), b + "mlp.W_in"),
            (h + "mlp.down_proj.weight", (d, f), b + "mlp.W_out"),
        ]
        for name, heads in (("q", H), ("k", Hkv), ("v", Hkv)):
            p = h + f"self_attn.{name}_proj."
            rows.append((p + "weight", (heads * dh, d), b + f"attn.W_{name}"))
            if cfg.qkv_bias:
                rows.append((p + "bias", (heads * dh,), b + f"attn.b_{name}"))
        if cfg.bias:
            rows += [
                (h + "self_attn.o_proj.bias", (d,), b + "attn.b_O"),
                (h + "mlp.gate_proj.bias", (f,), b + "mlp.b_gate"),
                (h + "mlp.up_proj.bias", (f,), b + "mlp.b_in"),
                (h + "mlp.down_proj.bias", (d,), b + "mlp.b_out"),
            ]
    if not cfg.tie_weights:
        rows.append(("lm_head.weight", (V, d), "W_U"))
    return [(n, s, (o,), n.endswith(("proj.weight", "lm_head.weight"))) for n, s, o in rows]
