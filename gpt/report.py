"""A training run's health on one page: ``python -m gpt report RUN_DIR`` reads log.jsonl and
watch.jsonl (gpt/watch.py) and writes ``RUN_DIR/report/report.html``, self-contained (its
figures embedded), with each figure also saved beside it as a PNG. The page opens with what
looks wrong by the rules in ``RULES`` (docs/watching_training.md reads an example).
"""

from __future__ import annotations

import base64
import html
import math
import os
from pathlib import Path

import numpy as np

from gpt import plots
from gpt.run_folder import RunFolder

BAND = (3e-4, 3e-3)  # the commonly cited update-to-weight ratio, ~1e-3 (Karpathy, makemore)
EXPLODING = 1e-1  # a matrix's update ratio above this: each step moves it by a tenth
VANISHING = 1e-5  # below this at the end: the matrix has stopped moving
DEAD = 0.25  # a share of dead (or saturated) MLP units above this, at the end
COLLAPSED = 0.1  # nats: a head this sure attends to one key nearly everywhere
RULES = (
    f"exploding updates: a weight matrix's update ratio |Δw|/|w| above {EXPLODING:g}, or a "
    "non-finite gradient or ratio, at any watched step",
    f"vanishing updates: a weight matrix's update ratio below {VANISHING:g} at the last step",
    f"dead (saturated) units: more than {DEAD:.0%} of a block's MLP units never positive "
    "(always in a tail) on the fixed batch, at the last step",
    f"collapsed attention: half of the heads or more with a mean entropy below {COLLAPSED:g} "
    "nats at the last step",
)


def matrices(record: dict) -> dict[str, float]:
    """The update ratios of the weight matrices (parameters named W...: no biases, no gains)."""
    return {k: v for k, v in record["update_ratio"].items() if k.rsplit(".", 1)[-1][0] == "W"}


def flags(watch: list[dict]) -> list[str]:
    """A plain sentence for each rule (``RULES``) the records break; none for a healthy run."""
    if not watch:
        return []
    out, last = [], watch[-1]
    values = [v for r in watch for k in ("update_ratio", "grad_norm") for v in r[k].values()]
    big = [(r["iter"], k, v) for r in watch for k, v in matrices(r).items() if v > EXPLODING]
    if big or not all(map(math.isfinite, values)):
        it, name, v = big[0] if big else (None, None, None)
        where = f"the first: {name}, {v:.2g} at iteration {it}" if big else "non-finite values"
        out.append(
            f"Exploding updates: a step moved a weight matrix by more than {EXPLODING:g} of its "
            f"size ({where}); lower the learning rate or lengthen the warmup."
        )
    small = [k for k, v in matrices(last).items() if v < VANISHING]
    if small:
        out.append(
            f"Vanishing updates: {', '.join(small)} moved by less than {VANISHING:g} of their "
            f"size at iteration {last['iter']}; the learning rate may be too low."
        )
    for key, name, what in (
        ("mlp_dead", "Dead", "never positive"),
        ("mlp_saturated", "Saturated", "always in a tail"),
    ):
        shares = [(i, b[key]) for i, b in enumerate(last["blocks"]) if (b[key] or 0) > DEAD]
        if shares:
            listed = ", ".join(f"{s:.0%} in block {i}" for i, s in shares)
            out.append(f"{name} units: MLP units {what} on the fixed batch: {listed}.")
    ent = np.array([b["attn_entropy"] for b in last["blocks"]])  # host: JSON numbers
    if ent.size and (ent < COLLAPSED).mean() >= 0.5:
        out.append(
            f"Collapsed attention: {(ent < COLLAPSED).sum()} of {ent.size} heads attend to one "
            f"key nearly everywhere (entropy below {COLLAPSED:g} nats)."
        )
    return out


def _lr_and_grad_norm(log: list[dict], clip: float, path) -> str:
    steps = [r for r in log if "lr" in r]
    fig, (top, bottom) = plots._pyplot().subplots(2, 1, figsize=(7, 4.5), sharex=True)
    its = [r["iter"] for r in steps]
    top.plot(its, [r["lr"] for r in steps])
    top.set_ylabel("learning rate")
    bottom.semilogy(its, [r["grad_norm"] for r in steps], lw=0.8)
    if clip > 0:
        bottom.axhline(clip, color="k", ls=":", label=f"--grad-clip {clip:g}")
        bottom.legend()
    bottom.set_ylabel("gradient norm")
    bottom.set_xlabel("iteration")
    return plots._save(fig, path)


def _update_ratios(watch: list[dict], path) -> str:
    names = list(matrices(watch[-1]))
    its = [r["iter"] for r in watch]
    ratios = [[max(matrices(r).get(n, np.nan), 1e-30) for r in watch] for n in names]
    logr = np.log10(ratios)  # host: JSON numbers
    plt = plots._pyplot()
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(8, 3 + 0.16 * len(names)), height_ratios=(1, 2.5)
    )
    top.axhspan(*BAND, color="g", alpha=0.15, label="~1e-3 band")
    lo, hi = 10 ** np.nanpercentile(logr, [0, 100], axis=0)  # host: JSON numbers
    top.fill_between(its, lo, hi, alpha=0.3)
    median = 10 ** np.nanmedian(logr, axis=0)  # host: JSON numbers
    top.semilogy(its, median, label="median (shaded: min to max)")
    top.set_ylabel("|Δw| / |w|")
    top.legend(fontsize=7)
    im = bottom.imshow(
        logr, aspect="auto", cmap="RdBu_r", vmin=-5, vmax=-1, interpolation="nearest"
    )
    bottom.set_yticks(range(len(names)), names, fontsize=6)
    ticks = np.linspace(0, len(its) - 1, min(len(its), 8)).astype(int)  # host: JSON numbers
    bottom.set_xticks(ticks, [its[i] for i in ticks])
    bottom.set_xlabel("iteration")
    bar = fig.colorbar(im, ax=bottom, label="log10 |Δw| / |w|")
    for edge in BAND:
        bar.ax.axhline(math.log10(edge), color="k", lw=1.5)
    return plots._save(fig, path)


def _per_block(watch: list[dict], path, block_size: int) -> str:
    """Attention entropy per head, and residual RMS, dead / saturated units, largest logit."""
    plt = plots._pyplot()
    fig, axes = plt.subplots(4, 1, figsize=(7, 10), sharex=True)
    its = [r["iter"] for r in watch]
    for i in range(len(watch[0]["blocks"])):
        ent = np.array([r["blocks"][i]["attn_entropy"] for r in watch])  # host: JSON numbers
        for h in range(ent.shape[1]):
            axes[0].plot(its, ent[:, h], color=f"C{i}", label=f"layer {i}" if h == 0 else None)
        axes[1].semilogy(its, [r["blocks"][i]["resid_rms"] for r in watch], color=f"C{i}")
        for key, style in (("mlp_dead", "-"), ("mlp_saturated", ":")):
            share = [r["blocks"][i][key] for r in watch]
            if share[-1] is not None:
                axes[2].plot(its, share, style, color=f"C{i}")
    uniform = np.log(np.arange(1, block_size + 1)).mean()  # host: a number
    axes[0].axhline(uniform, color="k", ls="--", lw=0.8, label="uniform over the context")
    axes[0].axhline(COLLAPSED, color="r", ls=":", lw=0.8, label="collapsed")
    axes[0].set_ylabel("attention entropy\n(nats, each head)")
    axes[0].legend(fontsize=7, ncol=2)
    axes[1].set_ylabel("residual RMS\n(after each block)")
    axes[2].set_ylabel("MLP units: dead (—)\nsaturated (···)")
    axes[2].set_ylim(-0.02, 1.02)
    axes[3].semilogy(its, [r["max_logit"] for r in watch], color="k")
    axes[3].set_ylabel("largest |logit|")
    axes[3].set_xlabel("iteration")
    return plots._save(fig, path)


def _circuits(watch: list[dict], path) -> str:
    plt = plots._pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2), sharey=True)
    its = [r["iter"] for r in watch]
    for ax, key in zip(axes, ("induction", "previous_token")):
        scores = np.array([r[key] for r in watch])  # host: JSON numbers (time, layer, head)
        for i in range(scores.shape[1]):
            ax.plot(its, scores[:, i].max(-1), color=f"C{i}", label=f"layer {i}")
        ax.set_title(f"{key.replace('_', '-')} score (best head of each layer)", fontsize=9)
        ax.set_xlabel("iteration")
    axes[0].legend(fontsize=7)
    return plots._save(fig, path)


def report(run_dir, out_dir=None) -> Path:
    """Write the report of the run in ``run_dir`` (default place: ``run_dir/report``); returns
    the HTML file's path."""
    run = RunFolder(run_dir)
    config, log, watch = run.read_config(), run.read_log(), run.read_log(run.watch)
    out = Path(out_dir or run.path / "report")
    out.mkdir(parents=True, exist_ok=True)
    sections = [("Loss", plots.loss_curve(log, out / "loss.png"))]
    clip = config["train"].get("grad_clip", 0.0)
    sections.append(
        ("Learning rate and gradient norm", _lr_and_grad_norm(log, clip, out / "lr.png"))
    )
    if watch:
        sections += [
            ("Update ratios of the weight matrices", _update_ratios(watch, out / "updates.png")),
            (
                "Attention entropy and activations",
                _per_block(watch, out / "blocks.png", config["model"]["block_size"]),
            ),
        ]
        if "induction" in watch[-1]:
            sections.append(
                ("Induction and previous-token heads", _circuits(watch, out / "circuits.png"))
            )
    found = flags(watch)
    if not watch:
        summary = ["No watch.jsonl: train with --watch-interval N to record the run's health."]
    else:
        summary = found or ["Nothing looks wrong by the rules below."]
    body = "".join(f"<p class={'bad' if found else 'ok'}>{html.escape(s)}</p>" for s in summary)
    body += "<details><summary>rules</summary><ul>"
    body += "".join(f"<li>{html.escape(r)}</li>" for r in RULES) + "</ul></details>"
    for title, png in sections:
        data = base64.b64encode(Path(png).read_bytes()).decode()
        body += f"<h2>{title}</h2><img alt='{title}' src='data:image/png;base64,{data}'>"
    name = html.escape(os.path.basename(os.path.abspath(run.path)))
    page = (
        f"<!doctype html><meta charset=utf-8><title>{name}: training report</title>"
        "<style>body{font:15px sans-serif;max-width:900px;margin:auto}img{max-width:100%}"
        ".bad{color:#b00;font-size:17px}.ok{color:#070;font-size:17px}</style>"
        f"<h1>Training report: {name}</h1>{body}"
    )
    path = out / "report.html"
    path.write_text(page)
    return path
