"""The examples run where the user is and write only into their own run folders under out/:
never over a trained run, never into the working directory itself."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_compare_tokenizers_writes_its_page_into_its_run_folder(tmp_path):
    """It left tokens.html in the working directory; now out/compare_tokenizers/, printed."""
    text = (ROOT / "data" / "tinyshakespeare.txt").read_text(encoding="utf-8")[:30_000]
    (tmp_path / "t.txt").write_text(text, encoding="utf-8")
    done = run_example(
        "compare_tokenizers.py", "--text", "t.txt", "--vocab-size", "300", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    page = tmp_path / "out" / "compare_tokenizers" / "tokens.html"
    assert "<html" in page.read_text(encoding="utf-8").lower()
    assert "wrote out/compare_tokenizers/tokens.html" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "t.txt"]


def test_draw_graph_without_dot_says_how_to_install_it(tmp_path, monkeypatch, capsys):
    """Without Graphviz's dot: the DOT sources, and one line on how to get the pictures."""
    draw_graph = load_example("draw_graph.py")
    monkeypatch.setattr(draw_graph.shutil, "which", lambda name: None)
    written = draw_graph.main(str(tmp_path / "graphs"))
    assert [p.suffix for p in written] == [".dot"] * 3 and all(p.exists() for p in written)
    out = capsys.readouterr().out.splitlines()
    install = [line for line in out if "graphviz" in line.lower()]
    assert len(install) == 1 and "Traceback" not in "\n".join(out)
    for how in ("apt install graphviz", "brew install graphviz", "conda install -c conda-forge"):
        assert how in install[0]


@pytest.mark.slow  # the tour's analyses take seconds even after 100 training steps
def test_interpretability_tour_says_where_its_picture_is(tmp_path, capsys):
    """The tour drew circuits_forming.png without a word; it now prints its path."""
    pytest.importorskip("matplotlib")
    tour = load_example("interpretability_tour.py")
    tour.main(["--steps", "100", "--out", str(tmp_path)])
    picture = tmp_path / "circuits_forming.png"
    assert picture.exists()
    assert f"as a picture: {picture}" in capsys.readouterr().out
