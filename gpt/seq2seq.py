"""An encoder-decoder transformer ("Attention is all you need", Vaswani et al. 2017).

The encoder reads the source with bidirectional self-attention (padding masked out) into a
``memory`` (B, S, d_model). The decoder reads the target shifted right (``bos`` first) with
causal self-attention, and attends to the memory through cross-attention; its final stream
becomes next-token logits through W_U::

    src_resid = √d · W_E^src[src] + PE                    (encoder stack; post-norm shown)
    src_resid = norm(src_resid + self_attn(src_resid))    src_resid = norm(src_resid + mlp(...))
    memory = src_resid
    resid = √d · W_E^tgt[tgt_in] + PE                     (decoder stack)
    resid = norm(resid + causal_self_attn(resid))
    resid = norm(resid + cross_attn(resid, memory))       queries from resid, keys/values memory
    resid = norm(resid + mlp(resid))
    logits = resid @ W_U                                   W_U = (W_E^tgt)ᵀ when tied

Embeddings are multiplied by √d_model, as in the paper (section 3.4), and drawn from
N(0, 1/d_model), so that the scaled embedding has unit-size entries comparable to the
sinusoidal positions, and tied logits ``resid @ W_Eᵀ`` start at unit scale
(``scale_embeddings=False`` turns the factor off).

Hook points as in :mod:`gpt.model`, under ``encoder.`` and ``decoder.``; a decoder block adds
``hook_cross_out`` and ``hook_resid_cross`` (the stream after cross-attention).

Generation (greedy decoding, beam search) is in ``gpt/generate_seq2seq.py``.
"""

from __future__ import annotations

import math

import numpy as np

import nn
import nn.functional as F
import tensorlab as tl
from gpt.config import Seq2SeqConfig
from gpt.model import NoNorm, make_norm, sublayer
from tensorlab import Tensor
from tensorlab.backend import xp_of

__all__ = ["Transformer", "Stack", "Seq2SeqBlock", "Seq2SeqCache"]


# ---------------------------------------------------------------------- blocks
class Seq2SeqBlock(nn.Module):
    """Self-attention, then (in the decoder) cross-attention to the encoder's memory, then the
    MLP, each added by :func:`gpt.model.sublayer`. The encoder's self-attention is
    bidirectional with the source padding masked out, the decoder's causal; norms ln1..ln3
    (and their outputs ln{i}_out) in that order."""

    def __init__(self, cfg: Seq2SeqConfig, decoder: bool):
        super().__init__()
        self.post, self.decoder = cfg.norm_placement == "post", decoder
        d, H, kw = cfg.d_model, cfg.n_head, dict(bias=cfg.bias, dropout=cfg.dropout)
        self.attn = nn.SelfAttention(d, H, causal=decoder, **kw)
        if decoder:
            self.cross_attn = nn.CrossAttention(d, H, **kw)
        self.mlp = nn.FeedForward(d, cfg.d_ff, activation=cfg.activation, **kw)
        for i in range(1, 4 if decoder else 3):
            setattr(self, f"ln{i}", make_norm(cfg))
            sandwich = cfg.norm_placement == "sandwich"
            setattr(self, f"ln{i}_out", make_norm(cfg) if sandwich else NoNorm())
        self.hook_resid_pre = nn.HookPoint()
        self.hook_attn_out = nn.HookPoint()
        self.hook_resid_mid = nn.HookPoint()
        if decoder:
            self.hook_cross_out = nn.HookPoint()
            self.hook_resid_cross = nn.HookPoint()
        self.hook_mlp_out = nn.HookPoint()
        self.hook_resid_post = nn.HookPoint()

    def forward(self, resid, memory=None, src_mask=None, self_cache=None, cross_cache=None):
        resid = self.hook_resid_pre(resid)
        own_mask = None if self.decoder else src_mask  # the encoder's keys are the source
        attn = lambda h: self.attn(h, key_padding_mask=own_mask, cache=self_cache)  # noqa: E731
        resid = sublayer(resid, attn, self.ln1, self.ln1_out, self.hook_attn_out, self.post)
        resid = self.hook_resid_mid(resid)
        norms = self.ln2, self.ln2_out  # the MLP's (the decoder's ln2 is cross-attention's)
        if self.decoder:
            cross = lambda h: self.cross_attn(  # noqa: E731
                h, source=memory, key_padding_mask=src_mask, cache=cross_cache
            )
            resid = sublayer(resid, cross, *norms, self.hook_cross_out, self.post)
            resid = self.hook_resid_cross(resid)
            norms = self.ln3, self.ln3_out
        resid = sublayer(resid, self.mlp, *norms, self.hook_mlp_out, self.post)
        return self.hook_resid_post(resid)


# ---------------------------------------------------------------------- stacks
class Stack(nn.Module):
    """One side of the model: √d · W_E[ids] + positions, dropout, the blocks and a final norm.
    The encoder maps source ids (B, S) to the memory (B, S, d_model); the decoder, target ids
    (B, T) and the memory to its final stream (B, T, d_model). ``embed`` may be shared."""

    def __init__(self, cfg: Seq2SeqConfig, embed: nn.Embedding, decoder: bool):
        super().__init__()
        self.embed, self.ids = embed, "tgt_in" if decoder else "src"
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        if cfg.positional == "learned":
            self.pos = nn.LearnedPositionalEmbedding(cfg.max_len, cfg.d_model)
        else:
            self.pos = nn.SinusoidalPositionalEncoding(cfg.d_model, max_len=cfg.max_len)
        self.drop = nn.Dropout(cfg.dropout)
        self.hook_embed = nn.HookPoint()
        n = cfg.n_decoder_layer if decoder else cfg.n_encoder_layer
        self.blocks = nn.ModuleList(Seq2SeqBlock(cfg, decoder) for _ in range(n))
        self.ln_final = make_norm(cfg) if cfg.final_norm else None

    def forward(self, ids: Tensor, memory=None, src_mask=None, cache=None) -> Tensor:
        try:  # the embedding checks the ids: integers, in range
            x = self.embed(ids)
        except ValueError as err:
            vocab = self.embed.num_embeddings
            raise ValueError(
                f"{self.ids}: token ids outside the vocabulary of {vocab} ({err})"
            ) from None
        if self.scale != 1.0:
            x = x * self.scale
        x = self.hook_embed(x)
        resid = self.drop(x + self.pos(x, offset=cache.length if cache is not None else 0))
        for i, block in enumerate(self.blocks):
            if cache is None:
                resid = block(resid, memory, src_mask)
            else:
                resid = block(resid, memory, src_mask, cache.self_attn[i], cache.cross_attn[i])
        if cache is not None:
            cache.length += ids.shape[1]
        return resid if self.ln_final is None else self.ln_final(resid)


class Seq2SeqCache:
    """The decoder's key/value caches: per layer one for self-attention (grows by the new
    positions at each call) and one for cross-attention (the memory's keys and values, made
    on the first call), and ``length``, the number of target positions seen so far."""

    def __init__(self, n_layer: int):
        self.self_attn = [nn.KVCache() for _ in range(n_layer)]
        self.cross_attn = [nn.KVCache() for _ in range(n_layer)]
        self.length = 0

    def reorder(self, rows, cross: bool = False) -> None:
        """Keep batch rows ``rows`` (an index array; repeats allowed), as beam search does
        when it keeps some hypotheses and drops others. Cross-attention caches are left as
        they are unless ``cross``: a beam only moves between rows of the same source."""
        caches = self.self_attn + (self.cross_attn if cross else [])
        for c in caches:
            if c.k is not None:
                r = xp_of(c.k.data).asarray(rows)
                c.k, c.v = tl.as_tensor(c.k.data[r]), tl.as_tensor(c.v.data[r])


# ---------------------------------------------------------------------- the model
def _ids(x, name: str, device: str = "cpu") -> Tensor:
    """Token ids (B, T) as a Tensor; the embedding checks the ids themselves (_Stack)."""
    x = x if isinstance(x, Tensor) else Tensor(np.asarray(x), device=device)  # host: ids
    if x.ndim != 2:
        raise ValueError(f"{name}: expected token ids of shape (batch, time), got {x.shape}")
    return x


class Transformer(nn.Module):
    """An encoder-decoder transformer.

    ``forward(src, tgt_in, tgt_out=None)`` -> ``(logits, loss)``: src (B, S) source ids padded
    with ``pad_id``; tgt_in (B, T) the decoder input (``bos`` then the target, shifted right);
    tgt_out (B, T) the ids to predict (the target then ``eos``, padded with ``pad_id``).
    logits (B, T, tgt_vocab_size); loss the mean cross-entropy over non-pad targets (None
    without tgt_out).

    For decoding: ``memory = encode(src)``, ``src_mask = padding_mask(src)``, then
    ``decode(memory, src_mask, tgt_in, cache)`` once per step with only the new positions
    (``cache = new_cache()``), or with the whole prefix and no cache.
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = cfg = config
        tgt_embed = nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        src_embed = (
            tgt_embed if cfg.share_embeddings else nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        )
        self.encoder = Stack(cfg, src_embed, decoder=False)
        self.decoder = Stack(cfg, tgt_embed, decoder=True)
        if not cfg.tie_weights:  # unembedding (d_model, tgt_vocab_size); else W_U = W_Eᵀ
            self.W_U = nn.init.constant((cfg.d_model, cfg.tgt_vocab_size), 0.0)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Embeddings ~ N(0, 1/d_model); attention and MLP matrices (and an untied W_U)
        Glorot-uniform, U[-a, a] with a = √(6 / (fan_in + fan_out)) for each d_in -> d_out
        map; biases zero; norm gains one."""
        d = self.config.d_model
        for emb in {id(m.embed.W): m.embed.W for m in (self.encoder, self.decoder)}.values():
            nn.init.normal_(emb, 0.0, d**-0.5)
        for name, p in self.named_parameters():
            if p.ndim < 2 or name.endswith("embed.W") or name.endswith("W_pos"):
                continue
            # every attention matrix is a d_model -> d_model map, whatever its stored shape
            fan_in, fan_out = (d, d) if ".attn." in name or "cross_attn." in name else p.shape
            a = math.sqrt(6.0 / (fan_in + fan_out))
            nn.init.uniform_(p, -a, a)

    def __getattr__(self, name: str):
        if name == "W_U":  # tied: the unembedding is the target embedding's transpose
            return self.decoder.embed.W.T
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    # ------------------------------------------------------------------ pieces
    @property
    def device(self) -> str:
        return self.decoder.embed.W.device

    def padding_mask(self, src) -> np.ndarray:
        """(B, S) boolean NumPy array, True at the source's padding positions (``pad_id``)."""
        data = src.numpy() if isinstance(src, Tensor) else np.asarray(src)  # host: ids
        return data == self.config.pad_id

    def new_cache(self) -> Seq2SeqCache:
        return Seq2SeqCache(self.config.n_decoder_layer)

    def encode(self, src) -> Tensor:
        """Source ids (B, S) -> memory (B, S, d_model) (the position table refuses S > max_len)."""
        src = _ids(src, "src", self.device)
        return self.encoder(src, src_mask=self.padding_mask(src))

    def decode(self, memory: Tensor, src_mask, tgt_in, cache: Seq2SeqCache | None = None):
        """Logits (B, T, tgt_vocab_size) for decoder input ids (B, T). With a cache, tgt_in
        holds only the new positions (which continue from ``cache.length``)."""
        tgt_in = _ids(tgt_in, "tgt_in", self.device)
        if tgt_in.shape[0] != memory.shape[0]:
            raise ValueError(
                f"decode: {tgt_in.shape[0]} target sequences (tgt_in {tgt_in.shape}) for "
                f"{memory.shape[0]} sources (memory {memory.shape}); give one target per source"
            )
        resid = self.decoder(tgt_in, memory, src_mask, cache)
        return F.linear(resid, self.W_U)

    def forward(self, src, tgt_in, tgt_out=None):
        src = _ids(src, "src", self.device)
        logits = self.decode(self.encode(src), self.padding_mask(src), tgt_in)
        loss = None
        if tgt_out is not None:
            loss = F.cross_entropy(
                logits,
                tgt_out,
                ignore_index=self.config.pad_id,
                label_smoothing=self.config.label_smoothing,
            )
        return logits, loss
