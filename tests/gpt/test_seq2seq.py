"""The encoder-decoder Transformer: shapes, masks, loss, gradients, cached decoding, beam
search, and the digit-task example."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import nn
import tensorlab as tl
from gpt.config import ConfigError, Seq2SeqConfig
from gpt.generate_seq2seq import beam_search, greedy_decode, length_penalty, sequence_score
from gpt.seq2seq import Transformer
from nn.embedding import sinusoidal_table
from tensorlab.backend import xp_of

ROOT = Path(__file__).resolve().parents[2]
V = 9  # pad 0, bos 1, eos 2, six "words"


def small(seed: int = 0, **overrides) -> Transformer:
    tl.manual_seed(seed)
    kw = dict(
        src_vocab_size=V,
        tgt_vocab_size=V,
        max_len=16,
        n_encoder_layer=2,
        n_decoder_layer=2,
        n_head=2,
        d_model=16,
        dropout=0.0,
    )
    model = Transformer(Seq2SeqConfig(**{**kw, **overrides}))
    model.eval()
    return model


def sources(seed: int = 0, n: int = 4, length: int = 6) -> np.ndarray:
    """(n, length) source ids in 3..V-1, the row i padded from position length - i on."""
    src = np.random.default_rng(seed).integers(3, V, (n, length))
    for i in range(1, n):
        src[i, length - i :] = 0
    return src


def targets(seed: int = 1, n: int = 4, length: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).integers(3, V, (n, length))


VARIANTS = [
    {},
    dict(norm_placement="pre"),
    dict(norm_placement="sandwich", norm="rmsnorm"),
    dict(activation="swiglu", positional="learned", bias=False),
    dict(tie_weights=False, share_embeddings=True, scale_embeddings=False),
]


# ---------------------------------------------------------------------- shapes and config
@pytest.mark.parametrize("overrides", VARIANTS)
def test_shapes(overrides):
    model = small(**overrides)
    src, tgt = sources(), targets()
    logits, loss = model(src, tgt, tgt)
    assert logits.shape == (4, 5, V)
    assert loss.shape == () and np.isfinite(loss.item())
    memory = model.encode(src)
    assert memory.shape == (4, 6, 16)
    assert model.decode(memory, model.padding_mask(src), tgt[:, :2]).shape == (4, 2, V)
    logits2, loss2 = model(src, tgt)
    assert loss2 is None and np.array_equal(logits2.numpy(), logits.numpy())


def test_defaults_follow_the_paper():
    cfg = Seq2SeqConfig()
    assert (cfg.norm_placement, cfg.positional, cfg.activation) == ("post", "sinusoidal", "relu")
    assert cfg.tie_weights and cfg.scale_embeddings and not cfg.final_norm
    model = Transformer(cfg)
    assert model.W_U.shape == (cfg.d_model, cfg.tgt_vocab_size)
    assert model.encoder.scale == pytest.approx(cfg.d_model**0.5)
    assert model.encoder.ln_final is None and model.decoder.ln_final is None
    assert Seq2SeqConfig(norm_placement="pre").final_norm


def test_initialization_is_glorot_uniform_and_scaled_normal_embeddings():
    """reset_parameters: embeddings N(0, 1/d_model); every other matrix U[-a, a] with Glorot's
    a = √(6 / (fan_in + fan_out)), an attention matrix counted as the d_model -> d_model map it
    is part of. With 1024+ entries the largest |w| is above 0.9 a (all below: 0.9^1024)."""
    d = 64
    model = Transformer(Seq2SeqConfig(d_model=d, tie_weights=False))
    V = model.config.tgt_vocab_size
    for name, p in model.named_parameters():
        w = p.numpy()
        if name.endswith("embed.W"):
            assert float(w.std()) == pytest.approx(d**-0.5, rel=0.1), name
        elif p.ndim >= 2:
            fan_in, fan_out = (d, d) if "attn." in name else p.shape  # (self_, cross_)
            a = np.sqrt(6.0 / (fan_in + fan_out))
            assert 0.9 * a < float(np.abs(w).max()) <= a * (1 + 1e-6), name
    assert model.W_U.shape == (d, V)


def test_shared_embeddings_are_one_parameter():
    model = small(share_embeddings=True)
    assert model.encoder.embed is model.decoder.embed
    names = [n for n, _ in model.named_parameters() if n.endswith("embed.W")]
    assert names == ["encoder.embed.W"]


@pytest.mark.parametrize(
    "bad",
    [
        dict(share_embeddings=True, src_vocab_size=5),
        dict(norm_placement="middle"),
        dict(positional="rope"),
        dict(eos_id=99),
        dict(dropout=1.0),
        dict(d_model=10, n_head=4),
    ],
)
def test_config_errors(bad):
    with pytest.raises(ConfigError):
        Seq2SeqConfig(**bad)


def test_eos_must_differ_from_pad():
    """The loss ignores pad_id targets: with eos_id = pad_id every eos target was ignored, so
    the model was never taught to end a sequence, without a word. (bos_id = pad_id stays
    allowed: T5 starts its decoder with the pad token, which is never a target.)"""
    with pytest.raises(ConfigError, match="eos_id=0: must differ from pad_id=0"):
        Seq2SeqConfig(pad_id=0, bos_id=1, eos_id=0)
    assert Seq2SeqConfig(pad_id=0, bos_id=0, eos_id=1).bos_id == 0


def test_config_round_trip():
    cfg = Seq2SeqConfig(norm_placement="pre", activation="geglu")
    assert Seq2SeqConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="unknown"):
        Seq2SeqConfig.from_dict({"nope": 1})


def test_bad_inputs_say_what_is_wrong():
    model = small()
    with pytest.raises(ValueError, match="src: token ids outside the vocabulary of 9 .*index 99"):
        model(np.array([[3, 99]]), np.array([[1, 3]]))
    with pytest.raises(ValueError, match="tgt_in: token ids outside the vocabulary of 9 .*-1"):
        model(np.array([[3, 4]]), np.array([[1, -1]]))
    with pytest.raises(TypeError, match="integers"):
        model(np.array([[3.0, 4.0]]), np.array([[1, 3]]))
    with pytest.raises(ValueError, match="max_len"):
        model(np.full((1, 17), 3), np.array([[1, 3]]))
    with pytest.raises(ValueError, match="decode: 3 target sequences .* for 2 sources"):
        model(np.full((2, 4), 3), np.full((3, 2), 3))  # (once named a padding mask instead)


# ---------------------------------------------------------------------- masks
@pytest.mark.parametrize("overrides", VARIANTS[:3])
def test_source_padding_is_ignored(overrides):
    model = small(**overrides)
    src, tgt = sources(), targets()
    logits = model(src, tgt)[0].numpy()
    # 1. more padding on the right changes nothing
    wider = np.concatenate([src, np.zeros((4, 3), np.int64)], axis=1)
    np.testing.assert_allclose(model(wider, tgt)[0].numpy(), logits, atol=1e-5)
    # 2. a single unpadded row gives the same logits as in the padded batch
    np.testing.assert_allclose(
        model(src[3:, :3], tgt[3:])[0].numpy(), logits[3:], rtol=1e-4, atol=1e-5
    )
    # 3. whatever the encoder reads at padded positions changes nothing
    pad = model.padding_mask(src)

    def scribble(module, inputs, out):
        noise = np.random.default_rng(5).normal(size=out.shape).astype(np.float32) * 10
        return out + tl.tensor(noise * pad[..., None])

    handle = model.encoder.hook_embed.register_forward_hook(scribble)
    try:
        np.testing.assert_allclose(model(src, tgt)[0].numpy(), logits, atol=1e-5)
    finally:
        handle.remove()


def test_future_target_tokens_do_not_change_earlier_logits():
    model = small()
    src, tgt = sources(), targets()
    logits = model(src, tgt)[0].numpy()
    for t in range(tgt.shape[1]):
        changed = tgt.copy()
        changed[:, t:] = (changed[:, t:] - 2) % (V - 3) + 3
        new = model(src, changed)[0].numpy()
        np.testing.assert_allclose(new[:, :t], logits[:, :t], atol=1e-5)
        assert not np.allclose(new[:, t], logits[:, t])


def test_cross_attention_pattern_is_zero_on_padding():
    model = small()
    src, tgt = sources(), targets()
    seen, modules = {}, dict(model.named_modules())
    with nn.composed_attention(model):  # the pattern is a Tensor on the composed path only
        for name in (
            "encoder.blocks.0.attn",
            "decoder.blocks.1.cross_attn",
            "decoder.blocks.0.attn",
        ):
            hook = modules[f"{name}.hook_pattern"]
            hook.register_forward_hook(lambda m, i, out, name=name: seen.__setitem__(name, out))
        logits = model(src, tgt)[0].numpy()
    pad = model.padding_mask(src)
    cross = seen["decoder.blocks.1.cross_attn"].numpy()
    assert cross.shape == (4, 2, 5, 6)
    assert np.all(cross[np.broadcast_to(pad[:, None, None, :], cross.shape)] == 0)
    np.testing.assert_allclose(cross.sum(-1), 1.0, rtol=1e-5)
    assert np.all(np.triu(seen["decoder.blocks.0.attn"].numpy(), k=1) == 0)
    assert seen["encoder.blocks.0.attn"].shape == (4, 2, 6, 6)
    # hooks read, they do not change the result (the hooked path equals the fused one)
    fresh = small()
    np.testing.assert_allclose(fresh(src, tgt)[0].numpy(), logits, atol=1e-5)


def test_hook_point_names():
    names = {n for n, m in small().named_modules() if isinstance(m, nn.HookPoint)}
    for n in (
        "encoder.hook_embed",
        "decoder.hook_embed",
        "encoder.blocks.0.hook_resid_post",
        "encoder.blocks.0.attn.hook_pattern",
        "decoder.blocks.1.hook_cross_out",
        "decoder.blocks.1.hook_resid_cross",
        "decoder.blocks.0.cross_attn.hook_pattern",
        "decoder.blocks.0.attn.hook_z",
    ):
        assert n in names


# ---------------------------------------------------------------------- loss
def test_loss_ignores_padding():
    model = small(label_smoothing=0.0)
    src, tgt_in = sources(), targets()
    tgt_out = targets(seed=2)
    tgt_out[0, 3:] = 0
    tgt_out[2, 1:] = 0
    logits, loss = model(src, tgt_in, tgt_out)
    z = logits.numpy().astype(np.float64)
    lsm = (
        z
        - np.log(np.exp(z - z.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - z.max(-1)[..., None]
    )
    keep = tgt_out != 0
    picked = np.take_along_axis(lsm, tgt_out[..., None], -1)[..., 0]
    assert loss.item() == pytest.approx(-picked[keep].mean(), rel=1e-5)
    # what the decoder reads after the target's end changes nothing that counts
    changed = tgt_in.copy()
    changed[0, 4:] = 5
    changed[2, 2:] = 7
    assert model(src, changed, tgt_out)[1].item() == pytest.approx(loss.item(), rel=1e-6)


def test_loss_backward_reaches_every_parameter():
    model = small(dropout=0.1)
    model.train()
    _, loss = model(sources(), targets(), targets(seed=3))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and np.isfinite(p.grad.numpy()).all(), name


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_gradcheck_loss_float64(placement):
    tl.manual_seed(0)
    cfg = Seq2SeqConfig(
        src_vocab_size=6,
        tgt_vocab_size=6,
        max_len=8,
        n_encoder_layer=1,
        n_decoder_layer=1,
        n_head=2,
        d_model=8,
        d_ff=8,
        dropout=0.0,
        norm_placement=placement,
        label_smoothing=0.1,
    )
    model = Transformer(cfg)
    for p in model.parameters():
        p.data = p.data.astype(np.float64)
    for _, b in model.named_buffers():
        b.data = b.data.astype(np.float64)
    src = np.array([[3, 4, 5, 0], [5, 3, 0, 0]])
    tgt_in = np.array([[1, 3, 4], [1, 5, 0]])
    tgt_out = np.array([[3, 4, 2], [5, 2, 0]])
    params = dict(model.named_parameters())
    wrt = [
        params["decoder.embed.W"],  # tied: embedding and unembedding
        params["encoder.blocks.0.attn.W_q"],
        params["decoder.blocks.0.cross_attn.W_k"],
        params["decoder.blocks.0.cross_attn.W_v"],
        params["decoder.blocks.0.cross_attn.b_q"],
        params["decoder.blocks.0.ln2.w"],
        params["encoder.blocks.0.mlp.W_out"],
    ]
    assert all(p.dtype == np.float64 for p in wrt)

    def loss_of(*_params):  # the parameters are perturbed in place; the model reads them
        return model(src, tgt_in, tgt_out)[1]

    assert tl.gradcheck(loss_of, wrt)


# ---------------------------------------------------------------------- decoding
@pytest.mark.parametrize("overrides", [{}, dict(norm_placement="pre", positional="learned")])
def test_cached_decoding_matches_full_decoding(overrides):
    model = small(**overrides)
    src, tgt = sources(), targets()
    memory, mask = model.encode(src), model.padding_mask(src)
    full = model.decode(memory, mask, tgt).numpy()
    cache = model.new_cache()
    steps = [model.decode(memory, mask, tgt[:, :2], cache)]  # a 2-token prompt, then 1 by 1
    steps += [model.decode(memory, mask, tgt[:, t : t + 1], cache) for t in range(2, 5)]
    assert cache.length == 5
    np.testing.assert_allclose(np.concatenate([s.numpy() for s in steps], 1), full, atol=1e-5)
    # cross-attention keys and values were made once, from the memory
    assert cache.cross_attn[0].k.shape == (4, 6, 2, 8)  # (batch, source positions, heads, d_head)


def test_cached_greedy_equals_uncached_greedy():
    model = small(seed=3)
    src = sources(seed=4, n=6)
    cached = greedy_decode(model, src, max_new_tokens=10)
    uncached = greedy_decode(model, src, max_new_tokens=10, use_cache=False)
    assert cached == uncached
    assert all(1 <= len(h) <= 10 for h in cached)
    assert all(2 not in h[:-1] for h in cached)  # nothing after eos
    # one sequence in, one list out; lists of ragged lists are padded
    assert greedy_decode(model, src[0], max_new_tokens=10) == cached[0]
    ragged = [list(src[0]), list(src[3, :3])]
    assert greedy_decode(model, ragged, max_new_tokens=10) == [cached[0], cached[3]]


def test_decoding_restores_training_mode():
    model = small(dropout=0.1)
    model.train()
    greedy_decode(model, sources(), max_new_tokens=3)
    beam_search(model, sources(), beam_size=2, max_new_tokens=3)
    assert model.training


def peaked(seed: int) -> Transformer:
    """A random model with confident, source-dependent predictions (bigger weights), so that
    the decoders' choices are not all near-ties."""
    model = small(seed=seed)
    for p in model.parameters():
        if p.ndim >= 2:
            p.data *= 2.5
    return model


def argmax_decode(model, src, max_new_tokens: int) -> list[list[int]]:
    """Greedy decoding written out: per source, the argmax after the whole prefix, each step."""
    cfg, out = model.config, []
    for s in src:
        hyp = []
        while len(hyp) < max_new_tokens and cfg.eos_id not in hyp:
            logits, _ = model(s[None], np.array([[cfg.bos_id, *hyp]]))
            hyp.append(int(logits.numpy()[0, -1].argmax()))
        out.append(hyp)
    return out


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_size_one_is_greedy(alpha):
    for seed in range(3):
        model = peaked(seed)
        src = sources(seed=seed + 10, n=5)
        greedy = argmax_decode(model, src, 12)
        assert greedy_decode(model, src, max_new_tokens=12) == greedy
        assert beam_search(model, src, 1, max_new_tokens=12, alpha=alpha) == greedy


@pytest.mark.parametrize("alpha", [0.0, 1.0])
@pytest.mark.parametrize("exhaustive", [False, True])
def test_beam_never_scores_below_greedy(alpha, exhaustive):
    better = 0
    for seed in range(4):
        model = peaked(seed)
        src = sources(seed=seed + 20, n=6)
        greedy = greedy_decode(model, src, max_new_tokens=10)
        beams = beam_search(
            model,
            src,
            beam_size=4,
            max_new_tokens=10,
            alpha=alpha,
            exhaustive=exhaustive,
            return_scores=True,
        )
        for i, (g, (b, b_score)) in enumerate(zip(greedy, beams)):
            g_score = sequence_score(model, src[i], g, alpha)
            # the score beam search reports is the score of what it returns
            assert b_score == pytest.approx(sequence_score(model, src[i], b, alpha), abs=1e-4)
            assert b_score >= g_score - 1e-4, (seed, i, g, b)
            better += b_score > g_score + 1e-4
    assert better > 0  # the search does find better sequences than greedy, sometimes


class Scripted(nn.Module):
    """A decoder whose next-token probabilities are a table of the prefix (bos left out):
    ``script(prefix) -> {token: probability}``, the rest spread evenly over the other tokens.
    It decodes without a cache (``use_cache=False``: every call sees the whole prefix)."""

    def __init__(self, script, vocab: int = 6, max_len: int = 8):
        super().__init__()
        self.script, self.vocab = script, vocab
        self.config = Seq2SeqConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, max_len=max_len)

    def encode(self, src):
        return tl.tensor(np.zeros((len(src), 1, 1), dtype=np.float32))

    def padding_mask(self, src):
        return np.zeros(np.shape(src), dtype=bool)

    def decode(self, memory, src_mask, tgt_in, cache=None):
        assert cache is None
        rows = []
        for prefix in np.asarray(tgt_in)[:, 1:].tolist():
            given = self.script(tuple(prefix))
            rest = (1.0 - sum(given.values())) / (self.vocab - len(given))
            rows.append([given.get(tok, rest) for tok in range(self.vocab)])
        logp = np.log(np.array(rows))[:, None, :]  # only the last position is read
        return tl.tensor(np.repeat(logp, np.shape(tgt_in)[1], axis=1))


EOS, A, B = 2, 3, 4  # (Seq2SeqConfig's default pad 0, bos 1, eos 2)


def test_exhaustive_search_goes_on_while_a_live_prefix_could_still_win():
    """alpha = 2: an early eos scores log 0.5 / lp(1); the prefix A (log 0.3) scores worse if
    it ended now, but could reach log 0.3 / lp(max) > log 0.5 at the longest length. The
    default rule stops with [eos]; exhaustive=True goes on and finds A A A eos, which scores
    log(0.3 · 0.999³) / lp(4) > log 0.5 (lp(n) = ((5 + n) / 6)²)."""

    def script(prefix):
        if prefix == ():
            return {EOS: 0.5, A: 0.3, B: 0.15}
        if prefix[0] == A:
            return {A: 0.999} if len(prefix) < 3 else {EOS: 0.999}
        return {}

    model = Scripted(script)
    kw = dict(beam_size=2, max_new_tokens=7, alpha=2.0, use_cache=False, return_scores=True)
    stopped = beam_search(model, [A], **kw)
    assert stopped == ([EOS], pytest.approx(np.log(0.5)))
    hyp, score = beam_search(model, [A], exhaustive=True, **kw)
    assert hyp == [A, A, A, EOS]
    assert score == pytest.approx(np.log(0.3 * 0.999**3) / length_penalty(4, 2.0))
    assert score > np.log(0.5)


def test_beam_search_batch_equals_one_by_one():
    model = peaked(1)
    src = sources(seed=7, n=4)
    batch = beam_search(model, src, beam_size=3, max_new_tokens=8, alpha=0.6)
    one = [
        beam_search(model, src[i][src[i] != 0], beam_size=3, max_new_tokens=8, alpha=0.6)
        for i in range(4)
    ]
    assert batch == one


def test_length_penalty():
    assert length_penalty(7, 0.0) == 1.0
    assert length_penalty(1, 0.6) == 1.0
    assert length_penalty(7, 1.0) == pytest.approx(2.0)


def test_beam_search_refuses_bad_arguments():
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(small(), sources(), beam_size=0)
    with pytest.raises(ValueError, match="alpha"):
        beam_search(small(), sources(), alpha=-1)


# ---------------------------------------------------------------------- the example
def run_example(*args: str, timeout: float) -> dict[str, tuple[float, float]]:
    """Run examples/train_seq2seq.py in its own process (it sets BLAS to one thread before
    NumPy loads); returns {task: (exact match, token accuracy)} from its summary table."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_seq2seq.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = re.findall(r"^(copy|reverse|sort)\s+([\d.]+)%\s+([\d.]+)%", proc.stdout, re.M)
    assert rows, proc.stdout[-2000:]
    return {task: (float(em) / 100, float(tok) / 100) for task, em, tok in rows}


def test_example_quick_learns_to_copy():
    result = run_example("--quick", "--task", "copy", "--log-every", "0", timeout=120)
    exact, token = result["copy"]
    assert token > 0.5  # chance is 10%


@pytest.mark.slow
def test_example_reverse_reaches_99_percent():
    result = run_example("--task", "reverse", "--log-every", "0", timeout=900)
    assert result["reverse"][0] >= 0.99


# ---------------------------------------------------------------------- parity with PyTorch
# The same model written in plain PyTorch (tests/gpt/seq2seq_torch.py), our parameters copied
# in, everything in float64. Tolerance: float64 rounds each operation by u ≈ 1.1e-16; a value
# here is a chain of at most ~20 sublayers, each summing n ≤ 64 products, through norms that may
# amplify relative error by 1/σ (≲ 10 for these draws): ≲ 20 · 64 · 10 · u ≈ 1.4e-12 of the
# values' scale. We allow 1e-10 of the largest |value| (observed: ~1e-15). A float32 rounding
# anywhere is ~6e-8 relative, 600× above it; both slips made while writing this were of that
# size and failed: the sinusoid table a cast model keeps rounded to float32 (see ``model64``),
# and a float32 exponent in the reference's own table.
TOL = 1e-10


def model64(cfg: Seq2SeqConfig, seed: int, gain: float = 1.0) -> Transformer:
    """A float64 model; ``gain`` scales the matrices (peaked attention, confident logits)."""
    tl.manual_seed(seed)
    model = Transformer(cfg)
    for p in model.parameters():
        p.data = p.data.astype(np.float64) * (gain if p.ndim >= 2 else 1.0)
    for name, b in model.named_buffers():  # the table was built in float64, then rounded
        table = sinusoidal_table(*b.shape) if name.endswith(".pe") else b.data
        b.data = xp_of(b.data).asarray(table).astype(np.float64)
    return model.eval()


def assert_close(ours, theirs, what: str):
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    scale = max(1.0, float(np.abs(theirs).max(initial=0.0)))
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOL * scale, err_msg=what)


@st.composite
def seq2seq_cases(draw, max_tgt_vocab: int = 9):
    """A small config, a float64 model, and a batch: sources with any padding pattern (rows
    all padding included), decoder inputs ``bos`` + the targets shifted right, and targets
    with pads anywhere (at least one real one)."""
    H, d_head = draw(st.integers(1, 3)), draw(st.integers(2, 4))
    share = draw(st.booleans())
    tgt_V = draw(st.integers(4, max_tgt_vocab))
    src_V = tgt_V if share else draw(st.integers(4, 9))
    pad, bos, eos = draw(st.sampled_from([(0, 1, 2), (2, 0, 1), (1, 2, 0), (0, 0, 1)]))
    B, S, T = draw(st.integers(1, 3)), draw(st.integers(1, 5)), draw(st.integers(1, 5))
    activation = draw(st.sampled_from(["relu", "gelu", "gelu_tanh", "silu", "elu", "swiglu"]))
    cfg = Seq2SeqConfig(
        src_vocab_size=src_V,
        tgt_vocab_size=tgt_V,
        max_len=max(S, T) + draw(st.integers(0, 2)),
        n_encoder_layer=draw(st.integers(1, 2)),
        n_decoder_layer=draw(st.integers(1, 2)),
        n_head=H,
        d_model=H * d_head,
        d_ff=draw(st.sampled_from([None, 3])),
        activation=draw(st.sampled_from([activation, "geglu", "glu", "reglu"]))
        if draw(st.booleans())
        else activation,
        norm=draw(st.sampled_from(["layernorm", "rmsnorm"])),
        norm_placement=draw(st.sampled_from(["post", "pre", "sandwich"])),
        final_norm=draw(st.sampled_from([None, True, False])),
        positional=draw(st.sampled_from(["sinusoidal", "learned"])),
        bias=draw(st.booleans()),
        dropout=0.0,
        tie_weights=draw(st.booleans()),
        share_embeddings=share,
        scale_embeddings=draw(st.booleans()),
        label_smoothing=draw(st.sampled_from([0.0, 0.1])),
        pad_id=pad,
        bos_id=bos,
        eos_id=eos,
    )
    model = model64(cfg, draw(st.integers(0, 2**16)), draw(st.sampled_from([1.0, 2.5])))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))

    def words(V, shape):  # ids other than pad
        ids = rng.integers(0, V - 1, shape)
        return ids + (ids >= pad)

    src = words(src_V, (B, S))
    src[draw(hnp.arrays(bool, (B, S)))] = pad
    tgt_out = words(tgt_V, (B, T))
    pads = draw(hnp.arrays(bool, (B, T)))
    pads[0, 0] = False
    tgt_out[pads] = pad
    tgt_in = np.concatenate([np.full((B, 1), bos), tgt_out[:, :-1]], axis=1)
    return model, src, tgt_in, tgt_out


def check_against_reference(model, src, tgt_in, tgt_out, composed=False):
    """Our logits, loss and every parameter's gradient equal the reference's (all finite)."""
    ref_module = pytest.importorskip("tests.gpt.seq2seq_torch", reason="needs torch")
    with nn.composed_attention(model) if composed else contextlib.nullcontext():
        logits, loss = model(src, tgt_in, tgt_out)
        loss.backward()
    ref = ref_module.load(model)
    with ref_module.one_thread():
        ref_logits, ref_loss = ref(src, tgt_in, tgt_out)
        ref_loss.backward()
    assert logits.dtype == np.float64 and np.isfinite(logits.numpy()).all()
    assert_close(logits.numpy(), ref_logits.detach().numpy(), "logits")
    assert_close(loss.item(), ref_loss.item(), "loss")
    # each gradient entry sums terms no larger than the largest gradient: that is its scale
    # (a relative test per parameter is meaningless for the key biases, whose exact gradient
    # is 0: adding q·b_k to every score of a row leaves the softmax unchanged)
    grads = ref_module.grads_as_ours(ref, model)
    scale = max(1.0, max(float(np.abs(g).max()) for g in grads.values()))
    for name, p in model.named_parameters():
        assert np.isfinite(p.grad.numpy()).all(), name
        np.testing.assert_allclose(
            p.grad.numpy(), grads[name], rtol=0, atol=TOL * scale, err_msg=name
        )


@given(case=seq2seq_cases(), composed=st.booleans())
def test_matches_pytorch_reference(case, composed):
    """Logits, loss and the gradient of every parameter equal the PyTorch reference's, on
    the fused attention path and on the composed one (the one hooks see)."""
    check_against_reference(*case, composed=composed)


@pytest.mark.parametrize("overrides", VARIANTS)
def test_all_padding_source_row_matches_reference(overrides):
    """A source row that is all padding: the encoder's and the cross-attention's queries
    attend to no key, get a zero pattern (our convention; PyTorch's softmax would give NaN)
    and add only the output bias; logits, loss and gradients stay finite and equal the
    reference's."""
    model = model64(small(**overrides).config, seed=0)
    src = sources(n=2)
    src[1] = model.config.pad_id
    check_against_reference(model, src, targets(n=2), targets(seed=2, n=2))


@given(case=seq2seq_cases(), cuts=st.lists(st.integers(1, 4), min_size=1, max_size=5))
def test_cached_decoding_matches_full_decoding_and_reference(case, cuts):
    """The decoder fed a few positions at a time (chunks of ``cuts`` sizes) through the key/
    value cache gives the logits of one pass over the whole target, and the reference's."""
    ref_module = pytest.importorskip("tests.gpt.seq2seq_torch", reason="needs torch")
    model, src, tgt_in, _ = case
    T = tgt_in.shape[1]
    memory, mask = model.encode(src), model.padding_mask(src)
    full = model.decode(memory, mask, tgt_in).numpy()
    cache, steps, t = model.new_cache(), [], 0
    for n in [*cuts, T]:
        if t < T:
            steps.append(model.decode(memory, mask, tgt_in[:, t : t + n], cache).numpy())
            t += n
    assert cache.length == T
    assert_close(np.concatenate(steps, axis=1), full, "cached vs full")
    with ref_module.one_thread():
        ref_logits = ref_module.load(model)(src, tgt_in)[0].detach().numpy()
    assert_close(full, ref_logits, "reference")


def reference_logprobs(ref, src_row, prefixes) -> np.ndarray:
    """log p(· | src, bos, prefix) from the reference, one row per prefix (all one length)."""
    cfg = ref.cfg
    tgt_in = np.array([[cfg.bos_id, *p] for p in prefixes], dtype=np.int64)
    src = np.repeat(src_row[None], len(prefixes), axis=0)
    ref_module = pytest.importorskip("tests.gpt.seq2seq_torch", reason="needs torch")
    with ref_module.torch.no_grad(), ref_module.one_thread():
        logits = ref(src, tgt_in)[0][:, -1]
    return logits.log_softmax(-1).numpy()


@given(case=seq2seq_cases())
def test_greedy_with_cache_equals_recomputing_and_reference(case):
    """Greedy decoding through the cache, recomputing the whole decoder at each step, and the
    reference's greedy choice at each step all pick the same tokens."""
    ref = pytest.importorskip("tests.gpt.seq2seq_torch", reason="needs torch").load(case[0])
    model, src = case[0], case[1]
    cfg = model.config
    cached = greedy_decode(model, src)
    assert greedy_decode(model, src, use_cache=False) == cached
    for row, hyp in zip(src, cached):
        prefix: list[int] = []
        while len(prefix) < cfg.max_len and (not prefix or prefix[-1] != cfg.eos_id):
            prefix.append(int(reference_logprobs(ref, row, [prefix])[0].argmax()))
        assert hyp == prefix


@given(
    case=seq2seq_cases(),
    beam_size=st.integers(1, 4),
    alpha=st.sampled_from([0.0, 0.6]),
    exhaustive=st.booleans(),
)
def test_beam_search_with_cache_equals_recomputing(case, beam_size, alpha, exhaustive):
    """Beam search through the (reordered) cache returns the hypotheses and scores of beam
    search that recomputes every prefix, and each score is the reference's log P / lp."""
    ref = pytest.importorskip("tests.gpt.seq2seq_torch", reason="needs torch").load(case[0])
    model, src = case[0], case[1]
    kw = dict(beam_size=beam_size, alpha=alpha, exhaustive=exhaustive, return_scores=True)
    cached = beam_search(model, src, **kw)
    recomputed = beam_search(model, src, use_cache=False, **kw)
    assert [h for h, _ in cached] == [h for h, _ in recomputed]
    assert_close([s for _, s in cached], [s for _, s in recomputed], "scores")
    for row, (hyp, score) in zip(src, cached):
        lsm = [reference_logprobs(ref, row, [hyp[:t]])[0, tok] for t, tok in enumerate(hyp)]
        assert_close(score, sum(lsm) / length_penalty(len(hyp), alpha), f"score of {hyp}")


@given(
    case=seq2seq_cases(max_tgt_vocab=5),
    alpha=st.sampled_from([0.0, 0.6, 2.0]),
)
def test_wide_exhaustive_beam_finds_the_best_sequence(case, alpha):
    """With a beam wider than every candidate (V^m for m steps) and ``exhaustive=True`` the
    search is exact: it returns the best of all hypotheses by log P / lp, enumerated with the
    reference (no eos before the end; the end is eos or the length limit m)."""
    ref = pytest.importorskip("tests.gpt.seq2seq_torch", reason="needs torch").load(case[0])
    model, src = case[0], case[1]
    cfg, V = model.config, model.config.tgt_vocab_size
    m = min(3, cfg.max_len)
    found = beam_search(
        model, src, V**m, max_new_tokens=m, alpha=alpha, exhaustive=True, return_scores=True
    )
    words = [w for w in range(V) if w != cfg.eos_id]
    for row, (hyp, score) in zip(src, found):
        best, layer = (-np.inf, None), {(): 0.0}  # prefixes without eos -> log P
        for t in range(m):
            prefixes = list(layer)
            lsm = reference_logprobs(ref, row, prefixes)
            nxt = {}
            for p, lp_p in layer.items():
                i = prefixes.index(p)
                ends = [cfg.eos_id] + (words if t == m - 1 else [])
                for tok in ends:
                    y = (*p, tok)
                    best = max(best, ((lp_p + lsm[i, tok]) / length_penalty(len(y), alpha), y))
                nxt.update({(*p, w): lp_p + lsm[i, w] for w in words} if t < m - 1 else {})
            layer = nxt
        assert_close(score, best[0], "best score")
        assert tuple(hyp) == best[1]


def test_sequence_score_takes_one_source_not_a_batch():
    """hyp is one sequence: a batch of sources is refused, not silently read as its first."""
    model = small()
    src = sources(n=2)
    with pytest.raises(ValueError, match="src holds 2 sequences"):
        sequence_score(model, src, [3, 4])
    assert sequence_score(model, src[1], [3, 4]) == sequence_score(model, src[1:], [3, 4])
