"""The course in notebooks/ runs from top to bottom, in its small-run mode.

Each notebook is a jupytext text file (``py:percent``); it is converted and executed with
nbclient in a fresh Python kernel, with ``TL_COURSE_SMALL=1`` so that the training notebooks
take seconds. The student notebooks hold stubs where the exercises are (``check`` reports
them as not written yet) and never import the reference solutions.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
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
    for cell in nb.cells:  # each exercise's verdict shows once (printed, not also displayed)
        for name, _ in re.findall(CHECK, cell.source if cell.cell_type == "code" else ""):
            shown = "".join(o.get("text", "") for o in cell.outputs)
            shown += "".join(o.get("data", {}).get("text/plain", "") for o in cell.outputs)
            assert shown.count(f"{name}: ") == 1, shown


CHECK = r'check\("(\w+)", (\w+)[,)]'  # an exercise's check call: its name and its function
GRADED = [p for p in NOTEBOOKS if re.search(CHECK, p.read_text(encoding="utf-8"))]


@functools.cache
def run_as_script(path: Path) -> str:
    """What ``python notebooks/NN_*.py`` prints (every exercise still a stub)."""
    env = {**os.environ, "TL_COURSE_SMALL": "1", "MPLBACKEND": "Agg"}
    done = subprocess.run(
        [sys.executable, path.name],
        cwd=path.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("path", GRADED, ids=[p.stem for p in GRADED])
def test_a_notebook_run_as_a_script_prints_its_verdicts(path):
    """python notebooks/NN_*.py showed nothing of the grader: check(...) stood bare at a
    cell's end, which only Jupyter displays. Each verdict is one line of the script's output
    (here: every exercise a stub, so not written yet)."""
    lines = run_as_script(path).splitlines()
    for name, _ in re.findall(CHECK, path.read_text(encoding="utf-8")):
        verdicts = [line for line in lines if line.startswith(f"{name}: ")]
        assert len(verdicts) == 1 and "not written yet" in verdicts[0], (name, verdicts)
        assert f'hint("{name}")' in verdicts[0]


@pytest.mark.parametrize("path", GRADED, ids=[p.stem for p in GRADED])
def test_a_student_who_writes_nothing_sees_no_formula(path):
    """Run with every stub unwritten, a notebook prints none of its exercises' answers (the
    rule, or any part of it that states a formula): those come from hint(name), the third
    time it is asked."""
    from tests.test_grader import EXERCISES, formula_parts

    shown = run_as_script(path)
    for name, _ in re.findall(CHECK, path.read_text(encoding="utf-8")):
        ex = EXERCISES[name]
        assert ex.rule not in shown, name
        for part in formula_parts(ex):
            assert part not in shown, (name, part)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_student_notebooks_hold_no_solutions(path):
    text = path.read_text(encoding="utf-8")
    assert "solutions" not in re.findall(r"^\s*(?:from|import)\s+([\w.]+)", text, re.M)
    from tests.test_grader import EXERCISES

    for name, func in re.findall(CHECK, text):
        assert name in EXERCISES, name
        body = re.search(rf"def {func}\(.*?\n(.*?)\n\n", text, re.S)
        assert body and "raise NotImplementedError" in body.group(1), func


# How each exercise's answer would be written in a notebook (LaTeX in the text, NumPy in the
# code): none of it may stand above the exercise, where a student reads it before trying.
ANSWERS = {
    "tanh": [r"1 - \tanh^2", "1 - y^2", "1 - y**2", "1 - np.tanh"],
    "sub": ["db = -g", "dB = -g", "-g for b"],
    "add_broadcast": ["g.sum(axis=0)", "sum of `g` over the rows", "sum of g over the rows"],
    "matmul": [r"g B^\top", r"gB^\top", r"A^\top g", "g @ b.T", "a.T @ g"],
    "log": ["g / a", r"\frac{g}{a}", "1/a", "1 / a"],
    "sum_rows": ["g[:, None]", "reshaped with a 1", "np.broadcast_to(g"],
    "softmax": [r"\mathrm{rowsum}(g", r"g - \sum_j g_j y_j", "(g * y).sum"],
    "attention": ["dS = A", "dQ = ", "dS @ K", "A.T @ G"],
    "layer_norm": [r"\hat g", "mean(ĝ", "(gh * xhat)"],
    "gelu_tanh": ["1 - t^2", "1 - t**2"],
    "cross_entropy": [r"\mathrm{softmax}(z) - \mathrm{onehot}", "p - onehot", "- onehot"],
}


@pytest.mark.parametrize("path", GRADED, ids=[p.stem for p in GRADED])
def test_no_exercise_is_answered_above_it(path):
    """A notebook may derive a different example, or work an exercise out after it, but the
    text and code above an exercise's check hold none of its answer."""
    text = path.read_text(encoding="utf-8")
    names = re.findall(CHECK, text)
    assert names and {name for name, _ in names} <= set(ANSWERS)
    for name, _ in names:
        above = text[: text.index(f'check("{name}"')]
        for answer in ANSWERS[name]:
            assert answer not in above, (name, answer)
