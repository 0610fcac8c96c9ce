"""gpt.data: batches are windows of the corpus with targets shifted by one, drawn from every
start position and reproducibly; splits and length checks name what is wrong."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpt.data import DataError, get_batch, split_ids


@given(
    n=st.integers(2, 60),
    block=st.integers(1, 8),
    batch=st.integers(1, 6),
    seed=st.integers(0, 2**16),
)
def test_targets_are_the_inputs_shifted_by_one_window_of_the_corpus(n, block, batch, seed):
    ids = np.arange(1000, 1000 + n + block)  # distinct ids: a value tells its position
    x, y = get_batch(ids, block, batch, np.random.default_rng(seed))
    assert x.shape == y.shape == (batch, block) and x.dtype == y.dtype == np.int64
    start = x[:, 0] - 1000
    np.testing.assert_array_equal(x, 1000 + start[:, None] + np.arange(block))  # consecutive
    np.testing.assert_array_equal(y, x + 1)  # the next token of every position
    assert (start >= 0).all() and (start + block < len(ids)).all()  # y stays inside


def test_every_start_is_drawn_and_the_stream_repeats():
    ids, block = np.arange(12), 4  # starts 0 ... 7 (the last target is ids[11])
    x, _ = get_batch(ids, block, 2000, np.random.default_rng(0))
    assert set(x[:, 0]) == set(range(len(ids) - block))
    again, _ = get_batch(ids, block, 2000, np.random.default_rng(0))
    np.testing.assert_array_equal(x, again)


def test_a_text_of_exactly_one_window_gives_that_window():
    x, y = get_batch(np.arange(5), 4, 3, np.random.default_rng(0))  # block_size + 1 tokens
    np.testing.assert_array_equal(x, [[0, 1, 2, 3]] * 3)
    np.testing.assert_array_equal(y, [[1, 2, 3, 4]] * 3)


def test_a_text_shorter_than_a_window_is_named():
    with pytest.raises(DataError, match="has 4 tokens, fewer than block_size \\+ 1 = 5"):
        get_batch(np.arange(4), 4, 1, np.random.default_rng(0))


def test_split_keeps_order_and_refuses_a_bad_fraction():
    train, val = split_ids(np.arange(10), 0.2)
    np.testing.assert_array_equal(train, np.arange(8))
    np.testing.assert_array_equal(val, [8, 9])
    with pytest.raises(DataError, match="val_fraction must be in \\(0, 1\\), got 1.0"):
        split_ids(np.arange(10), 1.0)
