"""Trusting a training run: --resume knows the run's files by identity, not by spelling; one
run at a time writes into a folder (run.lock); bad values that would quietly lose or
misreport a run are refused."""

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

import gpt.tokenizers as tk
from gpt.__main__ import main
from gpt.config import ConfigError, GPTConfig
from gpt.run_folder import RunError, RunFolder
from gpt.token_files import prepare
from gpt.train import Diverged, TrainConfig, Trainer
from tests.mpi_launcher import MPIEXEC, needs_mpi, program_stderr

TEXT = (
    "the quick brown fox jumps over the lazy dog. " * 40
    + "pack my box with five dozen liquor jugs. " * 40
)
SMALL = ["--block-size", "16", "--n-layer", "1", "--d-model", "16", "--n-head", "2"]
QUICK = ["--eval-iters", "1", "--eval-interval", "2"]
LOCK = "run.lock"  # (gpt.run_folder.LOCK)


def tiny_model() -> GPTConfig:
    return GPTConfig(vocab_size=1, block_size=16, n_layer=1, n_head=2, d_model=16)


def trainer(out, text=None, data=None, **kw) -> Trainer:
    settings = dict(eval_interval=5, eval_iters=2, batch_size=4, warmup_iters=2, max_iters=5)
    cfg = TrainConfig(out_dir=str(out), text=text, data=data, progress=False, **{**settings, **kw})
    return Trainer(tiny_model(), cfg)


@pytest.fixture
def text_file(tmp_path):
    (tmp_path / "a").mkdir()
    path = tmp_path / "a" / "t.txt"
    path.write_text(TEXT)
    return path


# ------------------------------------------------------------------ the text by identity
def test_resume_accepts_the_same_text_by_another_path(tmp_path, text_file, monkeypatch):
    """The text given by a relative path, then by its absolute path, or relatively from
    another working directory: the same file, so the run resumes (it was refused as
    "text: 't.txt' -> '/.../t.txt'" though the contents are checked by digest too)."""
    monkeypatch.chdir(tmp_path / "a")
    trainer(tmp_path / "run", text="t.txt").run()
    trainer(tmp_path / "run", text=str(text_file), resume=True, max_iters=7).run()
    saved = RunFolder(tmp_path / "run").read_config()["train"]
    assert saved["text"] == str(text_file)  # recorded absolute: valid from anywhere
    (tmp_path / "b").mkdir()
    monkeypatch.chdir(tmp_path / "b")
    resumed = trainer(tmp_path / "run", text="../a/t.txt", resume=True, max_iters=9)
    resumed.run()
    assert resumed.iter == 9


def test_resume_refuses_another_file_and_a_changed_text(tmp_path, text_file):
    trainer(tmp_path / "run", text=str(text_file)).run()
    copy = tmp_path / "copy.txt"
    shutil.copy(text_file, copy)  # the same words in another file, beside the run's own
    with pytest.raises(RunError, match=r"text: '.*a/t\.txt' -> '.*copy\.txt'"):
        trainer(tmp_path / "run", text=str(copy), resume=True, max_iters=7)
    text_file.write_text(TEXT.upper())  # the run's own file, changed
    with pytest.raises(RunError, match="the text's contents changed"):
        trainer(tmp_path / "run", text=str(text_file), resume=True, max_iters=7)


def test_without_its_config_json_a_run_still_refuses_another_text(tmp_path, text_file):
    """config.json lost (or edited): the checkpoint records the text's digest too, so resuming
    on changed text is still refused, and on the run's own text it resumes."""
    trainer(tmp_path / "run", text=str(text_file)).run()
    (tmp_path / "run" / "config.json").unlink()
    text_file.write_text(TEXT[::-1])  # the same characters: the run's tokenizer reads it
    with pytest.raises(RunError, match="the text's contents changed"):
        trainer(tmp_path / "run", text=str(text_file), resume=True, max_iters=7).run()
    text_file.write_text(TEXT)
    resumed = trainer(tmp_path / "run", text=str(text_file), resume=True, max_iters=7)
    resumed.run()
    assert resumed.iter == 7


def test_without_its_config_json_a_run_still_refuses_other_data(tmp_path, text_file):
    data = _prepare(text_file, tmp_path / "d")
    trainer(tmp_path / "run", data=data).run()
    (tmp_path / "run" / "config.json").unlink()
    other = _prepare(text_file, tmp_path / "d2", val_fraction=0.2)  # cut at another place
    with pytest.raises(RunError, match="the prepared data's token counts changed"):
        trainer(tmp_path / "run", data=other, resume=True, max_iters=7).run()
    resumed = trainer(tmp_path / "run", data=data, resume=True, max_iters=7)
    resumed.run()
    assert resumed.iter == 7


def test_a_moved_text_is_accepted_by_its_contents(tmp_path, text_file):
    """The run's text moved elsewhere: its new path is accepted when its contents are the
    run's (the digest), and refused when they are not."""
    trainer(tmp_path / "run", text=str(text_file)).run()
    moved = tmp_path / "moved.txt"
    text_file.rename(moved)
    trainer(tmp_path / "run", text=str(moved), resume=True, max_iters=7).run()
    moved.write_text(TEXT.upper())
    with pytest.raises(RunError, match="the text's contents changed"):
        trainer(tmp_path / "run", text=str(moved), resume=True, max_iters=9)


def test_cli_resumes_from_another_directory(tmp_path, text_file, monkeypatch, capsys):
    """``--resume`` takes the text's path from config.json: recorded relative to where the
    run began, it named no file from anywhere else."""
    monkeypatch.chdir(tmp_path / "a")
    args = ["train", "--text", "t.txt", *SMALL, *QUICK]
    assert main([*args, "--out-dir", "runs/x", "--max-iters", "2"]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--out-dir", "a/runs/x", "--resume", "--max-iters", "4"]) == 0
    assert "final: iter 4" in capsys.readouterr().out


def test_cli_resumes_a_moved_run_folder_where_it_is(tmp_path, text_file, monkeypatch, capsys):
    """A run folder renamed to ``out`` (the default --out-dir) and resumed: the out_dir its
    config.json names, the old place, was taken instead (there: "no checkpoint", or
    another run's files)."""
    monkeypatch.chdir(tmp_path)
    args = ["train", "--text", str(text_file), *SMALL, *QUICK]
    assert main([*args, "--out-dir", "runs/x", "--max-iters", "2"]) == 0
    (tmp_path / "runs" / "x").rename(tmp_path / "out")
    assert main(["train", "--resume", "--max-iters", "4"]) == 0
    assert "final: iter 4" in capsys.readouterr().out
    assert RunFolder(tmp_path / "out").read_config()["train"]["out_dir"] == "out"
    assert not (tmp_path / "runs" / "x").exists()


# ------------------------------------------------------------------ prepared data
def _prepare(text_file, out, tokenizer="char", val_fraction=0.1):
    prepare(text_file, out, tokenizer=tokenizer, val_fraction=val_fraction)
    return str(out)


def test_a_moved_data_folder_is_accepted(tmp_path, text_file):
    data = _prepare(text_file, tmp_path / "d")
    trainer(tmp_path / "run", data=data).run()
    (tmp_path / "d").rename(tmp_path / "d2")
    resumed = trainer(tmp_path / "run", data=str(tmp_path / "d2"), resume=True, max_iters=7)
    resumed.run()
    assert resumed.iter == 7


def test_data_of_the_same_text_by_another_tokenizer_is_refused(tmp_path, text_file):
    """The data folder prepared again, from the same text, with a tokenizer of the same
    characters in another order: the text's digest is the same, the path too, and the run
    went on training on ids that mean other characters."""
    data = _prepare(text_file, tmp_path / "d")
    t = trainer(tmp_path / "run", data=data)
    t.run()
    shutil.rmtree(tmp_path / "d")
    other = tk.KINDS["char"](t.tokenizer.itos[::-1])  # (the run's tokenizer: characters only)
    other.save(tmp_path / "other.json")
    _prepare(text_file, tmp_path / "d", tokenizer=str(tmp_path / "other.json"))
    with pytest.raises(RunError, match="tokenized by another tokenizer than the run's own"):
        trainer(tmp_path / "run", data=data, resume=True, max_iters=7)


def test_data_cut_at_another_place_is_refused(tmp_path, text_file):
    data = _prepare(text_file, tmp_path / "d")
    trainer(tmp_path / "run", data=data).run()
    shutil.rmtree(tmp_path / "d")
    _prepare(text_file, tmp_path / "d", val_fraction=0.2)
    with pytest.raises(RunError, match="the prepared data's token counts changed"):
        trainer(tmp_path / "run", data=data, resume=True, max_iters=7)


def test_another_data_folder_is_refused(tmp_path, text_file):
    data = _prepare(text_file, tmp_path / "d")
    trainer(tmp_path / "run", data=data).run()
    other = _prepare(text_file, tmp_path / "e")  # the same tokens, another folder
    with pytest.raises(RunError, match=r"data: '.*/d' -> '.*/e'"):
        trainer(tmp_path / "run", data=other, resume=True, max_iters=7)


# ------------------------------------------------------------------ one run at a time
def _lock(folder, pid, host=None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    owner = {"pid": pid, "host": host or socket.gethostname()}
    (folder / LOCK).write_text(json.dumps(owner) + "\n")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # reaped: no process has this id (until the system reuses it)
    return proc.pid


def test_a_held_lock_refuses_another_run(tmp_path, text_file):
    """One line naming the lock file and the process, and how to recover; nothing is
    written, with --overwrite or --resume either."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _lock(tmp_path / "run", sleeper.pid)
        for kw in ({}, {"overwrite": True}):
            with pytest.raises(RunError) as err:
                trainer(tmp_path / "run", text=str(text_file), **kw)
            message = str(err.value)
            assert f"{tmp_path / 'run' / LOCK}:" in message and f"process {sleeper.pid}" in message
            assert "delete" in message and "\n" not in message
        assert sorted(os.listdir(tmp_path / "run")) == [LOCK]
    finally:
        sleeper.kill()
        sleeper.wait()


def test_two_runs_made_together_do_not_share_a_folder(tmp_path, text_file):
    """Both pass the folder's check when they are made (it is empty); the first to run
    takes the lock, the other is refused while it runs, and after it too (the folder then
    holds the first run)."""
    first = trainer(tmp_path / "run", text=str(text_file), max_iters=4, eval_interval=2)
    second = trainer(tmp_path / "run", text=str(text_file), max_iters=4, eval_interval=2)
    refusals = []
    backward = first.backward

    def backward_and_start_the_second(x, y):
        if first.iter == 1:
            with pytest.raises(RunError, match=f"process {os.getpid()} on") as err:
                second.run()
            refusals.append(str(err.value))
        return backward(x, y)

    first.backward = backward_and_start_the_second
    first.run()
    assert len(refusals) == 1 and not (tmp_path / "run" / LOCK).exists()
    before = (tmp_path / "run" / "ckpt.safetensors").read_bytes()
    with pytest.raises(RunError, match="holds a training run"):
        second.run()
    assert (tmp_path / "run" / "ckpt.safetensors").read_bytes() == before
    assert not (tmp_path / "run" / LOCK).exists()


@pytest.mark.parametrize("error", [Diverged("the loss is nan"), KeyboardInterrupt()])
def test_the_lock_is_released_however_the_run_ends(tmp_path, text_file, error):
    t = trainer(tmp_path / "run", text=str(text_file))
    seen = []

    def step():
        seen.append((tmp_path / "run" / LOCK).exists())
        raise error

    t.step = step
    with pytest.raises(type(error)):
        t.run()
    assert seen == [True] and not (tmp_path / "run" / LOCK).exists()
    t2 = trainer(tmp_path / "run2", text=str(text_file))
    t2.run()
    assert not (tmp_path / "run2" / LOCK).exists()


def test_a_lock_left_by_a_dead_process_is_taken_over(tmp_path, text_file):
    """A run killed with SIGKILL leaves its lock; its process is gone, so the next run (on
    the same host) takes the lock over. A lock of another host is not: the process may live."""
    trainer(tmp_path / "run", text=str(text_file)).run()
    _lock(tmp_path / "run", _dead_pid())
    assert RunFolder(tmp_path / "run").holds_run()
    resumed = trainer(tmp_path / "run", text=str(text_file), resume=True, max_iters=7)
    resumed.run()
    assert resumed.iter == 7 and not (tmp_path / "run" / LOCK).exists()
    _lock(tmp_path / "run", _dead_pid(), host="another-machine")
    with pytest.raises(RunError, match="process .* on another-machine.*delete"):
        trainer(tmp_path / "run", text=str(text_file), resume=True, max_iters=9)


def test_a_lock_alone_is_not_a_run(tmp_path, text_file):
    """A folder holding nothing but a stale lock takes a new run without --overwrite."""
    _lock(tmp_path / "run", _dead_pid())
    assert not RunFolder(tmp_path / "run").holds_run()
    trainer(tmp_path / "run", text=str(text_file)).run()
    assert (tmp_path / "run" / "ckpt.safetensors").exists()


def test_unlock_leaves_another_processs_lock_alone(tmp_path):
    """unlock() removes this process's lock only: a lock naming another process id, or our
    own id on another host, stays as it was (that run still holds the folder)."""
    folder = RunFolder(tmp_path / "run")
    for pid, host in ((_dead_pid(), None), (os.getpid(), "another-machine")):
        _lock(tmp_path / "run", pid, host=host)
        before = (tmp_path / "run" / LOCK).read_text()
        folder.unlock()
        assert (tmp_path / "run" / LOCK).read_text() == before
    _lock(tmp_path / "run", os.getpid())
    folder.unlock()
    assert not (tmp_path / "run" / LOCK).exists()


def test_removing_a_stale_lock_puts_back_a_live_one(tmp_path):
    """Two runs race over a stale lock: one removed it and created its own, live lock, which
    the other then renamed aside; that run finds a lock other than the stale one it read, so
    it puts it back and reports False. The stale lock itself is removed."""
    folder = RunFolder(tmp_path / "run")
    stale = {"pid": _dead_pid(), "host": socket.gethostname()}
    _lock(tmp_path / "run", os.getpid())  # the live lock the other run has just created
    live = (tmp_path / "run" / LOCK).read_text()
    assert folder._remove_stale(stale) is False
    assert (tmp_path / "run" / LOCK).read_text() == live
    assert sorted(os.listdir(tmp_path / "run")) == [LOCK]  # no run.lock.*.stale left
    _lock(tmp_path / "run", stale["pid"])
    assert folder._remove_stale(stale) is True
    assert os.listdir(tmp_path / "run") == []


def test_cli_refuses_a_locked_folder_in_one_line(tmp_path, text_file, capsys):
    _lock(tmp_path / "run", os.getpid())
    args = ["train", "--text", str(text_file), "--out-dir", str(tmp_path / "run"), *SMALL]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"process {os.getpid()}" in err and LOCK in err, err


def test_cli_draws_the_loss_curve_under_the_folders_lock(tmp_path, text_file, capsys, monkeypatch):
    """The curve is drawn after training, into the run folder: under its lock, which is then
    released. If another run took the folder in between, its files are left alone (it was
    drawn after the lock was released, into whatever run the folder then held)."""
    pytest.importorskip("matplotlib")
    args = ["train", "--text", str(text_file), "--out-dir", str(tmp_path / "run"), *SMALL]
    args += [*QUICK, "--max-iters", "2", "--sample-tokens", "4"]
    assert main(args) == 0
    assert (tmp_path / "run" / "loss.png").exists() and not (tmp_path / "run" / LOCK).exists()
    assert "loss curve:" in capsys.readouterr().out

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    run = Trainer.run

    def run_then_taken(self, *a, **kw):  # another run claims the folder as this one ends
        history = run(self, *a, **kw)
        _lock(tmp_path / "run2", sleeper.pid)
        return history

    monkeypatch.setattr(Trainer, "run", run_then_taken)
    try:
        args[args.index(str(tmp_path / "run"))] = str(tmp_path / "run2")
        assert main(args) == 0
        assert not (tmp_path / "run2" / "loss.png").exists()
        err = capsys.readouterr().err
        assert "loss curve not drawn" in err and f"process {sleeper.pid}" in err
    finally:
        sleeper.kill()
        sleeper.wait()


# ------------------------------------------------------------------ quiet losses
def test_resume_to_fewer_iterations_than_done_is_refused(tmp_path, text_file, capsys):
    """--max-iters below the iteration the run has reached did nothing, printed the old
    final loss and rewrote config.json with the smaller max_iters."""
    trainer(tmp_path / "run", text=str(text_file), max_iters=6).run()
    config = (tmp_path / "run" / "config.json").read_text()
    with pytest.raises(ConfigError, match=r"max_iters=4: must be ≥ 6"):
        trainer(tmp_path / "run", text=str(text_file), resume=True, max_iters=4).run()
    assert (tmp_path / "run" / "config.json").read_text() == config
    out = str(tmp_path / "run")
    assert main(["train", "--out-dir", out, "--resume", "--max-iters", "3"]) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # (after the configs, printed at start)
    assert last.startswith("error: --max-iters 3: must be ≥ 6, the iteration the run in")
    trainer(tmp_path / "run", text=str(text_file), resume=True, max_iters=6).run()  # (a no-op)


def test_a_second_run_call_keeps_the_runs_own_records(tmp_path, text_file):
    """With overwrite, every run() of the Trainer removed the folder's run, its own too: a
    run continued by a second run() lost its log and its best checkpoint."""
    t = trainer(tmp_path / "run", text=str(text_file), overwrite=True, max_iters=10)
    t.run(max_iters=5)
    t.run()
    log = RunFolder(tmp_path / "run").read_log()
    assert [r["iter"] for r in log if "val_loss" in r] == [0, 5, 10]
    assert (tmp_path / "run" / "best.safetensors").exists()


@needs_mpi
def test_under_mpiexec_rank_zero_alone_takes_the_lock(tmp_path, text_file):
    """Two processes: rank 0 takes the lock and removes it at the end (rank 1 taking it
    too would refuse its own job); a held lock ends the job with rank 0's one line."""
    env = {k: v for k, v in os.environ.items() if k != "PMI_SIZE"}
    out = tmp_path / "run"
    args = ["train", "--text", str(text_file), "--out-dir", str(out), *SMALL, *QUICK]
    command = [MPIEXEC, "-n", "2", sys.executable, "-m", "gpt", *args, "--batch-size", "4"]
    done = subprocess.run(
        [*command, "--max-iters", "2"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (out / "ckpt.safetensors").exists() and not (out / LOCK).exists()
    _lock(out, os.getpid())
    refused = subprocess.run(
        [*command, "--resume", "--max-iters", "4"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert refused.returncode == 2, refused.stderr[-2000:]
    own = program_stderr(refused.stderr)
    assert own.count("\n") == 1 and f"process {os.getpid()}" in own


# ------------------------------------------------------------------ a run stopped early
def _stopped_before_its_first_checkpoint(out, text_file) -> Trainer:
    """A run killed in its first steps: its config.json written, and a tokenizer.json (here
    one of another text, to see whether a new run would keep it), no checkpoint, no log."""
    t = trainer(out, text=str(text_file))

    def killed():
        raise KeyboardInterrupt

    t.step = killed
    with pytest.raises(KeyboardInterrupt):
        t.run()
    tk.CharTokenizer.train("another text, other characters: XYZ").save(out / "tokenizer.json")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "tokenizer.json"]
    return t


def test_a_run_stopped_before_its_first_checkpoint_is_started_again(tmp_path, text_file):
    """It was a dead end: a plain start said "continue it with --resume", and --resume said
    "start the run without resume". It holds nothing trained, so a plain start takes the
    folder and replaces its files (the old tokenizer.json would have been kept and used)."""
    out = tmp_path / "run"
    _stopped_before_its_first_checkpoint(out, text_file)
    assert RunFolder(out).only_begun()
    with pytest.raises(RunError, match="stopped before its first checkpoint.*without resume"):
        trainer(out, text=str(text_file), resume=True)
    again = trainer(out, text=str(text_file))
    again.run()
    assert again.tokenizer.decode(again.tokenizer.encode("lazy dog")) == "lazy dog"
    assert tk.load(out / "tokenizer.json").vocab_size == again.tokenizer.vocab_size
    assert RunFolder(out).holds_run() and not RunFolder(out).only_begun()
    with pytest.raises(RunError, match="holds a training run"):  # now it has weights
        trainer(out, text=str(text_file))


def test_the_cli_starts_a_run_stopped_early_again(tmp_path, text_file, capsys):
    out = tmp_path / "run"
    _stopped_before_its_first_checkpoint(out, text_file)
    args = ["train", "--text", str(text_file), *SMALL, *QUICK, "--out-dir", str(out)]
    assert main([*args, "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nothing to resume; start it again without resume" in err
    assert main([*args, "--max-iters", "2"]) == 0
    assert (out / "ckpt.safetensors").exists()


def test_a_config_json_that_is_not_a_runs_is_still_refused(tmp_path, text_file):
    """An exported model's config.json (another program's) is no begun run: kept."""
    out = tmp_path / "export"
    out.mkdir()
    (out / "config.json").write_text('{"model_type": "llama"}')
    assert not RunFolder(out).only_begun()
    with pytest.raises(RunError, match="holds a training run"):
        trainer(out, text=str(text_file))


def test_a_begun_runs_own_input_tokenizer_is_not_replaced(tmp_path, text_file):
    """A run told to train with the folder's own tokenizer.json: that file is the user's,
    so the folder is not taken as an early-stopped run (it is refused as before)."""
    out = tmp_path / "run"
    out.mkdir()
    tk.CharTokenizer.train(TEXT).save(out / "tokenizer.json")
    cfg = {"model": tiny_model().to_dict(), "train": {"tokenizer": str(out / "tokenizer.json")}}
    RunFolder(out).write_config(cfg)
    assert not RunFolder(out).only_begun()
    with pytest.raises(RunError, match="holds a training run"):
        trainer(out, text=str(text_file))
    assert (out / "tokenizer.json").exists()
