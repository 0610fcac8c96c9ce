"""Training from scripts: it learns, resumes bit for bit, and refuses bad input clearly."""

import os
import signal

import numpy as np
import pytest

import gpt
import nn
from gpt.config import ConfigError, GPTConfig
from gpt.data import get_batch
from gpt.run_folder import RunError, RunFolder
from gpt.train import (
    Diverged,
    Interrupted,
    TrainConfig,
    Trainer,
    estimate_loss,
    learning_rate,
)

TEXT = (
    "the quick brown fox jumps over the lazy dog. " * 40
    + "pack my box with five dozen liquor jugs. " * 40
)


def tiny_model(dropout: float = 0.0) -> GPTConfig:
    return GPTConfig(vocab_size=1, block_size=16, n_layer=1, n_head=2, d_model=16, dropout=dropout)


def trainer(tmp_path, dropout: float = 0.0, **kw) -> Trainer:
    settings = dict(eval_interval=10, eval_iters=2, batch_size=4, warmup_iters=2)
    cfg = TrainConfig(out_dir=str(tmp_path), progress=False, **{**settings, **kw})
    return Trainer(tiny_model(dropout), cfg, text=TEXT)


def test_learning_rate_schedule_warms_up_then_decays():
    cfg = TrainConfig(learning_rate=1e-3, min_lr=1e-4, warmup_iters=10, max_iters=100)
    lrs = [learning_rate(i, cfg) for i in range(101)]
    assert lrs[0] < lrs[5] < lrs[9] < lrs[10] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lrs[100] == pytest.approx(1e-4)


def test_each_step_takes_the_rate_of_the_iteration_it_starts_from(tmp_path):
    """The step from iteration i to i + 1 trains with the schedule's rate at i (nanoGPT's
    get_lr(iter_num)): the first step warms up from lr / (warmup + 1), not from the second
    step's rate. The log records the rate each step used, and the optimizer holds it."""
    t = trainer(tmp_path, max_iters=6, warmup_iters=3)
    t.run()
    steps = [r for r in t.run_folder.read_log() if "loss" in r]
    assert [r["iter"] for r in steps] == [1, 2, 3, 4, 5, 6]
    for r in steps:
        assert r["lr"] == learning_rate(r["iter"] - 1, t.cfg)
    assert steps[0]["lr"] == pytest.approx(t.cfg.learning_rate / 4)
    assert all(g["lr"] == steps[-1]["lr"] for g in t.optimizer.param_groups)


def test_evaluation_batches_depend_on_the_iteration_not_on_training(tmp_path):
    """estimate_loss draws its batches from a generator seeded by (seed, iteration): the same
    iteration gives the same estimate, another iteration other batches (so a run's validation
    curve is not one fixed sample), and evaluating leaves the training batches' stream alone."""
    t = trainer(tmp_path, eval_iters=3)
    before = t.rng.bit_generator.state
    at_10, again, at_20 = (estimate_loss(t.model, t.splits, t.cfg, 16, it) for it in (10, 10, 20))
    assert again == at_10
    assert at_10["val"] != at_20["val"] and at_10["train"] != at_20["train"]
    assert t.rng.bit_generator.state == before


def test_loss_goes_down(tmp_path):
    t = trainer(tmp_path, max_iters=60, learning_rate=3e-3)
    history = t.run()
    assert history[-1]["train_loss"] < history[0]["train_loss"] - 0.5
    assert (tmp_path / "ckpt.safetensors").exists() and (tmp_path / "log.jsonl").exists()


@pytest.mark.parametrize("dropout", [0.0, 0.2])
def test_resume_continues_bit_for_bit(tmp_path, dropout):
    """Also with dropout, whose random stream is saved and restored."""
    kw = dict(max_iters=20, dropout=dropout)
    straight = trainer(tmp_path / "a", **kw)
    straight.run()

    first = trainer(tmp_path / "b", **kw)
    first.run(max_iters=10)  # checkpoint written at iteration 10
    resumed = trainer(tmp_path / "b", resume=True, **kw)
    resumed.run()

    assert resumed.iter == straight.iter == 20
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert [h["val_loss"] for h in resumed.history] == [h["val_loss"] for h in straight.history]


def test_resume_trains_with_the_optimizer_settings_it_is_given(tmp_path):
    """--weight-decay, --beta1 and --beta2 may change on resume (the run's config.json then
    records the new values), and the optimizer must use them: loading the optimizer's state
    brought back the old ones, so the run silently trained with the old settings."""
    trainer(tmp_path, max_iters=5).run()
    resumed = trainer(tmp_path, max_iters=8, resume=True, weight_decay=0.5, beta1=0.5, beta2=0.9)
    resumed.run()
    decay, no_decay = resumed.optimizer.param_groups
    assert decay["weight_decay"] == 0.5 and no_decay["weight_decay"] == 0.0
    assert decay["betas"] == no_decay["betas"] == (0.5, 0.9)
    saved = resumed.run_folder.read_config()["train"]
    assert (saved["weight_decay"], saved["beta1"], saved["beta2"]) == (0.5, 0.5, 0.9)


def test_text_shorter_than_block_size_is_refused(tmp_path):
    cfg = TrainConfig(out_dir=str(tmp_path), progress=False)
    with pytest.raises(ValueError, match="block_size"):
        Trainer(tiny_model(), cfg, text="too short")


def test_checkpoint_from_another_config_is_refused(tmp_path):
    t = trainer(tmp_path, max_iters=10)
    t.run()
    other = TrainConfig(out_dir=str(tmp_path), progress=False, resume=True)
    bigger = GPTConfig(vocab_size=1, block_size=16, n_layer=2, n_head=2, d_model=16)
    with pytest.raises(RunError, match=r"n_layer: 1 -> 2"):
        Trainer(bigger, other, text=TEXT)
    # what is checked is the checkpoint's record: without the run's config.json, alike
    (tmp_path / "config.json").unlink()
    with pytest.raises(RunError, match=r"differs from the one in .* \(n_layer: 1 -> 2\)"):
        Trainer(bigger, other, text=TEXT)


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    t = trainer(tmp_path, max_iters=10)
    t.run()
    path = tmp_path / "ckpt.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(nn.serialization.SerializationError, match="ckpt.safetensors"):
        t.load()


# ------------------------------------------------------------------ run safety (issue 12)
def test_a_run_is_not_replaced_without_overwrite(tmp_path):
    trainer(tmp_path, max_iters=10).run()
    before = (tmp_path / "ckpt.safetensors").read_bytes()
    with pytest.raises(RunError, match="evaluated up to iteration 10.*--resume.*--overwrite"):
        trainer(tmp_path, max_iters=3)
    assert (tmp_path / "ckpt.safetensors").read_bytes() == before
    fresh = trainer(tmp_path, max_iters=3, overwrite=True)
    fresh.run()
    log = RunFolder(tmp_path).read_log()
    assert [r["iter"] for r in log if "val_loss" in r] == [0, 3]  # the old run's records went


def test_resume_needs_a_checkpoint(tmp_path):
    with pytest.raises(RunError, match="no checkpoint .*ckpt.safetensors"):
        trainer(tmp_path, resume=True)


def test_resume_refuses_another_text(tmp_path):
    trainer(tmp_path, max_iters=10).run()
    cfg = TrainConfig(out_dir=str(tmp_path), progress=False, resume=True)
    with pytest.raises(RunError, match="contents changed"):
        Trainer(tiny_model(), cfg, text=TEXT.upper())


def test_resume_uses_the_runs_own_tokenizer(tmp_path):
    """A resumed run never rebuilds its tokenizer (a new text would remap the ids)."""
    t = trainer(tmp_path, max_iters=10)
    t.run()
    saved = (tmp_path / "tokenizer.json").read_bytes()
    resumed = trainer(tmp_path, resume=True, max_iters=12)
    assert resumed.tokenizer.encode(TEXT[:50]) == t.tokenizer.encode(TEXT[:50])
    resumed.run()
    assert (tmp_path / "tokenizer.json").read_bytes() == saved


def test_divergence_keeps_the_last_good_checkpoint(tmp_path):
    t = trainer(tmp_path, max_iters=20)
    t.run(max_iters=10)
    before = (tmp_path / "ckpt.safetensors").read_bytes()
    log_before = (tmp_path / "log.jsonl").read_text()
    t.model.parameters()[0].data[...] = np.nan
    with pytest.raises(Diverged, match=r"is nan at iteration 11; the checkpoint .* is kept"):
        t.run()
    assert (tmp_path / "ckpt.safetensors").read_bytes() == before
    added = (tmp_path / "log.jsonl").read_text().removeprefix(log_before)  # old lines kept
    assert added.count("\n") == 1 and '{"iter": 11, "diverged"' in added  # + its finding


def test_a_divergence_found_by_an_evaluation_names_the_iteration_evaluated(tmp_path):
    """The evaluation at iteration 0 (before any step) finds the NaN: iteration 0, not 1."""
    t = trainer(tmp_path, max_iters=5)
    t.model.parameters()[0].data[...] = np.nan
    with pytest.raises(Diverged, match=r"the (train|val) loss is nan at iteration 0; no check"):
        t.run()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_saves_then_stops_and_resume_is_exact(tmp_path, signum):
    straight = trainer(tmp_path / "a", max_iters=12, eval_interval=5)
    straight.run()

    stopped = trainer(tmp_path / "b", max_iters=12, eval_interval=5)
    backward = stopped.backward

    def backward_then_signal(x, y):  # the signal arrives during the 7th step
        if stopped.iter == 6:
            os.kill(os.getpid(), signum)
        return backward(x, y)

    stopped.backward = backward_then_signal
    with pytest.raises(Interrupted, match=f"{signal.Signals(signum).name} at iteration 7"):
        stopped.run()
    resumed = trainer(tmp_path / "b", max_iters=12, eval_interval=5, resume=True)
    assert resumed.iter == 0  # loaded by run()
    resumed.run()
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # the log is the straight run's, record for record
    assert RunFolder(tmp_path / "b").read_log() == RunFolder(tmp_path / "a").read_log()


def test_a_kill_between_checkpoint_and_log_loses_no_record(tmp_path):
    """The log is written after the checkpoint, which keeps the records since the previous
    save: if the process dies between the two writes, resuming restores them, and records
    past the checkpoint (which a resumed run writes again) are dropped."""
    straight = trainer(tmp_path / "a", max_iters=15, eval_interval=5)
    straight.run()
    first = trainer(tmp_path / "b", max_iters=15, eval_interval=5)
    first.run(max_iters=10)
    log = RunFolder(tmp_path / "b").log
    lines = log.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if '"iter": 6,' in line)
    log.write_text("".join(lines[:cut]) + '{"iter": 6, "lo')  # lost tail, torn last line
    resumed = trainer(tmp_path / "b", max_iters=15, eval_interval=5, resume=True)
    resumed.run()
    assert RunFolder(tmp_path / "b").read_log() == RunFolder(tmp_path / "a").read_log()


def test_stale_temporary_files_are_removed_on_start(tmp_path):
    for name in ("ckpt.safetensors.1a2b3c4d.tmp", ".tokenizer.json.x8y9.tmp", "notes.tmp"):
        (tmp_path / name).write_text("left by a crash")
    trainer(tmp_path, max_iters=2).run()
    assert sorted(p.name for p in tmp_path.glob("*.tmp")) == ["notes.tmp"]


def test_best_checkpoint_holds_the_lowest_validation_loss(tmp_path):
    t = trainer(tmp_path, max_iters=30, eval_interval=5, learning_rate=3e-3)
    history = t.run()
    best = min(history, key=lambda r: r["val_loss"])
    meta = nn.serialization.load_checkpoint(tmp_path / "best.safetensors")
    assert meta["iter"] == best["iter"] and meta["best_val"] == best["val_loss"]
    model, _ = gpt.load(tmp_path, which="best")
    ckpt, _ = gpt.load(tmp_path)
    if best["iter"] != history[-1]["iter"]:
        assert any(
            not np.array_equal(a, b)
            for a, b in zip(model.state_dict().values(), ckpt.state_dict().values())
        )


def test_gpt_load_gives_the_trained_model_and_tokenizer(tmp_path):
    t = trainer(tmp_path, max_iters=5)
    t.run()
    model, tok = gpt.load(tmp_path)
    prompt = tok.encode("the quick")
    assert prompt == t.tokenizer.encode("the quick")
    ours = gpt.generate(model, prompt, 10, temperature=0)
    theirs = gpt.generate(t.model, prompt, 10, temperature=0)
    assert ours == theirs
    with pytest.raises(RunError, match="does not exist"):
        gpt.load(tmp_path / "nothing")
    # a tokenizer.json that is not the run's (replaced by hand or by another tool) is refused:
    # its ids would decode the model's output into other text without a word
    import gpt.tokenizers as tk

    tk.KINDS["char"].train("abc").save(tmp_path / "tokenizer.json")
    with pytest.raises(RunError, match=r"has 3 tokens but the model of .* has 28:"):
        gpt.load(tmp_path)


def test_a_replaced_tokenizer_of_the_same_size_is_refused(tmp_path):
    """A tokenizer.json replaced by another of the same vocabulary size (tokenizer-train
    --out into the run folder writes over it without a word) passed every check: gpt.load
    decoded the model's ids into other text, and --resume went on training on the text
    encoded another way. The checkpoint records the fingerprint of the tokenizer it was
    trained with; both now refuse, and the resumed run writes nothing."""
    import gpt.tokenizers as tk

    t = trainer(tmp_path, max_iters=5)
    t.run()
    other = tk.KINDS["char"](t.tokenizer.chars[::-1])  # the same characters, other ids
    assert other.vocab_size == t.tokenizer.vocab_size
    other.save(tmp_path / "tokenizer.json")
    before = (tmp_path / "ckpt.safetensors").read_bytes()
    with pytest.raises(RunError, match="is not the tokenizer .*ckpt.safetensors was trained with"):
        gpt.load(tmp_path)
    with pytest.raises(RunError, match="put the run's own tokenizer.json back"):
        trainer(tmp_path, max_iters=8, resume=True)
    assert (tmp_path / "ckpt.safetensors").read_bytes() == before
    t.tokenizer.save(tmp_path / "tokenizer.json")  # the run's own: accepted again
    gpt.load(tmp_path)


# ------------------------------------------------------------------ gradient accumulation
def test_gradient_accumulation_equals_one_bigger_batch(tmp_path):
    """K micro-batches of B with losses scaled by 1/K give the gradient of one batch of K·B:
    the same sums in another order, so equal up to float32 rounding (observed ≤ 2e-7
    relative to the largest gradient entry; the bound gives 50× headroom). Parameters whose
    true gradient is zero (the key bias: softmax ignores a constant per row) hold rounding
    noise of ~1e-12, hence one scale for all, not one per parameter."""
    rng = np.random.default_rng(0)
    one = trainer(tmp_path / "1", batch_size=8)
    acc = trainer(tmp_path / "4", batch_size=2, grad_accum_steps=4)
    x, y = get_batch(one.splits["train"], 16, 8, rng)
    loss_one, loss_acc = one.backward(x, y), acc.backward(x, y)
    assert loss_acc == pytest.approx(loss_one, rel=1e-5)  # float32 means: a few ulps apart
    scale = max(np.abs(p.grad.data).max() for p in one.model.parameters())
    for p, q in zip(one.model.parameters(), acc.model.parameters()):
        np.testing.assert_allclose(q.grad.data, p.grad.data, rtol=0, atol=1e-5 * scale)


def test_accumulation_draws_the_same_batches(tmp_path):
    """The batch is drawn whole and then split, so a run with K×B stays on the same random
    stream as one with batch K·B."""
    one = trainer(tmp_path / "1", batch_size=8, max_iters=3)
    acc = trainer(tmp_path / "4", batch_size=4, grad_accum_steps=2, max_iters=3)
    np.testing.assert_allclose(
        [one.step() for _ in range(3)], [acc.step() for _ in range(3)], rtol=1e-5
    )


def test_the_run_files_share_one_mode(tmp_path):
    """Every file of a run is written by one atomic writer, so the tokenizer gets the same
    permissions as the checkpoint (it was 0600, from mkstemp, beside a 0644 checkpoint)."""
    trainer(tmp_path, max_iters=2).run()
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert len(set(modes.values())) == 1, modes
    assert modes["tokenizer.json"] == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_bfloat16_training_learns_like_float32(tmp_path):
    """Mixed precision (tl.autocast) with float32 master weights: the bfloat16 run's
    validation loss falls as float32's does and ends within 0.05 of it (on this run they
    differ by about 0.001; 0.05 is a tenth of the drop the test asks for, room for bfloat16's
    rounding to move 60 steps apart without hiding a run that fails to learn)."""
    runs = {}
    for dtype in ("float32", "bfloat16"):
        t = trainer(tmp_path / dtype, max_iters=60, learning_rate=3e-3, dtype=dtype)
        runs[dtype] = [r["val_loss"] for r in t.run()]
        assert all(p.dtype == np.float32 for p in t.model.parameters())
    assert runs["bfloat16"][-1] < runs["bfloat16"][0] - 0.5
    assert abs(runs["bfloat16"][-1] - runs["float32"][-1]) < 0.05


def test_float16_training_scales_the_loss_and_resumes_the_scale(tmp_path):
    t = trainer(tmp_path, max_iters=10, dtype="float16")
    history = t.run()
    assert history[-1]["val_loss"] < history[0]["val_loss"]
    steps = [r for r in t.run_folder.read_log() if "loss" in r]
    assert len(steps) == 10 and all(r["loss_scale"] >= 1.0 for r in steps)
    resumed = trainer(tmp_path, max_iters=10, dtype="float16", resume=True)
    resumed.load()
    assert resumed.scaler.state_dict() == t.scaler.state_dict()


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_mixed_precision_training_with_dropout(tmp_path, dtype):
    """Dropout under autocast draws its masks for half-precision activations (attention
    pattern, outputs); this raised TypeError before (the generators draw no half floats).
    Ten steps: the run finishes and its validation loss falls."""
    t = trainer(tmp_path, dropout=0.1, max_iters=10, learning_rate=3e-3, dtype=dtype)
    history = t.run()
    assert t.iter == 10 and history[-1]["val_loss"] < history[0]["val_loss"]


@pytest.mark.parametrize("legacy", [False, True])
def test_a_run_resumed_in_float16_starts_its_own_loss_scale(tmp_path, legacy):
    """A float32 run resumed with dtype float16 must scale its loss from the GradScaler's
    start (2¹⁶); it loaded the float32 run's pass-through scale of 1.0 and so trained in
    float16 without loss scaling. ``legacy``: a checkpoint written before float32 runs saved
    no scaler state (they saved scale 1.0, 0 skipped)."""
    t = trainer(tmp_path, max_iters=5)
    t.run()
    if legacy:
        extra = nn.serialization.load_checkpoint(t.checkpoint_path, model=None)
        assert extra["loss_scaler"] is None
        extra["loss_scaler"] = {"scale": 1.0, "good_steps": 0, "skipped": 0}
        nn.serialization.save_checkpoint(t.checkpoint_path, t.model, t.optimizer, **extra)
    resumed = trainer(tmp_path, max_iters=5, resume=True, dtype="float16")
    resumed.load()
    assert resumed.scaler.enabled and resumed.scaler.scale_value == 2.0**16


def test_dtype_is_checked():
    with pytest.raises(ConfigError, match="dtype"):
        TrainConfig(dtype="float64")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_resume_continues_bit_for_bit_on_the_gpu(tmp_path, monkeypatch, dtype):
    """The same on the GPU (CuPy emulated by NumPy, tests/fake_cupy.py), with dropout: the
    checkpoint holds the GPU generator's cuRAND states (a device array, where NumPy's is a
    dict), and the resumed run draws the masks the uninterrupted one drew. (Before
    backend.generator_state, the first checkpoint on a GPU failed: it stored CuPy's
    ``bit_generator.state``, a method.)"""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    kw = dict(max_iters=6, eval_interval=3, dropout=0.2, device="cuda", dtype=dtype)
    straight = trainer(tmp_path / "a", **kw)
    straight.run()
    first = trainer(tmp_path / "b", **kw)
    first.run(max_iters=3)
    saved = nn.serialization.load_checkpoint(tmp_path / "b" / "ckpt.safetensors")
    (state,) = saved["tl_rng_states"]
    assert isinstance(state, np.ndarray) and state.dtype == np.int8  # the cuRAND states
    resumed = trainer(tmp_path / "b", resume=True, **kw)
    resumed.run()
    assert isinstance(resumed.model.W_U.data, fake_cupy.ndarray)
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    assert [h["val_loss"] for h in resumed.history] == [h["val_loss"] for h in straight.history]


def test_a_step_reads_the_gpu_once_for_its_loss(tmp_path, monkeypatch):
    """With K micro-batches the step's loss is summed on the device and read once (each read
    waits for the GPU): the reads of one step are the ids' and targets' range checks of each
    micro-batch, the loss, and the gradient norm (CuPy emulated, tests/fake_cupy.py)."""
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    t = trainer(tmp_path, max_iters=3, device="cuda", grad_accum_steps=2, batch_size=4)
    t.run(max_iters=1)
    fake_cupy.SYNCS.clear()
    t.step()
    assert fake_cupy.SYNCS == {"tolist": 4, "float": 2}


def test_the_progress_line_leaves_the_evaluations_out_of_the_eta(tmp_path, monkeypatch, capsys):
    """With a clock where each step takes 1 s and each evaluation 1000 s, the first progress
    line's ETA is the steps' (2 steps left: 2 s); the iteration-0 evaluation was counted in
    it (a one-minute run's first line said "eta 666 s"). That evaluation is printed too."""
    import types

    import gpt.train

    clock = [0.0]
    monkeypatch.setattr(gpt.train, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    settings = dict(max_iters=3, eval_interval=10, eval_iters=2, batch_size=4, log_interval=1)
    t = Trainer(tiny_model(), TrainConfig(out_dir=str(tmp_path), **settings), text=TEXT)
    evaluate, step = t.evaluate, t.step

    def slow_evaluate():
        clock[0] += 1000.0
        return evaluate()

    def timed_step():
        clock[0] += 1.0
        return step()

    monkeypatch.setattr(t, "evaluate", slow_evaluate)
    monkeypatch.setattr(t, "step", timed_step)
    t.run()
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("iter      0: train loss")
    etas = [line.split("eta ")[1] for line in lines if "eta" in line]  # it said 2,002 s
    etas = [float(eta.removesuffix(" s").replace(",", "")) for eta in etas]
    assert etas == [2.0, 1.0, 0.0]
