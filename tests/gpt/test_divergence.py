"""The first-NaN finder: a diverged step is replayed under anomaly detection, and the error
and the log name the first op that made NaN or Inf, its module, the nearest hook point, and
whether its forward value or its gradient went non-finite."""

import warnings

import numpy as np
import pytest

import tensorlab as tl
from gpt.config import GPTConfig
from gpt.divergence import NOT_FOUND, Finding, first_nonfinite
from gpt.model import GPT
from gpt.run_folder import RunFolder
from gpt.train import Diverged, TrainConfig, Trainer

TEXT = (
    "the quick brown fox jumps over the lazy dog. " * 40
    + "pack my box with five dozen liquor jugs. " * 40
)


@pytest.fixture(autouse=True)
def _quiet():  # the NaN the runs make on purpose warns in NumPy
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def trainer(tmp_path, **kw) -> Trainer:
    settings = dict(eval_interval=5, eval_iters=1, batch_size=4, warmup_iters=2, max_iters=20)
    cfg = TrainConfig(out_dir=str(tmp_path), progress=False, **{**settings, **kw})
    model = GPTConfig(vocab_size=1, block_size=16, n_layer=2, n_head=2, d_model=16)
    return Trainer(model, cfg, text=TEXT)


def diverge(t: Trainer, **run) -> str:
    with pytest.raises(Diverged) as err:
        t.run(**run)
    message = str(err.value)
    assert "\n" not in message
    return message


def test_a_learning_rate_that_blows_up_is_traced_to_the_attention_forward(tmp_path):
    """Adam's steps grow with the warmup until the attention scores overflow float32 at
    iteration 7 (the checkpoint of iteration 5 is kept): the fused attention's forward makes
    the first NaN, and the first hook point that carries it is the heads' output, hook_z."""
    t = trainer(tmp_path, learning_rate=1e6, warmup_iters=1000, grad_clip=0.0)
    message = diverge(t)
    assert "training loss is nan at iteration 7; the checkpoint" in message
    assert (
        "; the first non-finite forward value came from AttentionFn in blocks.0.attn, first "
        "reaching hook point blocks.0.attn.hook_z; try a lower --learning-rate" in message
    )
    log = RunFolder(tmp_path).read_log()
    steps = [r["iter"] for r in log if "loss" in r]
    assert steps == [1, 2, 3, 4, 5, 6]  # the good steps since the checkpoint are kept too
    assert log[-1] == {
        "iter": 7,
        "diverged": "the training loss is nan",
        "first_nonfinite": {
            "op": "AttentionFn",
            "module": "blocks.0.attn",
            "hook": "blocks.0.attn.hook_z",
            "gradient": False,
        },
    }
    resumed = trainer(tmp_path, resume=True, learning_rate=1e-3, max_iters=6)
    resumed.run()  # a resumed run drops the records past its checkpoint, this one too
    assert all("diverged" not in r for r in RunFolder(tmp_path).read_log())


def test_an_infinite_weight_in_block_1s_mlp_is_named_in_the_forward(tmp_path):
    t = trainer(tmp_path, grad_accum_steps=2)  # (replayed micro-batch by micro-batch)
    t.run(max_iters=5)
    dict(t.model.named_parameters())["blocks.1.mlp.W_in"].data[3, 5] = np.inf
    message = diverge(t)
    assert "training loss is nan at iteration 6" in message
    assert (
        "the first non-finite forward value came from LinearFn in blocks.1.mlp, first "
        "reaching hook point blocks.1.mlp.hook_pre" in message
    )
    found = RunFolder(tmp_path).read_log()[-1]["first_nonfinite"]
    assert found == {
        "op": "LinearFn",
        "module": "blocks.1.mlp",
        "hook": "blocks.1.mlp.hook_pre",
        "gradient": False,
    }


def test_a_gradient_only_nan_is_named_as_the_gradient(tmp_path):
    """sqrt(0 · h) is 0 in the forward, but its derivative 1 / (2 sqrt(0)) is infinite: the
    loss stays finite and the gradient norm is NaN. The finder names Sqrt's backward, in the
    module whose forward ran the hook, and the hook point whose gradient it reaches first."""
    t = trainer(tmp_path)
    t.run(max_iters=5)
    t.model.blocks[1].mlp.hook_pre.register_forward_hook(lambda m, i, h: h + (h * 0.0).sqrt())
    message = diverge(t)
    assert "the gradient norm is nan at iteration 6" in message
    assert (
        "the first non-finite gradient came from Sqrt in blocks.1.mlp, first reaching hook "
        "point blocks.1.mlp.hook_pre" in message
    )
    assert RunFolder(tmp_path).read_log()[-1]["first_nonfinite"]["gradient"] is True


def test_a_nan_gradient_put_in_by_a_backward_hook_is_found_at_that_hook_point():
    from gpt.circuits import hooks

    tl.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, d_model=16))
    x = tl.tensor(np.arange(16).reshape(2, 8) % 11)
    assert first_nonfinite(model, x, x) is None
    with hooks(model, bwd_hooks=[("blocks.1.hook_mlp_out", lambda g: g * np.nan)]):
        found = first_nonfinite(model, x, x)
    assert found == Finding("LinearFn", "blocks.1.mlp", "blocks.1.hook_mlp_out", gradient=True)
    assert all(p.grad is None for p in model.parameters())  # the replay stores no gradient


def test_a_nan_the_replay_does_not_make_is_said_so(tmp_path):
    """A NaN that the replay cannot reproduce (here: a backward that reports a NaN loss for a
    healthy step) is reported as not found, not blamed on an op; no checkpoint, no log."""
    t = trainer(tmp_path)
    backward = t.backward
    t.backward = lambda x, y: backward(x, y) * np.nan
    message = diverge(t)
    assert f"no checkpoint was written; {NOT_FOUND}; try a lower" in message
    assert not RunFolder(tmp_path).log.exists()


def test_anomaly_error_carries_the_node_and_whether_it_was_the_gradient():
    x = tl.tensor([0.0, 4.0], requires_grad=True)
    with tl.detect_anomaly(), tl.named_scope("block"):
        with pytest.raises(tl.AnomalyError) as err:
            (x - 1.0).log()
        assert (err.value.node.name, err.value.node.scope, err.value.gradient) == (
            "Log",
            "block",
            False,
        )
        with pytest.raises(tl.AnomalyError) as err:
            x.sqrt().sum().backward()
        assert (err.value.node.name, err.value.gradient) == ("Sqrt", True)
