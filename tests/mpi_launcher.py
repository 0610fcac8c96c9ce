"""The MPI launcher the tests run programs under (``mpiexec`` on the PATH: MPICH's, from the
``mpi`` extra), whether it is there, and which part of a job's stderr the program wrote."""

from __future__ import annotations

import re
import shutil

import pytest

MPIEXEC = shutil.which("mpiexec")


def _have_mpi() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return MPIEXEC is not None


needs_mpi = pytest.mark.skipif(
    not _have_mpi(), reason="needs mpi4py and mpiexec: pip install -e '.[mpi]'"
)

# Open MPI's mpiexec (the GPU machine's) reports a rank that exits non-zero in blocks between
# two rules of dashes ("Primary job terminated normally, but 1 process returned a non-zero
# exit code..."); MPICH's adds nothing. The programs here never print such a rule.
_LAUNCHER_REPORT = re.compile(r"^-{20,}\n.*?^-{20,}\n", re.MULTILINE | re.DOTALL)


def program_stderr(stderr: str) -> str:
    """``stderr`` of a job without the launcher's own reports: what the ranks wrote."""
    return _LAUNCHER_REPORT.sub("", stderr)
