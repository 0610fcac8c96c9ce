"""The circuits examples: examples/zero_layer_bigram.py and examples/induction_heads.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _load_example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_zero_layer_bigram_example_quick(capsys):
    out = _load_example("zero_layer_bigram").main(["--quick"])
    assert out["corpus_loss"] == pytest.approx(out["entropy"] + out["kl"], rel=1e-5)
    assert out["history"][-1]["kl"] < out["history"][0]["kl"]
    assert "conditional entropy" in capsys.readouterr().out


def test_induction_heads_example_quick(tmp_path, capsys):
    out = _load_example("induction_heads").main(["--quick", "--out", str(tmp_path)])
    rep = out["report"]
    assert rep["induction"].shape == (2, out["model"].config.n_head)
    printed = capsys.readouterr().out
    assert "induction scores" in printed and "second copy" in printed
    from gpt import plots

    if plots.available():
        assert (tmp_path / "induction_scores.png").is_file()
        assert (tmp_path / "induction_head_pattern.png").is_file()


@pytest.mark.slow
def test_induction_heads_example_forms_an_induction_head():
    """The default run (about 1 min single-threaded; seed 0): a layer-1 head attends from each
    token of the second copy of [r, r] to the token after its first occurrence, and the loss
    on the second copy falls near 0. Seeds 0-2 reach a best score of about 0.93 (and 16 of 16
    seeds tried form the head by step 1100); 0.7 leaves room for other BLAS and platforms
    while staying far above what any non-induction head scores here (the old training setup
    peaked at 0.3, a uniform head scores about 1/position)."""
    out = _load_example("induction_heads").main(["--no-plots"])
    rep = out["report"]
    assert rep["induction"][1].max() > 0.7
    assert rep["second_half"] < 0.5 < rep["first_half"] - 3
    assert out["found"] is not None
