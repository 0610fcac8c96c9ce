"""tensorlab.blas_threads: the BLAS thread count, changed at run time."""

import numpy as np
import pytest

from tensorlab.blas_threads import blas_threads, get_blas_threads, set_blas_threads


def test_blas_threads_round_trip():
    before = get_blas_threads()
    if before is None:
        pytest.skip("NumPy's BLAS is not an OpenBLAS that tensorlab.blas_threads can find")
    with blas_threads(1):
        assert get_blas_threads() == 1
        a = np.arange(12.0, dtype=np.float32).reshape(3, 4)
        np.testing.assert_array_equal(a @ a.T, np.einsum("ik,jk->ij", a, a))
    assert get_blas_threads() == before
    other = 1 if before != 1 else 2
    assert set_blas_threads(other) == before  # the count it replaced, to put back later
    assert set_blas_threads(before) == other and get_blas_threads() == before


def test_blas_threads_rejects_zero():
    with pytest.raises(ValueError, match="at least 1 thread, got 0"):
        set_blas_threads(0)
