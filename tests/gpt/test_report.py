"""gpt/report.py: ``python -m gpt report RUN_DIR`` writes one self-contained HTML page with its
sections and figures; its opening sentences flag a run whose learning rate makes the updates
explode and stay quiet on a healthy one; each rule reacts to its own symptom; and the page
renders in headless Chromium."""

from __future__ import annotations

import base64
import copy
import shutil
import subprocess

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from gpt.__main__ import main  # noqa: E402
from gpt.report import flags, report  # noqa: E402
from gpt.train import Diverged  # noqa: E402
from tests.gpt.test_watch import trainer  # noqa: E402

SECTIONS = (
    "Loss",
    "Learning rate and gradient norm",
    "Update ratios of the weight matrices",
    "Attention entropy and activations",
    "Induction and previous-token heads",
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A healthy run and one whose learning rate (3.0, no clipping) blows the updates up."""
    healthy, broken = (tmp_path_factory.mktemp(name) for name in ("healthy", "broken"))
    trainer(healthy, max_iters=30, learning_rate=1e-3).run()
    try:
        trainer(broken, max_iters=30, learning_rate=3.0, min_lr=0.0, grad_clip=0.0).run()
    except Diverged:  # its watch.jsonl holds the steps before it
        pass
    return healthy, broken


def test_the_page_has_its_sections_and_embeds_its_figures(runs):
    healthy, _ = runs
    page = report(healthy).read_text()
    for title in SECTIONS:
        assert f"<h2>{title}</h2>" in page
    pngs = sorted(p.name for p in (healthy / "report").glob("*.png"))
    assert pngs == ["blocks.png", "circuits.png", "loss.png", "lr.png", "updates.png"]
    loss = base64.b64encode((healthy / "report" / "loss.png").read_bytes()).decode()
    assert f"src='data:image/png;base64,{loss}'" in page  # self-contained: no file links
    assert "Nothing looks wrong" in page


def test_exploding_updates_are_flagged_and_a_healthy_run_is_not(runs):
    healthy, broken = runs
    assert "Exploding updates" in report(broken).read_text()
    assert "Exploding updates" not in report(healthy).read_text()


def record(**blocks) -> dict:
    """A healthy record of 2 blocks of 2 heads, with ``blocks``' fields replaced."""
    block = {"resid_rms": 1.0, "attn_entropy": [1.5, 2.0], "mlp_dead": 0.0, "mlp_saturated": 0.0}
    r = {
        "iter": 10,
        "grad_norm": {"blocks.0.mlp.W_in": 0.5, "blocks.0.mlp.b_in": 0.1},
        "update_ratio": {"blocks.0.mlp.W_in": 1e-3, "blocks.0.mlp.b_in": 1e-7},
        "blocks": [dict(block), dict(block)],
        "max_logit": 5.0,
    }
    r["blocks"][1].update(blocks)
    return r


def test_each_rule_reacts_to_its_symptom():
    assert flags([record()]) == []  # (a bias's tiny ratio is no vanishing matrix)
    vanishing = record()
    vanishing["update_ratio"]["blocks.0.mlp.W_in"] = 1e-6
    assert flags([record(), vanishing])[0].startswith("Vanishing updates: blocks.0.mlp.W_in")
    assert flags([vanishing, record()]) == []  # only the last step counts
    nan = copy.deepcopy(record())
    nan["grad_norm"]["blocks.0.mlp.b_in"] = float("nan")
    assert flags([nan, record()])[0].startswith("Exploding updates")
    (dead,) = flags([record(mlp_dead=0.6)])
    assert dead.startswith("Dead units") and "60% in block 1" in dead
    (saturated,) = flags([record(mlp_saturated=0.3)])
    assert saturated.startswith("Saturated units") and "30% in block 1" in saturated
    assert flags([record(attn_entropy=[0.01, 2.0])]) == []  # one head of four: a sharp head
    (collapsed,) = flags([record(attn_entropy=[0.01, 0.05])])
    assert collapsed.startswith("Collapsed attention: 2 of 4 heads")


def test_a_run_without_watch_records_says_how_to_get_them(tmp_path):
    trainer(tmp_path, max_iters=10, watch_interval=0).run()
    page = report(tmp_path).read_text()
    assert "train with --watch-interval N" in page and "<h2>Loss</h2>" in page
    assert "Update ratios" not in page


def test_the_command_writes_the_page_and_a_folder_without_a_run_is_one_line(runs, tmp_path, capsys):
    healthy, _ = runs
    assert main(["report", str(healthy), "--out", str(tmp_path / "page")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "page" / "report.html")
    assert (
        "<h2>Update ratios of the weight matrices</h2>"
        in (tmp_path / "page" / "report.html").read_text()
    )
    assert main(["report", str(tmp_path)]) == 2
    assert "cannot read the run's config" in capsys.readouterr().err


@pytest.mark.skipif(not shutil.which("chromium"), reason="chromium is not installed")
def test_the_page_renders_in_headless_chromium(runs, tmp_path):
    """A screenshot of each page is drawn, and is more than a blank page."""
    import matplotlib.image

    for run in runs:
        shot = tmp_path / f"{run.name}.png"
        cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
        cmd += ["--window-size=1000,3000", f"--screenshot={shot}", report(run).as_uri()]
        subprocess.run(cmd, capture_output=True, timeout=120, check=True)
        pixels = matplotlib.image.imread(shot)[..., :3]
        assert pixels.shape[:2] == (3000, 1000)
        assert (pixels.min(-1) < 0.5).mean() > 0.01  # text and figures, not a white page
        assert np.ptp(pixels[:, :, 0] - pixels[:, :, 2]) > 0.3  # colour: the figures drew
