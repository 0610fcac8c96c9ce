"""The GPT model: every config variant runs, counts its parameters as the config says,
decodes incrementally with the same logits as a full recompute, and backpropagates
correct gradients (float64 finite differences through the whole model)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nn
import tensorlab as tl
from gpt.config import GPTConfig
from gpt.model import GPT
from tensorlab.autograd import topological_order
from tensorlab.checkpoint import Checkpoint
from tests.strategies import gpt_configs

VARIANTS = {
    "default": {},
    "rope-rmsnorm-swiglu-nobias": dict(
        positional="rope", norm="rmsnorm", activation="swiglu", bias=False
    ),
    "relative": dict(positional="relative", max_relative_distance=4),
    "post-sinusoidal-relu": dict(norm_placement="post", positional="sinusoidal", activation="relu"),
    "sandwich-parallel": dict(norm_placement="sandwich", parallel=True),
    "parallel-untied-geglu": dict(parallel=True, tie_weights=False, activation="geglu"),
    "attn-only": dict(attn_only=True),
    "no-norm": dict(norm="none", attn_only=True),
    "no-positions": dict(positional="none"),
    "zero-layer": dict(n_layer=0),
    # Llama: multi-query attention (1 key/value head for 2 query heads), rotate-half RoPE
    "llama-mqa": dict(
        positional="rope",
        rope_layout="half",
        n_kv_head=1,
        norm="rmsnorm",
        activation="swiglu",
        bias=False,
        tie_weights=False,
    ),
    # Qwen2's q/k/v-only biases, Mistral's sliding window (4 < block_size), Llama 3.1's RoPE
    "qkv-bias-window-llama3": dict(
        positional="rope",
        rope_layout="half",
        rope_scaling=dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=4,
        ),
        n_kv_head=1,
        bias=False,
        qkv_bias=True,
        sliding_window=4,
        norm="rmsnorm",
        activation="swiglu",
    ),
}


def small(**kw) -> GPTConfig:
    base = dict(vocab_size=11, block_size=12, n_layer=2, n_head=2, d_model=16)
    base.update(kw)
    return GPTConfig(**base)


@pytest.fixture(params=list(VARIANTS))
def variant(request):
    return VARIANTS[request.param]


def test_forward_shapes_and_initial_loss_near_uniform(variant):
    tl.manual_seed(0)
    cfg = small(**variant)
    model = GPT(cfg)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, cfg.vocab_size, (2, 3, cfg.block_size))
    logits, loss = model(x, y)
    assert logits.shape == (3, cfg.block_size, cfg.vocab_size)
    # GPT-2 init keeps logits small, so the first loss is close to log(vocab). (Targets other
    # than the inputs: with tied weights a token's own logit starts about 0.3 above the rest.)
    assert abs(loss.item() - np.log(cfg.vocab_size)) < 0.3


def test_kv_cache_logits_equal_full_recompute(variant):
    tl.manual_seed(1)
    cfg = small(**variant)
    model = GPT(cfg).eval()
    x = np.random.default_rng(1).integers(0, cfg.vocab_size, (2, cfg.block_size))
    with tl.no_grad():
        full, _ = model(x)
        cache = model.new_cache()
        pieces = [model(x[:, :5], cache=cache)[0]]
        pieces += [model(x[:, t : t + 1], cache=cache)[0] for t in range(5, cfg.block_size)]
    incremental = np.concatenate([p.numpy() for p in pieces], axis=1)
    np.testing.assert_allclose(incremental, full.numpy(), atol=2e-5, rtol=1e-4)


@given(gpt_configs(), st.integers(1, 6), st.integers(0, 2**16))
def test_kv_cache_equals_full_recompute_for_drawn_configs(cfg, first, seed):
    """Every architectural switch drawn (tests/strategies.py: gpt_configs, sliding windows
    included): a prompt of ``first`` tokens, then one token at a time through the cache, gives
    the full forward's logits (float32; 2e-5 absolute and 1e-4 relative, as above)."""
    tl.manual_seed(seed)
    model = GPT(cfg).eval()
    T = cfg.block_size
    x = np.random.default_rng(seed).integers(0, cfg.vocab_size, (2, T))
    first = min(first, T)
    with tl.no_grad():
        full, _ = model(x)
        cache = model.new_cache()
        pieces = [model(x[:, :first], cache=cache)[0]]
        pieces += [model(x[:, t : t + 1], cache=cache)[0] for t in range(first, T)]
    incremental = np.concatenate([p.numpy() for p in pieces], axis=1)
    np.testing.assert_allclose(incremental, full.numpy(), atol=2e-5, rtol=1e-4)


def test_causality_future_tokens_do_not_change_earlier_logits(variant):
    cfg = small(**variant)
    model = GPT(cfg).eval()
    x = np.random.default_rng(2).integers(0, cfg.vocab_size, (1, cfg.block_size))
    y = x.copy()
    y[0, 7:] = (y[0, 7:] + 1) % cfg.vocab_size
    with tl.no_grad():
        a, b = model(x)[0].numpy(), model(y)[0].numpy()
    np.testing.assert_allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not np.allclose(a[:, 7:], b[:, 7:])


@pytest.mark.parametrize("name", ["default", "rope-rmsnorm-swiglu-nobias", "post-sinusoidal-relu"])
def test_whole_model_gradients_match_finite_differences(name):
    """gradcheck of the loss with respect to a few parameters, the model cast to float64."""
    tl.manual_seed(3)
    cfg = small(vocab_size=5, block_size=4, n_layer=1, n_head=2, d_model=4, **VARIANTS[name])
    model = GPT(cfg)
    for p in model.parameters():
        p.data = p.data.astype(np.float64)
    rng = np.random.default_rng(3)
    x = rng.integers(0, cfg.vocab_size, (2, cfg.block_size))
    y = rng.integers(0, cfg.vocab_size, (2, cfg.block_size))
    params = dict(model.named_parameters())
    chosen = ["embed.W", "blocks.0.attn.W_q", "blocks.0.attn.W_O", "blocks.0.mlp.W_in"]

    def loss_of(*tensors):
        return model(x, y)[1]

    tl.gradcheck(loss_of, [params[k] for k in chosen])


def test_bad_inputs_have_clear_errors():
    cfg = small()
    model = GPT(cfg)
    with pytest.raises(ValueError, match="outside the model's vocabulary of 11"):
        model(np.array([[1, 2, 11]]))
    with pytest.raises(ValueError, match="block_size=12"):
        model(np.zeros((1, 13), dtype=np.int64))
    with pytest.raises(ValueError, match=r"\(batch, time\)"):
        model(np.zeros(5, dtype=np.int64))
    with pytest.raises(TypeError, match="indices must be integers, got dtype float"):
        model(np.zeros((1, 3)))  # (refused by the embedding, the one check of the ids)


def test_hook_names_follow_the_circuits_convention():
    names = {n for n, _ in GPT(small()).named_modules()}
    for n in [
        "hook_embed",
        "hook_pos_embed",
        "blocks.0.hook_resid_pre",
        "blocks.0.hook_attn_out",
        "blocks.0.hook_resid_mid",
        "blocks.1.hook_mlp_out",
        "blocks.1.hook_resid_post",
        "blocks.0.attn.hook_q",
        "blocks.0.attn.hook_k",
        "blocks.0.attn.hook_v",
        "blocks.0.attn.hook_attn_scores",
        "blocks.0.attn.hook_pattern",
        "blocks.0.attn.hook_z",
        "blocks.0.attn.hook_result",
    ]:
        assert n in names


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "rope"])
def test_hook_pos_embed_holds_the_position_vectors_of_each_sequence(positional):
    """``hook_pos_embed`` (B, T, d), as in TransformerLens: the vectors the positions add, the
    same for every sequence; rotary positions add none and have no such hook. A hook that
    zeroes it leaves the token embeddings alone in the stream."""
    from gpt import circuits as C

    model = GPT(small(positional=positional))
    tokens = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    _, cache = C.run_with_cache(model, tokens)
    if positional == "rope":
        assert model.hook_pos_embed is None and "hook_pos_embed" not in cache
        return
    pos = cache["hook_pos_embed"]
    assert pos.shape == (2, 4, model.config.d_model)
    np.testing.assert_array_equal(pos[0], pos[1])
    np.testing.assert_allclose(
        cache["blocks.0.hook_resid_pre"], cache["hook_embed"] + pos, rtol=1e-6, atol=1e-6
    )
    zero = ("hook_pos_embed", lambda a: np.zeros(a.shape, np.float32))
    with C.hooks(model, fwd_hooks=[zero]):
        _, patched = C.run_with_cache(model, tokens)
    np.testing.assert_array_equal(patched["blocks.0.hook_resid_pre"], cache["hook_embed"])


def test_the_training_path_stays_fused_and_summed_after_a_full_cache():
    """Caching every hook point (scores, pattern and per-head results included) opens the
    closed ones for that run only: afterwards every attention layer is fused again, sums
    over heads in one product, and training gives the same loss as a model never hooked."""
    from gpt import circuits

    tl.manual_seed(0)
    model, twin = GPT(small()), GPT(small())
    twin.load_state_dict(model.state_dict())
    x = np.random.default_rng(0).integers(0, 11, (2, 8))
    _, cache = circuits.run_with_cache(model, x)
    assert "blocks.1.attn.hook_result" in cache and "blocks.1.attn.hook_pattern" in cache
    attns = [b.attn for b in model.blocks]
    assert all(a.fused and not a.use_attn_result for a in attns)
    assert all(a.hook_result.closed and a.hook_pattern.closed for a in attns)
    _, loss = model(tl.tensor(x[:, :-1]), tl.tensor(x[:, 1:]))
    _, ref = twin(tl.tensor(x[:, :-1]), tl.tensor(x[:, 1:]))
    assert loss.item() == ref.item()


def test_gpt2_init_scales_the_residual_projections_by_depth():
    """GPT-2's initialization: every matrix N(0, 0.02²), except the two projections that write
    into the residual stream (attention's W_O and the MLP's W_out), whose std is
    0.02 / √(2 · n_layer) so that the stream's variance does not grow with depth. With 4096+
    entries per matrix the sample std is within ~1% of the true one; 10% is 9 sigma."""
    cfg = small(n_layer=8, d_model=64, n_head=4)
    model = GPT(cfg)
    deep = cfg.init_std / np.sqrt(2 * cfg.n_layer)
    for name, p in model.named_parameters():
        if p.ndim < 2 or "pos" in name:
            continue
        want = deep if name.endswith(("W_O", "W_out")) else cfg.init_std
        assert float(np.std(p.numpy())) == pytest.approx(want, rel=0.1), name


def test_tied_unembedding_is_the_embedding_transpose():
    model = GPT(small())
    assert np.shares_memory(model.W_U.data, model.W_E.data)
    assert model.W_U.shape == (16, 11)


def test_trace_backward_over_a_whole_training_step():
    """tl.trace_backward sees every node of a GPT's backward, fused ops included, and the
    gradients it reports are the ones the engine stores."""
    import io

    tl.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=2, n_head=2, d_model=16))
    opt = nn.optim.AdamW(model.parameters(), lr=1e-3)
    idx = np.random.default_rng(0).integers(0, 11, (3, 8))
    out = io.StringIO()
    opt.zero_grad()
    _, loss = model(idx, idx)
    with tl.trace_backward(file=out) as trace:
        loss.backward()
    opt.step()
    names = [s.op for s in trace.steps]
    for fused in ("CrossEntropyFn", "LinearFn", "LayerNormFn", "AttentionFn", "GELUFn"):
        assert fused in names, fused
    # the backward starts at the loss's node: the mean over the rows is inside it (each row's
    # loss divided by their number, and summed), then the unembedding's product
    assert names[:2] == ["CrossEntropyFn", "LinearFn"]
    assert len(out.getvalue().splitlines()) == len(names)
    assert all(np.isfinite(s.grad_norm) for s in trace.steps)
    # the first layer norm the backward reaches is the final one; the gain's gradient it
    # sends is the one stored in ln_final.w.grad
    ln_final = next(s for s in trace.steps if s.op == "LayerNormFn")
    assert ln_final.sent[1][1] == pytest.approx(
        float(np.linalg.norm(model.ln_final.w.grad.numpy()))
    )


@pytest.mark.parametrize("positional", ["learned", "sinusoidal", "relative", "rope", "none"])
def test_d_head_independent_of_d_model_works_with_every_positional_scheme(positional):
    """d_head need not be d_model / n_head: the heads then span n_head·d_head ≠ d_model."""
    tl.manual_seed(0)
    cfg = small(positional=positional, d_head=6, max_relative_distance=4)
    model = GPT(cfg)
    attn = model.blocks[0].attn
    assert attn.W_Q.shape == (2, 16, 6) and attn.W_O.shape == (2, 6, 16)
    x = np.random.default_rng(0).integers(0, cfg.vocab_size, (2, cfg.block_size))
    logits, loss = model(x, x)
    assert logits.shape == (2, cfg.block_size, cfg.vocab_size) and np.isfinite(loss.item())
    loss.backward()
    assert all(np.isfinite(p.grad.numpy()).all() for p in model.parameters())


def test_every_bias_is_one_dimensional_zero_at_init_and_not_decayed():
    """nanoGPT's rule (decay exactly the parameters with 2 or more axes) needs every bias to
    be 1-D; GPT-2's init starts every bias at 0."""
    cfg = small(positional="relative", max_relative_distance=4)
    model = GPT(cfg)
    decay, no_decay = nn.optim.param_groups_for_decay(model, 0.1)
    decayed = {id(p) for p in decay["params"]}
    biases = [(n, p) for n, p in model.named_parameters() if n.rsplit(".", 1)[-1].startswith("b")]
    assert {n.rsplit(".", 1)[-1] for n, _ in biases} >= {
        "b_q",
        "b_k",
        "b_v",
        "b_O",
        "b_in",
        "b_out",
    }
    for name, p in biases:
        assert p.ndim == 1, name
        assert id(p) not in decayed, name
        assert (p.numpy() == 0).all(), name


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_checkpoint_activations_gives_the_same_loss_and_gradients(dropout):
    """Recomputing each block in backward (tl.checkpoint) changes what is kept, not what is
    computed: the loss and every gradient are bit-identical, with dropout too (the random
    generators are restored for the recomputation)."""
    grads = []
    for flag in (False, True):
        cfg = GPTConfig(
            vocab_size=11,
            block_size=8,
            n_layer=2,
            n_head=2,
            d_model=32,
            dropout=dropout,
            checkpoint_activations=flag,
        )
        tl.manual_seed(0)
        model = GPT(cfg)
        idx = np.random.default_rng(0).integers(0, 11, (3, 8))
        _, loss = model(tl.tensor(idx), tl.tensor(np.roll(idx, -1, axis=1)))
        nodes = topological_order([loss._ctx])
        checkpoints = sum(isinstance(n, Checkpoint) for n in nodes)
        assert checkpoints == (cfg.n_layer if flag else 0)  # one node per block, or none
        loss.backward()
        named = [(n, p.grad.numpy().copy()) for n, p in model.named_parameters()]
        grads.append([("loss", loss.item()), *named])
    for (name, a), (_, b) in zip(*grads):
        if name == "embed.W" and tl.default_device() == "cuda":
            # on a GPU the embedding's gradient is an atomic scatter-add (CuPy's add.at): each
            # row's float32 sum of up to B·T = 24 gradient rows comes in no fixed order, so two
            # runs differ in the last bits (seen: 1.5e-8 on entries of 0.05, 2 ulps); a sum of
            # n terms reordered moves by at most 2(n-1)·u·Σ|terms| (u = 2^-24), well inside this
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * np.abs(b).max())
        else:
            np.testing.assert_array_equal(a, b)


def _block_by_hand(block, x, placement: str, parallel: bool):
    """The block's output from its own parts, as gpt/model.py's docstrings write it."""
    attn, mlp = block.attn, block.mlp
    if parallel:  # GPT-J: both read x (with pre-norm through one shared norm)
        a, m = attn(block.ln1(x)), mlp(block.ln2(x))
        if placement == "sandwich":
            a, m = block.ln1_out(a), block.ln2_out(m)
        return x + a + m
    if placement == "post":
        mid = block.ln1(x + attn(x))
        return block.ln2(mid + mlp(mid))
    if placement == "sandwich":
        mid = x + block.ln1_out(attn(block.ln1(x)))
        return mid + block.ln2_out(mlp(block.ln2(mid)))
    mid = x + attn(block.ln1(x))
    return mid + mlp(block.ln2(mid))


@pytest.mark.parametrize(
    "placement, parallel",
    [("pre", False), ("post", False), ("sandwich", False), ("pre", True), ("sandwich", True)],
)
def test_each_norm_placement_is_its_formula(placement, parallel):
    """pre: x + f(norm(x)); post: norm(x + f(x)); sandwich: x + norm_out(f(norm(x)));
    parallel: attention and MLP both read the block's input. Norm gains and biases are drawn
    at random so that no norm is the identity by accident."""
    cfg = small(norm_placement=placement, parallel=parallel, n_layer=1)
    model = GPT(cfg).eval()
    rng = np.random.default_rng(3)
    with tl.no_grad():
        for name, p in model.named_parameters():
            if ".ln" in name:
                p.copy_(rng.uniform(0.5, 1.5, p.shape) if name.endswith(".w") else 0.1)
    if parallel and placement == "pre":
        assert model.blocks[0].ln2 is model.blocks[0].ln1
    x = tl.tensor(rng.standard_normal((2, 5, cfg.d_model)).astype(np.float32))
    with tl.no_grad():
        got = model.blocks[0](x).numpy()
        want = _block_by_hand(model.blocks[0], x, placement, parallel).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_a_training_step_waits_for_the_gpu_three_times(monkeypatch):
    """On a GPU every read of a device value by the host (a range check, float(), .item())
    makes the host wait until the queued kernels have run. One training step of a GPT with
    dropout, on CuPy emulated by NumPy (tests/fake_cupy.py counts the reads), reads it three
    times: the range of the token ids (the embedding's check) and of the targets (the loss's),
    in the forward, and the gradient norm that clipping compares with its bound. The backward
    and the fused AdamW step read nothing."""
    import nn
    from tests import fake_cupy

    fake_cupy.install(monkeypatch)
    tl.manual_seed(0)
    model = GPT(small(dropout=0.1)).to("cuda")
    opt = nn.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 11, (2, 3, 12))
    x, y = tl.tensor(x, device="cuda"), tl.tensor(y, device="cuda")
    reads = {}

    def phase(name, fn):
        fake_cupy.SYNCS.clear()
        out = fn()
        reads[name] = dict(fake_cupy.SYNCS)
        return out

    for _ in range(2):  # (the second step: optimizer state made, kernels traced)
        opt.zero_grad()
        _, loss = phase("forward", lambda: model(x, y))
        phase("backward", loss.backward)
        phase("clip", lambda: nn.optim.clip_grad_norm_(model.parameters(), 1.0))
        phase("optimizer", opt.step)
    assert reads == {
        "forward": {"tolist": 2},
        "backward": {},
        "clip": {"float": 1},
        "optimizer": {},
    }
    assert isinstance(model.W_U.data, fake_cupy.ndarray)  # (it ran on the emulated GPU)
