"""Shared test setup: hypothesis profiles and device selection.

HYPOTHESIS_PROFILE=ci (set by .ci/run) draws few examples so CI stays fast; the default "dev"
profile draws more; "thorough" is for a long run by hand.
"""

import os

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


def _cuda_available() -> bool:
    from tensorlab.backend import cuda_available

    return cuda_available()


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def device(request):
    """Run a test on the CPU, and on the GPU where CuPy and a GPU are present."""
    if request.param == "cuda" and not _cuda_available():
        pytest.skip("no CUDA GPU with CuPy on this machine")
    return request.param
