"""The examples run where the user is and write only into their own run folders under out/:
never over a trained run, never into the working directory itself."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TEXT = "to be, or not to be, that is the question. " * 30


def run_example(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MPLBACKEND": "Agg"}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def load_example(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_gpt_twice_trains_two_runs_side_by_side(tmp_path):
    """The README's command, run twice: the second run had stopped at "out/train_gpt holds a
    training run"; now it takes out/train_gpt-2, and says so. --resume continues the newest."""
    (tmp_path / "t.txt").write_text(TEXT)
    tiny = ["--text", "t.txt", "--n-layer", "1", "--d-model", "16", "--n-head", "2"]
    tiny += ["--block-size", "8", "--batch-size", "2", "--sample-tokens", "5"]
    quick = ["--max-iters", "2", "--eval-interval", "1", "--eval-iters", "1", *tiny]
    for folder in ("out/train_gpt", "out/train_gpt-2"):
        done = run_example("train_gpt.py", *quick, cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        assert f"run folder: {folder}" in done.stdout
        assert (tmp_path / folder / "ckpt.safetensors").exists()
    resumed = run_example("train_gpt.py", "--resume", *quick[2:], "--max-iters", "3", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "run folder: out/train_gpt-2" in resumed.stdout and "final: iter 3" in resumed.stdout
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["train_gpt", "train_gpt-2"]
