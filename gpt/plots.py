"""Matplotlib figures, saved as PNG files: a training run's loss curve, and for circuits work
attention patterns and scores per head. matplotlib is an optional extra (``pip install
'tensorlab[plot]'``); it is imported only when a figure is drawn, and :func:`available` says
whether it can be.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
from collections.abc import Sequence

import numpy as np

__all__ = ["available", "attention_pattern", "loss_curve", "head_scores"]


def available() -> bool:
    """Whether matplotlib is installed."""
    return importlib.util.find_spec("matplotlib") is not None


def _pyplot():
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError(
            "gpt.plots needs matplotlib, an optional extra: pip install 'tensorlab[plot]' "
            "(or pip install matplotlib)"
        ) from err
    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path) -> str:
    path = os.fspath(path)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    _pyplot().close(fig)
    return path


def attention_pattern(
    pattern, path, tokens: Sequence | None = None, title: str = "", labels=None
) -> str:
    """Heatmap of one head's pattern (T_q, T_k): rows are queries, columns keys. ``tokens``
    (ids) or ``labels`` (strings, e.g. the tokens' text) name the positions when there are
    few enough to read; without either the ticks are the positions."""
    plt = _pyplot()
    pat = np.asarray(pattern, dtype=np.float64)
    if pat.ndim != 2:
        raise ValueError(f"expected one head's pattern (T_q, T_k), got shape {pat.shape}")
    Tq, Tk = pat.shape
    size = min(10.0, 3 + 0.12 * max(Tq, Tk))
    fig, ax = plt.subplots(figsize=(size + 1, size))
    im = ax.imshow(pat, cmap="viridis", vmin=0.0, vmax=max(1e-9, float(pat.max())))
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04, label="attention")
    named = "position"
    if labels is None and tokens is not None:
        labels, named = [str(t) for t in np.asarray(tokens).tolist()], "token (id)"
    elif labels is not None:
        named = "token"
    if labels is not None and max(Tq, Tk) <= 80:
        fs = 6 if max(Tq, Tk) > 40 else 8
        ax.set_xticks(range(Tk), labels[-Tk:], rotation=90, fontsize=fs)
        ax.set_yticks(range(Tq), labels[-Tq:], fontsize=fs)
    else:
        named = "position"  # too many to name: matplotlib's ticks, which are positions
    ax.set_xlabel(f"key {named}")
    ax.set_ylabel(f"query {named}")
    if title:
        ax.set_title(title)
    return _save(fig, path)


def loss_curve(records: Sequence[dict], path) -> str:
    """A training run's loss curve, from its log (``log.jsonl``): the training loss of every
    step drawn faintly, with an exponential moving average over it (span about 1/50 of the
    run, so the curve reads the same for 10 iterations or 100k), and the evaluations on top
    as points. A record without a key is skipped (the log mixes steps and evaluations)."""
    plt = _pyplot()
    steps = [r for r in records if "loss" in r]
    evals = [r for r in records if "val_loss" in r]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    if steps:
        its = np.array([r["iter"] for r in steps])  # host: the log's numbers, for a plot
        loss = np.array([r["loss"] for r in steps])  # host: as above
        ax.plot(its, loss, color="C0", alpha=0.25, lw=0.8)
        alpha = 2.0 / (max(len(loss) / 50, 1.0) + 1.0)
        smooth = list(itertools.accumulate(loss, lambda s, x: s + alpha * (x - s)))
        ax.plot(its, smooth, color="C0", label="train (each step, smoothed)")
    if evals:
        its = [r["iter"] for r in evals]
        ax.plot(
            its, [r["train_loss"] for r in evals], "o", color="C0", ms=4, label="train (evaluated)"
        )
        ax.plot(its, [r["val_loss"] for r in evals], "s-", color="C1", ms=4, label="val")
    ax.set_xlabel("iteration")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.grid(alpha=0.3)
    ax.legend()
    return _save(fig, path)


def head_scores(scores, path, title: str = "score", kind: str = "heatmap") -> str:
    """A score per head (n_layer, n_head), as an annotated heatmap or grouped bars
    (``kind="bar"``)."""
    plt = _pyplot()
    s = np.atleast_2d(np.asarray(scores, dtype=np.float64))
    L, H = s.shape
    if kind == "bar":
        fig, ax = plt.subplots(figsize=(max(4, 0.5 * L * H + 2), 3.5))
        w = 0.8 / L
        for layer in range(L):
            ax.bar(np.arange(H) + layer * w, s[layer], width=w, label=f"layer {layer}")
        ax.set_xticks(np.arange(H) + 0.4 - w / 2, [f"head {h}" for h in range(H)])
        ax.set_ylabel(title)
        ax.legend()
    elif kind == "heatmap":
        fig, ax = plt.subplots(figsize=(1.2 + 0.8 * H, 1.0 + 0.7 * L))
        im = ax.imshow(s, cmap="magma", vmin=min(0.0, s.min()), vmax=max(1.0, s.max()))
        for layer in range(L):
            for h in range(H):
                ax.text(h, layer, f"{s[layer, h]:.2f}", ha="center", va="center", color="w")
        ax.set_xticks(range(H), [f"h{h}" for h in range(H)])
        ax.set_yticks(range(L), [f"L{layer}" for layer in range(L)])
        fig.colorbar(im, ax=ax, label=title)
        ax.set_title(title)
    else:
        raise ValueError(f"kind must be 'heatmap' or 'bar', got {kind!r}")
    return _save(fig, path)
