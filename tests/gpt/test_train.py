"""Training from scripts: it learns, resumes bit for bit, and refuses bad input clearly."""

import numpy as np
import pytest

import nn
from gpt.config import GPTConfig
from gpt.run_folder import RunError
from gpt.train import TrainConfig, Trainer, learning_rate

TEXT = (
    "the quick brown fox jumps over the lazy dog. " * 40
    + "pack my box with five dozen liquor jugs. " * 40
)


def tiny_model(dropout: float = 0.0) -> GPTConfig:
    return GPTConfig(vocab_size=1, block_size=16, n_layer=1, n_head=2, d_model=16, dropout=dropout)


def trainer(tmp_path, dropout: float = 0.0, **kw) -> Trainer:
    cfg = TrainConfig(
        out_dir=str(tmp_path),
        eval_interval=10,
        eval_iters=2,
        batch_size=4,
        warmup_iters=2,
        progress=False,
        **kw,
    )
    return Trainer(tiny_model(dropout), cfg, text=TEXT)


def test_learning_rate_schedule_warms_up_then_decays():
    cfg = TrainConfig(learning_rate=1e-3, min_lr=1e-4, warmup_iters=10, max_iters=100)
    lrs = [learning_rate(i, cfg) for i in range(101)]
    assert lrs[0] < lrs[5] < lrs[9] < lrs[10] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:]))
    assert lrs[100] == pytest.approx(1e-4)


def test_loss_goes_down(tmp_path):
    t = trainer(tmp_path, max_iters=60, learning_rate=3e-3)
    history = t.run()
    assert history[-1]["train_loss"] < history[0]["train_loss"] - 0.5
    assert (tmp_path / "ckpt.safetensors").exists() and (tmp_path / "log.jsonl").exists()


@pytest.mark.parametrize("threads, dropout", [(1, 0.0), (2, 0.0), (2, 0.2)])
def test_resume_continues_bit_for_bit(tmp_path, threads, dropout):
    """Also with the batch split over threads, whose dropout masks come from generators
    seeded from the saved shared one."""
    kw = dict(max_iters=20, threads=threads, dropout=dropout)
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


def test_threads_share_the_batch_without_changing_the_result(tmp_path):
    """One thread or two: the same updates up to float32 rounding of the gradient sums. Over
    10 steps the losses differed by 1.1e-7 (relative) and the weights by at most 1.7e-7
    when this test was written; the bounds give 10× headroom. (Each AdamW step moves an entry
    by at most ~lr = 1e-3, so a rounding-sized gradient difference cannot move it far.)"""
    runs = [trainer(tmp_path / str(n), max_iters=10, threads=n) for n in (1, 2)]
    losses = [[r.step() for _ in range(10)] for r in runs]
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-6)
    a, b = (r.model.state_dict() for r in runs)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=0, atol=2e-6, err_msg=k)


def test_bad_thread_count_is_refused(tmp_path):
    with pytest.raises(ValueError, match="threads=0: must be an integer ≥ 1"):
        trainer(tmp_path, threads=0)


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
    # without the run's config.json, the checkpoint's own config is checked on load
    (tmp_path / "config.json").unlink()
    t2 = Trainer(bigger, other, text=TEXT)
    with pytest.raises(RunError, match=r"different model config \(n_layer: 1 -> 2\)"):
        t2.load()


def test_corrupt_checkpoint_is_a_clear_error(tmp_path):
    t = trainer(tmp_path, max_iters=10)
    t.run()
    path = tmp_path / "ckpt.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(nn.serialization.SerializationError, match="ckpt.safetensors"):
        t.load()
