"""Decoding an encoder-decoder (:class:`gpt.seq2seq.Transformer`): greedy and beam search.

Both use a key/value cache: the decoder's self-attention keys and values grow by one position
per step, and each cross-attention layer projects the memory to keys and values once per
source. (Sampling from a decoder-only GPT is ``gpt/generate.py``.)
"""

from __future__ import annotations

import numpy as np

import nn
import tensorlab as tl
from gpt.seq2seq import Transformer
from nn.checks import check_int, check_real
from tensorlab import Tensor, log_softmax_array
from tensorlab.backend import xp_of

__all__ = ["greedy_decode", "beam_search", "length_penalty", "sequence_logprob", "sequence_score"]


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


def greedy_decode(model: Transformer, src, max_new_tokens: int | None = None, use_cache=True):
    """The most likely next token at every step, until ``eos`` or ``max_new_tokens`` tokens
    (default: as many as the decoder's ``max_len`` allows): :func:`beam_search` with one beam.

    ``src``: one sequence of ids (returns one list) or a batch, (B, S) padded with ``pad_id``
    or a list of lists (returns a list of lists). Outputs exclude ``bos`` and end with ``eos``
    when the model produced it.
    """
    return beam_search(model, src, 1, max_new_tokens, use_cache=use_cache)


def beam_search(
    model: Transformer,
    src,
    beam_size: int = 4,
    max_new_tokens: int | None = None,
    alpha: float = 0.0,
    exhaustive: bool = False,
    return_scores: bool = False,
    use_cache: bool = True,
):
    """Beam search: keep the ``beam_size`` most probable prefixes (by log-probability) at
    each step; a hypothesis ends at ``eos`` or after ``max_new_tokens`` tokens, and the best
    ended one by log P(Y) / lp(Y) (:func:`length_penalty`, GNMT's α) is returned.

    At each step the 2k best extensions of the k live prefixes are ranked; an ``eos`` among
    the first k ends its hypothesis, the best k others stay alive (as in fairseq and Hugging
    Face). A source is done when no live prefix can beat its best ended hypothesis, judged by
    log P / lp(current length) (so k = 1 is greedy decoding, for any α), or with
    ``exhaustive=True`` by log P / lp(max length), the best it could reach at any length.

    ``src`` as in :func:`greedy_decode`. Returns the best hypothesis per source (without
    ``bos``), or (hypothesis, score) pairs with ``return_scores``. ``use_cache=False`` runs
    the decoder over every whole prefix at each step instead (slow; the check of the cache).
    """
    with nn.evaluating(model):
        cfg = model.config
        check_int("beam_size", beam_size, 1)
        check_real("alpha", alpha, 0.0)
        src, single = _as_batch(model, src)
        max_new = cfg.max_len if max_new_tokens is None else min(max_new_tokens, cfg.max_len)
        B, k, eos = src.shape[0], beam_size, cfg.eos_id
        memory, src_mask = model.encode(src), model.padding_mask(src)
        rep = np.repeat(np.arange(B), k)  # row b*k + j is beam j of source b
        memory = tl.as_tensor(memory.data[xp_of(memory.data).asarray(rep)])
        src_mask = src_mask[rep]
        cache = model.new_cache() if use_cache else None
        seqs = np.zeros((B, k, 0), dtype=np.int64)
        logp = np.full((B, k), -np.inf)
        logp[:, 0] = 0.0  # one live prefix (bos) to begin with
        finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
        done = np.zeros(B, dtype=bool)
        bos = np.full((B * k, 1), cfg.bos_id, dtype=np.int64)
        last = bos
        max_lp = length_penalty(max_new, alpha)
        for t in range(max_new):
            step_in = last if use_cache else np.concatenate([bos, seqs.reshape(B * k, t)], axis=1)
            logits = model.decode(memory, src_mask, step_in, cache).numpy()[:, -1]
            V = logits.shape[-1]
            cand = (
                logp[:, :, None] + log_softmax_array(logits.astype(np.float64)).reshape(B, k, V)
            ).reshape(B, k * V)
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
                        (s / lp_now, [*new_seqs[b, j].tolist()])
                        for j, (_, _, s) in enumerate(alive)
                    ]
                best = max((f[0] for f in finished[b]), default=-np.inf)
                reach = max((s for _, _, s in alive), default=-np.inf)
                reach /= max_lp if exhaustive else lp_now  # the best a live prefix could score
                done[b] = not alive or t == max_new - 1 or best >= reach
            if done.all():
                break
            seqs, logp = new_seqs, new_logp
            if use_cache:
                cache.reorder(rows)
            last = seqs.reshape(B * k, -1)[:, -1:]
        results = []
        for b in range(B):
            score, hyp = max(finished[b], key=lambda f: f[0])  # the first found among equals
            results.append((hyp, float(score)) if return_scores else hyp)
        return results[0] if single else results


def sequence_logprob(model: Transformer, src, hyp) -> float:
    """log P(hyp | src) = Σ_t log p(hyp_t | src, bos, hyp_<t), by one teacher-forced pass,
    for one source sequence (1-D, or a batch of one)."""
    cfg = model.config
    src, _ = _as_batch(model, src)
    if src.shape[0] != 1:
        raise ValueError(
            f"sequence_logprob: src holds {src.shape[0]} sequences; give the one that hyp "
            "translates (hyp is one sequence)"
        )
    hyp = [int(t) for t in hyp]
    tgt_in = np.array([[cfg.bos_id, *hyp[:-1]]])
    with nn.evaluating(model):
        logits, _ = model(src, tgt_in)
    lsm = log_softmax_array(logits.numpy()[0].astype(np.float64))
    return float(lsm[np.arange(len(hyp)), hyp].sum())


def sequence_score(model: Transformer, src, hyp, alpha: float = 0.0) -> float:
    """The score beam search ranks ended hypotheses by: log P(hyp | src) / lp(|hyp|, α)."""
    return sequence_logprob(model, src, hyp) / length_penalty(len(hyp), alpha)
