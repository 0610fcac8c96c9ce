"""Mutation testing: does the test suite notice a plausible one-line bug?

For each mutation in ``tests/mutants.py`` (a wrong sign, an off-by-one, a wrong axis, a
dropped term...), this script changes one snippet of one source file in a *copy* of the
repository, runs the tests meant to catch it, and records whether they failed (the mutant is
"killed") or all passed (it "survived": a bug the tests cannot see, or an equivalent mutant
that changes nothing observable). The kill rate is killed / (killed + survived). A survivor
someone has looked at is listed in ``REVIEWED`` in ``mutants.py`` with the verdict
(equivalent, or a gap accepted for now); it still counts as survived, and a new survivor is
printed as NOT REVIEWED.

    python -m benchmarks.mutation                 # every mutant, against HEAD
    python -m benchmarks.mutation -k optim -k bpe # only mutants whose id contains a pattern
    python -m benchmarks.mutation --list          # check the snippets, run nothing
    python -m benchmarks.mutation --json out.json # also write the results
    python -m benchmarks.mutation --worktree -k x # the checkout as it is, uncommitted edits too

How it stays honest:

- The copy is ``git archive`` of one commit (``--rev``, default HEAD), so the files being
  edited in the checkout are never touched, and the commit is printed with the result.
  ``--worktree`` copies the checkout's files as they are instead (tracked and untracked, not
  ignored): for trying a new test against a mutant before committing it; the result then
  names the commit with "+ working tree".
- Python must import the copy's packages: this is checked before anything runs, and bytecode
  caching is off (a mutant of the same length could otherwise reuse a stale ``.pyc``).
- Each test stage is run once on the unmutated copy first. A test that fails there would
  "kill" every mutant: it is listed, and deselected from the mutant runs.
- A snippet that is not found exactly once in its file is an error for that mutant, reported.
- A mutant whose tests run past ``--timeout`` counts as killed (the tests noticed *something*)
  and is listed as a timeout.

Each mutant runs its stages in order with ``pytest -x -q`` (``HYPOTHESIS_PROFILE=ci``): the
focused test file first, then the package's test folder; the first failing stage kills it.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Mutant:
    id: str  # "file stem.name", e.g. "elementwise.sub-db-sign"
    file: str
    find: str
    replace: str
    why: str
    stages: list[str]
    line: int = 0
    at_line: int = 0  # a sweep's mutant: ``find`` is this whole line (not once in the file)
    status: str = "pending"  # killed, survived, timeout, error
    seconds: float = 0.0
    detail: str = ""  # the failing test, or what is wrong with the mutant
    verdict: str = ""  # for a survivor reviewed before: why it is equivalent or accepted
    stage_results: list[str] = field(default_factory=list)


def load_mutants(path: Path) -> list[Mutant]:
    data = runpy.run_path(str(path))
    out = []
    verdicts = data.get("REVIEWED", {})
    for file, entries in data["MUTANTS"].items():
        stages = data["TESTS"][file]
        for name, find, replace, why in entries:
            m = Mutant(f"{Path(file).stem}.{name}", file, find, replace, why, stages)
            m.verdict = verdicts.get(m.id, "")
            out.append(m)
    ids = [m.id for m in out]
    unknown = set(verdicts) - set(ids)
    if unknown:
        raise SystemExit(f"{path}: REVIEWED names mutants that do not exist: {sorted(unknown)}")
    if len(set(ids)) != len(ids):
        raise SystemExit(
            f"{path}: duplicate mutant ids {sorted({i for i in ids if ids.count(i) > 1})}"
        )
    return out


def snapshot(rev: str, work: Path, shared: Path | None) -> tuple[Path, str]:
    """``rev`` of this repository unpacked into ``work/tree`` (and ``work/shared`` linked to
    ``shared``, which tests read as ``../shared``); returns the tree and the full commit."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    tree = work / "tree"
    tree.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(REPO), "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(tree)], stdin=archive.stdout, check=True)
    if archive.wait() != 0:
        raise SystemExit(f"git archive {commit} failed")
    _link_shared(work, shared)
    return tree, commit


def _link_shared(work: Path, shared: Path | None) -> None:
    """``work/shared`` -> ``shared``: the tests read it as ``../shared`` from the copy."""
    if shared is not None and shared.is_dir():
        (work / "shared").symlink_to(shared.resolve())


def snapshot_worktree(work: Path, shared: Path | None) -> tuple[Path, str]:
    """The checkout's files as they are now (tracked and untracked, not ignored) copied into
    ``work/tree``, and ``shared`` linked as in ``snapshot``; returns the tree and a label."""
    files = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split("\0")
    tree = work / "tree"
    for name in filter(None, files):
        source = REPO / name
        if source.is_file():  # a tracked file deleted in the checkout is left out
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tree / name)
    _link_shared(work, shared)
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()
    return tree, f"{head} + working tree"


def environment(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    env["HYPOTHESIS_PROFILE"] = "ci"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def check_imports(tree: Path, env: dict) -> None:
    """Stop unless ``tensorlab``, ``nn`` and ``gpt`` are imported from the copy."""
    code = "import tensorlab, nn, gpt; print(tensorlab.__file__, nn.__file__, gpt.__file__)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True
    )
    files = out.stdout.split()
    if out.returncode or len(files) != 3 or not all(f.startswith(str(tree)) for f in files):
        raise SystemExit(f"the copy's packages are not the ones imported: {out.stdout}{out.stderr}")
    print(f"imports from the copy: {' '.join(files)}")


def run_stage(args: list[str], tree: Path, env: dict, timeout: float) -> tuple[str, str]:
    """``pytest -q`` with ``args``: ("passed" | "failed" | "timeout" | "error", its output).
    Leading ``NAME=value`` words are the environment's (``TENSORLAB_TEST_DEVICE=fake-cuda``:
    a stage on CuPy emulated by NumPy, which reaches the GPU-only branches)."""
    while args and "=" in args[0] and args[0].split("=", 1)[0].isidentifier():
        name, value = args[0].split("=", 1)
        env, args = {**env, name: value}, args[1:]
    cmd = [sys.executable, "-m", "pytest", "-q", "--no-header", *args]
    proc = subprocess.Popen(
        cmd,
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, so a timeout can end all of it
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "timeout", f"more than {timeout:.0f} s"
    # pytest: 0 all passed, 1 some failed, 2 interrupted (a collection error: the mutant broke
    # an import), 3 internal error; 4 usage error and 5 no tests are the script's problem.
    status = {0: "passed", 1: "failed", 2: "failed", 3: "failed"}.get(proc.returncode, "error")
    return status, output if status != "error" else f"pytest exit {proc.returncode}: {output}"


def failures(output: str) -> list[str]:
    """The node ids in pytest's ``FAILED id - message`` / ``ERROR id - message`` lines."""
    ids = []
    for line in output.splitlines():
        for tag in ("FAILED ", "ERROR "):
            if line.startswith(tag):
                rest = line[len(tag) :]
                cut = rest.find("] - ") + 1 if "[" in rest else 0
                ids.append(rest[:cut] if cut else rest.split(" - ")[0])
    return ids


def summary(output: str) -> str:
    """The first failing test's line, else pytest's last line."""
    lines = [s for s in output.strip().splitlines() if s.strip()]
    failed = [s for s in lines if s.startswith(("FAILED", "ERROR"))]
    return (failed[0] if failed else lines[-1] if lines else "")[:200]


def locate(m: Mutant, tree: Path) -> str | None:
    """Check the snippet against the copy; returns the source, or None (m.status = error)."""
    path = tree / m.file
    if not path.is_file():
        m.status, m.detail = "error", f"{m.file} does not exist at this commit"
        return None
    source = path.read_text(encoding="utf-8")
    if m.at_line:
        lines = source.split("\n")
        if not (0 < m.at_line <= len(lines) and lines[m.at_line - 1] == m.find):
            m.status, m.detail = "error", f"line {m.at_line} of {m.file} is not the sweep's"
            return None
        m.line = m.at_line
        return source
    n = source.count(m.find)
    if n != 1:
        m.status, m.detail = "error", f"snippet found {n} times in {m.file} (must be once)"
        return None
    if m.find == m.replace:
        m.status, m.detail = "error", "the replacement equals the snippet"
        return None
    m.line = source.count("\n", 0, source.index(m.find)) + 1
    return source


def mutated(m: Mutant, source: str) -> str:
    """``source`` with the mutation applied: the snippet (once in the file), or for a sweep's
    mutant its line replaced."""
    if not m.at_line:
        return source.replace(m.find, m.replace)
    lines = source.split("\n")
    lines[m.at_line - 1] = m.replace
    return "\n".join(lines)


def run_mutant(m: Mutant, tree: Path, env: dict, timeout: float, skip: dict) -> None:
    source = locate(m, tree)
    if source is None:
        return
    path = tree / m.file
    start = time.perf_counter()
    path.write_text(mutated(m, source), encoding="utf-8")
    try:
        m.status = "survived"
        for stage in m.stages:
            args = [*shlex.split(stage), "-x", *(f"--deselect={t}" for t in skip.get(stage, []))]
            result, output = run_stage(args, tree, env, timeout)
            m.stage_results.append(f"{stage}: {result}")
            if result == "error":
                m.status, m.detail = "error", summary(output)
                break
            if result in ("failed", "timeout"):
                m.status = "killed" if result == "failed" else "timeout"
                m.detail = summary(output)
                break
    finally:
        path.write_text(source, encoding="utf-8")
        m.seconds = time.perf_counter() - start


def baseline(stages: list[str], tree: Path, env: dict, timeout: float) -> dict[str, list[str]]:
    """Run every stage on the unmutated copy. A test that fails there would "kill" every
    mutant: it is reported and deselected from the mutant runs (returned, by stage)."""
    skip = {}
    for stage in stages:
        t0 = time.perf_counter()
        result, output = run_stage(shlex.split(stage), tree, env, timeout)
        print(f"baseline {result:8} {time.perf_counter() - t0:6.1f} s  {stage}", flush=True)
        if result in ("timeout", "error") or (result == "failed" and not failures(output)):
            raise SystemExit(
                f"the unmutated tests of stage {stage!r} cannot run: {summary(output)}"
            )
        skip[stage] = failures(output)
        for t in skip[stage]:
            print(f"  fails without any mutation, deselected: {t}", flush=True)
    return skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", action="append", default=[], help="only ids containing this")
    parser.add_argument("--rev", default="HEAD", help="the commit to mutate (default HEAD)")
    parser.add_argument(
        "--worktree", action="store_true", help="mutate the checkout's files as they are"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per test stage")
    parser.add_argument("--list", action="store_true", help="check the snippets; run no test")
    parser.add_argument("--json", type=Path, help="write every mutant's result here")
    mutants = Path(__file__).parents[1] / "tests" / "mutants.py"
    parser.add_argument("--mutants", type=Path, default=mutants)
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    parser.add_argument(
        "--workdir", type=Path, help="where to unpack the copy (default: a temp dir)"
    )
    parser.add_argument(
        "--sweep",
        metavar="FILE",
        help="instead of the written mutants, flip every operator and number of FILE in turn "
        "(benchmarks/sweep_mutants.py), against its stages in TESTS",
    )
    parser.add_argument("--lines", metavar="A-B", help="with --sweep: only lines A to B")
    args = parser.parse_args(argv)
    if args.lines and not args.sweep:
        parser.error("--lines goes with --sweep")
    if args.worktree and args.rev != "HEAD":
        parser.error("--worktree copies the checkout as it is; it takes no --rev")

    mutants = [
        m for m in load_mutants(args.mutants) if not args.k or any(k in m.id for k in args.k)
    ]
    work = Path(args.workdir or tempfile.mkdtemp(prefix="tensorlab-mutation-"))
    try:
        if args.worktree:
            tree, commit = snapshot_worktree(work, args.shared)
        else:
            tree, commit = snapshot(args.rev, work, args.shared)
        if args.sweep:
            mutants = swept(args, tree)
        return run(args, mutants, tree, commit)
    finally:
        if args.workdir is None:
            shutil.rmtree(work)


def swept(args, tree: Path) -> list[Mutant]:
    """The sweep's mutants of ``args.sweep`` in the copy (``-k`` filters their ids too)."""
    from benchmarks.sweep_mutants import sweep

    stages = runpy.run_path(str(args.mutants))["TESTS"].get(args.sweep)
    if stages is None:
        raise SystemExit(f"--sweep {args.sweep}: no test stages for it in TESTS ({args.mutants})")
    path = tree / args.sweep
    if not path.is_file():
        raise SystemExit(f"--sweep {args.sweep}: no such file in the copy")
    lines = None
    if args.lines:
        a, _, b = args.lines.partition("-")
        if not (a.isdigit() and b.isdigit()):
            raise SystemExit(f"--lines {args.lines}: give two line numbers, as 120-180")
        lines = range(int(a), int(b) + 1)
    found = sweep(args.sweep, path.read_text(encoding="utf-8"), stages, lines)
    return [m for m in found if not args.k or any(k in m.id for k in args.k)]


def run(args, mutants: list[Mutant], tree: Path, commit: str) -> int:
    print(f"commit {commit}; copy in {tree}; {len(mutants)} mutants", flush=True)
    t_start = time.perf_counter()
    if args.list:
        for m in mutants:
            ok = locate(m, tree) is not None
            what = f"{m.why}: {m.replace.strip()}" if m.at_line else ""
            print(f"{'ok   ' if ok else 'ERROR'} {m.id:45} {m.file}:{m.line} {what}{m.detail}")
        return int(any(m.status == "error" for m in mutants))

    env = environment(tree)
    check_imports(tree, env)
    skip = baseline(sorted({s for m in mutants for s in m.stages}), tree, env, args.timeout)
    for i, m in enumerate(mutants, 1):
        run_mutant(m, tree, env, args.timeout, skip)
        where = f"{m.file}:{m.line}"
        print(f"[{i:3}/{len(mutants)}] {m.status:8} {m.seconds:6.1f} s  {m.id:42} {where:34} "
              f"{m.why}\n{'':18}{m.detail[:110]}", flush=True)  # fmt: skip
    total = time.perf_counter() - t_start

    counts = {
        s: sum(m.status == s for m in mutants) for s in ("killed", "timeout", "survived", "error")
    }
    judged = counts["killed"] + counts["timeout"] + counts["survived"]
    rate = (counts["killed"] + counts["timeout"]) / judged if judged else float("nan")
    print(f"\ncommit {commit}")
    print(
        f"{judged} mutants judged: {counts['killed']} killed, {counts['timeout']} timed out, "
        f"{counts['survived']} survived; {counts['error']} errors. Kill rate {rate:.1%}. "
        f"Run time {total / 60:.1f} min."
    )
    for stage, tests in skip.items():
        for t in tests:
            print(f"  deselected (fails without any mutation), in {stage!r}: {t}")
    for status in ("survived", "error"):
        for m in (m for m in mutants if m.status == status):
            print(f"  {status}: {m.id} ({m.file}:{m.line}) {m.why}\n"
                  f"      {m.find.strip()!r} -> {m.replace.strip()!r}  {m.detail}")  # fmt: skip
            if status == "survived":
                print(f"      reviewed: {m.verdict}" if m.verdict else "      NOT REVIEWED")
    if args.json:
        report = {"commit": commit, "seconds": total, "kill_rate": rate, **counts}
        report["deselected"] = skip
        report["mutants"] = [asdict(m) for m in mutants]
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
