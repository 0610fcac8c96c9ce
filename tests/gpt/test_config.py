"""GPTConfig: defaults filled by the usual rules, clear errors; the parameters and FLOPs of the
model a config builds (counted on the model)."""

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpt.config import GATED, ConfigError, ConfigNote, GPTConfig, Seq2SeqConfig, preset
from gpt.model import GPT, flops_per_token
from nn.init import empty_parameters


def test_rules_fill_in_defaults():
    c = GPTConfig(d_model=128, n_head=4)
    assert c.d_head == 32 and c.d_ff == 512
    g = GPTConfig(d_model=96, n_head=4, activation="swiglu")
    assert g.d_ff == 256  # 8/3 · 96 = 256, already a multiple of 8


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(d_model=130, n_head=4), ["d_model=130", "n_head=4"]),
        (dict(activation="tanhh"), ["activation", "tanhh"]),
        (dict(positional="alibi"), ["positional", "alibi"]),
        (dict(norm="batchnorm"), ["norm", "batchnorm", "'none'"]),
        (dict(norm_placement="middle"), ["norm_placement"]),
        (dict(n_head=0), ["n_head"]),
        (dict(dropout=1.0), ["dropout"]),
        (dict(d_model=36, n_head=4, positional="rope"), ["rope", "d_head"]),
    ],
)
def test_invalid_configs_name_the_field(kwargs, words):
    with pytest.raises(ConfigError) as e:
        GPTConfig(**kwargs)
    for w in words:
        assert w in str(e.value)


def test_unusual_aspect_ratio_gets_a_note():
    with pytest.warns(ConfigNote, match="d_model / n_layer"):
        GPTConfig(d_model=64, n_head=4, n_layer=12)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GPTConfig()  # 128 / 4 = 32: no note


def test_gpt2_small_parameter_count_matches_the_published_124m():
    # 124,439,808 with tied embeddings (GPT-2 small, Radford et al. 2019; as counted by
    # Hugging Face's GPT2LMHeadModel).
    with empty_parameters():  # (nothing drawn: only the count is wanted)
        assert GPT(preset("gpt2-small")).num_parameters() == 124_439_808


def test_flops_per_token_is_about_six_n():
    c = preset("gpt2-small")
    with empty_parameters():
        n = GPT(c).num_parameters()
    assert 6 * n < flops_per_token(c) < 7 * n


def test_from_dict_round_trip_and_unknown_field():
    c = GPTConfig(n_layer=2)
    assert GPTConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ConfigError, match="n_layers"):
        GPTConfig.from_dict({**c.to_dict(), "n_layers": 3})


def test_norm_none_has_no_norm_parameters_and_is_gpt_only():
    with_norm = GPTConfig(n_layer=2, attn_only=True)
    without = GPTConfig(n_layer=2, attn_only=True, norm="none")
    # two pre-attention LayerNorms and the final one, a gain and a bias each
    count = GPT(with_norm).num_parameters() - GPT(without).num_parameters()
    assert count == 3 * 2 * with_norm.d_model
    with pytest.raises(ConfigError, match="norm"):
        Seq2SeqConfig(norm="none")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(norm_eps=-1.0), "norm_eps=-1.0: must be a finite number in (0, ∞)"),
        (dict(norm_eps=0.0), "norm_eps=0.0: must be a finite number in (0, ∞)"),
        (dict(rope_base=0.0), "rope_base=0.0: must be a finite number in (0, ∞)"),
        (dict(rope_base=float("nan")), "rope_base=nan: must be a finite number in (0, ∞)"),
        (dict(vocab_size=True), "vocab_size=True: must be an integer ≥ 1"),
        (dict(n_layer=2.0), "n_layer=2.0: must be an integer ≥ 0"),
        (dict(bias="no"), "bias='no': must be true or false"),
        (dict(init_std=-0.02), "init_std=-0.02: must be a finite number in [0, ∞)"),
        (dict(dropout=float("nan")), "dropout=nan: must be a finite number in [0, 1)"),
        (dict(n_kv_head=3), "n_kv_head=3: must divide n_head=4"),
        (dict(n_kv_head=8), "n_kv_head=8: must be an integer in [1, 4]"),
        (dict(sliding_window=0), "sliding_window=0: must be an integer ≥ 1"),
        (dict(rope_layout="pairs"), "rope_layout='pairs': must be one of 'interleaved', 'half'"),
        (
            dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}),
            "rope_scaling={'rope_type': 'yarn', 'factor': 4.0}: rope_type must be one of "
            "linear, llama3",
        ),
        (
            dict(rope_scaling={"rope_type": "linear", "factor": -2}),
            "rope_scaling linear: factor=-2 must be a number > 0",
        ),
    ],
)
def test_every_field_is_checked_in_one_form(kwargs, message):
    """Values that used to give NaN logits (norm_eps < 0, rope_base = 0) or were accepted
    by accident (a bool as a size) are refused, each as ``field=value: rule``."""
    with pytest.raises(ConfigError) as e:
        GPTConfig(**kwargs)
    assert str(e.value) == message
    assert e.value.field == next(iter(kwargs))


def test_an_empty_batch_is_a_clear_error():
    import numpy as np

    import tensorlab as tl
    from gpt.model import GPT

    model = GPT(GPTConfig(vocab_size=10, n_layer=1, d_model=16, n_head=2, block_size=8))
    for shape in [(0, 5), (2, 0)]:
        with pytest.raises(
            ValueError, match=rf"batch of token ids is empty \(shape \({shape[0]}, "
        ):
            model(tl.tensor(np.zeros(shape, dtype=np.int64)))


def test_grouped_query_parameter_count_by_hand():
    """Qwen2-like: 4 query heads sharing 1 key/value head of width 4, biases on q, k, v only,
    RMSNorm gains, a SwiGLU MLP, tied embeddings. Counted by hand: embedding 11·16 = 176;
    attention W_q, W_O 2·16·16 = 512, W_k, W_v 2·16·4 = 128, b_q 16, b_k + b_v 8 (664); MLP
    3·16·24 = 1152; two block norms 32 and the final one 16."""
    c = GPTConfig(
        vocab_size=11,
        block_size=12,
        n_layer=1,
        n_head=4,
        n_kv_head=1,
        d_model=16,
        d_ff=24,
        bias=False,
        qkv_bias=True,
        norm="rmsnorm",
        activation="swiglu",
        positional="rope",
        tie_weights=True,
    )
    assert GPT(c).num_parameters() == 176 + (512 + 128 + 16 + 8) + 1152 + 32 + 16


@given(d_model=st.integers(1, 4096), activation=st.sampled_from(GATED))
def test_a_gated_mlps_width_is_eight_thirds_rounded_up_to_a_multiple_of_8(d_model, activation):
    """Shazeer's 8/3 · d_model keeps a gated MLP's three matrices at the parameter count of a
    plain 4 · d_model MLP's two; rounded up (never below 8/3 · d_model) to a multiple of 8."""
    d_ff = GPTConfig(d_model=d_model, n_head=1, activation=activation).d_ff
    assert d_ff % 8 == 0
    assert 8 * d_model / 3 - 1 < d_ff < 8 * d_model / 3 + 8  # (int() may drop one fraction)


PARALLEL = dict(vocab_size=5, block_size=4, n_layer=1, n_head=2, d_model=32, parallel=True)


def test_a_parallel_pre_norm_block_shares_one_norm():
    """GPT-J: attention and MLP read one norm of the block's input (a LayerNorm's gain and
    bias, 2·32); sandwich has its own two in and two out."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConfigNote)
        pre = GPT(GPTConfig(**PARALLEL, norm_placement="pre")).num_parameters()
        sandwich = GPT(GPTConfig(**PARALLEL, norm_placement="sandwich")).num_parameters()
    assert sandwich - pre == 3 * 2 * 32


def test_flops_count_the_attention_a_sliding_window_allows():
    """Per token, a layer's scores and mix cost 2 · span · n_head · d_head in the forward pass,
    where span = min(block_size, sliding_window); ×3 with the backward."""
    full = GPTConfig(block_size=64)
    window = GPTConfig(block_size=64, sliding_window=16)
    per_position = 3 * 2 * full.n_layer * full.n_head * full.d_head
    assert flops_per_token(full) - flops_per_token(window) == per_position * (64 - 16)
    assert flops_per_token(GPTConfig(block_size=64, sliding_window=100)) == flops_per_token(full)


def test_seq2seq_pad_id_must_be_a_source_id_too():
    kw = dict(src_vocab_size=4, tgt_vocab_size=8, bos_id=5, eos_id=6)
    with pytest.raises(
        ConfigError, match="pad_id=4: must be a source id too, below src_vocab_size=4"
    ):
        Seq2SeqConfig(pad_id=4, **kw)
    assert Seq2SeqConfig(pad_id=3, **kw).pad_id == 3


def test_seq2seq_final_norm_follows_the_placement_unless_given():
    """Post-norm ends each sublayer with a norm already; pre-norm and sandwich need one after
    each stack."""
    assert [Seq2SeqConfig(norm_placement=p).final_norm for p in ("post", "pre", "sandwich")] == [
        False,
        True,
        True,
    ]
    assert Seq2SeqConfig(norm_placement="post", final_norm=True).final_norm


def test_seq2seq_heads_must_divide_the_width_in_the_gpt_configs_words():
    with pytest.raises(ConfigError, match=r"^n_head=3: must divide d_model=64$"):
        Seq2SeqConfig(n_head=3)
