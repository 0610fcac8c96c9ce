"""tensorlab.allocator: import keeps freed memory for reuse on glibc, unless opted out."""

import ctypes
import os
import subprocess
import sys

import pytest

try:
    GLIBC = hasattr(ctypes.CDLL(None), "mallopt")
except OSError:
    GLIBC = False


def applied_in_a_fresh_process(**env) -> str:
    code = "import tensorlab as tl; print(tl.allocator.applied)"
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(not GLIBC, reason="mallopt is glibc's; elsewhere nothing is changed")
def test_import_sets_the_thresholds_once():
    assert applied_in_a_fresh_process(TENSORLAB_KEEP_FREED_MEMORY="1") == "True"


def test_the_environment_can_opt_out():
    assert applied_in_a_fresh_process(TENSORLAB_KEEP_FREED_MEMORY="0") == "False"
