"""Sampling text from a trained model: greedy, temperature, top-k, top-p, with a key/value
cache (the prompt runs once, then each new token costs one position's forward pass).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import nn
import tensorlab as tl
from gpt.config import check_int, check_real
from tensorlab import log_softmax_array

# The temperature of generate() and of `python -m gpt sample` when none is given: 1 samples
# the model's own distribution (below 1 sharpens it toward greedy, above 1 flattens it).
DEFAULT_TEMPERATURE = 1.0


def check_sampling(
    temperature: float, top_k: int | None, top_p: float | None, max_new_tokens: int | None = None
) -> None:
    """Refuse sampling settings outside their ranges (ConfigError naming the setting)."""
    check_real("temperature", temperature, 0.0)
    if top_k is not None:
        check_int("top_k", top_k, 1)
    if top_p is not None:
        check_real("top_p", top_p, 0.0, 1.0, open_lo=True)
    if max_new_tokens is not None:
        check_int("max_new_tokens", max_new_tokens, 0)


def next_token_probs(
    logits: np.ndarray,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> np.ndarray:
    """The distribution the next token is drawn from, given one row of logits (float64).

    ``temperature == 0`` is greedy: all the probability on the first largest logit.
    Otherwise the logits are divided by the temperature, cut to the ``top_k`` largest (ties
    with the k-th largest stay) and/or to the smallest set, most probable first, whose
    probability reaches ``top_p`` (nucleus sampling, Holtzman et al. 2020), and what is left
    is softmaxed: p_i ∝ exp(z_i / T) on the kept ids, 0 elsewhere.
    """
    check_sampling(temperature, top_k, top_p)
    logits = np.asarray(logits, dtype=np.float64)
    if temperature == 0:
        p = np.zeros_like(logits)
        p[np.argmax(logits)] = 1.0
        return p
    z = logits / temperature
    if top_k is not None and top_k < z.size:
        kth = np.partition(z, -top_k)[-top_k]  # the k-th largest
        z = np.where(z < kth, -np.inf, z)
    p = np.exp(log_softmax_array(z))
    if top_p is not None and top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        keep = order[: int(np.searchsorted(cum, top_p) + 1)]
        kept = np.zeros_like(p)
        kept[keep] = p[keep]
        p = kept / kept.sum()
    return p


def sample_next(
    logits: np.ndarray,
    rng: np.random.Generator,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> int:
    """Draw the next token id from :func:`next_token_probs` (greedy, ``temperature == 0``,
    draws no random number)."""
    p = next_token_probs(logits, temperature, top_k, top_p)
    if temperature == 0:
        return int(np.argmax(p))
    return int(rng.choice(p.size, p=p))


class NextLogits:
    """The model's logits for the token after ``ids``, seeing the last ``block_size`` tokens.
    With ``use_cache`` each call runs only the tokens added since the last one; once the
    sequence outgrows the window the cache starts again from the last ``block_size`` tokens at
    every step (absolute positions cannot slide), so the logits are a full recompute's."""

    def __init__(self, model, use_cache: bool = True):
        self.model, self.block = model, model.config.block_size
        self.use_cache = use_cache
        self.device = next(iter(model.parameters())).device
        self.cache, self.seen = None, 0  # tokens of ids the cache holds

    def __call__(self, ids: Sequence[int]) -> np.ndarray:
        if not self.use_cache:
            return self._run(ids[-self.block :], None)
        new = len(ids) - self.seen
        if self.cache is None or self.cache.length + new > self.block:
            self.cache = self.model.new_cache()
            context = ids[-self.block :]
        else:
            context = ids[self.seen :]
        self.seen = len(ids)
        return self._run(context, self.cache)

    def _run(self, context, cache) -> np.ndarray:
        x = tl.tensor(np.array([context]), device=self.device)
        logits, _ = self.model(x, cache=cache) if cache is not None else self.model(x)
        return logits.numpy()[0, -1]


def generate(
    model,
    prompt: Sequence[int],
    max_new_tokens: int,
    temperature: float = DEFAULT_TEMPERATURE,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int | None = None,
    stop_tokens: Sequence[int] = (),
    use_cache: bool = True,
) -> list[int]:
    """Continue ``prompt`` (token ids) by up to ``max_new_tokens`` tokens.

    Stops early at any id in ``stop_tokens`` (which is included in the output). The model
    must be a ``gpt.model.GPT``; it sees the last ``block_size`` tokens (:class:`NextLogits`).
    """
    check_sampling(temperature, top_k, top_p, max_new_tokens)
    ids = [int(i) for i in prompt]
    if not ids:
        raise ValueError("generate: the prompt is empty; give at least one token id")
    vocab = model.config.vocab_size
    bad = [i for i in ids if not 0 <= i < vocab]
    if bad:
        raise ValueError(
            f"generate: prompt ids {bad[:5]} are outside the model's vocabulary "
            f"(size {vocab}); was the prompt encoded with another tokenizer?"
        )
    rng = np.random.default_rng(seed)
    next_logits = NextLogits(model, use_cache)
    stops = set(stop_tokens)
    with nn.evaluating(model):
        for _ in range(max_new_tokens):
            nxt = sample_next(next_logits(ids), rng, temperature, top_k, top_p)
            ids.append(nxt)
            if nxt in stops:
                break
    return ids
