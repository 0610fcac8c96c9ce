"""tests/conftest.py's ``--shard K/N`` (benchmarks/gpu_session.sh runs the suite on a GPU as
eight shards side by side): the shards are disjoint and together are the whole collection."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TARGET = os.path.join(HERE, "nn", "test_init.py")


def collected(*args: str) -> list[str]:
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    res = subprocess.run([*cmd, *args, TARGET], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode in (0, 5), res.stdout + res.stderr  # 5: nothing collected
    return [line for line in res.stdout.splitlines() if "::" in line]


def test_shards_split_the_suite_into_disjoint_parts():
    everything = collected()
    parts = [collected("--shard", f"{k}/3") for k in (1, 2, 3)]
    assert sorted(t for part in parts for t in part) == sorted(everything)
    assert all(parts) and len(everything) > 3  # each shard gets some of the tests


@pytest.mark.parametrize("shard", ["4/3", "a/b"])
def test_a_shard_out_of_range_is_refused_by_name(shard):
    cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "--shard", shard, TARGET]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert res.returncode != 0 and f"--shard {shard}: give K/N with 1 ≤ K ≤ N" in res.stderr
