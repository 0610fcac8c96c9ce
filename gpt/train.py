"""Train a GPT on a text file: the loop nanoGPT made familiar, in a few readable pieces.

    python -m gpt train --text input.txt --max-iters 2000

Each step draws a random batch and takes one AdamW step (``grad_accum_steps`` micro-batches
add their gradients first). Every ``eval_interval`` iterations (and at iteration 0) both splits'
losses are estimated, then the checkpoint and the log are written; ``resume`` continues from
the checkpoint bit for bit. A non-finite loss or gradient stops the run before anything is
saved (:class:`Diverged`), its step replayed to name the first op that went non-finite
(gpt/divergence.py); Ctrl-C or SIGTERM finishes the step, saves, and stops
(:class:`Interrupted`). The run folder's rules: gpt/run_folder.py.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

import nn
import nn.amp
import tensorlab as tl
from gpt import token_files
from gpt.config import GPTConfig, TrainConfig, bad_value, check_device
from gpt.data import check_length, get_batch, load_text, split_ids
from gpt.divergence import NOT_FOUND, first_nonfinite
from gpt.model import GPT
from gpt.run_folder import RunFolder, recorded, text_digest, tokenizer_digest
from gpt.watch import Watcher
from tensorlab.blas_threads import blas_threads


class Diverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint is kept."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: the step in progress was finished and a checkpoint saved."""


def learning_rate(it: int, cfg: TrainConfig) -> float:
    """Linear warmup to ``learning_rate``, then cosine decay to ``min_lr``
    (:func:`nn.optim.cosine_with_warmup`)."""
    total = max(cfg.lr_decay_iters or cfg.max_iters, cfg.warmup_iters)
    return nn.optim.cosine_with_warmup(it, cfg.warmup_iters, total, cfg.learning_rate, cfg.min_lr)


def build_tokenizer(cfg: TrainConfig, text: str):
    """Train the chosen tokenizer on the text, or load a saved one."""
    import gpt.tokenizers as tk

    if cfg.tokenizer not in tk.KINDS:
        return tk.load(cfg.tokenizer)
    kw = {} if cfg.tokenizer == "char" else {"vocab_size": cfg.tokenizer_vocab_size}
    if cfg.tokenizer == "bpe":  # the one trainer with a progress bar (its merges)
        kw["verbose"] = cfg.progress and sys.stderr.isatty()
    return tk.KINDS[cfg.tokenizer].train(text, **kw)


def estimate_loss(
    model: nn.Module, splits: dict, cfg: TrainConfig, block_size: int, it: int, dist=None
) -> dict[str, float]:
    """Mean loss over ``eval_iters`` random batches of each split, in eval mode, drawn from a
    generator seeded by (seed, iteration), not the training stream. In an MPI job rank r runs
    the batches i with i mod N = r and the sums are added: the same mean as one process."""
    from tqdm import tqdm

    dist = dist or nn.distributed.Solo()
    sums = []
    with nn.evaluating(model):
        for name, ids in splits.items():
            rng = np.random.default_rng([cfg.seed, it, len(name)])
            total, shown = 0.0, cfg.progress and sys.stderr.isatty() and dist.rank == 0
            for i in tqdm(range(cfg.eval_iters), f"eval {name}", leave=False, disable=not shown):
                x, y = get_batch(ids, block_size, cfg.batch_size, rng)  # drawn on every rank
                if i % dist.size == dist.rank:
                    x, y = tl.tensor(x, device=cfg.device), tl.tensor(y, device=cfg.device)
                    with tl.autocast(cfg.dtype):  # (the training step's dtype)
                        total += model(x, y)[1].item()
            sums.append(total)
    sums = dist.sum(np.array(sums))  # host: Python floats, summed over ranks by MPI
    return {name: float(v) / cfg.eval_iters for name, v in zip(splits, sums)}


def _float16_scaler(state) -> bool:
    """Whether a checkpoint's ``loss_scaler`` entry is a float16 run's scale (to resume):
    not None, and not the pass-through scale 1.0 with no step skipped that older float32
    checkpoints saved (a float16 run starts at 2¹⁶ and only a skipped step lowers it)."""
    if not isinstance(state, dict):
        return False
    return not (state.get("scale") == 1.0 and state.get("skipped", 0) == 0)


class Trainer:
    """Holds everything a run needs, so that a checkpoint can capture and restore it. With
    ``cfg.resume`` the tokenizer is the run's own (:meth:`RunFolder.check_resume`). Under
    ``mpiexec -n N`` each process trains on its share of every batch and the gradients are
    averaged (nn/distributed.py); rank 0 alone writes the run's files."""

    def __init__(
        self,
        model_cfg: GPTConfig,
        cfg: TrainConfig,
        text: str | None = None,
        tokenizer=None,
        dist=None,
    ):
        self.cfg = cfg
        self.dist = dist = dist or nn.distributed.world()
        if cfg.batch_size % dist.size:
            raise bad_value(
                "batch_size", cfg.batch_size, f"must be divisible by the {dist.size} processes"
            )
        self.run_folder = RunFolder(cfg.out_dir)
        self.run_folder.claim(cfg.resume, cfg.overwrite)
        self.run_folder.check_unlocked()
        check_device(cfg.device)
        # What the run trains on, as config.json and every checkpoint record it.
        self.record = {"train": recorded(cfg), "processes": dist.size}
        if cfg.data is not None:  # tokenized once by ``prepare``, read through memory maps
            tokenizer, self.splits, meta = token_files.load(cfg.data)
            self.record["text_digest"] = meta["text_digest"]
            self.record["data_tokens"] = {name: len(ids) for name, ids in self.splits.items()}
        else:
            text = load_text(cfg.text) if text is None else text
            self.record["text_digest"] = text_digest(text)
        if cfg.resume:  # the run's own tokenizer, once this run is checked to continue it
            now = {**self.record, "model": model_cfg.to_dict()}
            tokenizer = self.run_folder.check_resume(now, tokenizer if cfg.data else None)
        self.tokenizer = tokenizer or build_tokenizer(cfg, text)
        self.tokenizer_digest = tokenizer_digest(self.tokenizer)  # (each checkpoint records it)
        if model_cfg.vocab_size != self.tokenizer.vocab_size:
            model_cfg = dataclasses.replace(model_cfg, vocab_size=self.tokenizer.vocab_size)
        if cfg.data is None:
            ids = np.asarray(self.tokenizer.encode(text), dtype=np.int64)  # host: token ids
            self.splits = dict(zip(("train", "val"), split_ids(ids, cfg.val_fraction)))
        check_length(self.splits["train"], model_cfg.block_size, "training")
        check_length(self.splits["val"], model_cfg.block_size, "validation")
        self.model_cfg = model_cfg

        tl.manual_seed(cfg.seed)
        self.model = GPT(model_cfg).to(cfg.device)
        if dist.size > 1:  # each rank its own dropout stream (the model: see run)
            tl.manual_seed(int(np.random.SeedSequence([cfg.seed, dist.rank]).generate_state(1)[0]))
        groups = nn.optim.param_groups_for_decay(self.model, cfg.weight_decay)
        self.optimizer = nn.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2))
        # float16 needs loss scaling (nn.amp); float32 and bfloat16 get a pass-through scaler
        self.scaler = nn.amp.GradScaler(enabled=cfg.dtype == "float16")
        self.rng = np.random.default_rng(cfg.seed)
        self.iter = 0
        self.history: list[dict] = []  # evaluation records
        self.pending: list[dict] = []  # log records not yet in log.jsonl (since the last save)
        self.best_val = math.inf
        self._stop: str | None = None  # set by a signal: finish the step, save, stop
        self._stopping: str | None = None  # the same, once all ranks know (see step)
        self._began = False  # whether run() has taken the folder once (then it is this run's)

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_path(self) -> Path:
        return self.run_folder.ckpt

    def _extra(self) -> dict:
        return dict(
            iter=self.iter,
            model_config=self.model_cfg.to_dict(),
            rng_state=self.rng.bit_generator.state,
            tl_rng_states=self.dist.gather(tl.backend.generator_state(self.cfg.device)),
            history=self.history,
            loss_scaler=self.scaler.state_dict() if self.scaler.enabled else None,
            log_tail=self.pending,
            best_val=self.best_val,
            # what the run trains on: RunFolder.check_resume checks a resumed run against it
            train=self.record["train"],
            text_digest=self.record["text_digest"],
            data_tokens=self.record.get("data_tokens"),
            tokenizer_digest=self.tokenizer_digest,
        )

    def save(self) -> None:
        """Write the checkpoint (and, on a new best validation loss, the best one), then the
        log records since the last save. Each file is written atomically, by rank 0 only."""
        run, extra = self.run_folder, self._extra()  # (every rank takes part in the gather)
        val = self.history[-1]["val_loss"] if self.history else math.inf
        best = self.history and self.history[-1]["iter"] == self.iter and val < self.best_val
        if best:
            self.best_val = extra["best_val"] = val
        if self.dist.rank == 0:
            if not run.tokenizer.exists():
                self.tokenizer.save(run.tokenizer)
            if best:
                nn.serialization.save_checkpoint(run.best, self.model, None, **extra)
            nn.serialization.save_checkpoint(run.ckpt, self.model, self.optimizer, **extra)
            run.append_log(self.pending)
        self.pending = []

    def load(self) -> None:
        """Restore everything :meth:`save` wrote, and make the log agree with the checkpoint."""
        path = self.checkpoint_path
        extra = nn.serialization.load_checkpoint(path, self.model, self.optimizer)
        # The optimizer's state brings back the hyperparameters it was saved with; this run's
        # config decides them instead (as it does the learning rate at every step), so that a
        # resume with another --weight-decay, --beta1 or --beta2 trains as its config.json says.
        decay, _ = self.optimizer.param_groups  # param_groups_for_decay: decayed, then not
        decay["weight_decay"] = self.cfg.weight_decay
        for group in self.optimizer.param_groups:
            group["betas"] = (self.cfg.beta1, self.cfg.beta2)
        try:
            self.iter = int(extra["iter"])
            self.rng.bit_generator.state = extra["rng_state"]
            states = list(extra["tl_rng_states"])
            self.history = list(extra.get("history", []))
            tail = list(extra.get("log_tail", []))
            self.best_val = float(extra.get("best_val", math.inf))
            if self.scaler.enabled and _float16_scaler(extra.get("loss_scaler")):
                self.scaler.load_state_dict(extra["loss_scaler"])
        except (KeyError, TypeError, ValueError) as err:
            raise nn.serialization.SerializationError(
                f"{path}: damaged checkpoint metadata ({type(err).__name__}: {err})"
            ) from err
        tl.backend.set_generator_state(states[self.dist.rank], self.cfg.device)
        # The log holds every record up to the previous save; the checkpoint holds the
        # records since then. Records past the checkpoint (from a run killed later) go.
        since = tail[0]["iter"] if tail else self.iter + 1
        if self.dist.rank == 0:
            kept = [r for r in self.run_folder.read_log() if r.get("iter", math.inf) < since]
            self.run_folder.rewrite_log(kept + tail)

    # ------------------------------------------------------------------ the loop
    def step(self) -> float:
        """One optimization step on a fresh random batch; returns the loss."""
        cfg = self.cfg
        lr = learning_rate(self.iter, cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(
            self.splits["train"],
            self.model_cfg.block_size,
            cfg.grad_accum_steps * cfg.batch_size,
            self.rng,
        )
        self.optimizer.zero_grad()
        # In an MPI job every rank drew the same batch and runs its own share of the rows;
        # the gradients are then averaged, and with them the loss and the stop requests.
        dist, rows = self.dist, len(x) // self.dist.size
        mine = slice(dist.rank * rows, (dist.rank + 1) * rows)
        loss = self.backward(x[mine], y[mine])
        asked = self._stop is not None
        loss, stops = dist.average_gradients(self.model.parameters(), [loss, asked])
        loss /= dist.size
        if stops:  # decided together, so that every rank stops after the same step
            self._stopping = self._stop or "a signal to another process"
        overflow = self.scaler.unscale_(self.optimizer)  # (float16: the true gradients)
        clip = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
        grad_norm = nn.optim.clip_grad_norm_(self.model.parameters(), clip)
        if not math.isfinite(loss):
            raise self._diverged("training loss", loss, x[mine], y[mine])
        if not (math.isfinite(grad_norm) or overflow):  # a float16 overflow skips the step
            raise self._diverged("gradient norm", grad_norm, x[mine], y[mine])
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.iter += 1
        record = {"iter": self.iter, "loss": loss, "lr": lr, "grad_norm": grad_norm}
        if self.scaler.enabled:
            record["loss_scale"] = self.scaler.scale_value
            record["skipped"] = overflow
        self.pending.append(record)
        return loss

    def backward(self, x: np.ndarray, y: np.ndarray) -> float:
        """Add the batch's gradient to the parameters' ``.grad``; returns the batch's loss.
        The batch runs as K = ``grad_accum_steps`` micro-batches, each loss scaled by 1/K, under
        ``tl.autocast(dtype)``; float16's loss is scaled (``self.scaler``)."""
        k, device = self.cfg.grad_accum_steps, self.cfg.device
        model = self.model
        total = 0.0  # summed on the device, read once (on a GPU each read waits for it)
        for xk, yk in zip(np.split(x, k), np.split(y, k)):  # host: batches from get_batch
            with tl.autocast(self.cfg.dtype):
                _, loss = model(tl.tensor(xk, device=device), tl.tensor(yk, device=device))
            self.scaler.scale(loss if k == 1 else loss * (1.0 / k)).backward()
            total = total + loss.data.astype(np.float64) / k
        return float(total)

    def _diverged(self, what: str, value: float, x=None, y=None, at=None) -> Diverged:
        """The error to raise at iteration ``at`` (default: the step being taken); given the
        step's batch ``x``, ``y`` (host arrays, this rank's rows), the step is replayed to name
        the first op that made NaN or Inf (gpt/divergence.py), in the message and, beside a
        checkpoint, in a log record."""
        cfg, saved = self.cfg, self.checkpoint_path.exists()
        at = self.iter + 1 if at is None else at
        kept = (
            f"the checkpoint {self.checkpoint_path} is kept"
            if saved
            else "no checkpoint was written"
        )
        if x is not None:
            finding, k = None, cfg.grad_accum_steps
            for xk, yk in zip(np.split(x, k), np.split(y, k)):  # host: the micro-batches
                xk, yk = tl.tensor(xk, device=cfg.device), tl.tensor(yk, device=cfg.device)
                finding = finding or first_nonfinite(self.model, xk, yk, cfg.dtype)
            kept += f"; {finding or NOT_FOUND}"
            if saved and self.dist.rank == 0:  # (the records since the last save, and this)
                record = {"iter": at, "diverged": f"the {what} is {value}"}
                record["first_nonfinite"] = finding and dataclasses.asdict(finding)
                self.run_folder.append_log([*self.pending, record])
                self.pending = []
        return Diverged(
            f"training diverged: the {what} is {value} at iteration {at}; {kept}; "
            f"try a lower --learning-rate (now {self.cfg.learning_rate:g}), "
            f"--grad-clip (now {self.cfg.grad_clip:g}) or more --warmup-iters "
            f"(now {self.cfg.warmup_iters})"
        )

    def evaluate(self) -> dict:
        """Estimate both splits' losses at this iteration; the record joins the history."""
        losses = estimate_loss(
            self.model, self.splits, self.cfg, self.model_cfg.block_size, self.iter, self.dist
        )
        for name in ("train", "val"):
            if not math.isfinite(losses[name]):
                raise self._diverged(f"{name} loss", losses[name], at=self.iter)
        record = {"iter": self.iter, "train_loss": losses["train"], "val_loss": losses["val"]}
        self.history.append(record)
        self.pending.append(record)
        return record

    def run(self, max_iters: int | None = None) -> list[dict]:
        """Train to ``max_iters`` (default ``cfg.max_iters``); returns the evaluation records.

        Raises :class:`Diverged` on a non-finite loss (nothing saved) and :class:`Interrupted`
        after Ctrl-C or SIGTERM (a checkpoint saved first)."""
        cfg = self.cfg
        stop = cfg.max_iters if max_iters is None else max_iters
        dist = self.dist
        lead = dist.rank == 0  # the rank that writes files and prints
        with dist.together():
            if lead:
                self._take_folder()
        try:
            self._run(stop)
        finally:
            if lead:
                self.run_folder.unlock()
        return self.history

    def _take_folder(self) -> None:
        """Lock the run folder (rank 0 alone), then check again that this run may write into
        it (another run may have since this Trainer was made); the first run() also prepares
        it (:meth:`RunFolder.prepare`)."""
        cfg, folder = self.cfg, self.run_folder
        folder.path.mkdir(parents=True, exist_ok=True)
        folder.lock()
        try:
            if not self._began:
                folder.claim(cfg.resume, cfg.overwrite)
            folder.prepare(overwrite=cfg.overwrite and not cfg.resume and not self._began)
        except BaseException:
            folder.unlock()
            raise
        self._began = True

    def _run(self, stop: int) -> None:
        """:meth:`run`, in the locked folder."""
        cfg, dist, lead = self.cfg, self.dist, self.dist.rank == 0
        dist.broadcast_parameters(self.model.parameters())  # one model everywhere
        with dist.together():
            if cfg.resume:
                self.load()
            if stop < self.iter:  # (else the run would stop at once, having done nothing)
                raise bad_value(
                    "max_iters",
                    stop,
                    f"must be ≥ {self.iter}, the iteration the run in {self.run_folder.path} "
                    "has reached",
                )
        if cfg.resume and cfg.progress and lead:
            print(f"resuming from iteration {self.iter} ({self.checkpoint_path})", file=sys.stderr)
        if lead:
            self.run_folder.write_config({"model": self.model_cfg.to_dict(), **self.record})
        # Processes of one MPI job on one machine share its cores: each one's matrix products
        # get its share of them (BLAS would otherwise start a thread per core in every one).
        threads = max(1, (os.cpu_count() or 1) // dist.local_size)
        share = blas_threads(threads) if dist.size > 1 else contextlib.nullcontext()
        with share, self._signals_stop_after_the_step():
            self._loop(stop)

    @contextlib.contextmanager
    def _signals_stop_after_the_step(self):
        """Ctrl-C and SIGTERM ask the loop to stop after the current step (a second Ctrl-C
        stops at once); on the main thread only, where signals can be caught."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def ask_to_stop(signum, frame):
            if self._stop is not None and signum == signal.SIGINT:
                raise KeyboardInterrupt
            self._stop = signal.Signals(signum).name

        old = {s: signal.signal(s, ask_to_stop) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in old.items():
                signal.signal(s, handler)

    def _loop(self, stop: int) -> None:
        cfg = self.cfg
        progress = Progress(self, stop, shown=cfg.progress and self.dist.rank == 0)
        if self.iter == 0 and not self.history:
            progress.eval(self.evaluate())  # (and the rate's clock starts after it)
        watch = Watcher(self)  # watch.jsonl (gpt/watch.py)
        while self.iter < stop:
            with watch.step():
                progress.step(self.step())
            if self.iter % cfg.eval_interval == 0 or self.iter == stop:
                progress.eval(self.evaluate())
                self.save()
            if self._stopping is not None:
                if self.pending:
                    self.save()
                progress.close()
                raise Interrupted(
                    f"{self._stopping} at iteration {self.iter}: saved {self.checkpoint_path}; "
                    "continue with --resume"
                )
        progress.close()


class Progress:
    """Training progress on stderr (nothing unless ``shown``): a tqdm bar (loss, learning
    rate, tokens/s, ETA) on a terminal; elsewhere a plain line every ``log_interval`` steps."""

    def __init__(self, trainer: Trainer, stop: int, shown: bool):
        from tqdm import tqdm

        self.t, self.stop, self.shown = trainer, stop, shown
        self.tokens = trainer.cfg.batch_size * trainer.cfg.grad_accum_steps
        self.tokens *= trainer.model_cfg.block_size
        self.bar = None
        if shown and sys.stderr.isatty():
            self.bar = tqdm(total=stop, initial=trainer.iter, unit="it", dynamic_ncols=True)
        self.t0, self.last = time.perf_counter(), trainer.iter

    def step(self, loss: float) -> None:
        it, cfg = self.t.iter, self.t.cfg
        if self.bar is not None:
            self.bar.update(1)
        if not self.shown or (it % cfg.log_interval and it != self.stop):
            return
        dt = time.perf_counter() - self.t0
        tps = self.tokens * (it - self.last) / max(dt, 1e-9)
        lr = self.t.pending[-1]["lr"]
        if self.bar is not None:
            self.bar.set_postfix_str(f"loss {loss:.4f}  lr {lr:.2e}  {tps:,.0f} tok/s")
        else:
            eta = (self.stop - it) * dt / max(it - self.last, 1)
            print(
                f"iter {it:>6}/{self.stop}  loss {loss:.4f}  lr {lr:.2e}  "
                f"{tps:,.0f} tok/s  eta {eta:,.0f} s",
                file=sys.stderr,
                flush=True,
            )
        self.t0, self.last = time.perf_counter(), it

    def eval(self, record: dict) -> None:
        if not self.shown:
            return
        line = (
            f"iter {record['iter']:>6}: train loss {record['train_loss']:.4f}, "
            f"val loss {record['val_loss']:.4f}"
        )
        if self.bar is not None:
            self.bar.write(line, file=sys.stderr)
            self.bar.unpause()  # the bar's rate and ETA leave the evaluation's time out too
        else:
            print(line, file=sys.stderr, flush=True)
        self.t0 = time.perf_counter()  # the next rate counts training steps, not evaluation

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
