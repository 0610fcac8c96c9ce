"""tensorlab.backend's per-thread generators and tensorlab.blas_threads."""

import threading

import numpy as np
import pytest

import tensorlab as tl
from tensorlab.backend import generator, thread_generators
from tensorlab.blas_threads import blas_threads, get_blas_threads, set_blas_threads


def test_thread_generators_draw_from_their_seed_and_leave_the_shared_one_alone():
    tl.manual_seed(0)
    expected_shared = np.random.default_rng(0).random(3)
    with thread_generators(42):
        inside = tl.rand(4).numpy()
        with thread_generators(7):
            nested = generator().random(2)
        after_nested = generator().random(1)
    np.testing.assert_array_equal(inside, np.random.default_rng(42).random(4, dtype=np.float32))
    np.testing.assert_array_equal(nested, np.random.default_rng(7).random(2))
    # back in the outer block, its generator goes on where it stopped
    ref = np.random.default_rng(42)
    ref.random(4, dtype=np.float32)
    np.testing.assert_array_equal(after_nested, ref.random(1))
    np.testing.assert_array_equal(generator().random(3), expected_shared)


def test_thread_generators_belong_to_one_thread():
    tl.manual_seed(0)
    inside, release = threading.Event(), threading.Event()

    def work():
        with thread_generators(1):
            inside.set()
            release.wait(5)

    t = threading.Thread(target=work)
    t.start()
    inside.wait(5)
    try:  # the other thread's block does not change this thread's generator
        np.testing.assert_array_equal(generator().random(2), np.random.default_rng(0).random(2))
    finally:
        release.set()
        t.join()


def test_blas_threads_round_trip():
    before = get_blas_threads()
    if before is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS that tensorlab.blas_threads can find")
    with blas_threads(1):
        assert get_blas_threads() == 1
        a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
        np.testing.assert_array_equal(a @ a.T, np.einsum("ik,jk->ij", a, a))
    assert get_blas_threads() == before
    assert set_blas_threads(before) == before


def test_blas_threads_rejects_zero():
    with pytest.raises(ValueError, match="at least 1 thread, got 0"):
        set_blas_threads(0)
