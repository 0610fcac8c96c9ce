"""Data parallelism over MPI processes: N = 2 takes the steps N = 1 takes, rank 0 writes a
checkpoint that resumes exactly, and a failure on one rank ends the job with one line.

The multi-process tests start ``mpiexec -n 2`` (``pip install -e '.[mpi]'``) and skip with a
reason where it or mpi4py is missing."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nn
import tensorlab as tl
from gpt.config import GPTConfig
from gpt.train import TrainConfig, Trainer
from tests.mpi_launcher import MPIEXEC, needs_mpi, program_stderr

TEXT = (
    "the quick brown fox jumps over the lazy dog. " * 40
    + "pack my box with five dozen liquor jugs. " * 40
)

SETUP = f"""
import sys
import numpy as np
from gpt.config import GPTConfig
from gpt.train import TrainConfig, Trainer
TEXT = {TEXT!r}
def trainer(out, dropout=0.0, **kw):
    model = GPTConfig(vocab_size=1, block_size=16, n_layer=1, n_head=2, d_model=16,
                      dropout=dropout)
    settings = dict(batch_size=8, progress=False, warmup_iters=2, eval_iters=2)
    return Trainer(model, TrainConfig(out_dir=out, **{{**settings, **kw}}), text=TEXT)
"""


def mpirun(code: str, n: int = 2, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "HYPOTHESIS_PROFILE": "ci"}
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE"):
        env.pop(var, None)
    script = SETUP + textwrap.dedent(code)
    return subprocess.run(
        [MPIEXEC, "-n", str(n), sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def solo_trainer(out, dropout=0.0, **kw) -> Trainer:
    settings = dict(batch_size=8, progress=False, warmup_iters=2, eval_iters=2)
    model = GPTConfig(vocab_size=1, block_size=16, n_layer=1, n_head=2, d_model=16, dropout=dropout)
    return Trainer(model, TrainConfig(out_dir=str(out), **{**settings, **kw}), text=TEXT)


def test_one_process_is_solo(monkeypatch):
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS", "PMIX_SIZE"):
        monkeypatch.delenv(var, raising=False)
    dist = nn.distributed.world()
    assert isinstance(dist, nn.distributed.Solo) and (dist.rank, dist.size) == (0, 1)
    assert dist.average_gradients([], [1.5, 0.0]) == [1.5, 0.0]


@needs_mpi
def test_two_processes_take_the_steps_of_one(tmp_path, monkeypatch):
    """The global batch is the same for N = 1 and 2, so the parameters after 5 AdamW steps
    agree up to float32 rounding of the gradient sums (observed 2.4e-7 with lr ≤ 1e-3; the
    bound gives 8× headroom), and the evaluations, which run the same batches split over
    the ranks, to float32 rounding of the losses."""
    run = mpirun(
        f"""
        t = trainer({str(tmp_path / "two")!r}, max_iters=5, eval_interval=5)
        t.run()
        if t.dist.rank == 0:
            np.savez({str(tmp_path / "two.npz")!r}, **t.model.state_dict())
            print("losses", *[h["val_loss"] for h in t.history])
            print("steps", *[r["loss"] for r in t.run_folder.read_log() if "loss" in r])
        """
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # the ranks drew their initial weights from the CPU's generator; so does the solo run
    monkeypatch.setattr(tl.backend, "_default_device", ["cpu"])
    one = solo_trainer(tmp_path / "one", max_iters=5, eval_interval=5)
    one.run()
    two = np.load(tmp_path / "two.npz")
    for k, v in one.model.state_dict().items():
        np.testing.assert_allclose(two[k], v, rtol=0, atol=2e-6, err_msg=k)
    out = run.stdout.split("steps")
    losses = [float(v) for v in out[0].split("losses")[1].split()]
    np.testing.assert_allclose(losses, [h["val_loss"] for h in one.history], rtol=1e-6)
    # the logged loss of each step is the whole batch's mean, not one rank's share
    steps = [float(v) for v in out[1].split()]
    from gpt.run_folder import RunFolder

    logged = [r["loss"] for r in RunFolder(tmp_path / "one").read_log() if "loss" in r]
    np.testing.assert_allclose(steps, logged, rtol=1e-6)


@needs_mpi
def test_rank_zero_checkpoint_resumes_exactly(tmp_path):
    """With dropout, so each rank's own random stream must come back too."""
    straight = mpirun(
        f"""
        t = trainer({str(tmp_path / "a")!r}, max_iters=8, eval_interval=4, dropout=0.1)
        t.run()
        if t.dist.rank == 0:
            np.savez({str(tmp_path / "a.npz")!r}, **t.model.state_dict())
        """
    )
    assert straight.returncode == 0, straight.stderr[-3000:]
    first = mpirun(
        f"""
        t = trainer({str(tmp_path / "b")!r}, max_iters=8, eval_interval=4, dropout=0.1)
        t.run(max_iters=4)
        """
    )
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = mpirun(
        f"""
        t = trainer({str(tmp_path / "b")!r}, max_iters=8, eval_interval=4, dropout=0.1,
                    resume=True)
        t.run()
        if t.dist.rank == 0:
            np.savez({str(tmp_path / "b.npz")!r}, **t.model.state_dict())
        """
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
    # only rank 0 wrote: one log, with each record once
    from gpt.run_folder import RunFolder

    log = RunFolder(tmp_path / "b").read_log()
    steps = [r["iter"] for r in log if "loss" in r]
    assert steps == list(range(1, 9))
    # a different number of processes is refused by name
    with pytest.raises(ValueError, match="run of 2 processes; resume it with as many"):
        solo_trainer(tmp_path / "b", max_iters=9, eval_interval=4, resume=True, dropout=0.1)


@needs_mpi
def test_a_failing_rank_ends_the_job_with_one_line(tmp_path):
    run = mpirun(
        f"""
        t = trainer({str(tmp_path / "c")!r}, max_iters=50, eval_interval=100)
        if t.dist.rank == 1:
            step = t.step
            def failing_step():
                if t.iter == 3:
                    raise MemoryError("out of memory on rank 1")
                return step()
            t.step = failing_step
        from nn.distributed import fail  # what the CLI does with an error on one rank
        try:
            t.run()
        except MemoryError as e:
            fail(t.dist, f"{{e}}", 1)
        """,
        timeout=60,
    )
    assert run.returncode != 0
    lines = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert lines == ["error: rank 1/2: out of memory on rank 1"], (
        f"exit {run.returncode}\nstderr: {run.stderr[-2000:]}\nstdout: {run.stdout[-2000:]}"
    )


@needs_mpi
def test_a_bad_flag_under_mpiexec_is_one_line_and_no_abort(tmp_path):
    """Errors every rank meets in setup are agreed on (Distributed.together): rank 0 prints
    one line and the job ends normally, not through MPI_Abort."""
    path = tmp_path / "t.txt"
    path.write_text(TEXT)
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_SIZE",)}
    run = subprocess.run(
        [
            MPIEXEC,
            "-n",
            "2",
            sys.executable,
            "-m",
            "gpt",
            "train",
            "--text",
            str(path),
            "--out-dir",
            str(tmp_path / "r"),
            "--batch-size",
            "5",
            "--block-size",
            "16",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert run.returncode == 2
    assert (
        program_stderr(run.stderr).strip()
        == "error: --batch-size 5: must be divisible by the 2 processes"
    )


@needs_mpi
def test_average_gradients_in_many_buckets(tmp_path):
    """Buckets of at most 8 bytes (one per parameter and more), a gradient missing on one
    rank (zeros), float64 parameters, and the extras summed."""
    run = mpirun(
        """
        import tensorlab as tl
        from nn.distributed import Distributed
        from mpi4py import MPI
        d = Distributed(MPI.COMM_WORLD, bucket_bytes=8)
        r = d.rank
        ps = [tl.tensor(np.zeros(s), requires_grad=True) for s in [(2, 3), (1,), (4,)]]
        ps[0].grad = tl.tensor(np.full((2, 3), r + 1.0))
        ps[1].grad = tl.tensor(np.array([10.0 * (r + 1)]))
        if r == 1:
            ps[2].grad = tl.tensor(np.arange(4.0))
        extras = d.average_gradients(ps, [r + 0.5, r])
        if r == 0:
            print(ps[0].grad.numpy().ravel().tolist(), ps[1].grad.numpy().tolist(),
                  ps[2].grad.numpy().tolist(), extras, len(d._buckets))
        """
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (
        run.stdout.strip()
        == "[1.5, 1.5, 1.5, 1.5, 1.5, 1.5] [15.0] [0.0, 0.5, 1.0, 1.5] [2.0, 1.0] 3"
    )
