"""Activation patching: run the model on a corrupted input with one activation taken from a
clean run, and see how much of the clean behaviour comes back (Meng et al. 2022, "ROME";
Wang et al. 2022, "IOI"); attribution patching, its first-order approximation from one
forward and one backward pass (Nanda 2023). docs/interpretability.md, section 5.

``metric(logits)`` maps the logits Tensor (B, T, vocab) of a whole batch to one number (in
Tensor ops for attribution patching, which differentiates it). Where the patch goes, by the
hook point's layout: :func:`_axes`, and the docs' table.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpt.circuits.factored import _arr
from gpt.circuits.hooks import _as_tokens, run_with_cache, run_with_hooks
from tensorlab import Tensor

HEAD_FIRST = ("hook_attn_scores", "hook_pattern")
PER_HEAD = ("hook_q", "hook_k", "hook_v", "hook_z", "hook_result")
SWEEPS = {"layer": (), "pos": ("pos",), "head": ("head",), "pos_head": ("pos", "head")}


def _axes(name: str) -> tuple[int, int | None]:
    """(position axis, head axis or None) of the activation at hook point ``name``: axis 1
    for the stream and the per-head activations (head axis 2), the query's axis 2 for the
    scores and the pattern (B, H, T, T) (head axis 1)."""
    last = name.rsplit(".", 1)[-1]
    if last in HEAD_FIRST:
        return 2, 1
    if last in PER_HEAD:
        return 1, 2
    return 1, None


def _index(shape, name: str, pos, head) -> tuple:
    """The index of the entries at ``pos`` and/or ``head`` (all for None), every (position,
    head) pair when both are lists (``np.ix_``: NumPy would pair two lists up instead)."""
    pos_axis, head_axis = _axes(name)
    index = [slice(None)] * len(shape)
    if pos is not None:
        index[pos_axis] = pos
    if head is not None:
        if head_axis is None:
            raise ValueError(f"{name!r} has no head axis: patch it whole or by position")
        index[head_axis] = head
    try:
        return np.ix_(*(np.atleast_1d(np.arange(n)[i]) for n, i in zip(shape, index)))
    except IndexError as e:
        raise IndexError(f"{name} of shape {shape}: pos={pos!r}, head={head!r}: {e}") from None


def _value(x) -> float:
    """The metric's one number (a per-sequence vector must be reduced by the metric)."""
    a = np.asarray(x.numpy() if isinstance(x, Tensor) else x)
    if a.size != 1:
        raise ValueError(f"metric(logits) must return one number, got shape {a.shape}")
    return float(a.reshape(()))


def patch_activation(model, corrupted_tokens, clean_cache: dict, name: str, pos=None, head=None):
    """The logits (B, T, vocab) of ``corrupted_tokens`` with the activation at hook point
    ``name`` replaced by its value in ``clean_cache``: whole, or only at position(s) ``pos``
    and/or head(s) ``head`` (an int, a list, or a slice)."""
    if name not in clean_cache:
        raise KeyError(f"{name!r} is not in the clean cache; run run_with_cache with it")
    clean = clean_cache[name]

    def patch(act):
        if act.shape != clean.shape:
            raise ValueError(
                f"{name}: the clean activation has shape {clean.shape}, the corrupted run's "
                f"{act.shape}; the two inputs must have the same shape"
            )
        out = act.numpy().copy()
        index = _index(out.shape, name, pos, head)
        out[index] = clean[index]
        return out

    return run_with_hooks(model, corrupted_tokens, [(name, patch)])


def _sweep_shape(model, by: str, n_pos: int, hook: str) -> tuple[int, ...]:
    if by not in SWEEPS:
        raise ValueError(f"by must be one of {', '.join(SWEEPS)}, got {by!r}")
    # keys and values have the key/value heads only (grouped-query attention)
    kv = hook.endswith(("hook_k", "hook_v"))
    heads = getattr(model.config, "n_kv_head", None) if kv else None
    sizes = {"pos": n_pos, "head": heads or model.config.n_head}
    return (len(model.blocks),) + tuple(sizes[k] for k in SWEEPS[by])


def activation_patching(
    model,
    corrupted_tokens,
    clean_cache: dict,
    metric: Callable,
    hook: str = "hook_resid_pre",
    by: str = "pos",
) -> np.ndarray:
    """``metric`` of the patched run (one forward pass each) for every layer and, by ``by``,
    every position, head or both: ``hook`` is the hook point inside each block
    ("hook_resid_pre", "attn.hook_z", ...), ``by`` "layer" (n_layer,), "pos" (n_layer, T),
    "head" (n_layer, n_head) or "pos_head" (n_layer, T, n_head)."""
    corrupted = _as_tokens(corrupted_tokens)
    out = np.zeros(_sweep_shape(model, by, corrupted.shape[1], hook))
    for index in np.ndindex(out.shape):
        layer, rest = index[0], dict(zip(SWEEPS[by], index[1:]))
        name = f"blocks.{layer}.{hook}"
        logits = patch_activation(model, corrupted, clean_cache, name, **rest)
        out[index] = _value(metric(logits))
    return out


def attribution_patching(
    model,
    clean_tokens,
    corrupted_tokens,
    metric: Callable[[Tensor], Tensor],
    hook: str = "hook_resid_pre",
    by: str = "pos",
) -> np.ndarray:
    """The first-order estimate of :func:`activation_patching`'s change in ``metric`` (the
    patched value minus the corrupted run's), from one clean forward pass and one corrupted
    forward and backward pass::

        metric(patched) - metric(corrupted) ≈ Σ (clean - corrupted) · ∂metric/∂act |corrupted

    summed over every axis the sweep does not index (shapes as :func:`activation_patching`).
    Exact when the metric is linear in the activation; poor where a softmax saturates."""
    clean, corrupted = _as_tokens(clean_tokens), _as_tokens(corrupted_tokens)
    if clean.shape != corrupted.shape:
        raise ValueError(
            f"clean and corrupted tokens must have the same shape, got {clean.shape} and "
            f"{corrupted.shape}"
        )
    names = [f"blocks.{i}.{hook}" for i in range(len(model.blocks))]
    _, clean_cache = run_with_cache(model, clean, names=names)
    _, cache = run_with_cache(model, corrupted, names=names, incl_bwd=True, metric=metric)
    out = np.zeros(_sweep_shape(model, by, corrupted.shape[1], hook))
    for layer, name in enumerate(names):
        clean_act, act = _arr(clean_cache[name]), _arr(cache[name])
        same = clean_act == act  # masked scores are -inf in both runs: nothing to patch
        diff = np.subtract(clean_act, act, out=np.zeros_like(act), where=~same)
        term = diff * _arr(cache[name + "_grad"])
        pos_axis, head_axis = _axes(name)
        keep = [{"pos": pos_axis, "head": head_axis}[k] for k in SWEEPS[by]]
        if None in keep:
            raise ValueError(f"{name!r} has no head axis: sweep it by 'layer' or 'pos'")
        kept = term.sum(axis=tuple(a for a in range(term.ndim) if a not in keep))
        out[layer] = kept.T if keep != sorted(keep) else kept  # (pos, head) for the pattern
    return out
