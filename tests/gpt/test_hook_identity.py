"""Identity hooks change nothing. On every hook point of a GPT (pre-norm with learned
positions, post-norm, sandwich + parallel, RoPE, relative positions, attention-only without
norms) and of an encoder-decoder Transformer, a hook that changes nothing (a forward hook
returning its input, one returning None, a pre-hook returning its arguments) leaves the logits
bit for bit those of the unhooked model: on the composed attention and norm paths with per-head
results, where every hook point is open; on the fused path as built, where the scores, the
pattern, the per-head results (hook_result) and the norms' hook_scale and hook_normalized are
closed and every other point is hooked; and on the fused path with per-head results; with
source padding (seq2seq) and with the key/value cache (both models)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import nn
import tensorlab as tl
from gpt.circuits import hook_names
from gpt.config import GPTConfig, Seq2SeqConfig
from gpt.generate import generate
from gpt.model import GPT
from gpt.seq2seq import Transformer
from nn.attention import attention_results
from nn.norm import composed_norms

STYLES = ["returns input", "returns None", "pre-hook"]
PATHS = ["composed", "fused", "fused-results"]
CLOSED_WHEN_FUSED = ("hook_attn_scores", "hook_pattern")
CLOSED_WITHOUT_RESULTS = ("hook_result",)
CLOSED_IN_FUSED_NORMS = ("hook_scale", "hook_normalized")

GPT_VARIANTS = {
    "default": {},
    "post-norm": dict(norm_placement="post"),
    "sandwich-parallel": dict(norm_placement="sandwich", parallel=True),
    "rope": dict(positional="rope"),
    "relative": dict(positional="relative", max_relative_distance=4),
    "attn-only-no-norm": dict(attn_only=True, norm="none"),
}
SEQ2SEQ_VARIANTS = {
    "post-sinusoidal": {},
    "pre-learned": dict(norm_placement="pre", positional="learned"),
}


def randomize(model: nn.Module, seed: int) -> nn.Module:
    """Every parameter N(0, 0.3²): gains, biases and the relative-position bias leave their
    initial 1s and 0s, so no term of the forward pass is trivially zero."""
    rng = np.random.default_rng(seed)
    with tl.no_grad():
        for p in model.parameters():
            p.copy_(rng.standard_normal(p.shape) * 0.3)
    return model


def small_gpt(variant: str, seed: int = 0) -> GPT:
    tl.manual_seed(seed)
    cfg = GPTConfig(
        vocab_size=11, block_size=12, n_layer=2, n_head=2, d_model=16, **GPT_VARIANTS[variant]
    )
    return randomize(GPT(cfg), seed).eval()


def small_seq2seq(variant: str, seed: int = 0) -> Transformer:
    tl.manual_seed(seed)
    cfg = Seq2SeqConfig(
        src_vocab_size=9,
        tgt_vocab_size=9,
        max_len=16,
        n_encoder_layer=2,
        n_decoder_layer=2,
        n_head=2,
        d_model=16,
        dropout=0.0,
        **SEQ2SEQ_VARIANTS[variant],
    )
    return randomize(Transformer(cfg), seed).eval()


@contextlib.contextmanager
def on_path(model: nn.Module, path: str):
    """Every hook point open (the composed attention and norm paths, inside
    ``nn.composed_attention`` and ``nn.composed_norms``, with per-head results, inside
    ``attention_results``), the model as built (fused, no per-head results), or the fused
    attention and norms with per-head results."""
    with contextlib.ExitStack() as stack:
        if path == "composed":
            stack.enter_context(nn.composed_attention(model))
            stack.enter_context(composed_norms(model))
        if path in ("composed", "fused-results"):
            stack.enter_context(attention_results(model))
        yield model


def open_points(model: nn.Module, path: str) -> list[str]:
    """The hook points the model's current path runs through. Closed ones (hooking them
    raises): on the fused path every attention layer's scores and pattern and every norm's
    scale and normalized input, and without per-head results every attention layer's
    hook_result."""
    modules = dict(model.named_modules())
    names = hook_names(model)
    points = [n for n in names if not modules[n].closed]
    closed = [n for n in names if n not in points]
    expected = {
        "composed": (),
        "fused": CLOSED_WHEN_FUSED + CLOSED_WITHOUT_RESULTS,
        "fused-results": CLOSED_WHEN_FUSED,
    }[path]
    n_attn = sum(isinstance(m, nn.MultiHeadAttention) for m in modules.values())
    n_norm = sum(isinstance(m, nn.LayerNorm | nn.RMSNorm) for m in modules.values())
    norms = CLOSED_IN_FUSED_NORMS * n_norm if path != "composed" else ()
    assert sorted(n.rsplit(".", 1)[-1] for n in closed) == sorted(expected * n_attn + norms)
    for n in closed:
        reason = "attention is fused" if n.endswith(CLOSED_WHEN_FUSED) else "per-head results"
        reason = "norm is fused" if n.endswith(CLOSED_IN_FUSED_NORMS) else reason
        with pytest.raises(RuntimeError, match=reason):
            modules[n].register_forward_hook(lambda *a: None)
    return points


def add_identity_hooks(model: nn.Module, names: list[str], style: str):
    """A hook that changes nothing on each named hook point, counting its calls by name."""
    modules = dict(model.named_modules())
    calls: dict[str, int] = {}
    handles = []
    for name in names:
        point = modules[name]
        assert isinstance(point, nn.HookPoint)

        def count(name=name):
            calls[name] = calls.get(name, 0) + 1

        if style == "returns input":
            h = point.register_forward_hook(lambda mod, inputs, out, c=count: c() or inputs[0])
        elif style == "returns None":
            h = point.register_forward_hook(lambda mod, inputs, out, c=count: c())
        else:
            h = point.register_forward_pre_hook(lambda mod, args, c=count: c() or args)
        handles.append(h)
    return handles, calls


def hooked_and_plain(model: nn.Module, path: str, style: str, logits_of):
    """``logits_of()`` without hooks and with an identity hook on every open hook point, on
    the given path. Returns both, and the hook points whose hook never ran."""
    with on_path(model, path):
        plain = logits_of()
        points = open_points(model, path)
        handles, calls = add_identity_hooks(model, points, style)
        try:
            hooked = logits_of()
        finally:
            for h in handles:
                h.remove()
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    return hooked, plain, sorted(set(points) - set(calls))


def assert_bitwise_equal(a: np.ndarray, b: np.ndarray) -> None:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert np.isfinite(a).all()
    assert a.tobytes() == b.tobytes()


# ---------------------------------------------------------------------- GPT
def gpt_logits(model: GPT, tokens: np.ndarray, cache: bool) -> np.ndarray:
    """All positions at once, or a 4-token prompt through model.new_cache() then one token at
    a time (the logits of every step, concatenated)."""
    with tl.no_grad():
        if not cache:
            return model(tokens)[0].numpy()
        c = model.new_cache()
        pieces = [model(tokens[:, :4], cache=c)[0]]
        pieces += [model(tokens[:, t : t + 1], cache=c)[0] for t in range(4, tokens.shape[1])]
        assert c.length == tokens.shape[1]
    return np.concatenate([p.numpy() for p in pieces], axis=1)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("cache", [False, True], ids=["no cache", "cache"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("variant", sorted(GPT_VARIANTS))
def test_gpt_identity_hooks_leave_the_logits_bit_for_bit(variant, path, cache, style):
    model = small_gpt(variant)
    tokens = np.random.default_rng(1).integers(0, 11, (2, 10))
    hooked, plain, missed = hooked_and_plain(
        model, path, style, lambda: gpt_logits(model, tokens, cache)
    )
    assert_bitwise_equal(hooked, plain)
    assert missed == []  # every hook ran


@pytest.mark.parametrize("variant", sorted(GPT_VARIANTS))
def test_every_gpt_hook_point_is_passed_through(variant):
    """Every hook point hook_names lists is one the forward pass runs through (a hook on a
    point that is never passed would silently do nothing: nn.HookPoint.closed exists to
    refuse such hooks on a fused attention's scores and pattern)."""
    model = small_gpt(variant)
    tokens = np.random.default_rng(1).integers(0, 11, (2, 10))
    *_, missed = hooked_and_plain(model, "composed", "returns None", lambda: model(tokens))
    assert missed == []


@pytest.mark.parametrize("path", PATHS)
def test_gpt_generate_with_identity_hooks_samples_the_same_tokens(path):
    """gpt.generate (KV cache, sampling at temperature 1 from a seed) continues a prompt with
    the same tokens with identity hooks everywhere open as without."""
    model = small_gpt("rope")
    prompt = [3, 1, 4, 1, 5]
    out = lambda: np.array(generate(model, prompt, 6, temperature=1.0, seed=0))
    hooked, plain, missed = hooked_and_plain(model, path, "returns input", out)
    np.testing.assert_array_equal(hooked, plain)
    assert missed == []


# ---------------------------------------------------------------------- seq2seq
def seq2seq_batch():
    """Sources with no padding, with two padded positions, and with every position padded
    (pad_id 0: the encoder and the cross-attention see no key for that row); targets."""
    rng = np.random.default_rng(2)
    src = rng.integers(3, 9, (3, 6))
    src[1, 4:] = 0
    src[2] = 0
    tgt_in = np.concatenate([np.ones((3, 1), np.int64), rng.integers(3, 9, (3, 5))], axis=1)
    return src, tgt_in


def seq2seq_logits(model: Transformer, src, tgt_in, cache: bool) -> np.ndarray:
    """model(src, tgt_in), or encode once and decode through model.new_cache(): a 2-token
    prefix, then one token at a time."""
    with tl.no_grad():
        if not cache:
            return model(src, tgt_in)[0].numpy()
        memory, mask = model.encode(src), model.padding_mask(src)
        assert mask.any()
        c = model.new_cache()
        steps = [model.decode(memory, mask, tgt_in[:, :2], c)]
        steps += [
            model.decode(memory, mask, tgt_in[:, t : t + 1], c) for t in range(2, tgt_in.shape[1])
        ]
    return np.concatenate([s.numpy() for s in steps], axis=1)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("cache", [False, True], ids=["no cache", "cache"])
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("variant", sorted(SEQ2SEQ_VARIANTS))
def test_seq2seq_identity_hooks_leave_the_logits_bit_for_bit(variant, path, cache, style):
    model = small_seq2seq(variant)
    src, tgt_in = seq2seq_batch()
    hooked, plain, missed = hooked_and_plain(
        model, path, style, lambda: seq2seq_logits(model, src, tgt_in, cache)
    )
    assert_bitwise_equal(hooked, plain)
    assert missed == []  # every hook ran
