"""Train a GPT on a text file: the loop nanoGPT made familiar, in a few readable pieces.

    python -m gpt train --text input.txt --max-iters 2000

Every ``eval_interval`` iterations the loss is estimated on ``eval_iters`` random batches of
the training and validation splits, logged (JSON lines), and a checkpoint is written
atomically. ``--resume`` reloads the checkpoint — model, optimizer moments, learning-rate
step, and the random generators' states — so the run continues bit for bit as if it had
never stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

import nn
import tensorlab as tl
from gpt.config import GPTConfig
from gpt.data import check_length, get_batch, load_text, split_ids
from gpt.model import GPT
from tensorlab.blas_threads import blas_threads


@dataclass
class TrainConfig:
    """How to train (the model's shape lives in GPTConfig)."""

    text: str | None = None  # path; None = the CPython docs text (gpt.data.default_text)
    tokenizer: str = "char"  # char | bpe | wordpiece | unigram | path to a saved tokenizer
    tokenizer_vocab_size: int = 512  # for trained subword tokenizers
    out_dir: str = "out"
    max_iters: int = 2000
    eval_interval: int = 250
    eval_iters: int = 200
    log_interval: int = 10
    batch_size: int = 12
    learning_rate: float = 1e-3
    min_lr: float = 1e-4
    warmup_iters: int = 100
    lr_decay_iters: int | None = None  # None = max_iters
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0
    val_fraction: float = 0.1
    seed: int = 1337
    device: str = "cpu"
    threads: int | None = None  # CPU threads sharing each batch (nn.data_parallel); None: auto
    resume: bool = False
    sample_tokens: int = 200
    progress: bool = True
    extra: dict = field(default_factory=dict)


def learning_rate(it: int, cfg: TrainConfig) -> float:
    """Linear warmup to ``learning_rate``, then cosine decay to ``min_lr``
    (:func:`nn.optim.cosine_with_warmup`)."""
    total = max(cfg.lr_decay_iters or cfg.max_iters, cfg.warmup_iters)
    return nn.optim.cosine_with_warmup(it, cfg.warmup_iters, total, cfg.learning_rate, cfg.min_lr)


def build_tokenizer(cfg: TrainConfig, text: str):
    """Train the chosen tokenizer on the text, or load a saved one."""
    import gpt.tokenizers as tk

    if cfg.tokenizer in tk.KINDS:
        cls = tk.KINDS[cfg.tokenizer]
        if cfg.tokenizer == "char":
            return cls.train(text)
        return cls.train(text, vocab_size=cfg.tokenizer_vocab_size)
    return tk.load(cfg.tokenizer)


def estimate_loss(
    model: nn.Module, splits: dict, cfg: TrainConfig, block_size: int, it: int
) -> dict[str, float]:
    """Mean loss over ``eval_iters`` random batches of each split, in eval mode.

    The batches come from a generator seeded by (seed, iteration), so evaluating never
    disturbs the training batches' random stream."""
    out = {}
    with nn.evaluating(model):
        for name, ids in splits.items():
            rng = np.random.default_rng([cfg.seed, it, len(name)])
            losses = []
            for _ in range(cfg.eval_iters):
                x, y = get_batch(ids, block_size, cfg.batch_size, rng)
                _, loss = model(tl.tensor(x, device=cfg.device), tl.tensor(y, device=cfg.device))
                losses.append(loss.item())
            out[name] = float(np.mean(losses))
    return out


def cpu_threads(cfg: TrainConfig) -> int:
    """How many threads share each batch: 1 on a GPU; ``cfg.threads``, or min(2, cores)."""
    if cfg.device != "cpu":
        return 1
    if cfg.threads is not None:
        if cfg.threads < 1:
            raise ValueError(f"TrainConfig.threads must be ≥ 1 (None = automatic): {cfg.threads}")
        return cfg.threads
    return min(2, nn.data_parallel.cores())


# On a terminal the progress line rewrites itself; in a log file each update is a line.
_CR, _END = ("\r", "") if sys.stderr.isatty() else ("", "\n")


class Trainer:
    """Holds everything a run needs, so that a checkpoint can capture and restore it."""

    def __init__(
        self, model_cfg: GPTConfig, cfg: TrainConfig, text: str | None = None, tokenizer=None
    ):
        self.cfg = cfg
        self.out = Path(cfg.out_dir)
        text = load_text(cfg.text) if text is None else text
        self.tokenizer = tokenizer or build_tokenizer(cfg, text)
        if model_cfg.vocab_size != self.tokenizer.vocab_size:
            model_cfg = GPTConfig.from_dict(
                {**model_cfg.to_dict(), "vocab_size": self.tokenizer.vocab_size}
            )
        ids = np.asarray(self.tokenizer.encode(text), dtype=np.int64)
        train_ids, val_ids = split_ids(ids, cfg.val_fraction)
        check_length(train_ids, model_cfg.block_size, "training")
        check_length(val_ids, model_cfg.block_size, "validation")
        self.splits = {"train": train_ids, "val": val_ids}
        self.model_cfg = model_cfg

        tl.manual_seed(cfg.seed)
        self.model = GPT(model_cfg).to(cfg.device)
        self.threads = cpu_threads(cfg)
        # On a CPU the batch is split over threads (nn/data_parallel.py): the same step, run
        # on pieces at once. ``self.model`` is the GPT itself (what checkpoints hold).
        self.parallel = nn.DataParallel(self.model, self.threads) if self.threads > 1 else None
        groups = nn.optim.param_groups_for_decay(self.model, cfg.weight_decay)
        self.optimizer = nn.optim.AdamW(
            groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), threads=self.threads
        )
        self.rng = np.random.default_rng(cfg.seed)
        self.iter = 0
        self.history: list[dict] = []

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_path(self) -> Path:
        return self.out / "ckpt.safetensors"

    def save(self) -> None:
        """Write model, optimizer, iteration and random states atomically."""
        self.out.mkdir(parents=True, exist_ok=True)
        self.tokenizer.save(self.out / "tokenizer.json")
        nn.serialization.save_checkpoint(
            self.checkpoint_path,
            self.model,
            self.optimizer,
            iter=self.iter,
            model_config=self.model_cfg.to_dict(),
            rng_state=self.rng.bit_generator.state,
            tl_rng_state=tl.backend.generator(self.cfg.device).bit_generator.state,
            history=self.history,
        )

    def load(self) -> None:
        """Restore everything :meth:`save` wrote (the configs must match)."""
        extra = nn.serialization.load_checkpoint(self.checkpoint_path, self.model, self.optimizer)
        if extra.get("model_config") != self.model_cfg.to_dict():
            raise ValueError(
                f"checkpoint {self.checkpoint_path} was written for a different model config:\n"
                f"  checkpoint: {extra.get('model_config')}\n  this run:   "
                f"{self.model_cfg.to_dict()}"
            )
        self.iter = int(extra["iter"])
        self.rng.bit_generator.state = extra["rng_state"]
        tl.backend.generator(self.cfg.device).bit_generator.state = extra["tl_rng_state"]
        self.history = list(extra.get("history", []))

    # ------------------------------------------------------------------ the loop
    def step(self) -> float:
        """One optimization step on a fresh random batch; returns the loss."""
        cfg = self.cfg
        lr = learning_rate(self.iter, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(self.splits["train"], self.model_cfg.block_size, cfg.batch_size, self.rng)
        x, y = tl.tensor(x, device=cfg.device), tl.tensor(y, device=cfg.device)
        model = self.parallel or self.model
        self.optimizer.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        if cfg.grad_clip > 0:
            nn.optim.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
        self.optimizer.step()
        self.iter += 1
        return loss.item()

    def run(self, max_iters: int | None = None) -> list[dict]:
        cfg = self.cfg
        stop = cfg.max_iters if max_iters is None else max_iters
        if cfg.resume and self.checkpoint_path.exists():
            self.load()
        log = self.out / "log.jsonl"
        self.out.mkdir(parents=True, exist_ok=True)
        tokens_per_iter = cfg.batch_size * self.model_cfg.block_size
        # With the batch split over threads, the pieces share the cores with BLAS: on two cores
        # each piece's matrix products get one BLAS thread (see docs/data_parallel.md).
        if self.threads > 1:
            share = blas_threads(nn.data_parallel.blas_threads_per_piece(self.threads))
        else:
            share = contextlib.nullcontext()
        with share:
            self._loop(stop, log, tokens_per_iter)
        return self.history

    def _loop(self, stop: int, log: Path, tokens_per_iter: int) -> None:
        cfg = self.cfg
        t0, last = time.perf_counter(), self.iter
        while self.iter < stop:
            loss = self.step()
            it = self.iter
            if cfg.progress and (it % cfg.log_interval == 0 or it == stop):
                dt = time.perf_counter() - t0
                tps = tokens_per_iter * (it - last) / max(dt, 1e-9)
                lr = learning_rate(it - 1, cfg)
                print(
                    f"{_CR}iter {it:>5}/{stop}  loss {loss:.4f}  lr {lr:.2e}  {tps:,.0f} tok/s",
                    end=_END,
                    file=sys.stderr,
                    flush=True,
                )
                t0, last = time.perf_counter(), it
            if it % cfg.eval_interval == 0 or it == stop:
                model = self.parallel or self.model
                losses = estimate_loss(model, self.splits, cfg, self.model_cfg.block_size, it)
                record = {
                    "iter": it,
                    "train_loss": losses["train"],
                    "val_loss": losses["val"],
                    "lr": learning_rate(it - 1, cfg),
                }
                self.history.append(record)
                with open(log, "a") as f:
                    f.write(json.dumps(record) + "\n")
                if cfg.progress:
                    print(
                        f"{_CR}iter {it:>5}: train {losses['train']:.4f}, val "
                        f"{losses['val']:.4f}" + " " * (30 if _CR else 0),
                        file=sys.stderr,
                    )
                self.save()

    def sample(
        self,
        prompt: str | None = None,
        max_new_tokens: int | None = None,
        temperature: float = 0.8,
        top_k: int | None = 40,
    ) -> str:
        """Generated text; without a prompt it starts from the training text's first token."""
        from gpt.generate import generate

        ids = self.tokenizer.encode(prompt) if prompt else [int(self.splits["train"][0])]
        out = generate(
            self.model,
            ids,
            max_new_tokens or self.cfg.sample_tokens,
            temperature=temperature,
            top_k=top_k,
            seed=self.cfg.seed,
        )
        return self.tokenizer.decode(out)


def plot_history(history: list[dict], path: str | os.PathLike) -> bool:
    """Save a PNG loss curve if matplotlib is installed; returns whether it did."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    its = [h["iter"] for h in history]
    ax.plot(its, [h["train_loss"] for h in history], label="train")
    ax.plot(its, [h["val_loss"] for h in history], label="val")
    ax.set_xlabel("iteration")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def config_summary(model_cfg: GPTConfig, cfg: TrainConfig) -> str:
    return json.dumps({"model": model_cfg.to_dict(), "train": asdict(cfg)}, indent=1)
