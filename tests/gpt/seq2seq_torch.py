"""A reference encoder-decoder in plain PyTorch, for the parity tests in test_seq2seq.py.

Written from the architecture as ``gpt/seq2seq.py`` and ``Seq2SeqConfig`` define it, with
PyTorch's own layers (``nn.Linear``, ``nn.LayerNorm``, ``nn.RMSNorm``, ``nn.Embedding``,
``F.cross_entropy``) and attention written out in a few lines::

    x = s · E[ids] + P[0:T]            s = √d_model (or 1), P sinusoidal or learned
    post:      x = norm(x + f(x))
    pre:       x = x + f(norm(x))
    sandwich:  x = x + norm_out(f(norm(x)))
    encoder block: f = self-attention (padding keys masked), then f = MLP
    decoder block: f = causal self-attention, then cross-attention to the memory (padding keys
                   masked), then MLP
    logits = final_norm(x) @ E_tgtᵀ (tied) or @ W_U; loss = cross-entropy, pad targets ignored

One convention is ours and not PyTorch's: a query that may attend to no key (a source row
that is all padding, seen by the encoder and by cross-attention) gets a zero pattern and so
outputs only the output bias, instead of NaN (``nn/attention.py``).

:func:`load` copies a ``gpt.seq2seq.Transformer``'s parameters into a :class:`Reference`;
:func:`grads_as_ours` gives the reference's gradients back under our names and shapes.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ACT = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "elu": F.elu,
    "sigmoid": torch.sigmoid,
}
GATED = {"glu": "sigmoid", "reglu": "relu", "geglu": "gelu", "swiglu": "silu"}


def norm(cfg) -> nn.Module:
    if cfg.norm == "rmsnorm":
        return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)


class Attention(nn.Module):
    def __init__(self, cfg, causal: bool):
        super().__init__()
        d, self.H, self.causal = cfg.d_model, cfg.n_head, causal
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=cfg.bias) for _ in range(4))

    def forward(self, x, source=None, pad=None):
        """x (B, T_q, d); source (B, T_k, d) for cross-attention; pad (B, T_k) True at
        padding keys."""
        source = x if source is None else source
        B, T_q, d = x.shape
        T_k, H = source.shape[1], self.H
        heads = lambda t, T: t.view(B, T, H, d // H).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.q(x), T_q), heads(self.k(source), T_k), heads(self.v(source), T_k)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // H)  # (B, H, T_q, T_k)
        allowed = torch.ones(T_q, T_k, dtype=torch.bool)
        if self.causal:
            allowed = torch.tril(allowed, diagonal=T_k - T_q)
        if pad is not None:
            allowed = allowed & ~torch.as_tensor(pad)[:, None, None, :]
        dead = ~allowed.any(-1, keepdim=True)  # no key to attend to: pattern 0, not NaN
        scores = scores.masked_fill(~allowed, -math.inf).masked_fill(dead, 0.0)
        pattern = torch.softmax(scores, -1).masked_fill(dead, 0.0)
        z = (pattern @ v).transpose(1, 2).reshape(B, T_q, d)
        return self.o(z)


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, d_ff, bias = cfg.d_model, cfg.d_ff, cfg.bias
        self.gated = cfg.activation in GATED
        self.act = ACT[GATED.get(cfg.activation, cfg.activation)]
        self.up, self.down = nn.Linear(d, d_ff, bias=bias), nn.Linear(d_ff, d, bias=bias)
        if self.gated:
            self.gate = nn.Linear(d, d_ff, bias=bias)

    def forward(self, x):
        h = self.act(self.gate(x)) * self.up(x) if self.gated else self.act(self.up(x))
        return self.down(h)


class Block(nn.Module):
    def __init__(self, cfg, decoder: bool):
        super().__init__()
        self.placement = cfg.norm_placement
        self.attn = Attention(cfg, causal=decoder)
        if decoder:
            self.cross_attn = Attention(cfg, causal=False)
        self.mlp = MLP(cfg)
        for i in range(1, 4 if decoder else 3):
            setattr(self, f"ln{i}", norm(cfg))
            sandwich = cfg.norm_placement == "sandwich"
            setattr(self, f"ln{i}_out", norm(cfg) if sandwich else nn.Identity())

    def add(self, x, f, i: int):
        ln, ln_out = getattr(self, f"ln{i}"), getattr(self, f"ln{i}_out")
        if self.placement == "post":
            return ln(x + f(x))
        return x + ln_out(f(ln(x)))  # pre: ln_out is the identity

    def forward(self, x, pad, memory=None):
        if memory is None:  # encoder
            x = self.add(x, lambda h: self.attn(h, pad=pad), 1)
            return self.add(x, self.mlp, 2)
        x = self.add(x, self.attn, 1)
        x = self.add(x, lambda h: self.cross_attn(h, memory, pad), 2)
        return self.add(x, self.mlp, 3)


@contextlib.contextmanager
def one_thread():
    """Run torch on one thread: for tensors this small, threads cost more than they save."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def sinusoids(T: int, d: int) -> torch.Tensor:
    """PE[t, j] = sin(t / 10000^(2⌊j/2⌋/d)) for even j, cos(...) for odd j."""
    t = torch.arange(T, dtype=torch.float64)[:, None]
    j = torch.arange(d, dtype=torch.float64)
    angle = t / 10000.0 ** (2 * torch.div(j, 2, rounding_mode="floor") / d)
    return torch.where(j % 2 == 0, torch.sin(angle), torch.cos(angle))


class Stack(nn.Module):
    def __init__(self, cfg, embed: nn.Embedding, decoder: bool):
        super().__init__()
        self.cfg, self.embed = cfg, embed
        if cfg.positional == "learned":
            self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        n = cfg.n_decoder_layer if decoder else cfg.n_encoder_layer
        self.blocks = nn.ModuleList(Block(cfg, decoder) for _ in range(n))
        if cfg.final_norm:
            self.ln_final = norm(cfg)

    def forward(self, ids, pad, memory=None):
        cfg, T = self.cfg, ids.shape[1]
        x = self.embed(ids) * (math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0)
        if cfg.positional == "learned":
            x = x + self.pos.weight[:T]
        else:
            x = x + sinusoids(T, cfg.d_model).to(x.dtype)
        for block in self.blocks:
            x = block(x, pad, memory)
        return self.ln_final(x) if cfg.final_norm else x


class Reference(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        tgt = nn.Embedding(cfg.tgt_vocab_size, cfg.d_model)
        src = tgt if cfg.share_embeddings else nn.Embedding(cfg.src_vocab_size, cfg.d_model)
        self.encoder = Stack(cfg, src, decoder=False)
        self.decoder = Stack(cfg, tgt, decoder=True)
        if not cfg.tie_weights:
            self.unembed = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)

    def forward(self, src, tgt_in, tgt_out=None):
        """(logits (B, T, V), loss or None), from int64 id arrays."""
        cfg = self.cfg
        src, tgt_in = torch.as_tensor(src), torch.as_tensor(tgt_in)
        pad = src == cfg.pad_id
        memory = self.encoder(src, pad)
        x = self.decoder(tgt_in, pad, memory)
        W = self.decoder.embed.weight if cfg.tie_weights else self.unembed.weight
        logits = x @ W.T
        if tgt_out is None:
            return logits, None
        loss = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            torch.as_tensor(tgt_out).reshape(-1),
            ignore_index=cfg.pad_id,
            label_smoothing=cfg.label_smoothing,
        )
        return logits, loss


# ours (last part of the name) -> (the reference's, how many leading axes of ours are inputs
# of a torch Linear whose weight is (out, in); 0: the same array)
RENAME = {
    "W_q": ("q.weight", 1),
    "W_k": ("k.weight", 1),
    "W_v": ("v.weight", 1),
    "W_O": ("o.weight", 2),
    "b_q": ("q.bias", 0),
    "b_k": ("k.bias", 0),
    "b_v": ("v.bias", 0),
    "b_O": ("o.bias", 0),
    "W_in": ("up.weight", 1),
    "W_gate": ("gate.weight", 1),
    "W_out": ("down.weight", 1),
    "b_in": ("up.bias", 0),
    "b_gate": ("gate.bias", 0),
    "b_out": ("down.bias", 0),
    "w": ("weight", 0),
    "b": ("bias", 0),
    "W": ("weight", 0),
    "W_pos": ("weight", 0),
    "W_U": ("unembed.weight", 1),
}


def _counterpart(name: str) -> tuple[str, int]:
    head, _, last = name.rpartition(".")
    theirs, in_dims = RENAME[last]
    return (f"{head}.{theirs}" if head else theirs), in_dims


def load(model) -> Reference:
    """A float64 :class:`Reference` holding ``model``'s parameters."""
    ref = Reference(model.config).double()
    theirs = dict(ref.named_parameters(remove_duplicate=False))
    ours = dict(model.named_parameters())
    assert len(ours) == len(dict(ref.named_parameters())), "a parameter without a counterpart"
    with torch.no_grad():
        for name, p in ours.items():
            ref_name, in_dims = _counterpart(name)
            a = np.asarray(p.numpy(), dtype=np.float64)
            if in_dims:
                a = a.reshape(math.prod(a.shape[:in_dims]), -1).T
            assert theirs[ref_name].shape == a.shape, (name, ref_name, a.shape)
            theirs[ref_name].copy_(torch.from_numpy(np.ascontiguousarray(a)))
    return ref


def grads_as_ours(ref: Reference, model) -> dict[str, np.ndarray]:
    """The reference's parameter gradients, by our parameter names and in our shapes."""
    theirs = dict(ref.named_parameters(remove_duplicate=False))
    out = {}
    for name, p in model.named_parameters():
        ref_name, in_dims = _counterpart(name)
        g = theirs[ref_name].grad.numpy()
        out[name] = (g.T if in_dims else g).reshape(p.shape)
    return out
