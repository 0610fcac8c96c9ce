"""A decoder-only transformer (GPT), built from ``nn`` blocks.

The residual stream ``resid`` (B, T, d_model) starts as token embeddings (plus positions),
each block reads it and adds what its attention and MLP write, and the unembedding W_U turns
the final stream into next-token logits:

    resid = W_E[tokens] (+ W_pos)
    resid = resid + attn(norm(resid));  resid = resid + mlp(norm(resid))    (per block, pre-norm)
    logits = norm(resid) @ W_U

Hook points (identity modules, ``hook_embed``, ``blocks.{i}.hook_resid_pre``, ...) name every
activation a circuits analysis reads, with TransformerLens's names and shapes: the table and
what they cost are in docs/interpretability.md, section 1.
"""

from __future__ import annotations

import numpy as np

import nn
import nn.functional as F
import tensorlab as tl
from gpt.config import GPTConfig
from nn.init import empty_parameters, gpt2_init_, gpt2_residual_init_
from tensorlab import Tensor

# The attention's biases for the config's (bias, qkv_bias): all, none, q/k/v only, output only
BIASES = {(True, True): True, (False, False): False, (False, True): "qkv", (True, False): "out"}


class NoNorm(nn.Module):
    """The identity, with no parameters: ``norm="none"`` (toy models read with
    ``gpt.circuits``, whose QK and OV circuits are then exact), and the output norm of a
    sublayer in every placement but "sandwich"."""

    def forward(self, x: Tensor) -> Tensor:
        return x


def make_norm(cfg) -> nn.Module:
    if cfg.norm == "none":
        return NoNorm()
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)


def sublayer(resid: Tensor, f, norm, norm_out, hook, post: bool) -> Tensor:
    """The stream after sublayer ``f`` (attention or MLP) adds its output, by norm placement:

        pre (GPT-2):        resid + f(norm(resid))              (norm_out is the identity)
        sandwich:           resid + norm_out(f(norm(resid)))
        post (Vaswani):     norm(resid + f(resid))

    ``hook`` sees what the sublayer adds. Shared by the GPT and the encoder-decoder blocks.
    """
    if post:
        return norm(resid + hook(f(resid)))
    return resid + hook(norm_out(f(norm(resid))))


class Block(nn.Module):
    """One transformer block: attention then MLP, each added to the residual stream as
    ``norm_placement`` says (:func:`sublayer`). ``parallel`` (GPT-J) feeds both the block's
    input and adds both outputs at once; with pre-norm they share one norm, as in GPT-J."""

    def __init__(self, cfg: GPTConfig, positions=None):
        super().__init__()
        self.post, self.parallel = cfg.norm_placement == "post", cfg.parallel
        self.ln1 = make_norm(cfg)
        if cfg.positional == "relative":  # each block its own; a rotary one is shared
            positions = nn.RelativePositionBias(cfg.n_head, cfg.max_relative_distance)
        self.attn = nn.SelfAttention(
            cfg.d_model,
            cfg.n_head,
            d_head=cfg.d_head,
            n_kv_head=cfg.n_kv_head,
            bias=BIASES[cfg.bias, cfg.qkv_bias],
            dropout=cfg.dropout,
            causal=cfg.sliding_window or True,
            positions=positions,
        )
        self.ln1_out = make_norm(cfg) if cfg.norm_placement == "sandwich" else NoNorm()
        self.mlp = None
        if not cfg.attn_only:
            self.ln2 = self.ln1 if cfg.parallel and cfg.norm_placement == "pre" else make_norm(cfg)
            self.mlp = nn.FeedForward(
                cfg.d_model, cfg.d_ff, activation=cfg.activation, bias=cfg.bias, dropout=cfg.dropout
            )
            self.ln2_out = make_norm(cfg) if cfg.norm_placement == "sandwich" else NoNorm()
        # Hook points: only those the forward passes (an attention-only block has no MLP
        # output, a parallel block no stream between attention and MLP).
        self.hook_resid_pre = nn.HookPoint()
        self.hook_attn_out = nn.HookPoint()
        if not self.parallel:
            self.hook_resid_mid = nn.HookPoint()
        if self.mlp is not None:
            self.hook_mlp_out = nn.HookPoint()
        self.hook_resid_post = nn.HookPoint()

    def forward(self, resid: Tensor, cache=None) -> Tensor:
        resid = self.hook_resid_pre(resid)
        attn = lambda h: self.attn(h, cache=cache)  # noqa: E731
        if self.parallel:  # GPT-J: both sublayers read the block's input
            a = self.hook_attn_out(self.ln1_out(attn(self.ln1(resid))))
            m = self.hook_mlp_out(self.ln2_out(self.mlp(self.ln2(resid))))
            return self.hook_resid_post(resid + a + m)
        resid = sublayer(resid, attn, self.ln1, self.ln1_out, self.hook_attn_out, self.post)
        resid = self.hook_resid_mid(resid)
        if self.mlp is not None:
            resid = sublayer(resid, self.mlp, self.ln2, self.ln2_out, self.hook_mlp_out, self.post)
        return self.hook_resid_post(resid)


class GPTCache:
    """Key/value caches of every layer, and how many positions they hold."""

    def __init__(self, n_layer: int):
        self.layers = [nn.KVCache() for _ in range(n_layer)]
        self.length = 0


class GPT(nn.Module):
    """A decoder-only language model. ``forward(idx, targets=None, cache=None)`` returns
    ``(logits, loss)``: logits (B, T, vocab_size), and the mean cross-entropy when targets
    (B, T) are given (else None)."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = cfg = config
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model, std=cfg.init_std)
        self.hook_embed = nn.HookPoint()
        self.pos = self.hook_pos_embed = None
        rotary = None
        if cfg.positional == "learned":
            self.pos = nn.LearnedPositionalEmbedding(cfg.block_size, cfg.d_model, std=cfg.init_std)
        elif cfg.positional == "sinusoidal":
            self.pos = nn.SinusoidalPositionalEncoding(cfg.d_model, max_len=cfg.block_size)
        if self.pos is not None:
            self.hook_pos_embed = nn.HookPoint()
        elif cfg.positional == "rope":
            rotary = nn.RotaryEmbedding(
                cfg.d_head, cfg.rope_base, layout=cfg.rope_layout, scaling=cfg.rope_scaling
            )
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, rotary) for _ in range(cfg.n_layer))
        self.ln_final = make_norm(cfg) if cfg.final_norm else None
        if not cfg.tie_weights:  # unembedding (d_model, vocab_size); else W_U = W_Eᵀ
            self.W_U = nn.init.constant((cfg.d_model, cfg.vocab_size), 0.0)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialization: N(0, 0.02²) matrices, zero biases, unit norm gains, and
        the residual output projections scaled by 1/√(2·n_layer)."""
        cfg = self.config
        gpt2_init_(self, std=cfg.init_std)
        for block in self.blocks:
            gpt2_residual_init_(block.attn.W_O, max(cfg.n_layer, 1), cfg.init_std)
            if block.mlp is not None:
                gpt2_residual_init_(block.mlp.W_out, max(cfg.n_layer, 1), cfg.init_std)
            if block.attn.relative_bias is not None:
                nn.init.zeros_(block.attn.relative_bias.W)

    @property
    def W_E(self) -> Tensor:
        """Token embedding (vocab_size, d_model)."""
        return self.embed.W

    def __getattr__(self, name: str):
        # Only reached when normal lookup fails: with tied weights there is no W_U
        # parameter, and the unembedding is the embedding's transpose.
        if name == "W_U":
            return self.embed.W.T
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def new_cache(self) -> GPTCache:
        return GPTCache(self.config.n_layer)

    def forward(self, idx, targets=None, cache: GPTCache | None = None):
        if not isinstance(idx, Tensor):  # a list or a NumPy array of ids: to the model's device
            idx = Tensor(np.asarray(idx), device=self.embed.W.device)  # host: a list of ids
        if idx.ndim != 2:
            raise ValueError(f"GPT expects token ids of shape (batch, time), got {idx.shape}")
        B, T = idx.shape
        offset = cache.length if cache is not None else 0
        cfg = self.config
        if offset + T > cfg.block_size:
            raise ValueError(
                f"sequence of {offset + T} positions is longer than block_size={cfg.block_size}"
            )
        if idx.size == 0:
            raise ValueError(f"GPT: the batch of token ids is empty (shape {idx.shape})")
        try:  # the embedding checks the ids: integers, in range (on a GPU one read, a wait)
            resid = self.embed(idx)
        except ValueError as err:
            raise ValueError(
                f"token ids outside the model's vocabulary of {cfg.vocab_size} ({err}); was "
                "the text encoded with another tokenizer?"
            ) from None
        resid = self.hook_embed(resid)
        if self.pos is not None:
            resid = resid + self.hook_pos_embed(self.pos(resid, offset=offset))
        resid = self.drop(resid)
        for i, block in enumerate(self.blocks):
            if cache is not None:
                resid = block(resid, cache=cache.layers[i])
            elif cfg.checkpoint_activations:  # recomputed in backward (tl.checkpoint)
                resid = tl.checkpoint(block, resid)
            else:
                resid = block(resid)
        if cache is not None:
            cache.length += T
        if self.ln_final is not None:
            resid = self.ln_final(resid)
        logits = F.linear(resid, self.W_U)  # (B, T, vocab): one GEMM over all positions
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits, targets)
        return logits, loss


def flops_per_token(cfg: GPTConfig, training: bool = True) -> int:
    """Approximate FLOPs per token of the model ``cfg`` builds: 2N for the weight products
    plus 2·L·T·d for attention scores and their mix, per forward; ×3 for forward + backward
    (Kaplan et al. 2020, Table 1; Chinchilla, Hoffmann et al. 2022, App. F). N counts the
    model's own parameters (built with :func:`nn.init.empty_parameters`: nothing drawn) but the
    embedding tables, which are looked up, not multiplied; the unembedding, tied or not, is a
    product of vocab_size · d_model."""
    with empty_parameters():
        model = GPT(cfg)
    tables = model.embed.num_parameters() + (model.pos.num_parameters() if model.pos else 0)
    n = model.num_parameters() - tables + cfg.vocab_size * cfg.d_model
    span = min(cfg.block_size, cfg.sliding_window or cfg.block_size)
    fwd = 2 * n + 2 * cfg.n_layer * span * cfg.n_head * cfg.d_head
    return 3 * fwd if training else fwd
