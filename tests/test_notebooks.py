"""The course in notebooks/ runs from top to bottom, in its small-run mode.

Each notebook is a jupytext text file (``py:percent``); it is converted and executed with
nbclient in a fresh Python kernel, with ``TL_COURSE_SMALL=1`` so that the training notebooks
take seconds. The student notebooks hold stubs where the exercises are (``check`` reports
them as not written yet) and never import the reference solutions. Each opens with its
objectives and a study time, and asks a few "predict, then run" questions whose answers
only ``reveal(name)`` prints.
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
        if re.search(rf"^class {func}\b", text, re.M):  # a class: a stub among its methods
            body = re.search(rf"^class {func}\b(.*?)check\(\"{name}\"", text, re.S | re.M)
        else:
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
    "value": ["+= node.grad", "self.grad = 1", "reversed(order)", "p.grad +="],
    "sum_to": ["keepdims=True", "g.sum(axis=tuple(range"],
    "array": ["np.ones_like(self.data)", "sum_to(vjp("],
    "gpt_block": ["x = x + ", "x + attn(", "ln1(x)"],
    "mlp": ["g @ W_out.T", "a.T @ g", "x.T @ dh", "dh @ W_in.T"],
    "heads": ["dz = ", "attention_backward(dz", 'np.einsum("td,hed->hte"'],
    "adamw": ["1 - b1**t", r"1 - \beta_1^t", "(1 - lr * weight_decay)", "np.sqrt(v_hat)"],
    "clip": ["max_norm / (norm", "min(1.0, max_norm"],
    "dla": ["r.mean(axis=-1", "ln_final.w.numpy()[:, None]", "/ sigma"],
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


# ---------------------------------------------------------------------- objectives, questions
def test_the_course_has_eight_notebooks_or_more():
    assert len(NOTEBOOKS) >= 8
    numbers = [int(p.name[:2]) for p in NOTEBOOKS]
    assert numbers == list(range(1, len(NOTEBOOKS) + 1))  # numbered in order, no gap


def first_markdown(text: str) -> str:
    return text.split("# %% [markdown]", 1)[1].split("# %%", 1)[0]


REVEAL = r'reveal\("([\w-]+)"\)(?<!reveal\("name"\))'  # (not the placeholder "name")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_each_notebook_opens_with_objectives_a_study_time_and_asks_questions(path):
    from tests.test_grader import GRADER

    text = path.read_text(encoding="utf-8")
    head = first_markdown(text)
    assert "**Objectives.**" in head and re.search(r"\*\*Study time:\*\* about \d+ minutes", head)
    asked = re.findall(REVEAL, text)
    assert text.count("**Predict, then run.**") >= 2 and len(set(asked)) >= 2, asked
    assert set(asked) <= set(GRADER.QUESTIONS), set(asked) - set(GRADER.QUESTIONS)
    assert "reveal" in re.findall(r"^from grader import (.*)$", text, re.M)[0]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_no_answer_to_a_question_is_printed_before_it_is_asked(path):
    """Run as a script (which calls no reveal), a notebook prints none of its questions'
    answers; reveal(name) prints the one asked for."""
    from tests.test_grader import GRADER

    shown = run_as_script(path)
    for name in set(re.findall(REVEAL, path.read_text(encoding="utf-8"))):
        answer = GRADER.QUESTIONS[name]
        assert answer not in shown and answer[:40] not in shown, name


def test_reveal_prints_the_answer_asked_for(capsys):
    from tests.test_grader import GRADER

    GRADER.reveal("reuse")
    assert capsys.readouterr().out == f"reuse: {GRADER.QUESTIONS['reuse']}\n"
    with pytest.raises(KeyError, match="no question 'reuse2'"):
        GRADER.reveal("reuse2")
    asked = set()
    for path in NOTEBOOKS:
        asked |= set(re.findall(REVEAL, path.read_text(encoding="utf-8")))
    assert asked == set(GRADER.QUESTIONS)  # every answer belongs to a question asked


def test_the_new_notebooks_link_their_reading_and_print_the_engines_loop():
    engine = (ROOT / "notebooks/02_write_the_engine.py").read_text(encoding="utf-8")
    assert "inspect.getsource(autograd._propagate)" in engine
    assert "inspect.getsource(Value.backward)" in engine
    block = (ROOT / "notebooks/06_build_a_gpt_block.py").read_text(encoding="utf-8")
    assert "docs/transformer.md" in block
