"""gpt/plots.py: the attention heatmap says what its ticks are (token ids, token text or
positions), and a pattern that is not one head's (T_q, T_k) is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from gpt import plots  # noqa: E402


@pytest.fixture
def drawn(monkeypatch, tmp_path):
    """Draw a pattern and return (x label, y label, x tick texts) of the figure saved."""
    seen = {}
    save = plots._save

    def keep(fig, path):
        ax = fig.axes[0]
        seen["labels"] = (ax.get_xlabel(), ax.get_ylabel())
        seen["ticks"] = [t.get_text() for t in ax.get_xticklabels()]
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)

    def draw(pattern, **kw):
        path = plots.attention_pattern(pattern, tmp_path / "p.png", **kw)
        assert (tmp_path / "p.png").exists() and path == str(tmp_path / "p.png")
        return (*seen["labels"], seen["ticks"])

    return draw


def test_ticks_and_axis_titles_agree(drawn):
    pattern = np.tril(np.ones((4, 4))) / np.arange(1, 5)[:, None]
    x, y, ticks = drawn(pattern, tokens=np.array([7, 3, 7, 3]))
    assert (x, y, ticks) == ("key token (id)", "query token (id)", ["7", "3", "7", "3"])
    x, y, ticks = drawn(pattern, labels=["the", " cat", " sat", "."])
    assert (x, y, ticks) == ("key token", "query token", ["the", " cat", " sat", "."])
    x, y, _ = drawn(pattern)
    assert (x, y) == ("key position", "query position")


def test_too_many_tokens_to_name_are_positions(drawn):
    T = 81
    x, y, ticks = drawn(np.eye(T), tokens=np.arange(T) + 1000)
    assert (x, y) == ("key position", "query position")
    assert "1000" not in ticks  # matplotlib's own ticks: positions


def test_a_pattern_of_several_heads_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"one head's pattern \(T_q, T_k\), got shape \(2, 4, 4\)"):
        plots.attention_pattern(np.zeros((2, 4, 4)), tmp_path / "p.png")
