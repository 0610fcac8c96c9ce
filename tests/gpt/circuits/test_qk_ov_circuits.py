"""gpt/circuits/qk_ov.py: the QK and OV circuits against the model's own computation (see
``circuit_models`` for how exactness is arranged), W_QK, W_OV and composition scores."""

from __future__ import annotations

import numpy as np
import pytest

import tensorlab as tl
from gpt import circuits as C
from gpt.model import GPT

from .circuit_models import exact_model, randomized, sigma, small


def test_qk_circuit_equals_model_scores_on_token_pairs():
    """For every (query token i, key token j): the sequence [j, i]; the model's q (position 1)
    · k (position 0) per head, times the LayerNorm scales, is QK[i, j]; and the pattern's
    log-odds between the two keys are the scaled circuit's difference."""
    model = exact_model()
    cfg = model.config
    V, eps = cfg.vocab_size, cfg.norm_eps
    i, j = np.meshgrid(np.arange(V), np.arange(V), indexing="ij")
    tokens = np.stack([j.ravel(), i.ravel()], axis=1)  # (V², 2): key j, then query i
    _, cache = C.run_with_cache(model, tokens)
    q, k = cache["blocks.0.attn.hook_q"], cache["blocks.0.attn.hook_k"]
    s = sigma(cache["blocks.0.hook_resid_pre"], eps)  # (V², 2)
    pattern = cache["blocks.0.attn.hook_pattern"]
    for h in range(cfg.n_head):
        QK = C.qk_circuit(model, 0, h)
        assert QK.shape == (V, V) and QK.rank_bound == cfg.d_head
        score = (q[:, 1, h] * k[:, 0, h]).sum(-1) * s[:, 1] * s[:, 0]
        np.testing.assert_allclose(score.reshape(V, V), QK.full(), rtol=1e-4, atol=1e-4)
        # pattern logits: log(p_j / p_i) = scaled QK[i, j] / σ_j - scaled QK[i, i] / σ_i
        S = C.qk_circuit(model, 0, h, scale=True).full()
        sq, sk = s[:, 1].reshape(V, V), s[:, 0].reshape(V, V)
        logodds = np.log(pattern[:, h, 1, 0] / pattern[:, h, 1, 1]).reshape(V, V)
        expect = (S / sk - np.diag(S)[:, None] / sq) / sq
        np.testing.assert_allclose(logodds, expect, rtol=1e-3, atol=1e-3)


def test_positional_qk_terms_sum_to_the_model_score():
    model = exact_model(positional="learned", seed=1)
    cfg = model.config
    rng = np.random.default_rng(3)
    tokens = rng.integers(0, cfg.vocab_size, (4, cfg.block_size))
    _, cache = C.run_with_cache(model, tokens)
    q, k = cache["blocks.0.attn.hook_q"], cache["blocks.0.attn.hook_k"]
    s = sigma(cache["blocks.0.hook_resid_pre"], cfg.norm_eps)
    T = cfg.block_size
    pos = np.arange(T)
    for h in range(cfg.n_head):
        terms = {
            (a, b): C.qk_circuit(model, 0, h, query=a, key=b).full()
            for a in ("token", "pos")
            for b in ("token", "pos")
        }
        assert terms["pos", "pos"].shape == (T, T)
        for b in range(len(tokens)):
            t = tokens[b]
            idx = {"token": t, "pos": pos}
            total = sum(M[np.ix_(idx[a], idx[c])] for (a, c), M in terms.items())
            model_scores = (q[b, :, h] @ k[b, :, h].T) * s[b][:, None] * s[b][None, :]
            np.testing.assert_allclose(model_scores, total, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="learned"):
        C.qk_circuit(exact_model(), 0, 0, query="pos")


def test_ov_circuit_row_is_the_heads_logit_contribution():
    """Sequence [i] (one token: the head attends fully to it). Knocking out every other
    head (hook_z), logits minus the direct path W_E[i] W_U are head h's contribution, which
    times the LayerNorm scale of the position is OV row i."""
    model = exact_model(seed=2)
    cfg = model.config
    V, H = cfg.vocab_size, cfg.n_head
    tokens = np.arange(V)[:, None]
    _, cache = C.run_with_cache(model, tokens, names=["blocks.0.hook_resid_pre"])
    s = sigma(cache["blocks.0.hook_resid_pre"], cfg.norm_eps)[:, 0]
    direct = model.W_E.numpy() @ model.W_U.numpy()
    for h in range(H):

        def keep_only(z, h=h):
            z = z.numpy().copy()
            z[:, :, [g for g in range(H) if g != h]] = 0
            return z

        logits = C.run_with_hooks(model, tokens, [("blocks.0.attn.hook_z", keep_only)]).numpy()
        contribution = (logits[:, 0] - direct) * s[:, None]
        OV = C.ov_circuit(model, 0, h)
        assert OV.shape == (V, V)
        np.testing.assert_allclose(contribution, OV.full(), rtol=1e-4, atol=1e-4)
        for i in (0, V - 1):
            np.testing.assert_allclose(contribution[i], OV.row(i), rtol=1e-4, atol=1e-4)


def test_circuits_are_exact_without_a_norm():
    """norm="none" (and no biases): the raw q·k and a lone head's logit contribution equal the
    QK and OV circuit entries, with no per-position scale to put back."""
    cfg = small(
        n_layer=1,
        attn_only=True,
        bias=False,
        tie_weights=False,
        norm="none",
        positional="none",
        init_std=0.5,
    )
    tl.manual_seed(4)
    model = GPT(cfg)
    assert not any("ln" in name for name, _ in model.named_parameters())
    V, H = cfg.vocab_size, cfg.n_head
    i, j = np.meshgrid(np.arange(V), np.arange(V), indexing="ij")
    tokens = np.stack([j.ravel(), i.ravel()], axis=1)  # key j, then query i
    _, cache = C.run_with_cache(model, tokens)
    q, k = cache["blocks.0.attn.hook_q"], cache["blocks.0.attn.hook_k"]
    single = np.arange(V)[:, None]
    direct = model.W_E.numpy() @ model.W_U.numpy()
    for h in range(H):
        score = (q[:, 1, h] * k[:, 0, h]).sum(-1).reshape(V, V)
        np.testing.assert_allclose(score, C.qk_circuit(model, 0, h).full(), rtol=1e-4, atol=1e-4)

        def keep_only(z, h=h):
            z = z.numpy().copy()
            z[:, :, [g for g in range(H) if g != h]] = 0
            return z

        logits = C.run_with_hooks(model, single, [("blocks.0.attn.hook_z", keep_only)]).numpy()
        np.testing.assert_allclose(
            logits[:, 0] - direct, C.ov_circuit(model, 0, h).full(), rtol=1e-4, atol=1e-4
        )


def test_circuit_factors_and_compositions():
    model = GPT(small(attn_only=True, n_layer=2))
    attn = model.blocks[1].attn
    g = model.blocks[1].ln1.w.numpy().astype(np.float64)
    WQ, WK = (W.numpy()[1].astype(np.float64) for W in (attn.W_Q, attn.W_K))
    np.testing.assert_allclose(
        C.W_QK(model, 1, 1).full(), (g[:, None] * WQ) @ (g[:, None] * WK).T, rtol=1e-6
    )
    np.testing.assert_allclose(
        C.W_QK(model, 1, 1, fold_ln=False).full(), WQ @ WK.T, rtol=1e-6, atol=1e-12
    )
    comp = C.composition_scores(model)
    L, H = 2, model.config.n_head
    for kind in "qkv":
        assert comp[kind].shape == (L, H, L, H)
        assert np.all(comp[kind][0] == 0) and np.all(comp[kind][1, :, 1] == 0)
        assert np.all((comp[kind][1, :, 0] > 0) & (comp[kind][1, :, 0] <= 1))
    # K-composition by hand, dense
    o = C.W_OV(model, 0, 1).full()
    q = C.W_QK(model, 1, 0).full()
    expect = np.linalg.norm(q @ o.T) / (np.linalg.norm(q) * np.linalg.norm(o))
    assert comp["k"][1, 0, 0, 1] == pytest.approx(expect, rel=1e-6)
    with pytest.raises(IndexError):
        C.qk_circuit(model, 2, 0)
    with pytest.raises(IndexError):
        C.ov_circuit(model, 0, H)


def test_qk_circuit_of_a_post_norm_model_leaves_out_the_norm_after_attention():
    """norm_placement="post": layer 0's attention reads the embeddings themselves (ln1
    normalizes the sum after it), so with no positions and no biases its scaled QK circuit is
    exactly the pre-softmax score of query token i for key token j, whatever ln1's gain; the
    gain is not folded into W_Q, W_K or W_V."""
    cfg = small(n_layer=1, attn_only=True, bias=False, norm_placement="post", positional="none")
    tl.manual_seed(5)
    model = GPT(cfg)
    rng = np.random.default_rng(5)
    with tl.no_grad():
        model.embed.W.copy_(rng.standard_normal(model.embed.W.shape))
        model.blocks[0].ln1.w.copy_(rng.uniform(0.3, 3.0, cfg.d_model))
    V = cfg.vocab_size
    i, j = np.meshgrid(np.arange(V), np.arange(V), indexing="ij")
    tokens = np.stack([j.ravel(), i.ravel()], axis=1)  # key j, then query i
    _, cache = C.run_with_cache(model, tokens, names="blocks.0.attn.hook_attn_scores")
    scores = cache["blocks.0.attn.hook_attn_scores"][:, :, 1, 0]  # (V², H)
    for h in range(cfg.n_head):
        QK = C.qk_circuit(model, 0, h, scale=True).full()
        np.testing.assert_allclose(QK, scores[:, h].reshape(V, V), rtol=1e-4, atol=1e-5)
        attn = model.blocks[0].attn
        WV, WO = attn.W_V.numpy()[h].astype(np.float64), attn.W_O.numpy()[h]
        np.testing.assert_allclose(C.W_OV(model, 0, h).full(), WV @ WO, rtol=1e-6)


def test_composition_scores_equal_the_dense_formulas_for_every_pair():
    """Every Q-, K- and V-composition score of a three-layer model with random gains, against
    the dense W_OV and W_QK matrices: Q ‖W_OV^{h0} W_QK^{h1}‖ / (‖W_OV^{h0}‖ ‖W_QK^{h1}‖),
    K ‖W_QK^{h1} (W_OV^{h0})ᵀ‖ / (‖W_QK^{h1}‖ ‖W_OV^{h0}‖), V ‖W_OV^{h0} W_OV^{h1}‖ /
    (‖W_OV^{h0}‖ ‖W_OV^{h1}‖) (Frobenius), for every l0 < l1, zero elsewhere. float64 math
    on both sides: rtol 1e-10."""
    model = randomized(6, n_layer=3, attn_only=True)
    L, H = 3, model.config.n_head
    ov = {(l, h): C.W_OV(model, l, h).full() for l in range(L) for h in range(H)}
    qk = {(l, h): C.W_QK(model, l, h).full() for l in range(L) for h in range(H)}
    # the W_QK and W_OV norms differ, so a score divided by the wrong one is off
    assert abs(np.linalg.norm(qk[1, 0]) / np.linalg.norm(ov[1, 0]) - 1) > 0.1
    comp = C.composition_scores(model)
    nrm = np.linalg.norm
    for l1, h1, l0, h0 in np.ndindex(L, H, L, H):
        if l0 >= l1:
            for kind in "qkv":
                assert comp[kind][l1, h1, l0, h0] == 0
            continue
        o, q, v = ov[l0, h0], qk[l1, h1], ov[l1, h1]
        expect = {
            "q": nrm(o @ q) / (nrm(o) * nrm(q)),
            "k": nrm(q @ o.T) / (nrm(q) * nrm(o)),
            "v": nrm(o @ v) / (nrm(o) * nrm(v)),
        }
        for kind, e in expect.items():
            np.testing.assert_allclose(
                comp[kind][l1, h1, l0, h0], e, rtol=1e-10, err_msg=f"{kind} {l1, h1, l0, h0}"
            )


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm"])
def test_ov_circuit_folds_the_final_norm_gain_into_the_unembedding(norm):
    """With a final norm whose gain g is far from 1: ov_circuit(fold_ln=True) is
    W_E (g₁ ⊙ W_V^h) W_O^h diag(g) W_U (g₁ the block's ln1 gain, folded into W_V), and
    fold_ln=False leaves both gains out, W_E W_V^h W_O^h W_U; computed densely from the
    parameters in float64 (rtol 1e-10)."""
    model = randomized(7, n_layer=2, norm=norm, final_norm=True, tie_weights=False)
    g = model.ln_final.w.numpy().astype(np.float64)
    assert np.abs(g - 1).max() > 0.3
    WE = model.W_E.numpy().astype(np.float64)
    WU = model.W_U.numpy().astype(np.float64)
    for layer in range(2):
        block = model.blocks[layer]
        g1 = block.ln1.w.numpy().astype(np.float64)
        for h in range(model.config.n_head):
            WV = block.attn.W_V.numpy()[h].astype(np.float64)
            WO = block.attn.W_O.numpy()[h].astype(np.float64)
            folded = WE @ (g1[:, None] * WV) @ WO @ (g[:, None] * WU)
            raw = WE @ WV @ WO @ WU
            np.testing.assert_allclose(
                C.ov_circuit(model, layer, h).full(), folded, rtol=1e-10, atol=1e-12
            )
            np.testing.assert_allclose(
                C.ov_circuit(model, layer, h, fold_ln=False).full(), raw, rtol=1e-10, atol=1e-12
            )
