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
(``scale_embeddings=False`` turns the factor off). Other matrices start Glorot-uniform, as in
the paper's reference code (tensor2tensor).

Hook points (identity modules): ``encoder.hook_embed``, ``decoder.hook_embed``,
``encoder.blocks.{i}.{hook_resid_pre, hook_attn_out, hook_resid_mid, hook_mlp_out,
hook_resid_post}``, ``decoder.blocks.{i}.{hook_resid_pre, hook_attn_out, hook_resid_mid,
hook_cross_out, hook_resid_cross, hook_mlp_out, hook_resid_post}``, and inside the attention
layers ``encoder.blocks.{i}.attn.hook_pattern``, ``decoder.blocks.{i}.attn.hook_pattern``,
``decoder.blocks.{i}.cross_attn.hook_pattern`` (and hook_q, hook_k, hook_v, hook_z).

Generation: :func:`greedy_decode` and :func:`beam_search` (GNMT length penalty), both with a
key/value cache: the decoder's self-attention keys and values grow by one position per step,
and each cross-attention layer projects the memory to keys and values once per source.
"""

from __future__ import annotations

import math

import numpy as np

import nn
import nn.functional as F
import tensorlab as tl
from gpt.config import Seq2SeqConfig
from gpt.model import make_norm
from tensorlab import Tensor
from tensorlab.backend import xp_of

__all__ = [
    "Transformer",
    "Encoder",
    "Decoder",
    "EncoderBlock",
    "DecoderBlock",
    "Seq2SeqCache",
    "greedy_decode",
    "beam_search",
    "length_penalty",
    "sequence_logprob",
    "sequence_score",
]


# ---------------------------------------------------------------------- blocks
def _norms(block: nn.Module, cfg: Seq2SeqConfig, n: int) -> None:
    """ln1..ln{n} (and ln{i}_out for sandwich placement) on ``block``."""
    for i in range(1, n + 1):
        setattr(block, f"ln{i}", make_norm(cfg))
        if cfg.norm_placement == "sandwich":
            setattr(block, f"ln{i}_out", make_norm(cfg))


def _sublayer(block: nn.Module, i: int, resid: Tensor, f, hook: nn.HookPoint) -> Tensor:
    """Sublayer f with its residual connection and norm ``ln{i}``, by placement:

    - post (the paper): ``resid = norm(resid + f(resid))``
    - pre (GPT-2): ``resid = resid + f(norm(resid))``
    - sandwich: ``resid = resid + norm_out(f(norm(resid)))``
    """
    norm = getattr(block, f"ln{i}")
    if block.placement == "post":
        return norm(resid + hook(f(resid)))
    out = f(norm(resid))
    if block.placement == "sandwich":
        out = getattr(block, f"ln{i}_out")(out)
    return resid + hook(out)


def _feed_forward(cfg: Seq2SeqConfig) -> nn.FeedForward:
    return nn.FeedForward(
        cfg.d_model, cfg.d_ff, activation=cfg.activation, bias=cfg.bias, dropout=cfg.dropout
    )


class EncoderBlock(nn.Module):
    """Bidirectional self-attention (source padding masked out), then the MLP."""

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.placement = cfg.norm_placement
        self.attn = nn.MultiHeadAttention(
            cfg.d_model, cfg.n_head, bias=cfg.bias, dropout=cfg.dropout
        )
        self.mlp = _feed_forward(cfg)
        _norms(self, cfg, 2)
        self.hook_resid_pre = nn.HookPoint()
        self.hook_attn_out = nn.HookPoint()
        self.hook_resid_mid = nn.HookPoint()
        self.hook_mlp_out = nn.HookPoint()
        self.hook_resid_post = nn.HookPoint()

    def forward(self, resid: Tensor, src_mask=None) -> Tensor:
        resid = self.hook_resid_pre(resid)
        attn = lambda h: self.attn(h, key_padding_mask=src_mask)
        resid = self.hook_resid_mid(_sublayer(self, 1, resid, attn, self.hook_attn_out))
        return self.hook_resid_post(_sublayer(self, 2, resid, self.mlp, self.hook_mlp_out))


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention to the encoder's memory, then the MLP."""

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.placement = cfg.norm_placement
        d, H = cfg.d_model, cfg.n_head
        self.attn = nn.MultiHeadAttention(d, H, bias=cfg.bias, dropout=cfg.dropout, causal=True)
        self.cross_attn = nn.MultiHeadAttention(
            d, H, bias=cfg.bias, dropout=cfg.dropout, cross=True
        )
        self.mlp = _feed_forward(cfg)
        _norms(self, cfg, 3)
        self.hook_resid_pre = nn.HookPoint()
        self.hook_attn_out = nn.HookPoint()
        self.hook_resid_mid = nn.HookPoint()
        self.hook_cross_out = nn.HookPoint()
        self.hook_resid_cross = nn.HookPoint()
        self.hook_mlp_out = nn.HookPoint()
        self.hook_resid_post = nn.HookPoint()

    def forward(
        self, resid: Tensor, memory: Tensor, src_mask=None, self_cache=None, cross_cache=None
    ) -> Tensor:
        resid = self.hook_resid_pre(resid)
        attn = lambda h: self.attn(h, cache=self_cache)
        resid = self.hook_resid_mid(_sublayer(self, 1, resid, attn, self.hook_attn_out))
        cross = lambda h: self.cross_attn(
            h, source=memory, key_padding_mask=src_mask, cache=cross_cache
        )
        resid = self.hook_resid_cross(_sublayer(self, 2, resid, cross, self.hook_cross_out))
        return self.hook_resid_post(_sublayer(self, 3, resid, self.mlp, self.hook_mlp_out))


# ---------------------------------------------------------------------- stacks
class _Stack(nn.Module):
    """What both stacks share: √d · W_E[ids] + positions, dropout, and a final norm.
    ``embed`` may be shared with the other stack."""

    def __init__(self, cfg: Seq2SeqConfig, embed: nn.Embedding):
        super().__init__()
        self.embed = embed
        self.scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        if cfg.positional == "learned":
            self.pos = nn.LearnedPositionalEmbedding(cfg.max_len, cfg.d_model)
        else:
            self.pos = nn.SinusoidalPositionalEncoding(cfg.d_model, max_len=cfg.max_len)
        self.drop = nn.Dropout(cfg.dropout)
        self.hook_embed = nn.HookPoint()
        self.ln_f = make_norm(cfg) if cfg.final_norm else None

    def embed_tokens(self, ids: Tensor, offset: int = 0) -> Tensor:
        x = self.embed(ids)
        if self.scale != 1.0:
            x = x * self.scale
        return self.drop(self.pos(self.hook_embed(x), offset=offset))

    def final(self, resid: Tensor) -> Tensor:
        return resid if self.ln_f is None else self.ln_f(resid)


class Encoder(_Stack):
    """Source ids (B, S) -> memory (B, S, d_model)."""

    def __init__(self, cfg: Seq2SeqConfig, embed: nn.Embedding):
        super().__init__(cfg, embed)
        self.blocks = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.n_encoder_layer))

    def forward(self, src: Tensor, src_mask=None) -> Tensor:
        resid = self.embed_tokens(src)
        for block in self.blocks:
            resid = block(resid, src_mask)
        return self.final(resid)


class Decoder(_Stack):
    """Target ids (B, T) and memory -> final residual stream (B, T, d_model)."""

    def __init__(self, cfg: Seq2SeqConfig, embed: nn.Embedding):
        super().__init__(cfg, embed)
        self.blocks = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.n_decoder_layer))

    def forward(self, tgt: Tensor, memory: Tensor, src_mask=None, cache=None) -> Tensor:
        resid = self.embed_tokens(tgt, offset=cache.length if cache is not None else 0)
        for i, block in enumerate(self.blocks):
            if cache is None:
                resid = block(resid, memory, src_mask)
            else:
                resid = block(resid, memory, src_mask, cache.self_attn[i], cache.cross_attn[i])
        if cache is not None:
            cache.length += tgt.shape[1]
        return self.final(resid)


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
                c.k, c.v = Tensor._wrap(c.k.data[r]), Tensor._wrap(c.v.data[r])


# ---------------------------------------------------------------------- the model
def _ids(x, vocab: int, name: str, device: str = "cpu") -> Tensor:
    x = x if isinstance(x, Tensor) else Tensor(np.asarray(x), device=device)
    if x.ndim != 2:
        raise ValueError(f"{name}: expected token ids of shape (batch, time), got {x.shape}")
    if x.dtype.kind not in "iu":
        raise TypeError(f"{name}: token ids must be integers, got dtype {x.dtype}")
    if x.size:
        lo, hi = int(x.data.min()), int(x.data.max())
        if lo < 0 or hi >= vocab:
            bad = hi if hi >= vocab else lo
            raise ValueError(f"{name}: token id {bad} is outside the vocabulary of {vocab}")
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
        self.encoder = Encoder(cfg, src_embed)
        self.decoder = Decoder(cfg, tgt_embed)
        if not cfg.tie_weights:  # unembedding (d_model, tgt_vocab_size); else W_U = W_Eᵀ
            self.W_U = nn.Parameter(np.zeros((cfg.d_model, cfg.tgt_vocab_size), np.float32))
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
        data = src.numpy() if isinstance(src, Tensor) else np.asarray(src)
        return data == self.config.pad_id

    def new_cache(self) -> Seq2SeqCache:
        return Seq2SeqCache(self.config.n_decoder_layer)

    def encode(self, src) -> Tensor:
        """Source ids (B, S) -> memory (B, S, d_model)."""
        cfg = self.config
        src = _ids(src, cfg.src_vocab_size, "src", self.device)
        if src.shape[1] > cfg.max_len:
            raise ValueError(f"source of {src.shape[1]} positions exceeds max_len={cfg.max_len}")
        return self.encoder(src, self.padding_mask(src))

    def decode(self, memory: Tensor, src_mask, tgt_in, cache: Seq2SeqCache | None = None):
        """Logits (B, T, tgt_vocab_size) for decoder input ids (B, T). With a cache, tgt_in
        holds only the new positions (which continue from ``cache.length``)."""
        cfg = self.config
        tgt_in = _ids(tgt_in, cfg.tgt_vocab_size, "tgt_in", self.device)
        offset = cache.length if cache is not None else 0
        if offset + tgt_in.shape[1] > cfg.max_len:
            raise ValueError(
                f"target of {offset + tgt_in.shape[1]} positions exceeds max_len={cfg.max_len}"
            )
        resid = self.decoder(tgt_in, memory, src_mask, cache)
        return F.linear(resid, self.W_U)

    def forward(self, src, tgt_in, tgt_out=None):
        src = _ids(src, self.config.src_vocab_size, "src", self.device)
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


# ---------------------------------------------------------------------- generation
def length_penalty(length: int, alpha: float) -> float:
    """GNMT's (Wu et al. 2016) lp(Y) = ((5 + |Y|) / 6)^α; a hypothesis scores log P(Y) / lp(Y).
    α = 0 is the plain log-probability; larger α favours longer outputs."""
    return ((5.0 + length) / 6.0) ** alpha


def _as_batch(model: Transformer, src) -> tuple[np.ndarray, bool]:
    """Source ids as a (B, S) array, and whether a single 1-D sequence was given."""
    data = src.numpy() if isinstance(src, Tensor) else src
    if isinstance(data, (list, tuple)) and data and isinstance(data[0], (list, tuple)):
        width = max(len(s) for s in data)
        pad = model.config.pad_id
        data = [list(s) + [pad] * (width - len(s)) for s in data]
    arr = np.asarray(data)
    if arr.ndim == 1:
        return arr[None], True
    return arr, False


def _eval_no_grad(fn):
    def wrapper(model, *args, **kwargs):
        was_training = model.training
        model.eval()
        try:
            with tl.no_grad():
                return fn(model, *args, **kwargs)
        finally:
            model.train(was_training)

    wrapper.__doc__, wrapper.__name__ = fn.__doc__, fn.__name__
    return wrapper


def _cut(row, eos: int) -> list[int]:
    out = []
    for t in row:
        out.append(int(t))
        if t == eos:
            break
    return out


@_eval_no_grad
def greedy_decode(model: Transformer, src, max_new_tokens: int | None = None, use_cache=True):
    """The most likely next token at every step, until ``eos`` or ``max_new_tokens`` tokens
    (default: as many as the decoder's ``max_len`` allows).

    ``src``: one sequence of ids (returns one list) or a batch, (B, S) padded with ``pad_id``
    or a list of lists (returns a list of lists). Outputs exclude ``bos`` and end with ``eos``
    when the model produced it.
    """
    cfg = model.config
    src, single = _as_batch(model, src)
    max_new = cfg.max_len if max_new_tokens is None else min(max_new_tokens, cfg.max_len)
    memory, src_mask = model.encode(src), model.padding_mask(src)
    B = src.shape[0]
    cache = model.new_cache() if use_cache else None
    tokens = np.full((B, 1), cfg.bos_id, dtype=np.int64)
    done = np.zeros(B, dtype=bool)
    for _ in range(max_new):
        step_in = tokens[:, -1:] if use_cache else tokens
        logits = model.decode(memory, src_mask, step_in, cache).numpy()[:, -1]
        nxt = np.where(done, cfg.pad_id, logits.argmax(-1))
        tokens = np.concatenate([tokens, nxt[:, None]], axis=1)
        done |= nxt == cfg.eos_id
        if done.all():
            break
    out = [_cut(row[1:], cfg.eos_id) for row in tokens]
    return out[0] if single else out


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


@_eval_no_grad
def beam_search(
    model: Transformer,
    src,
    beam_size: int = 4,
    max_new_tokens: int | None = None,
    alpha: float = 0.0,
    exhaustive: bool = False,
    return_scores: bool = False,
):
    """Beam search: keep the ``beam_size`` most probable prefixes (by log-probability) at
    each step; a hypothesis ends at ``eos`` or after ``max_new_tokens`` tokens, and the best
    ended one by log P(Y) / lp(Y) (:func:`length_penalty`, GNMT's α) is returned.

    At each step the 2k best extensions of the k live prefixes are ranked; an ``eos`` among
    the first k ends its hypothesis, the best k others stay alive (as in fairseq and Hugging
    Face). A source is done when no live prefix can beat its best ended hypothesis: judged by
    the prefix's score if it ended now, log P / lp(current length) (the default, so k = 1 is
    greedy decoding exactly, for any α), or with ``exhaustive=True`` by the best it could
    reach at any length, log P / lp(max length) (log P only falls as a prefix grows; exact
    for the beam, and the same rule when α = 0).

    ``src`` as in :func:`greedy_decode`. Returns the best hypothesis per source (without
    ``bos``), or (hypothesis, score) pairs with ``return_scores``.
    """
    cfg = model.config
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    src, single = _as_batch(model, src)
    max_new = cfg.max_len if max_new_tokens is None else min(max_new_tokens, cfg.max_len)
    B, k, eos = src.shape[0], beam_size, cfg.eos_id
    memory, src_mask = model.encode(src), model.padding_mask(src)
    rep = np.repeat(np.arange(B), k)  # row b*k + j is beam j of source b
    memory = Tensor._wrap(memory.data[xp_of(memory.data).asarray(rep)])
    src_mask = src_mask[rep]
    cache = model.new_cache()
    seqs = np.zeros((B, k, 0), dtype=np.int64)
    logp = np.full((B, k), -np.inf)
    logp[:, 0] = 0.0  # one live prefix (bos) to begin with
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    done = np.zeros(B, dtype=bool)
    last = np.full((B * k, 1), cfg.bos_id, dtype=np.int64)
    max_lp = length_penalty(max_new, alpha)
    for t in range(max_new):
        logits = model.decode(memory, src_mask, last, cache).numpy()[:, -1]
        V = logits.shape[-1]
        cand = (logp[:, :, None] + _log_softmax(logits).reshape(B, k, V)).reshape(B, k * V)
        new_seqs = np.zeros((B, k, t + 1), dtype=np.int64)
        new_logp = np.full((B, k), -np.inf)
        rows = np.arange(B * k)  # which old row each new row continues (default: itself)
        lp_now = length_penalty(t + 1, alpha)
        for b in range(B):
            if done[b]:
                continue
            alive = []
            order = np.argsort(-cand[b], kind="stable")[: 2 * k]
            for rank, c in enumerate(order):
                s = cand[b, c]
                if s == -np.inf:
                    break
                beam, tok = divmod(int(c), V)
                if tok == eos:
                    if rank < k:
                        finished[b].append((s / lp_now, [*seqs[b, beam].tolist(), eos]))
                else:
                    alive.append((beam, tok, s))
                    if len(alive) == k:
                        break
            for j, (beam, tok, s) in enumerate(alive):
                new_seqs[b, j, :t] = seqs[b, beam]
                new_seqs[b, j, t] = tok
                new_logp[b, j] = s
                rows[b * k + j] = b * k + beam
            if t == max_new - 1:  # out of room: live prefixes end here
                finished[b] += [
                    (s / lp_now, [*new_seqs[b, j].tolist()]) for j, (_, _, s) in enumerate(alive)
                ]
            best = max((f[0] for f in finished[b]), default=-np.inf)
            reach = max((s for _, _, s in alive), default=-np.inf)
            reach /= max_lp if exhaustive else lp_now  # the best a live prefix could score
            done[b] = not alive or t == max_new - 1 or best >= reach
        if done.all():
            break
        seqs, logp = new_seqs, new_logp
        cache.reorder(rows)
        last = seqs.reshape(B * k, -1)[:, -1:]
    results = []
    for b in range(B):
        score, hyp = max(finished[b], key=lambda f: f[0])  # the first found among equals
        results.append((hyp, float(score)) if return_scores else hyp)
    return results[0] if single else results


@_eval_no_grad
def sequence_logprob(model: Transformer, src, hyp) -> float:
    """log P(hyp | src) = Σ_t log p(hyp_t | src, bos, hyp_<t), by one teacher-forced pass."""
    cfg = model.config
    src, _ = _as_batch(model, src)
    hyp = [int(t) for t in hyp]
    tgt_in = np.array([[cfg.bos_id, *hyp[:-1]]])
    logits, _ = model(src[:1], tgt_in)
    lsm = _log_softmax(logits.numpy()[0])
    return float(lsm[np.arange(len(hyp)), hyp].sum())


def sequence_score(model: Transformer, src, hyp, alpha: float = 0.0) -> float:
    """The score beam search ranks ended hypotheses by: log P(hyp | src) / lp(|hyp|, α)."""
    return sequence_logprob(model, src, hyp) / length_penalty(len(hyp), alpha)
