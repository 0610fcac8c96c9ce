"""tests/mutants.py stays runnable: every written mutant's snippet is in its file exactly
once (so a change to the library that moves the code a mutant was written for shows up here,
in CI, not at the next mutation run), and every test stage names paths that exist."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # the benchmarks folder is no installed package
    sys.path.insert(0, str(ROOT))

from benchmarks.mutation import load_mutants, locate  # noqa: E402


def test_every_written_mutant_applies_to_the_current_code():
    mutants = load_mutants(ROOT / "tests" / "mutants.py")
    assert len(mutants) > 400
    stale = [f"{m.id}: {m.detail}" for m in mutants if locate(m, ROOT) is None]
    assert not stale, "\n".join(stale)


def test_every_stage_names_existing_tests():
    missing = set()
    for m in load_mutants(ROOT / "tests" / "mutants.py"):
        for stage in m.stages:
            for arg in stage.split():
                path = arg.split("::")[0]
                setting = "=" in arg  # an environment setting, like TENSORLAB_TEST_DEVICE=...
                if not (arg.startswith("-") or setting or (ROOT / path).exists()):
                    missing.add(f"{m.file}: {arg}")
    assert not missing, sorted(missing)
