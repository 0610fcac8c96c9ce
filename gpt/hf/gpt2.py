"""GPT-2 checkpoints (``GPT2LMHeadModel``, or ``GPT2Model`` without the ``transformer.``
prefix): the config and the names of the weights.

How the names map: :func:`tensor_names`. HF GPT-2 uses ``Conv1D`` layers, whose weights are
stored (in, out), the same orientation as our ``x @ W``, so every matrix is a reshape, never a
transpose (but the untied ``lm_head``). ``c_attn``'s 3d output columns are [queries | keys |
values], each d wide with the heads side by side: the row-major layout of our W_q, W_k, W_v (d,
H, d_head) put next to each other. The attention buffers ``attn.bias`` / ``attn.masked_bias``
that old checkpoints store (the causal mask) are ignored.
"""

from __future__ import annotations

from functools import partial

from gpt.config import GPTConfig
from gpt.hf.checkpoint import HFCheckpointError, field, make_config, refuse_unless

NAME = "GPT-2"
ARCHITECTURES = {"gpt2": ("GPT2LMHeadModel", "GPT2Model")}
PREFIX = "transformer."  # GPT2LMHeadModel's keys have it, GPT2Model's do not
IGNORED = (".attn.bias", ".attn.masked_bias")  # the causal mask and its fill value

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


def config_from_hf(hf: dict, path) -> GPTConfig:
    """The :class:`GPTConfig` of a GPT-2 ``config.json`` (parsed)."""
    get = partial(field, hf, path)
    act = get("activation_function", default="gelu_new")
    if act not in ACTIVATIONS:
        raise HFCheckpointError(
            path, f"activation_function={act!r} is not supported (known: {', '.join(ACTIVATIONS)})"
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
    return make_config(
        hf,
        path,
        NAME,
        vocab_size=get("vocab_size"),
        block_size=get("n_positions", "n_ctx"),
        n_layer=get("n_layer", "num_hidden_layers"),
        n_head=get("n_head", "num_attention_heads"),
        d_model=get("n_embd", "hidden_size"),
        d_ff=hf.get("n_inner") or None,  # None: 4 * d_model, as in HF
        activation=ACTIVATIONS[act],
        norm="layernorm",
        norm_eps=float(get("layer_norm_epsilon", default=1e-5)),
        positional="learned",
        bias=True,
        tie_weights=bool(hf.get("tie_word_embeddings", True)),
    )


def config_to_hf(cfg: GPTConfig) -> dict:
    """The Hugging Face ``config.json`` of a GPT-2-shaped :class:`GPTConfig` (the inverse of
    :func:`config_from_hf`). Raises ValueError naming what GPT-2 cannot express."""
    problems = []
    if cfg.activation not in _TO_HF_ACTIVATION:
        problems.append(f"activation={cfg.activation!r}")
    if cfg.n_head * cfg.d_head != cfg.d_model:
        problems.append(f"n_head * d_head = {cfg.n_head * cfg.d_head} != d_model={cfg.d_model}")
    wanted = {"norm": "layernorm", "positional": "learned", "bias": True}
    refuse_unless(cfg, NAME, wanted, problems)
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


def tensor_names(cfg: GPTConfig) -> list[tuple[str, tuple[int, ...], tuple[str, ...], bool]]:
    """(HF name, HF shape, our name(s), transposed) for every tensor of the checkpoint
    (:mod:`gpt.hf.checkpoint` reads it both ways)."""
    d, f, V = cfg.d_model, cfg.d_ff, cfg.vocab_size
    rows = [
        ("wte.weight", (V, d), ("embed.W",)),
        ("wpe.weight", (cfg.block_size, d), ("pos.W_pos",)),
    ]
    for i in range(cfg.n_layer):
        h, b = f"h.{i}.", f"blocks.{i}."
        rows += [
            (h + "ln_1.weight", (d,), (b + "ln1.w",)),
            (h + "ln_1.bias", (d,), (b + "ln1.b",)),
            (h + "attn.c_attn.weight", (d, 3 * d), tuple(b + f"attn.W_{n}" for n in "qkv")),
            (h + "attn.c_attn.bias", (3 * d,), tuple(b + f"attn.b_{n}" for n in "qkv")),
            (h + "attn.c_proj.weight", (d, d), (b + "attn.W_O",)),
            (h + "attn.c_proj.bias", (d,), (b + "attn.b_O",)),
            (h + "ln_2.weight", (d,), (b + "ln2.w",)),
            (h + "ln_2.bias", (d,), (b + "ln2.b",)),
            (h + "mlp.c_fc.weight", (d, f), (b + "mlp.W_in",)),
            (h + "mlp.c_fc.bias", (f,), (b + "mlp.b_in",)),
            (h + "mlp.c_proj.weight", (f, d), (b + "mlp.W_out",)),
            (h + "mlp.c_proj.bias", (d,), (b + "mlp.b_out",)),
        ]
    rows += [("ln_f.weight", (d,), ("ln_final.w",)), ("ln_f.bias", (d,), ("ln_final.b",))]
    rows = [(name, shape, ours, False) for name, shape, ours in rows]  # Conv1D: (in, out)
    if not cfg.tie_weights:
        rows.append(("lm_head.weight", (V, d), ("W_U",), True))
    return rows
