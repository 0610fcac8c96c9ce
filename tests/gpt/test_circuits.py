"""gpt.circuits: caching and hooks, factored matrices, QK/OV circuits against the model's own
computation, bigram statistics, and induction scores on a hand-built induction circuit.

How exactness is arranged: the circuits leave out each norm's division by a per-position
scale (and LayerNorm's centring). The tests build models whose embedding rows have zero mean
(so centring does nothing), use ``bias=False``, read each position's scale
σ = sqrt(var + eps) from the cache (``hook_resid_pre``), and multiply it back in: then the
model's q·k and its head outputs equal the circuit entries to float32 precision.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

import tensorlab as tl
from gpt import circuits as C
from gpt.config import GPTConfig
from gpt.model import GPT
from nn.module import HookPoint

ROOT = Path(__file__).resolve().parents[2]


def _set(param, value) -> None:
    param.data[...] = np.asarray(value, dtype=param.data.dtype)


def small(**kw) -> GPTConfig:
    base = dict(vocab_size=11, block_size=12, n_layer=2, n_head=2, d_model=16)
    base.update(kw)
    return GPTConfig(**base)


def exact_model(positional: str = "none", n_layer: int = 1, seed: int = 0) -> GPT:
    """Attention-only, no biases, no final norm, untied, LayerNorm with random gains, and
    embedding (and position) rows of zero mean."""
    cfg = small(
        n_layer=n_layer,
        attn_only=True,
        bias=False,
        final_norm=False,
        tie_weights=False,
        positional=positional,
    )
    tl.manual_seed(seed)
    model = GPT(cfg)
    rng = np.random.default_rng(seed)
    E = rng.standard_normal((cfg.vocab_size, cfg.d_model))
    _set(model.embed.W, E - E.mean(1, keepdims=True))
    if model.pos is not None:
        P = 0.5 * rng.standard_normal((cfg.block_size, cfg.d_model))
        _set(model.pos.W_pos, P - P.mean(1, keepdims=True))
    _set(model.W_U, rng.standard_normal(model.W_U.shape))
    for block in model.blocks:
        _set(block.ln1.w, rng.uniform(0.5, 1.5, cfg.d_model))
        _set(block.attn.W_QKV, rng.standard_normal(block.attn.W_QKV.shape) / 4)
        _set(block.attn.W_O, rng.standard_normal(block.attn.W_O.shape) / 4)
    return model


def sigma(resid: np.ndarray, eps: float) -> np.ndarray:
    """LayerNorm's per-position scale sqrt(var + eps) of (B, T, d) vectors (mean zero here)."""
    return np.sqrt(resid.astype(np.float64).var(-1) + eps)


# ====================================================================== caching and hooks
def test_run_with_cache_records_every_hook_with_its_shape():
    cfg = small()
    model = GPT(cfg)
    B, T, d, H, dh = 3, 7, cfg.d_model, cfg.n_head, cfg.d_head
    tokens = np.random.default_rng(0).integers(0, cfg.vocab_size, (B, T))
    logits, cache = C.run_with_cache(model, tokens)
    assert logits.shape == (B, T, cfg.vocab_size)
    assert set(cache) == set(C.hook_names(model))
    assert list(cache)[0] == "hook_embed"
    for name, act in cache.items():
        assert isinstance(act, np.ndarray)
        if name.endswith("hook_pattern"):
            assert act.shape == (B, H, T, T)
            np.testing.assert_allclose(act.sum(-1), 1.0, rtol=1e-5)
            assert np.all(np.triu(act, 1) == 0)  # causal
        elif name.split(".")[-1] in ("hook_q", "hook_k", "hook_v", "hook_z"):
            assert act.shape == (B, T, H, dh)
        else:
            assert act.shape == (B, T, d), name
    # the cached final residual stream gives the logits
    resid = cache[f"blocks.{cfg.n_layer - 1}.hook_resid_post"]
    ref, _ = GPT.__call__(model, tl.tensor(tokens))
    np.testing.assert_allclose(logits.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    assert resid.shape == (B, T, d)
    # every hook removed again, and the model is back in training mode
    assert all(not m._forward_hooks for m in model.modules())
    assert model.training


def test_cache_filters_by_names_and_predicate():
    model = GPT(small())
    tokens = np.arange(5)  # one sequence (T,) is accepted too
    _, one = C.run_with_cache(model, tokens, names="blocks.1.attn.hook_pattern")
    assert list(one) == ["blocks.1.attn.hook_pattern"]
    assert one["blocks.1.attn.hook_pattern"].shape == (1, 2, 5, 5)
    _, some = C.run_with_cache(model, tokens, names=lambda n: n.endswith("resid_post"))
    assert list(some) == ["blocks.0.hook_resid_post", "blocks.1.hook_resid_post"]
    with pytest.raises(KeyError, match="hook points are"):
        C.run_with_cache(model, tokens, names=["blocks.9.hook_resid_pre"])


def test_hooks_are_removed_after_an_error():
    model = GPT(small())

    def boom(x):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        C.run_with_hooks(model, np.arange(4), [("blocks.0.hook_resid_mid", boom)])
    assert all(not m._forward_hooks for m in model.modules())
    assert all(isinstance(m, HookPoint) or True for m in model.modules())


def test_run_with_hooks_intervenes():
    model = GPT(small(n_layer=1, attn_only=True))
    tokens = np.array([[1, 2, 3, 4]])
    base = C.run_with_hooks(model, tokens).numpy()
    # replacing the attention output by zeros leaves the direct path embed -> unembed
    zeroed = C.run_with_hooks(
        model, tokens, [("blocks.0.hook_attn_out", lambda x: np.zeros(x.shape))]
    ).numpy()
    _, cache = C.run_with_cache(model, tokens, names=["blocks.0.hook_resid_pre"])
    assert not np.allclose(base, zeroed)
    direct, _ = model.ln_f(tl.tensor(cache["blocks.0.hook_resid_pre"])), None
    np.testing.assert_allclose(zeroed, direct.numpy() @ model.W_U.numpy(), rtol=1e-4, atol=1e-5)
    # a hook returning None changes nothing; a two-argument hook gets the name
    seen = []
    same = C.run_with_hooks(
        model, tokens, [(lambda n: n.endswith("hook_z"), lambda x, name: seen.append(name))]
    ).numpy()
    np.testing.assert_allclose(same, base, rtol=1e-5, atol=1e-6)
    assert seen == ["blocks.0.attn.hook_z"]


# ====================================================================== factored matrices
@pytest.mark.parametrize("m,r,n", [(7, 3, 5), (6, 4, 6), (4, 6, 5), (9, 2, 9)])
def test_factored_matrix_matches_dense(m, r, n):
    rng = np.random.default_rng(m * 100 + r * 10 + n)
    A, B = rng.standard_normal((m, r)), rng.standard_normal((r, n))
    F, D = C.FactoredMatrix(A, B), A @ B
    assert F.shape == (m, n) and F.rank_bound == r
    np.testing.assert_allclose(F.full(), D)
    np.testing.assert_allclose(np.asarray(F), D)
    U, S, Vh = F.svd()
    k = min(m, n, r)
    np.testing.assert_allclose(S, np.linalg.svd(D, compute_uv=False)[:k], atol=1e-10)
    np.testing.assert_allclose((U * S) @ Vh, D, atol=1e-10)
    np.testing.assert_allclose(U.T @ U, np.eye(k), atol=1e-10)
    np.testing.assert_allclose(F.norm(), np.linalg.norm(D))
    v, w = rng.standard_normal(n), rng.standard_normal(m)
    np.testing.assert_allclose(F @ v, D @ v)
    np.testing.assert_allclose(w @ F, w @ D)
    M, N = rng.standard_normal((n, 3)), rng.standard_normal((2, m))
    assert isinstance(F @ M, C.FactoredMatrix) and isinstance(N @ F, C.FactoredMatrix)
    np.testing.assert_allclose((F @ M).full(), D @ M)
    np.testing.assert_allclose((N @ F).full(), N @ D)
    G = C.FactoredMatrix(rng.standard_normal((n, 2)), rng.standard_normal((2, 4)))
    np.testing.assert_allclose((F @ G).full(), D @ G.full())
    np.testing.assert_allclose(F.T.full(), D.T)
    np.testing.assert_allclose((2 * F).full(), 2 * D)
    for i in range(m):
        np.testing.assert_allclose(F.row(i), D[i])
        np.testing.assert_allclose(F[i], D[i])
    for j in range(n):
        np.testing.assert_allclose(F.column(j), D[:, j])
    assert F[1, 2] == pytest.approx(D[1, 2])
    np.testing.assert_allclose(F[1:3].full(), D[1:3])
    np.testing.assert_allclose(F[:, [0, 2]].full(), D[:, [0, 2]])
    with pytest.raises(ValueError):
        C.FactoredMatrix(A, B.T if n != r else B[:-1])


@pytest.mark.parametrize("n,r", [(6, 3), (8, 8), (5, 1)])
def test_factored_eigenvalues_and_copying_score(n, r):
    rng = np.random.default_rng(n + r)
    F = C.FactoredMatrix(rng.standard_normal((n, r)), rng.standard_normal((r, n)))
    dense = np.linalg.eigvals(F.full())
    top = dense[np.argsort(-np.abs(dense))][:r]  # the other n - r are ~0
    np.testing.assert_allclose(np.sort_complex(F.eigenvalues()), np.sort_complex(top), atol=1e-8)
    np.testing.assert_allclose(np.abs(dense[np.argsort(-np.abs(dense))][r:]), 0, atol=1e-8)
    assert F.trace() == pytest.approx(np.trace(F.full()))
    expected = dense.sum().real / np.abs(dense).sum()
    assert F.copying_score() == pytest.approx(expected, abs=1e-8)
    # a positive semi-definite "copying" matrix scores 1, its negative -1
    P = C.FactoredMatrix(F.A, F.A.T)
    assert P.copying_score() == pytest.approx(1.0)
    assert (-1 * P).copying_score() == pytest.approx(-1.0)
    s = F.summary(k=2)
    assert s["shape"] == (n, n) and len(s["top_singular_values"]) == min(2, r)
    assert s["frobenius_norm"] == pytest.approx(np.linalg.norm(F.full()))
    with pytest.raises(ValueError, match="square"):
        C.FactoredMatrix(np.ones((3, 2)), np.ones((2, 4))).eigenvalues()


# ====================================================================== QK and OV circuits
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


# ====================================================================== bigrams
def test_bigram_table_entropy_and_kl():
    ids = np.array([0, 1, 0, 1, 0, 2, 2, 1])
    t = C.bigram_table(ids, 4)
    assert t.sum() == len(ids) - 1 and t[0, 1] == 2 and t[2, 2] == 1 and t[3].sum() == 0
    # row 0: 1 w.p. 2/3, 2 w.p. 1/3; row 1: 0 always; row 2: 2 or 1 equally
    p0, p1, p2 = 3 / 7, 2 / 7, 2 / 7
    h0 = -(2 / 3 * np.log(2 / 3) + 1 / 3 * np.log(1 / 3))
    assert C.conditional_entropy(t) == pytest.approx(p0 * h0 + p1 * 0 + p2 * np.log(2))
    with pytest.raises(ValueError):
        C.bigram_table([0, 5], 4)


def test_zero_layer_model_loss_is_entropy_plus_kl():
    """A zero-layer model set to the log of the bigram table has KL 0; any model's mean loss
    over the pairs is H + KL."""
    rng = np.random.default_rng(0)
    V = 6
    ids = rng.integers(0, V, 400)
    table = C.bigram_table(ids, V)
    cfg = GPTConfig(
        vocab_size=V,
        n_layer=0,
        d_model=V,
        n_head=1,
        block_size=8,
        positional="none",
        final_norm=False,
        tie_weights=False,
        bias=False,
    )
    model = GPT(cfg)
    H = C.conditional_entropy(table)
    logq = C.model_bigram_logprobs(model)
    loss = -logq[ids[:-1], ids[1:]].mean()
    assert loss == pytest.approx(H + C.bigram_kl(model, table), rel=1e-5)
    cond = (table + 1e-12) / (table + 1e-12).sum(1, keepdims=True)
    _set(model.embed.W, np.eye(V))
    _set(model.W_U, np.log(cond))
    assert C.bigram_kl(model, table) == pytest.approx(0.0, abs=1e-5)


# ====================================================================== induction heads
def hand_built_induction_model(V: int = 9, seq_len: int = 8, c: float = 20.0) -> GPT:
    """Two single-head attention-only layers, RMSNorm, d_model = V + T + V with one-hot
    subspaces: token identity [0, V), position [V, V+T), previous token [V+T, V+T+V).

    - layer 0 (previous-token head): position t queries u_t, position s keys u_{s+1}, so t
      attends to t-1; its OV copies the token subspace into the previous-token subspace;
    - layer 1 (induction head): the query reads the current token, the key reads the
      previous-token subspace, so a token attends to the position after its earlier
      occurrence; its OV copies that position's token into the token subspace, and W_U reads
      the token subspace, so the model predicts the repeat.
    RMSNorm only rescales each position by a positive number, which the large c absorbs.
    """
    T = 2 * seq_len + 1
    d = V + T + V
    cfg = GPTConfig(
        vocab_size=V,
        block_size=T,
        n_layer=2,
        n_head=1,
        d_model=d,
        attn_only=True,
        positional="learned",
        norm="rmsnorm",
        bias=False,
        final_norm=False,
        tie_weights=False,
    )
    model = GPT(cfg)
    tok, pos, prev = np.arange(V), V + np.arange(T), V + T + np.arange(V)
    E, P = np.zeros((V, d)), np.zeros((T, d))
    E[tok, tok] = 1
    P[np.arange(T), pos] = 1
    _set(model.embed.W, E)
    _set(model.pos.W_pos, P)
    W0, W1 = np.zeros((d, 3, 1, d)), np.zeros((d, 3, 1, d))
    O0, O1 = np.zeros((1, d, d)), np.zeros((1, d, d))
    W0[pos, 0, 0, np.arange(T)] = c  # query: position t -> c u_t
    W0[pos[:-1], 1, 0, np.arange(1, T)] = 1  # key: position s -> u_{s+1}
    W0[tok, 2, 0, tok] = 1  # value: the token
    O0[0, tok, prev] = 1  # written into the previous-token subspace
    W1[tok, 0, 0, tok] = c  # query: the current token
    W1[prev, 1, 0, tok] = 1  # key: the previous token
    W1[tok, 2, 0, tok] = 1  # value: the token there
    O1[0, tok, tok] = 3  # written (strongly) into the token subspace
    for block, W, O in ((model.blocks[0], W0, O0), (model.blocks[1], W1, O1)):
        _set(block.attn.W_QKV, W)
        _set(block.attn.W_O, O)
    U = np.zeros((d, V))
    U[tok, tok] = 10
    _set(model.W_U, U)
    return model


def test_hand_built_induction_head_scores_high_and_previous_token_head_low():
    V, seq_len = 9, 8
    model = hand_built_induction_model(V, seq_len)
    kw = dict(seq_len=seq_len, batch=6, low=0, high=V - 1, bos=V - 1, seed=1)
    ind = C.induction_scores(model, **kw)
    prev = C.previous_token_scores(model, **kw)
    assert ind.shape == prev.shape == (2, 1)
    assert ind[1, 0] > 0.9  # the induction head
    assert ind[0, 0] < 0.05  # the previous-token head is not one
    assert prev[0, 0] > 0.9 and prev[1, 0] < 0.3
    losses = C.repeated_sequence_losses(model, **kw)
    assert losses["per_position"].shape == (2 * seq_len,)
    assert losses["second_half"] < 0.1 < 1.0 < losses["first_half"]
    rep = C.induction_report(model, **kw)
    assert rep["tokens"].shape == (6, 2 * seq_len + 1) and np.all(rep["tokens"][:, 0] == V - 1)
    # K-composition: the layer-1 head reads what the layer-0 head wrote
    comp = C.composition_scores(model)
    assert comp["k"][1, 0, 0, 0] > comp["q"][1, 0, 0, 0]
    # explicit tokens for previous_token_scores
    assert C.previous_token_scores(model, rep["tokens"])[0, 0] > 0.9


def test_forced_patterns_give_the_expected_scores():
    """Independent of any weights: force every layer-0 head to attend to the previous token
    and every layer-1 head to the induction target through hook_pattern, and check the
    scores read them back."""
    cfg = small(attn_only=True, block_size=20, vocab_size=16)
    model = GPT(cfg)
    seq_len = 10
    T = 2 * seq_len
    prev_pat = np.zeros((T, T))
    prev_pat[0, 0] = 1
    prev_pat[np.arange(1, T), np.arange(T - 1)] = 1
    ind_pat = prev_pat.copy()
    q = np.arange(seq_len, T)
    ind_pat[q] = 0
    ind_pat[q, q - seq_len + 1] = 1
    forced = [
        ("blocks.0.attn.hook_pattern", lambda p: np.broadcast_to(prev_pat, p.shape).copy()),
        ("blocks.1.attn.hook_pattern", lambda p: np.broadcast_to(ind_pat, p.shape).copy()),
    ]
    tokens = C.repeated_tokens(3, seq_len, 0, 16, seed=0)
    with C.hooks(model, forced):
        rep = C.induction_report(model, seq_len=seq_len, batch=3)
    np.testing.assert_allclose(rep["induction"][0], 0.0)
    np.testing.assert_allclose(rep["induction"][1], 1.0)
    assert np.all(rep["previous_token"][0] == 1.0)
    assert np.all(rep["previous_token"][1] < 0.5)
    assert tokens.shape == (3, T)
    assert all(not m._forward_hooks for m in model.modules())


def test_repeated_tokens_and_errors():
    r = C.repeated_tokens(4, 5, low=3, high=10, seed=2)
    assert r.shape == (4, 10) and np.all(r[:, :5] == r[:, 5:])
    assert r.min() >= 3 and r.max() < 10
    assert all(len(set(row[:5])) == 5 for row in r)  # distinct within r
    model = GPT(small(attn_only=True))
    with pytest.raises(ValueError, match="block_size"):
        C.induction_scores(model, seq_len=7)
    assert C.induction_scores(model).shape == (2, 2)  # seq_len defaults to half the block


# ====================================================================== examples
def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_zero_layer_bigram_example_quick(capsys):
    out = _load_example("zero_layer_bigram").main(["--quick"])
    assert out["corpus_loss"] == pytest.approx(out["entropy"] + out["kl"], rel=1e-5)
    assert out["history"][-1]["kl"] < out["history"][0]["kl"]
    assert "conditional entropy" in capsys.readouterr().out


def test_induction_heads_example_quick(tmp_path, capsys):
    out = _load_example("induction_heads").main(["--quick", "--out", str(tmp_path)])
    rep = out["report"]
    assert rep["induction"].shape == (2, out["model"].config.n_head)
    printed = capsys.readouterr().out
    assert "induction scores" in printed and "second copy" in printed
    from gpt import plots

    if plots.available():
        assert (tmp_path / "induction_scores.png").is_file()
        assert (tmp_path / "induction_head_pattern.png").is_file()


@pytest.mark.slow
def test_induction_heads_example_forms_an_induction_head():
    """The default run (about 1 min single-threaded; seed 0): a layer-1 head attends from each
    token of the second copy of [r, r] to the token after its first occurrence, and the loss
    on the second copy falls near 0. Seeds 0-2 reach a best score of about 0.93 (and 16 of 16
    seeds tried form the head by step 1100); 0.7 leaves room for other BLAS and platforms
    while staying far above what any non-induction head scores here (the old training setup
    peaked at 0.3, a uniform head scores about 1/position)."""
    out = _load_example("induction_heads").main(["--no-plots"])
    rep = out["report"]
    assert rep["induction"][1].max() > 0.7
    assert rep["second_half"] < 0.5 < rep["first_half"] - 3
    assert out["found"] is not None
