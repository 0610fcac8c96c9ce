"""gpt/watch.py: a short real training run writes watch.jsonl with its schema's fields, the
update ratios are |Δw|/|w| of the step's own update, the gradient norms add up to the log's,
and a resumed run continues the file from its checkpoint."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from gpt.config import ConfigError, GPTConfig
from gpt.train import TrainConfig, Trainer
from gpt.watch import activation_stats, entropy

TEXT = (
    "the quick brown fox jumps over the lazy dog. " * 40
    + "pack my box with five dozen liquor jugs. " * 40
)


def trainer(path, **kw) -> Trainer:
    model = GPTConfig(vocab_size=1, block_size=16, n_layer=2, n_head=2, d_model=16)
    settings = dict(eval_interval=10, eval_iters=2, batch_size=4, warmup_iters=2, watch_interval=5)
    cfg = TrainConfig(out_dir=str(path), progress=False, **{**settings, **kw})
    return Trainer(model, cfg, text=TEXT)


def test_a_short_run_writes_one_record_per_watched_step(tmp_path):
    t = trainer(tmp_path, max_iters=20, grad_clip=0.05)  # (every step clipped)
    t.run()
    records = t.run_folder.read_log(t.run_folder.watch)
    assert [r["iter"] for r in records] == [5, 10, 15, 20]
    names = [n for n, _ in t.model.named_parameters()]
    log = {r["iter"]: r for r in t.run_folder.read_log() if "grad_norm" in r}
    for r in records:
        assert set(r) == {"iter", "grad_norm", "update_ratio", "blocks", "max_logit"} | {
            "induction",
            "previous_token",
        }
        assert list(r["grad_norm"]) == names and list(r["update_ratio"]) == names
        # the norms before clipping: their root sum of squares is the log's grad_norm
        assert log[r["iter"]]["grad_norm"] > 0.05
        total = math.sqrt(sum(g**2 for g in r["grad_norm"].values()))
        assert total == pytest.approx(log[r["iter"]]["grad_norm"], rel=1e-4)
        assert len(r["blocks"]) == 2
        for b in r["blocks"]:
            assert set(b) == {"resid_rms", "attn_entropy", "mlp_dead", "mlp_saturated"}
            assert len(b["attn_entropy"]) == 2 and b["resid_rms"] > 0
            assert all(0 <= e <= math.log(16) for e in b["attn_entropy"])
            assert 0 <= b["mlp_dead"] <= 1 and 0 <= b["mlp_saturated"] <= 1
        assert r["max_logit"] > 0
        assert np.shape(r["induction"]) == np.shape(r["previous_token"]) == (2, 2)


def test_update_ratio_is_the_steps_own_update(tmp_path):
    t = trainer(tmp_path, max_iters=5)
    t.run(max_iters=4)
    before = {n: p.numpy().copy() for n, p in t.model.named_parameters()}
    t.run(max_iters=5)  # step 5 is watched
    (record,) = [r for r in t.run_folder.read_log(t.run_folder.watch) if r["iter"] == 5]
    for n, p in t.model.named_parameters():
        dw = np.linalg.norm(p.numpy() - before[n]) / np.linalg.norm(before[n])
        assert record["update_ratio"][n] == pytest.approx(dw, rel=1e-4, abs=1e-9), n
    assert record["update_ratio"]["blocks.0.attn.W_q"] > 0


def test_a_resumed_run_continues_the_file_from_its_checkpoint(tmp_path):
    trainer(tmp_path, max_iters=10).run()
    watch = tmp_path / "watch.jsonl"
    first = watch.read_text().splitlines()
    # a run killed after its checkpoint at 10 had recorded step 15 too: it goes on resume
    with open(watch, "a") as f:
        f.write(json.dumps({"iter": 15, "stale": True}) + "\n")
    trainer(tmp_path, max_iters=20, resume=True).run()
    lines = watch.read_text().splitlines()
    assert lines[:2] == first
    assert [json.loads(line)["iter"] for line in lines] == [5, 10, 15, 20]
    assert "stale" not in lines[2]


def test_watch_interval_zero_records_nothing_and_a_negative_one_is_refused(tmp_path):
    trainer(tmp_path, max_iters=10, watch_interval=0).run()
    assert not (tmp_path / "watch.jsonl").exists()
    with pytest.raises(ConfigError, match="watch_interval"):
        TrainConfig(watch_interval=-1)


def test_entropy_of_uniform_and_one_hot_patterns():
    T = 4
    uniform = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    one_hot = np.eye(T)
    pattern = np.stack([uniform, one_hot])[None]  # (B=1, H=2, T, T)
    h = entropy(pattern)
    assert h[0] == pytest.approx(np.log(np.arange(1, T + 1)).mean())
    assert h[1] == 0.0


def test_dead_and_saturated_units_are_counted_per_unit(tmp_path):
    """With W_in = 0 each MLP unit's pre-activation is its bias everywhere: a quarter of the
    units at -10 (dead, and in a tail), a quarter at +10 (in a tail), half at 0.5 (neither)."""
    t = trainer(tmp_path)
    mlp = t.model.blocks[1].mlp
    mlp.W_in.data[...] = 0.0
    d_ff = mlp.b_in.shape[0]
    mlp.b_in.data[...] = np.repeat([-10.0, 10.0, 0.5, 0.5], d_ff // 4)
    x = t.splits["val"][: 3 * 16].reshape(3, 16)
    stats = activation_stats(t.model, x)
    assert stats["blocks"][1]["mlp_dead"] == 0.25
    assert stats["blocks"][1]["mlp_saturated"] == 0.5
    assert stats["blocks"][0]["mlp_dead"] < 0.25
