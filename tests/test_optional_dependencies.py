"""A newcomer's ``pip install -e ".[dev]" && pytest`` has none of the reference libraries, no
MPI, no CuPy and maybe no Graphviz: the suite must still collect, and every test that needs one
of them must skip with a reason. Here they are hidden from a child pytest (an import of one
raises ModuleNotFoundError, and the PATH holds no ``dot`` or ``mpiexec``), whatever this
machine has installed."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = (
    "torch",
    "transformers",
    "tokenizers",
    "transformer_lens",
    "sentencepiece",
    "mpi4py",
    "cupy",
    "cupyx",
)

# The child: a finder placed first on sys.meta_path refuses the optional modules (and
# importlib.util.find_spec does not find them), then pytest.
_CHILD = """
import sys
HIDDEN = set(sys.argv[1].split(","))

class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r} (hidden)", name=name)
        return None

sys.meta_path.insert(0, Hide())

import importlib.util  # "is it installed?" answers no for them, as it does where they are not
_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".")[0] in HIDDEN else _find_spec(name, package)
)
import pytest
sys.exit(pytest.main(sys.argv[2:]))
"""


def run_hidden(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TENSORLAB_TEST_DEVICE"}
    env["PATH"] = str(tmp_path)  # an empty folder: no dot, no mpiexec
    cmd = [sys.executable, "-c", _CHILD, ",".join(OPTIONAL), "-p", "no:cacheprovider", *args]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)


def test_the_suite_collects_without_the_optional_libraries(tmp_path):
    res = run_hidden(tmp_path, "--collect-only", "-q", "-rs", "tests")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    assert "error" not in out.lower().split("collected")[-1], out[-3000:]
    # the tokenizers parity modules skip as a whole, naming the library
    assert re.search(r"SKIPPED .*tokenizers", out), out[-3000:]


def files_that_need_an_optional_library() -> list[str]:
    word = re.compile(r"\b(" + "|".join(OPTIONAL) + r"|needs_mpi|cuda_compile)\b")
    files = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if p.name != Path(__file__).name and word.search(p.read_text(encoding="utf-8"))
    )
    return files


@pytest.mark.slow
def test_tests_that_need_an_optional_library_skip_without_it(tmp_path):
    """Runs (not only collects) every test file that names an optional library, with the
    libraries hidden: a test that imports one before its skip guard fails here."""
    files = files_that_need_an_optional_library()
    assert "tests/gpt/test_hf_llama.py" in files and len(files) > 10
    res = run_hidden(tmp_path, "-q", "-rs", "-x", *files)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    assert "skipped" in out, out[-3000:]
