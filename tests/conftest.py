"""Shared test setup: hypothesis profiles and device selection.

HYPOTHESIS_PROFILE=ci (set by .ci/run) draws few examples so CI stays fast; the default "dev"
profile draws more; "thorough" is for a long run by hand.

TENSORLAB_TEST_DEVICE=fake-cuda runs the suite on CuPy emulated by NumPy (tests/fake_cupy.py):
CuPy's rules, with no GPU.

TENSORLAB_TEST_DEVICE=cuda runs the whole suite on the GPU: every tensor and parameter a test
makes without naming a device goes there (``tl.set_default_device``), and NumPy's testing
asserts accept CuPy arrays (copied to the host first), so the tests that read ``.data`` compare
as they do on the CPU. Tolerances are the tests' own; float32 GPU math (other summation
orders, fused multiply-adds) stays within them or the test says why not.
"""

import os
import zlib

import pytest
from hypothesis import HealthCheck, settings

# CI draws the same examples on every run (derandomize), so that a landing never depends on
# luck; "dev" and "thorough" draw new ones each run, which is where new counterexamples come from.
settings.register_profile(
    "ci",
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("thorough", max_examples=400, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


TEST_DEVICE = os.environ.get("TENSORLAB_TEST_DEVICE", "cpu")


def _on_host(fn):
    def wrapped(*args, **kwargs):
        import cupy

        args = [cupy.asnumpy(a) if isinstance(a, cupy.ndarray) else a for a in args]
        return fn(*args, **kwargs)

    return wrapped


if TEST_DEVICE == "fake-cuda":  # CuPy emulated on the CPU (tests/fake_cupy.py)
    from tests import fake_cupy

    fake_cupy.install()
    TEST_DEVICE = "cuda"

if TEST_DEVICE != "cpu":
    import numpy as np

    import tensorlab as tl

    tl.set_default_device(TEST_DEVICE)  # refuses a device that is not there, by name
    for name in ("assert_allclose", "assert_array_equal", "assert_array_less", "assert_equal"):
        setattr(np.testing, name, _on_host(getattr(np.testing, name)))


def pytest_report_header(config):
    return f"tensorlab test device: {TEST_DEVICE} (TENSORLAB_TEST_DEVICE)"


def _cuda_available() -> bool:
    from tensorlab.backend import cuda_available

    return cuda_available()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request):
    """Run a test on the CPU, and on the GPU where CuPy and a GPU are present."""
    if request.param == "cuda" and not _cuda_available():
        pytest.skip("no CUDA GPU with CuPy on this machine")
    return request.param


# ------------------------------------------------------------------ shards
# `pytest --shard 3/8` runs the third of eight disjoint parts of the collected tests (by a
# hash of each test's id, so the parts are the same on every machine and about equal in
# size): benchmarks/gpu_session.sh runs the suite on a GPU as eight processes side by side.
def pytest_addoption(parser):
    parser.addoption("--shard", default=None, help="K/N: run only the K-th of N parts (1 ≤ K ≤ N)")


def pytest_collection_modifyitems(config, items):
    shard = config.getoption("--shard")
    if shard is None:
        return
    try:
        k, n = (int(s) for s in shard.split("/"))
    except ValueError:
        k = n = 0
    if not 1 <= k <= n:
        raise pytest.UsageError(f"--shard {shard}: give K/N with 1 ≤ K ≤ N, e.g. --shard 1/8")
    keep, drop = [], []
    for item in items:
        digest = zlib.crc32(item.nodeid.encode())
        (keep if digest % n == k - 1 else drop).append(item)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep


@pytest.fixture
def numpy_kernels():
    """Kernels on NumPy arrays run by NumPy, operation by operation (tensorlab.fused.run_numpy),
    not compiled (tensorlab/c_runner.py): for tests that compare with that run bit for bit."""
    from tests.strategies import cpu_runner

    with cpu_runner("numpy"):
        yield
