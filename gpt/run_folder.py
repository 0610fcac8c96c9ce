"""A training run's folder: what it holds, and the rules that keep a trained run from being lost.

::

    out/
      ckpt.safetensors   the newest checkpoint: model, optimizer, iteration, random states
      best.safetensors   the model with the lowest validation loss so far (weights only)
      tokenizer.json     the tokenizer the run was trained with
      config.json        the resolved model and training configs
      log.jsonl          one JSON record per training step and per evaluation (and, after a
                         checkpoint, a "diverged" record naming the first non-finite op)
      watch.jsonl        training-health records every --watch-interval steps (gpt/watch.py)
      loss.png           the loss curve (when matplotlib is installed)
      run.lock           while a run is training: its process id and host

The rules: a folder that holds a run is written into only to resume that run (from its
checkpoint, with the tokenizer.json it was trained with) or to overwrite it (:meth:`claim`);
a run stopped before its first checkpoint has nothing to lose, so a new run replaces its files
(:meth:`only_begun`). Every file is written atomically, and a crash's temporary files are
removed when the next run starts. One run at a time: ``run.lock`` (:meth:`lock`), taken over
when its process is provably gone. A resumed run continues the one its checkpoint records,
or is refused with every difference named (:meth:`check_resume`); config.json is the same
record for people and for ``--resume``'s flags, not a second check.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import tempfile
from dataclasses import asdict
from pathlib import Path

from gpt.config import bad_value
from nn.serialization import atomic_write


class RunError(ValueError):
    """The run folder cannot be used as asked (the message says what to do instead)."""


RUN_FILES = (
    "ckpt.safetensors",
    "best.safetensors",
    "tokenizer.json",
    "config.json",
    "log.jsonl",
    "loss.png",
    "watch.jsonl",
)
LOCK = "run.lock"  # a training run's claim on the folder while it runs (see RunFolder.lock)


class RunFolder:
    """The files of one training run (see the module docstring)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)

    ckpt = property(lambda self: self.path / "ckpt.safetensors")
    best = property(lambda self: self.path / "best.safetensors")
    tokenizer = property(lambda self: self.path / "tokenizer.json")
    config = property(lambda self: self.path / "config.json")
    log = property(lambda self: self.path / "log.jsonl")
    watch = property(lambda self: self.path / "watch.jsonl")
    plot = property(lambda self: self.path / "loss.png")
    lock_file = property(lambda self: self.path / LOCK)

    def holds_run(self) -> bool:
        return any((self.path / name).exists() for name in RUN_FILES)

    def only_begun(self) -> bool:
        """Whether the folder holds only a training run's config.json and maybe its own
        tokenizer.json (not the file the user told it to train with), and the watch.jsonl of
        steps before the first checkpoint: no weights, log or plot."""
        present = {name for name in RUN_FILES if (self.path / name).exists()}
        begun = {"config.json", "tokenizer.json", "watch.jsonl"}
        if "config.json" not in present or not present <= begun:
            return False
        try:
            given = self.read_config()["train"].get("tokenizer")
        except RunError:
            return False
        users = isinstance(given, str) and os.path.isfile(given) and self.tokenizer.exists()
        return not (users and os.path.samefile(given, self.tokenizer))

    def claim(self, resume: bool, overwrite: bool) -> None:
        """Refuse a folder this run must not write into (before any work is done)."""
        if self.path.exists() and not self.path.is_dir():
            raise bad_value("out_dir", str(self.path), "is a file, not a folder")
        if resume and overwrite:
            raise RunError("resume and overwrite exclude each other: choose one")
        if resume and not self.ckpt.exists() and self.only_begun():
            raise RunError(
                f"resume: the run in {self.path} stopped before its first checkpoint (there is "
                f"no {self.ckpt}), so there is nothing to resume; start it again without "
                "resume, which replaces the files it left"
            )
        if resume and not self.ckpt.exists():
            raise RunError(
                f"resume: there is no checkpoint {self.ckpt} to resume from; start the run "
                "without resume"
            )
        if not resume and not overwrite and self.holds_run() and not self.only_begun():
            raise RunError(
                f"{self.path} holds a training run ({self._describe()}); continue it with "
                "--resume, replace it with --overwrite, or choose another --out-dir"
            )

    # ------------------------------------------------------------------ the lock
    def check_unlocked(self) -> None:
        """Refuse early (before any work) a folder another run holds the lock of; taking the
        lock (:meth:`lock`) checks again, atomically."""
        owner = self._read_lock()
        if owner is not False and not _gone(owner):
            raise self._locked(owner)

    def lock(self) -> None:
        """Create ``run.lock`` holding our process id and host, atomically (``O_CREAT |
        O_EXCL``: of two runs, exactly one creates it), taking over a lock whose process is
        provably gone (:func:`_gone`). The folder must exist."""
        me = {"pid": os.getpid(), "host": socket.gethostname()}
        if self._create_lock(me):
            return
        owner = self._read_lock()
        if owner is False or (_gone(owner) and self._remove_stale(owner)):
            if self._create_lock(me):
                return
            owner = self._read_lock()
        raise self._locked(owner)

    def unlock(self) -> None:
        """Remove this process's lock (a lock another process holds is left alone)."""
        if self._read_lock() == {"pid": os.getpid(), "host": socket.gethostname()}:
            self.lock_file.unlink(missing_ok=True)

    def _create_lock(self, owner: dict) -> bool:
        try:
            fd = os.open(self.lock_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(owner) + "\n")
        return True

    def _read_lock(self, path: Path | None = None) -> dict | None | bool:
        """The lock's ``{"pid", "host"}``; False when there is no lock, None when it names no
        process (a run killed between creating the file and writing it)."""
        try:
            owner = json.loads((path or self.lock_file).read_text())
        except FileNotFoundError:
            return False
        except (OSError, ValueError):
            return None
        ok = isinstance(owner, dict) and isinstance(owner.get("pid"), int)
        return owner if ok and isinstance(owner.get("host"), str) else None

    def _remove_stale(self, owner: dict) -> bool:
        """Remove the lock of the gone process ``owner``; False if it turned out to be
        another's. It is first renamed aside (atomic: of two runs, one gets it), then checked
        to be the stale lock and not a live one another run had just created."""
        aside = self.lock_file.with_name(f"{LOCK}.{os.getpid()}.stale")
        try:
            os.rename(self.lock_file, aside)
        except FileNotFoundError:  # the other run removed it first
            return True
        if self._read_lock(aside) == owner:
            aside.unlink()
            return True
        os.rename(aside, self.lock_file)  # a live lock: put it back
        return False

    def _locked(self, owner: dict | None) -> RunError:
        who = f"process {owner['pid']} on {owner['host']}" if owner else "an unnamed process"
        return RunError(
            f"{self.lock_file}: another training run is using {self.path} (the lock is held by "
            f"{who}); wait for it to end, or delete {self.lock_file} if that process is no "
            "longer running"
        )

    # ------------------------------------------------------------------ resume
    def check_tokenizer(self, extra: dict, file: Path, tokenizer) -> str:
        """Refuse a ``tokenizer`` other than the one the checkpoint ``file`` (extras
        ``extra``) was trained with (its ids would mean other text); returns its
        fingerprint."""
        digest = tokenizer_digest(tokenizer)
        if extra.get("tokenizer_digest", digest) != digest:
            raise RunError(
                f"{self.tokenizer} is not the tokenizer {file} was trained with (it was "
                "replaced since); put the run's own tokenizer.json back"
            )
        return digest

    def check_resume(self, now: dict, data_tokenizer=None):
        """The run's own tokenizer, after checking that this run, which would record ``now``
        (``model``, ``train``: :func:`recorded`, ``text_digest``, ``data_tokens``,
        ``processes``), continues the checkpoint's: the same model, data settings, text
        contents, prepared tokens (tokenized by the run's own tokenizer: ``data_tokenizer``
        is the data folder's) and number of processes. One RunError names every
        difference."""
        import gpt.tokenizers as tk
        from nn.serialization import load_checkpoint

        saved = load_checkpoint(self.ckpt, model=None)
        tokenizer = tk.load(self.tokenizer)
        digest = self.check_tokenizer(saved, self.ckpt, tokenizer)
        diff = []
        if saved.get("train"):
            diff += config_differences(saved["train"], now["train"], SAME_ON_RESUME)
        if saved.get("text_digest", now["text_digest"]) != now["text_digest"]:
            diff.append("the text's contents changed since the run began")
        tokens = now.get("data_tokens")
        if tokens and saved.get("data_tokens", tokens) != tokens:
            diff.append(
                f"the prepared data's token counts changed ({saved['data_tokens']} -> {tokens})"
            )
        if data_tokenizer is not None and tokenizer_digest(data_tokenizer) != digest:
            diff.append(
                f"the data was tokenized by another tokenizer than the run's own {self.tokenizer}"
            )
        if saved.get("model_config"):
            model = {**now["model"], "vocab_size": tokenizer.vocab_size}
            diff += config_differences(saved["model_config"], model)
        n = len(saved.get("tl_rng_states") or ())
        if n and n != now["processes"]:
            diff.append(
                f"the checkpoint was written by a run of {n} processes; resume it with as many "
                f"(mpiexec -n {n}), not {now['processes']}"
            )
        if diff:
            raise RunError(
                f"resume: this run differs from the one in {self.path} ("
                + "; ".join(diff)
                + "); resume with the run's own settings, or start a new run in another "
                "--out-dir"
            )
        return tokenizer

    def _describe(self) -> str:
        records = [r for r in self.read_log() if "val_loss" in r]
        if records:
            return f"evaluated up to iteration {records[-1]['iter']}"
        return ", ".join(n for n in RUN_FILES if (self.path / n).exists())

    def prepare(self, overwrite: bool) -> None:
        """Make the folder; remove a crash's temporary files, and the old run if asked or if
        it only began."""
        self.path.mkdir(parents=True, exist_ok=True)
        for p in self.path.glob("*.tmp"):  # an unfinished atomic write's (.)name.*.tmp
            if any(p.name.lstrip(".").startswith(name + ".") for name in RUN_FILES):
                p.unlink()
        if overwrite or self.only_begun():
            for name in RUN_FILES:
                (self.path / name).unlink(missing_ok=True)

    # ------------------------------------------------------------------ config and log
    def write_config(self, config: dict) -> None:
        text = json.dumps(config, indent=1) + "\n"
        atomic_write(self.config, lambda f: f.write(text.encode()))

    def read_config(self) -> dict:
        """The run's ``{"model": {...}, "train": {...}, ...}``; anything else is a RunError."""
        try:
            config = json.loads(self.config.read_text())
        except (OSError, ValueError) as err:
            raise RunError(f"{self.config}: cannot read the run's config ({err})") from err
        if not (
            isinstance(config, dict)
            and isinstance(config.get("model"), dict)
            and isinstance(config.get("train"), dict)
        ):
            raise RunError(
                f'{self.config} is not a training run\'s config (it needs "model" and '
                '"train" entries); was it replaced, e.g. by an export?'
            )
        return config

    def read_log(self, file: Path | None = None) -> list[dict]:
        """The records of the log (or of another JSON-lines ``file``: watch.jsonl); a last
        line torn by a crash is dropped."""
        file = file or self.log
        if not file.exists():
            return []
        records = []
        for line in file.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                break
        return records

    def append_log(self, records: list[dict], file: Path | None = None) -> None:
        with open(file or self.log, "a") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)

    def rewrite_log(self, records: list[dict], file: Path | None = None) -> None:
        text = "".join(json.dumps(r) + "\n" for r in records)
        atomic_write(file or self.log, lambda f: f.write(text.encode()))


def _gone(owner: dict | None) -> bool:
    """Whether the lock's process has provably ended: it ran on this host and no process has
    its id now (another host's, one we may not signal, or any on Windows counts as running)."""
    if os.name != "posix" or not owner or owner["host"] != socket.gethostname():
        return False
    if owner["pid"] <= 0:  # (0 and -1 would ask about process groups)
        return False
    try:
        os.kill(owner["pid"], 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:  # PermissionError: it exists, another user's
        pass
    return False


# What a resumed run must share with the run it continues (the data and its tokens).
SAME_ON_RESUME = ("text", "data", "tokenizer", "tokenizer_vocab_size", "val_fraction", "seed")


def text_digest(text: str) -> str:
    """A fingerprint of the training text (a resumed run must train on the same text)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def tokenizer_digest(tokenizer) -> str:
    """A fingerprint of a tokenizer: its saved file's bytes, hashed. Two tokenizers with the
    same one give every text the same ids."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer.json"
        tokenizer.save(path)
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def recorded(cfg) -> dict:
    """``asdict(cfg)`` with the paths of the text, the data and a tokenizer file made absolute
    (``--resume`` may read them back from another working directory)."""
    config = asdict(cfg)
    for name in ("text", "data", "tokenizer"):
        if _names_file(name, config[name]):
            config[name] = os.path.abspath(config[name])
    return config


def config_differences(saved: dict, now: dict, names=None) -> list[str]:
    """``name: saved -> now`` for each field that differs (all fields, or ``names``); paths
    differ only when they name other files (:func:`same_file`)."""
    names = sorted(set(saved) | set(now)) if names is None else names
    return [
        f"{k}: {saved.get(k)!r} -> {now.get(k)!r}"
        for k in names
        if not _same_value(k, saved.get(k), now.get(k))
    ]


def _names_file(name: str, value) -> bool:
    """Whether the TrainConfig field ``name`` holds the path of a file or folder."""
    import gpt.tokenizers as tk

    if not isinstance(value, str):
        return False
    return name in ("text", "data") or (name == "tokenizer" and value not in tk.KINDS)


def _same_value(name: str, saved, now) -> bool:
    if _names_file(name, saved) and _names_file(name, now):
        return same_file(saved, now)
    return saved == now


def same_file(saved: str, now: str) -> bool:
    """Whether the path ``now`` names the file (or folder) the run recorded as ``saved``, by
    any path; when ``saved`` no longer exists (moved), any (the contents are checked by
    digest and token counts instead)."""
    if saved == now or not os.path.exists(saved):
        return True
    return os.path.exists(now) and os.path.samefile(saved, now)


def load(path: str | os.PathLike, which: str = "ckpt", device: str = "cpu"):
    """A trained run's model and tokenizer: ``model, tokenizer = gpt.load("out")``.

    ``which`` is ``"ckpt"`` (the newest checkpoint) or ``"best"`` (lowest validation loss).
    The model is in eval mode, ready for :func:`gpt.generate`."""
    import gpt.tokenizers as tk
    from gpt.config import GPTConfig
    from gpt.model import GPT
    from nn.serialization import load_checkpoint

    run = RunFolder(path)
    if which not in ("ckpt", "best"):
        raise RunError(f"which={which!r}: must be 'ckpt' or 'best'")
    file = run.ckpt if which == "ckpt" else run.best
    if not file.exists():
        raise RunError(f"{file} does not exist: is {run.path} a training run's folder?")
    meta = load_checkpoint(file, model=None)
    config = GPTConfig.from_dict(meta["model_config"])
    tokenizer = tk.load(run.tokenizer)
    if tokenizer.vocab_size != config.vocab_size:  # its ids would decode to other text
        raise RunError(
            f"{run.tokenizer} has {tokenizer.vocab_size} tokens but the model of {file} has "
            f"{config.vocab_size}: it is not the tokenizer this run was trained with"
        )
    run.check_tokenizer(meta, file, tokenizer)
    model = GPT(config)
    load_checkpoint(file, model)
    return model.to(device).eval(), tokenizer
