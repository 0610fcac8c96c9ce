"""nn.init: in-place fills, the (d_in, d_out) fan convention, statistics, reproducibility."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import nn
import tensorlab as tl
from nn import init


def weight(*shape, dtype=np.float32) -> nn.Parameter:
    return nn.Parameter(tl.zeros(shape, dtype=dtype))


def test_fans_follow_the_d_in_d_out_convention():
    assert init.calculate_fan_in_and_fan_out((300, 20)) == (300, 20)  # y = x @ W, W: (in, out)
    assert init.calculate_fan_in_and_fan_out((4, 64, 16)) == (64, 16)  # per-head matrices
    for shape in [(), (5,)]:
        with pytest.raises(ValueError, match="at least 2 axes"):
            init.calculate_fan_in_and_fan_out(shape)


def test_gains():
    assert init.calculate_gain("linear") == 1.0
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    with pytest.raises(ValueError, match="unknown nonlinearity 'swish'"):
        init.calculate_gain("swish")


def test_fills_are_in_place_and_bump_the_version():
    w = weight(3, 4)
    array, v = w.data, w._version
    out = init.normal_(w, std=0.02)
    assert out is w and w.data is array and w._version == v + 1
    assert init.ones_(w).data.tolist() == [[1.0] * 4] * 3
    assert init.zeros_(w).data.sum() == 0
    assert init.constant_(w, 0.5).data.mean() == 0.5 and w.dtype == np.float32


def test_fills_work_without_no_grad():
    # Parameters require grad; init writes the raw array, so no "in-place on a leaf" error
    w = nn.Parameter(tl.ones((2, 2)))
    init.xavier_uniform_(w)
    assert w.requires_grad and w.is_leaf


def test_seeded_draws_are_reproducible():
    tl.manual_seed(123)
    a = init.kaiming_normal_(weight(16, 8)).data.copy()
    tl.manual_seed(123)
    b = init.kaiming_normal_(weight(16, 8)).data.copy()
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, init.kaiming_normal_(weight(16, 8)).data)


# (function, kwargs, expected std for a (400, 100) weight, expected bound or None)
FAN_IN, FAN_OUT = 400, 100
CASES = [
    (init.normal_, dict(mean=0.0, std=0.5), 0.5, None),
    (init.uniform_, dict(a=-0.3, b=0.3), 0.3 / math.sqrt(3), 0.3),
    (init.xavier_uniform_, {}, math.sqrt(2 / 500), math.sqrt(6 / 500)),
    (init.xavier_normal_, dict(gain=2.0), 2 * math.sqrt(2 / 500), None),
    (init.kaiming_uniform_, dict(nonlinearity="relu"), math.sqrt(2 / 400), math.sqrt(6 / 400)),
    (init.kaiming_normal_, dict(nonlinearity="relu"), math.sqrt(2 / FAN_IN), None),
    (init.kaiming_normal_, dict(mode="fan_out", nonlinearity="tanh"), 5 / 3 / 10.0, None),
]


@pytest.mark.parametrize("fn,kw,std,bound", CASES)
def test_statistics(fn, kw, std, bound):
    tl.manual_seed(0)
    w = fn(weight(FAN_IN, FAN_OUT, dtype=np.float64), **kw).data
    assert abs(w.mean()) < 4 * std / math.sqrt(w.size)
    assert float(w.std()) == pytest.approx(std, rel=0.02)
    if bound is not None:
        assert np.abs(w).max() <= bound
        assert np.abs(w).max() > 0.99 * bound


def test_gpt2_init_on_a_module():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.W_in = nn.Parameter(tl.ones((64, 256)))
            self.b_in = nn.Parameter(tl.ones(256))
            self.bias = nn.Parameter(tl.ones(3))
            self.w = nn.Parameter(tl.ones(64))  # a norm gain: left alone
            self.W_O = nn.Parameter(tl.ones((4, 16, 64)))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Parameter(tl.ones((100, 64)))
            self.block = Block()

    tl.manual_seed(0)
    m = Model()
    assert init.gpt2_init_(m) is m
    assert float(m.wte.data.std()) == pytest.approx(0.02, rel=0.05)
    assert float(m.block.W_in.data.std()) == pytest.approx(0.02, rel=0.05)
    assert m.block.b_in.data.sum() == 0 and m.block.bias.data.sum() == 0
    assert m.block.w.data.tolist() == [1.0] * 64
    init.gpt2_residual_init_(m.block.W_O, n_layer=8)
    assert init.gpt2_residual_std(8) == pytest.approx(0.02 / 4)
    assert float(m.block.W_O.data.std()) == pytest.approx(0.005, rel=0.05)


def test_gpt2_init_on_a_tensor():
    tl.manual_seed(0)
    w = init.gpt2_init_(weight(200, 200), std=0.1)
    assert float(w.data.std()) == pytest.approx(0.1, rel=0.02)


@given(st.sampled_from([np.float32, np.float64]), st.integers(1, 5), st.integers(1, 5))
def test_dtype_and_shape_are_kept(dtype, d_in, d_out):
    w = weight(d_in, d_out, dtype=dtype)
    for fn in (init.xavier_normal_, init.kaiming_uniform_, init.uniform_, init.normal_):
        fn(w)
        assert w.dtype == dtype and w.shape == (d_in, d_out) and np.isfinite(w.data).all()


@pytest.mark.parametrize("half", ["float16", "bfloat16"])
def test_layers_with_random_tables_can_be_made_in_half_precision(half):
    """nn.Linear could be made in float16/bfloat16 but nn.Embedding and
    LearnedPositionalEmbedding raised TypeError: init.normal asked the generator for half
    draws, which it has not. Now drawn in float32 and rounded: the same numbers as a float32
    table rounded to the half dtype (atol 0)."""
    dtype = tl.bfloat16 if half == "bfloat16" else np.dtype(np.float16)
    if dtype is None:
        pytest.skip("bfloat16 needs ml_dtypes")
    tl.manual_seed(3)
    emb = nn.Embedding(10, 4, std=0.5, dtype=dtype)
    pos = nn.LearnedPositionalEmbedding(6, 4, dtype=dtype)
    tl.manual_seed(3)
    ref = nn.Embedding(10, 4, std=0.5, dtype=np.float32)
    assert emb.W.dtype == pos.W_pos.dtype == dtype
    np.testing.assert_array_equal(emb.W.data, ref.W.data.astype(dtype))
    assert emb(np.array([[1, 2]])).dtype == dtype


def test_on_cuda(device):
    w = nn.Parameter(tl.zeros((8, 8), device=device))
    tl.manual_seed(0)
    init.kaiming_uniform_(w)
    assert w.device == device and float(abs(w.data).max()) > 0


def test_empty_parameters_draws_and_writes_nothing_even_after_an_inner_block():
    """Inside ``empty_parameters`` new Parameters take no draws from the generator and the
    in-place fills leave the tensor (values and version) as it was; leaving a nested block
    keeps the outer one in force, and leaving the outer one brings draws and fills back."""

    def draws_nothing(make) -> bool:
        tl.manual_seed(0)
        expected = tl.randn(3).numpy()
        tl.manual_seed(0)
        make()
        return np.array_equal(tl.randn(3).numpy(), expected)

    w = init.constant_(weight(3, 4), 7.0)
    version = w._version
    with init.empty_parameters():
        with init.empty_parameters():
            pass
        assert draws_nothing(lambda: init.normal((3, 4), 0.02))
        assert draws_nothing(lambda: init.uniform((3, 4), 0.5))
        assert draws_nothing(lambda: init.normal_(w))
        assert (w.data == 7.0).all() and w._version == version
        p = init.constant((2, 3), 1.0, dtype=np.float64)
        assert p.shape == (2, 3) and p.dtype == np.float64
    assert not draws_nothing(lambda: init.normal((3, 4), 0.02))
    init.normal_(w)
    assert w._version == version + 1 and not (w.data == 7.0).any()
