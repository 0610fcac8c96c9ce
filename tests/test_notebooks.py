"""The course in notebooks/ runs from top to bottom, in its small-run mode.

Each notebook is a jupytext text file (``py:percent``); it is converted and executed with
nbclient in a fresh Python kernel, with ``TL_COURSE_SMALL=1`` so that the training notebooks
take seconds. The student notebooks hold stubs where the exercises are (``check`` reports
them as not written yet) and never import the reference solutions.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path, monkeypatch):
    jupytext = pytest.importorskip("jupytext", reason="the notebook tests need jupytext")
    nbclient = pytest.importorskip("nbclient", reason="the notebook tests need nbclient")
    pytest.importorskip("ipykernel", reason="the notebook tests need ipykernel")
    monkeypatch.setenv("TL_COURSE_SMALL", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = jupytext.read(path)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    errors = [
        o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"
    ]
    assert not errors


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_student_notebooks_hold_no_solutions(path):
    text = path.read_text(encoding="utf-8")
    assert "solutions" not in re.findall(r"^\s*(?:from|import)\s+([\w.]+)", text, re.M)
    from nn.exercises import EXERCISES

    for name, func in re.findall(r'check\("(\w+)", (\w+)[,)]', text):
        assert name in EXERCISES, name
        body = re.search(rf"def {func}\(.*?\n(.*?)\n\n", text, re.S)
        assert body and "raise NotImplementedError" in body.group(1), func
