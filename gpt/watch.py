"""Training-health records: every ``watch_interval`` steps the trainer appends one JSON line to
``watch.jsonl`` beside ``log.jsonl`` (``python -m gpt report`` draws them: gpt/report.py).

A record (one per watched step; ``iter`` is log.jsonl's, the iteration just finished)::

    {"iter": 50,
     "grad_norm":    {"blocks.0.attn.W_q": 0.031, ...},  ‖g‖ per parameter tensor, before
                                                        clipping (their root sum of squares
                                                        is log.jsonl's grad_norm)
     "update_ratio": {"blocks.0.attn.W_q": 0.0012, ...}, ‖Δw‖ / ‖w‖ of this step's update
     "blocks": [{"resid_rms": 1.3,                       √mean(x²) of hook_resid_post
                 "attn_entropy": [2.1, 0.4, ...],        per head: -Σ p log p over the keys,
                                                        mean over queries (nats)
                 "mlp_dead": 0.0,                        share of MLP units whose
                                                        pre-activation is never > 0
                 "mlp_saturated": 0.0}, ...],            share with |pre-activation| > 3
                                                        everywhere (null: no MLP)
     "max_logit": 7.5,                                   the largest |logit|
     "induction": [[...]], "previous_token": [[...]]}    per (layer, head), CPU runs of at
                                                        most SCORED_HEADS heads only

The activations come from a fixed batch (``PROBE_ROWS`` validation sequences drawn once from
the run's seed) run through the model's hook points (:func:`gpt.circuits.run_with_cache`)
after the step, so that every record reads the same text; the scores are
:func:`gpt.circuits.induction_report`'s. A saturated unit sits in a tail of its activation,
where a sigmoid is flat and GELU is zero or linear: either way it computes no nonlinearity.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np

import tensorlab as tl
from gpt.data import get_batch
from nn.optim import sum_of_squares

PROBE_ROWS = 4  # sequences in the fixed batch
SCORED_HEADS = 64  # induction / previous-token scores for models with at most this many heads
SATURATED = 3.0  # |pre-activation| beyond which a unit counts as sitting in a tail


def _norm(array) -> float:
    return math.sqrt(float(sum_of_squares([array])))


def entropy(pattern: np.ndarray) -> np.ndarray:
    """Mean entropy (nats) of attention patterns (B, H, T, T) per head: (H,)."""
    p = pattern.astype(np.float64)
    h = -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)  # host: a cached pattern
    return h.mean(axis=(0, 2))


def activation_stats(model, tokens, dtype: str = "float32") -> dict:
    """A record's ``blocks`` and ``max_logit`` for the batch ``tokens`` (B, T) (a Tensor on the
    model's device), read at the hook points."""
    from gpt.circuits import run_with_cache

    L = len(model.blocks)
    mlps = [b.mlp is not None for b in model.blocks]
    names = [f"blocks.{i}.{n}" for i in range(L) for n in ("hook_resid_post", "attn.hook_pattern")]
    names += [f"blocks.{i}.mlp.hook_pre" for i in range(L) if mlps[i]]
    with tl.autocast(dtype):
        logits, cache = run_with_cache(model, tokens, names)
    blocks = []
    for i in range(L):
        resid = cache[f"blocks.{i}.hook_resid_post"].astype(np.float64)
        block = {
            "resid_rms": math.sqrt((resid**2).mean()),
            "attn_entropy": entropy(cache[f"blocks.{i}.attn.hook_pattern"]).tolist(),
            "mlp_dead": None,
            "mlp_saturated": None,
        }
        if mlps[i]:
            pre = cache[f"blocks.{i}.mlp.hook_pre"].reshape(-1, model.blocks[i].mlp.d_ff)
            block["mlp_dead"] = float((pre <= 0).all(0).mean())
            block["mlp_saturated"] = float((abs(pre) > SATURATED).all(0).mean())
        blocks.append(block)
    return {"blocks": blocks, "max_logit": float(abs(logits.numpy()).max())}


class Watcher:
    """Records the training health of ``trainer``'s run (see the module docstring): wrap each
    step in ``with watcher.step():``. Rank 0 alone records; ``watch_interval=0`` records
    nothing. At the start, records past the run's iteration are dropped: a resumed run
    continues the file from its checkpoint, a new run starts it empty."""

    def __init__(self, trainer):
        self.t, cfg, folder = trainer, trainer.cfg, trainer.run_folder
        self.every = cfg.watch_interval if trainer.dist.rank == 0 else 0
        if trainer.dist.rank == 0 and folder.watch.exists():
            kept = [r for r in folder.read_log(folder.watch) if r["iter"] <= trainer.iter]
            folder.rewrite_log(kept, folder.watch)
        if not self.every:
            return
        rows = min(PROBE_ROWS, cfg.batch_size)
        x, _ = get_batch(
            trainer.splits["val"],
            trainer.model_cfg.block_size,
            rows,
            np.random.default_rng(cfg.seed),
        )
        self.probe = tl.tensor(x, device=cfg.device)
        m = trainer.model_cfg
        heads = m.n_layer * m.n_head
        self.scored = cfg.device == "cpu" and heads <= SCORED_HEADS and m.block_size >= 4

    @contextlib.contextmanager
    def step(self):
        """Around one training step: on a watched step, keep the parameters before it, and
        after it append the record to watch.jsonl (nothing when the step raises)."""
        if not self.every or (self.t.iter + 1) % self.every:
            yield
            return
        params = dict(self.t.model.named_parameters())
        before = {name: p.data.copy() for name, p in params.items()}
        yield
        self.t.run_folder.append_log([self.record(params, before)], self.t.run_folder.watch)

    def record(self, params: dict, before: dict) -> dict:
        t, cfg = self.t, self.t.cfg
        # the step clipped the gradients in place: undo the factor for the norms before it
        total = t.pending[-1]["grad_norm"]
        unclip = max(1.0, (total + 1e-6) / cfg.grad_clip) if cfg.grad_clip > 0 else 1.0
        grads = {n: _norm(p.grad.data) * unclip for n, p in params.items() if p.grad is not None}
        ratios = {
            n: _norm(p.data - before[n]) / max(_norm(before[n]), 1e-12) for n, p in params.items()
        }
        record = {"iter": t.iter, "grad_norm": grads, "update_ratio": ratios}
        record.update(activation_stats(t.model, self.probe, cfg.dtype))
        if self.scored:
            from gpt.circuits import induction_report

            scores = induction_report(t.model, batch=PROBE_ROWS)
            record.update({k: scores[k].tolist() for k in ("induction", "previous_token")})
        return record
