"""The docs stay true to the code.

1. Every code reference in ``docs/*.md`` exists: ``path.py: Name`` (a class, function or
   attribute defined in that file, ``Class.method`` allowed), ``tests/...py::test_name`` (a
   test function), bare paths, and relative links between pages (with their #anchors).
2. Every derivation section names the code that implements it and a test that checks it.
3. ``examples/backprop_attention.py`` runs, and the hand-written backward, tensorlab's
   autograd and finite differences agree within the tolerances the example states.
4. Every ```python block of ``docs/`` runs; the ``>>>`` sessions are doctests, so every worked
   number they print is checked against the code.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))

_TOP = r"(?:tensorlab|nn|gpt|tests|examples|benchmarks)"
CODE_REF = re.compile(rf"`({_TOP}/[\w/]+\.py): ([A-Za-z_][\w.]*)`")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)`")
PATH_REF = re.compile(rf"`((?:{_TOP}|docs)/[\w/.-]+\.(?:py|md))`")
LINK = re.compile(r"\]\(([^)\s]*)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)

# The pages whose "## N. ..." sections are derivations (each must cite code and a test).
DERIVATION_PAGES = ["derivations.md", "derivations_nn.md"]


def _refs(pattern: re.Pattern) -> list[tuple[str, ...]]:
    found = []
    for page in PAGES:
        for m in pattern.finditer(page.read_text(encoding="utf-8")):
            found.append((page.name, *m.groups()))
    return found


def _defined_names(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """Names a module or class body defines: functions, classes, assignments, imports."""
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    names[t.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.ImportFrom | ast.Import):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = node
    return names


@functools.cache
def _module_body(path: Path) -> list[ast.stmt]:
    return ast.parse(path.read_text(encoding="utf-8")).body


def _defines(path: Path, dotted: str) -> bool:
    """Whether ``path`` defines ``dotted`` (``Name`` or ``Class.attr``), read with ast."""
    body = _module_body(path)
    node = None
    for part in dotted.split("."):
        names = _defined_names(body)
        if part not in names:
            return False
        node = names[part]
        body = node.body if isinstance(node, ast.ClassDef) else []
    return node is not None


@pytest.mark.parametrize("page, path, name", _refs(CODE_REF), ids=lambda x: str(x))
def test_code_references_exist(page, path, name):
    file = ROOT / path
    assert file.is_file(), f"{page}: {path} does not exist"
    assert _defines(file, name), f"{page}: {path} defines no {name}"
    if path.startswith(("tensorlab/", "nn/")):  # importable: the name is there at run time too
        obj = importlib.import_module(path[:-3].replace("/", "."))
        for part in name.split("."):
            obj = getattr(obj, part)


@pytest.mark.parametrize("page, path, name", _refs(TEST_REF), ids=lambda x: str(x))
def test_cited_tests_exist(page, path, name):
    file = ROOT / path
    assert file.is_file(), f"{page}: {path} does not exist"
    assert _defines(file, name), f"{page}: {path} has no test {name}"


@pytest.mark.parametrize("page, path", _refs(PATH_REF), ids=lambda x: str(x))
def test_cited_paths_exist(page, path):
    assert (ROOT / path).exists(), f"{page}: {path} does not exist"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {_slug(h) for h in HEADING.findall(page.read_text(encoding="utf-8"))}


def test_links_between_pages_resolve():
    checked = 0
    for page in PAGES:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            assert dest.exists(), f"{page.name}: link to missing {target}"
            if anchor and dest.suffix == ".md":
                assert anchor in _anchors(dest), f"{page.name}: no heading #{anchor} in {dest.name}"
            checked += 1
    assert checked >= 10


def test_the_docs_cite_plenty():
    # Guards the regular expressions: if they stopped matching, the checks above would pass
    # vacuously.
    assert len(_refs(CODE_REF)) >= 60
    assert len(_refs(TEST_REF)) >= 80


def _sections(text: str) -> list[tuple[str, str]]:
    parts = re.split(r"^## ", text, flags=re.M)[1:]
    return [(p.splitlines()[0], p) for p in parts]


@pytest.mark.parametrize("page", DERIVATION_PAGES)
def test_every_derivation_cites_code_and_a_test(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    numbered = [(title, body) for title, body in _sections(text) if re.match(r"[1-9]\d*\.", title)]
    assert len(numbered) >= 10
    for title, body in numbered:
        assert CODE_REF.search(body), f"{page}: section {title!r} names no implementation"
        assert TEST_REF.search(body), f"{page}: section {title!r} names no test"


# Every file or folder the README names, from the repository root (a clone has no ../shared).
README_PATH = re.compile(
    r"(?<![\w/.-])((?:examples|configs|data|docs|notebooks|benchmarks|tests|tensorlab|nn|gpt"
    r"|\.ci)/[\w/.-]*[\w/])"
)


def test_every_path_the_readme_names_exists():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    named = set(README_PATH.findall(text))
    assert "data/tinyshakespeare.txt" in named and "examples/train_gpt.py" in named
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"README.md names paths that do not exist: {missing}"
    assert "../shared" not in text, "README.md names ../shared, which a clone does not have"


def test_readme_indexes_every_page():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    for page in PAGES:
        if page.name != "README.md":
            assert f"]({page.name})" in index, f"docs/README.md does not link {page.name}"


# ---------------------------------------------------------------------- the worked example
def _load_example():
    path = ROOT / "examples" / "backprop_attention.py"
    spec = importlib.util.spec_from_file_location("backprop_attention", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_backprop_attention_example_agrees(capsys):
    ex = _load_example()
    diffs = ex.main(verbose=True)
    out = capsys.readouterr().out
    assert "by hand" in out and "finite diff" in out and "largest |difference|" in out
    assert "the pattern A" in out and "dS = A ⊙ (dA - rowsum(dA ⊙ A))" in out
    tol = ex.TOLERANCES
    for pair, d in diffs.items():
        if pair.startswith("max |dS|"):
            assert d == 0.0, "masked scores must get no gradient"
        elif "finite differences" in pair:
            assert d < tol["vs finite differences"], (pair, d)
        else:
            assert d < tol["hand vs autograd"], (pair, d)
    assert len(diffs) == 6


def test_readme_python_blocks_run_as_pasted(monkeypatch, capsys):
    """The README's Python blocks after the tour (which ``examples/tour.py`` runs) work when
    pasted in order into one session, from the repository root."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 3, "the README lost its Python examples"
    monkeypatch.chdir(ROOT)
    namespace: dict = {}
    for block in blocks[1:]:
        exec(compile(block, "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    assert "(4, 32, 320) loss" in out and "(4, 2, 32, 32)" in out and "induction scores" in out


# What the pages' code blocks take as given, as a reader would have it from the page's text.
PAGE_SETUP = {
    "autograd.md": "import tensorlab as tl\n",
    "tokenizers.md": (
        "from gpt.data import default_text\n"
        "text, heldout_text = default_text()[:300_000], default_text()[300_000:310_000]\n"
    ),
}
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _run_blocks(text: str, name: str) -> None:
    """Run a page's ```python blocks in order in one namespace: a ``>>>`` session as a
    doctest (its printed numbers must match), any other block with exec."""
    import doctest

    namespace: dict = {"__name__": "__docs__"}
    exec(PAGE_SETUP.get(name, ""), namespace)
    parser = doctest.DocTestParser()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    for i, block in enumerate(FENCE.findall(text)):
        where = f"{name}, Python block {i + 1}"
        if ">>>" in block:
            test = parser.get_doctest(block, namespace, where, name, 0)
            runner = doctest.DocTestRunner(optionflags=flags)
            report: list[str] = []  # the runner swaps sys.stdout while it runs: collect here
            runner.run(test, out=report.append, clear_globs=False)
            namespace.update(test.globs)  # DocTest ran on a copy: the page's names go on
            assert runner.failures == 0, f"{where}:\n{''.join(report)}"
        else:
            exec(compile(block, where, "exec"), namespace)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_code_blocks_run(page, tmp_path, monkeypatch):
    """Every ```python block of a page runs, in order, in one namespace per page (from a
    scratch folder); blocks written as a ``>>>`` session are run as doctests, so the worked
    numbers they print cannot drift from the code."""
    text = page.read_text(encoding="utf-8")
    if not FENCE.search(text):
        pytest.skip(f"{page.name} has no Python blocks")
    monkeypatch.chdir(tmp_path)
    _run_blocks(text, page.name)


def test_a_wrong_worked_number_fails_and_names_share_across_blocks():
    """Guards the runner above: a doctest whose printed number is wrong fails with the
    doctest's report, and names defined in one block are seen by the next."""
    fence = "```"
    good = f"{fence}python\n>>> a = 2\n{fence}\n\n{fence}python\n>>> a + 1\n3\n{fence}\n"
    _run_blocks(good, "good.md")
    bad = good.replace("\n3\n", "\n4\n")
    with pytest.raises(AssertionError, match="Expected:"):
        _run_blocks(bad, "bad.md")


# ---------------------------------------------------------------------- differences from PyTorch
def test_the_differences_from_pytorch_table_holds():
    """derivations_nn.md's "Differences from PyTorch" rows, run against PyTorch: causal
    alignment for T_q != T_k, ties of max over an axis, the all-ignored cross-entropy."""
    torch = pytest.importorskip("torch")
    import numpy as np

    import nn.functional as F
    import tensorlab as tl

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(s) for s in [(2, 4), (4, 4), (4, 4)])
    ours = F.scaled_dot_product_attention(*(tl.tensor(a) for a in (q, k, v)), causal=True)
    theirs = torch.nn.functional.scaled_dot_product_attention(
        *(torch.tensor(a) for a in (q, k, v)), is_causal=True
    )
    last = F.scaled_dot_product_attention(
        *(tl.tensor(a) for a in (q, k, v)), mask=np.tri(2, 4, 2, dtype=bool)
    )
    first = F.scaled_dot_product_attention(
        *(tl.tensor(a) for a in (q, k, v)), mask=np.tri(2, 4, 0, dtype=bool)
    )
    np.testing.assert_allclose(ours.numpy(), last.numpy())
    np.testing.assert_allclose(theirs.numpy(), first.numpy(), atol=1e-12)
    assert not np.allclose(ours.numpy(), theirs.numpy())

    a = np.array([[1.0, 3.0, 3.0, 2.0]])
    x = tl.tensor(a, dtype="float64", requires_grad=True)
    x.max(axis=1).sum().backward()
    tx = torch.tensor(a, requires_grad=True)
    torch.max(tx, dim=1).values.sum().backward()
    assert x.grad.numpy().tolist() == [[0.0, 0.5, 0.5, 0.0]]
    assert sorted(tx.grad.numpy().ravel().tolist()) == [0.0, 0.0, 0.0, 1.0]

    z = tl.tensor(np.zeros((2, 3)), dtype="float64", requires_grad=True)
    loss = F.cross_entropy(z, [-100, -100])
    loss.backward()
    tz = torch.zeros(2, 3, dtype=torch.float64, requires_grad=True)
    tloss = torch.nn.functional.cross_entropy(tz, torch.tensor([-100, -100]))
    tloss.backward()
    assert loss.item() == 0.0 and not z.grad.numpy().any()
    assert np.isnan(tloss.item()) and not tz.grad.numpy().any()
