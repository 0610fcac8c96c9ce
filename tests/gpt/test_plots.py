"""gpt/plots.py: the attention heatmap says what its ticks are (token ids, token text or
positions), its colour scale spans the pattern, and a pattern that is not one head's (T_q, T_k)
is refused by name; the score-per-head figures put each score in its head's place."""

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


@pytest.fixture
def figure(monkeypatch):
    """The figure of the last plot drawn (read before it is saved and closed)."""
    seen = {}
    save = plots._save

    def keep(fig, path):
        seen["fig"] = fig
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return lambda: seen["fig"]


def test_a_rectangular_pattern_names_the_last_positions(figure, tmp_path):
    """With a cache the queries are the last T_q positions of T_k: given the labels of all
    positions, the keys take the last T_k and the queries the last T_q."""
    labels = ["a", "b", "c", "d", "e"]
    plots.attention_pattern(np.full((2, 3), 1 / 3), tmp_path / "p.png", labels=labels)
    ax = figure().axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["c", "d", "e"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["d", "e"]


def test_the_colour_scale_spans_the_pattern(figure, tmp_path):
    pattern = np.tril(np.full((4, 4), 0.25))
    plots.attention_pattern(pattern, tmp_path / "p.png")
    assert figure().axes[0].images[0].get_clim() == (0.0, 0.25)


SCORES = np.array([[0.1, 0.9, 0.3], [0.5, 0.2, 0.7]])  # (layers, heads)


def test_head_scores_heatmap_writes_each_score_in_its_cell(figure, tmp_path):
    plots.head_scores(SCORES, tmp_path / "s.png", title="induction")
    ax = figure().axes[0]
    cells = {t.get_position(): t.get_text() for t in ax.texts}
    want = {(h, layer): f"{SCORES[layer, h]:.2f}" for layer in range(2) for h in range(3)}
    assert cells == want
    np.testing.assert_array_equal(ax.images[0].get_array(), SCORES)


def test_head_scores_bars_stand_side_by_side(figure, tmp_path):
    plots.head_scores(SCORES, tmp_path / "s.png", kind="bar")
    ax = figure().axes[0]
    assert len(ax.containers) == 2  # one group of bars per layer
    for layer, bars in enumerate(ax.containers):
        np.testing.assert_allclose([b.get_height() for b in bars], SCORES[layer])
        np.testing.assert_allclose(
            [b.get_x() + b.get_width() / 2 for b in bars], np.arange(3) + 0.4 * layer
        )  # width 0.8 / 2 layers


def test_loss_curve_reads_a_runs_log(figure, tmp_path):
    """A run's log mixes step records and evaluations: the steps give the faint curve and its
    moving average (starting at the first loss), the evaluations the points."""
    log = [{"iter": 0, "train_loss": 4.0, "val_loss": 4.1}]
    log += [{"iter": i, "loss": 4.0 - 0.01 * i, "lr": 1e-3} for i in range(1, 201)]
    log += [{"iter": 200, "train_loss": 3.0, "val_loss": 3.2}]
    path = plots.loss_curve(log, tmp_path / "loss.png")
    assert (tmp_path / "loss.png").exists() and path == str(tmp_path / "loss.png")
    raw, smooth, train, val = figure().axes[0].lines
    np.testing.assert_allclose(raw.get_ydata(), [4.0 - 0.01 * i for i in range(1, 201)])
    assert smooth.get_ydata()[0] == 3.99  # then it lags the falling loss (span 200/50 = 4)
    assert raw.get_ydata()[-1] < smooth.get_ydata()[-1] < raw.get_ydata()[-1] + 0.05
    assert list(train.get_ydata()) == [4.0, 3.0] and list(val.get_ydata()) == [4.1, 3.2]
