"""Milliseconds per training iteration of a GPT here and in PyTorch eager (CPU), same run.

    python benchmarks/bench_train.py               # the nanoGPT CPU config (issue #5 target)
    python benchmarks/bench_train.py --large       # also 6 layers, 6 heads, 384 wide, block 256
    python benchmarks/bench_train.py --threads 1   # both frameworks on one core
    python benchmarks/bench_train.py --device cuda # GPU: nanoGPT, 6x384 and GPT-2 small, in
                                                   # float32 and bfloat16, with MFU

One iteration = a random batch from tiny Shakespeare (characters), forward, backward,
gradient clipping at 1.0, and an AdamW step.

Timing: both models live in one process and take turns, a block of 5 iterations each, for
``--blocks`` rounds; the script prints each framework's median iteration time and the median
over rounds of the per-round ratio, then each framework's median time per phase of the
step (forward, backward, gradient clipping, optimizer), which says where a gap comes from.
Taking turns matters on a shared virtual machine, whose
speed drifts by ±20% over a minute: two runs measured a minute apart can differ more than the
frameworks do, while the ratio within a round is stable. ``--threads N`` sets NumPy's BLAS
threads (``OPENBLAS_NUM_THREADS``, read when NumPy loads, hence the subprocess) and
``torch.set_num_threads``; the default is the machine's CPU count, each library's default.

Peak memory is the growth of the process's maximum resident set during a loop of iterations,
measured in a fresh subprocess per framework, and once more for tensorlab with
``GPTConfig(checkpoint_activations=True)`` (each block recomputed in backward).

On a GPU (``--device cuda``) both run in this process on the same card, taking turns the same
way, each step ending with a device synchronisation so that its time is the GPU's. For each of
the nanoGPT config, the 6-layer 384-wide block-256 config and GPT-2 small (124M, block 1024)
(batches of 12, 64 and 8 sequences) it prints ms per step, tokens per second and the model
FLOPs utilisation: the step's FLOPs (``gpt.model.flops_per_token`` times tokens) per second
over the card's bf16 matrix-product rate, measured first in the same run (PyTorch, 8192² bf16
products). ``--dtype`` chooses float32, bfloat16 (``tl.autocast`` against ``torch.autocast``)
or both (the default on CUDA).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DATA = os.path.join(ROOT, "data", "tinyshakespeare.txt")

CONFIGS = {
    "tiny": dict(n_layer=4, n_head=4, d_model=128, block_size=64, batch_size=12),
    "large": dict(n_layer=6, n_head=6, d_model=384, block_size=256, batch_size=8),
    "gpt2": dict(n_layer=12, n_head=12, d_model=768, block_size=1024, batch_size=8),
}
# On a GPU the 6x384 config takes nanoGPT's own batch for it (config/train_shakespeare_char.py:
# 64 sequences of 256), which the card needs to be busy; the CPU's batch of 8 would time
# mostly the Python between kernels.
GPU_BATCH = {"tiny": 12, "large": 64, "gpt2": 8}
BLOCK = 5  # iterations per turn
PAUSE = 0.3  # seconds between turns: idle BLAS/OpenMP threads spin for up to ~0.1 s after a
# job, and would take the cores from the other library's turn


def load_ids():
    text = open(DATA, encoding="utf-8").read() if os.path.exists(DATA) else None
    if text is None:
        from gpt.data import default_text

        text = default_text()
    chars = sorted(set(text))
    lut = {c: i for i, c in enumerate(chars)}
    return np.array([lut[c] for c in text], dtype=np.int64), len(chars)


def make_ours(cfg: dict, checkpoint: bool = False, device: str = "cpu", dtype: str = "float32"):
    """A function that runs one training iteration of our GPT (one process, NumPy's BLAS
    threads as the environment sets them; or on the GPU) and returns the seconds of its
    phases (:data:`PHASES`, each ended by a device synchronisation on the GPU)."""
    import nn
    import tensorlab as tl
    from gpt.config import GPTConfig
    from gpt.data import get_batch
    from gpt.model import GPT

    ids, vocab = load_ids()
    tl.manual_seed(0)
    bs = cfg["batch_size"]
    shape = {k: v for k, v in cfg.items() if k != "batch_size"}
    mcfg = GPTConfig(vocab_size=vocab, checkpoint_activations=checkpoint, **shape)
    model = GPT(mcfg).to(device)
    groups = nn.optim.param_groups_for_decay(model, 0.1)
    opt = nn.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.99))
    rng = np.random.default_rng(0)
    sync = _sync_ours(device)
    precision = tl.autocast(None if dtype == "float32" else dtype)

    def step() -> list[float]:
        x, y = get_batch(ids, mcfg.block_size, bs, rng)
        lap = _laps(sync)
        opt.zero_grad()
        with precision:
            _, loss = model(tl.tensor(x, device=device), tl.tensor(y, device=device))
        lap()
        loss.backward()
        lap()
        nn.optim.clip_grad_norm_(model.parameters(), 1.0)
        lap()
        opt.step()
        return lap()

    return step


PHASES = ("forward", "backward", "clip", "optimizer")


def _laps(sync):
    """A stopwatch for one step's phases: each call ends a phase (after ``sync``) and returns
    the seconds of every phase so far."""
    times, last = [], time.perf_counter()

    def lap() -> list[float]:
        nonlocal last
        sync()
        now = time.perf_counter()
        times.append(now - last)
        last = now
        return times

    return lap


def _sync_ours(device: str):
    if device == "cpu":
        return lambda: None
    import cupy

    return cupy.cuda.Device().synchronize


def make_torch(cfg: dict, device: str = "cpu", dtype: str = "float32"):
    """The same for the PyTorch reference model (benchmarks/torch_gpt.py)."""
    import contextlib

    import torch

    from benchmarks.torch_gpt import TorchGPT, make_optimizer
    from gpt.data import get_batch

    torch.manual_seed(0)
    ids, vocab = load_ids()
    bs = cfg["batch_size"]
    model = TorchGPT(vocab, cfg["block_size"], cfg["n_layer"], cfg["n_head"], cfg["d_model"])
    model = model.to(device)
    opt = make_optimizer(model, 1e-3, 0.1)
    rng = np.random.default_rng(0)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    half = dtype != "float32"
    kind = "cuda" if device != "cpu" else "cpu"

    def step() -> list[float]:
        x, y = get_batch(ids, cfg["block_size"], bs, rng)
        lap = _laps(sync)
        x, y = torch.from_numpy(x).to(device), torch.from_numpy(y).to(device)
        precision = (
            torch.autocast(kind, dtype=getattr(torch, dtype)) if half else contextlib.nullcontext()
        )
        with precision:
            _, loss = model(x, y)
        lap()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        lap()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        lap()
        opt.step()
        return lap()

    return step


def child_times(name: str, blocks: int, threads: int) -> None:
    """Both frameworks in this process, taking turns; prints JSON (medians, ratio)."""
    cfg = CONFIGS[name]
    ours = make_ours(cfg)
    try:
        import torch

        torch.set_num_threads(threads)
        theirs = make_torch(cfg)
    except ImportError:
        theirs = None
    for _ in range(3):  # warm-up: caches, allocator, BLAS threads
        ours()
        if theirs:
            theirs()
    t_ours, t_ref, ratios = [], [], []
    for _ in range(blocks):
        a = [ours() for _ in range(BLOCK)]
        t_ours += a
        time.sleep(PAUSE)
        if theirs:
            b = [theirs() for _ in range(BLOCK)]
            time.sleep(PAUSE)
            t_ref += b
            ratios.append(statistics.median(map(sum, a)) / statistics.median(map(sum, b)))
    out = {"ours_ms": 1e3 * statistics.median(map(sum, t_ours)), "ours_phases": _phases(t_ours)}
    if theirs:
        out.update(ref_ms=1e3 * statistics.median(map(sum, t_ref)), ratio=statistics.median(ratios))
        out.update(ratios=[round(r, 3) for r in ratios], ref_phases=_phases(t_ref))
    print(json.dumps(out))


def _phases(steps: list[list[float]]) -> list[float]:
    """The median ms of each phase over ``steps`` (lists of seconds per phase)."""
    return [1e3 * statistics.median(col) for col in zip(*steps)]


def child_memory(framework: str, name: str, iters: int, threads: int) -> None:
    """One framework alone in this (fresh) process; prints JSON with the peak RSS growth."""
    if framework == "torch":
        import torch  # the libraries' own import is not part of the training run's memory

        torch.zeros(1)
    else:
        import nn  # noqa: F401
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if framework == "torch":
        step = make_torch(CONFIGS[name])
    else:
        step = make_ours(CONFIGS[name], checkpoint=framework == "ours-checkpointed")
    for _ in range(iters):
        step()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"peak_mb": (peak - base) / 1024}))


def bf16_gemm_rate(n: int = 8192, reps: int = 20) -> float:
    """The card's measured bf16 matrix-product rate in FLOP/s (PyTorch, n × n products)."""
    import torch

    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    torch.cuda.synchronize()
    return 2 * n**3 * reps / (time.perf_counter() - t0)


def gpu_main(blocks: int, dtypes: list[str]) -> None:
    """Both frameworks on the GPU, in this process, taking turns (see the module docstring)."""
    import torch

    from gpt.config import GPTConfig
    from gpt.model import flops_per_token

    peak = bf16_gemm_rate()
    print(f"GPU: {torch.cuda.get_device_name()}; bf16 matrix products: {peak / 1e12:.0f} TFLOP/s")
    print(f"medians over {blocks} rounds of {BLOCK} steps per framework, taken in turns")
    head = f"{'config':<7} {'dtype':<9} {'tensorlab ms':>12} {'pytorch ms':>11} {'ratio':>6}"
    print(head + f" {'tokens/s (ours, torch)':>24} {'MFU (ours, torch)':>19}")
    _, vocab = load_ids()
    for name in ("tiny", "large", "gpt2"):
        cfg = dict(CONFIGS[name], batch_size=GPU_BATCH[name])
        shape = {k: v for k, v in cfg.items() if k != "batch_size"}
        tokens = cfg["batch_size"] * cfg["block_size"]
        flops = flops_per_token(GPTConfig(vocab_size=vocab, **shape)) * tokens
        for dtype in dtypes:
            try:
                ours = make_ours(cfg, device="cuda", dtype=dtype)
                theirs = make_torch(cfg, device="cuda", dtype=dtype)
                p_a, p_b, ratios = _take_turns(ours, theirs, blocks)
            except Exception as e:  # one failing configuration is reported, the rest still run
                print(f"{name:<7} {dtype:<9} failed: {type(e).__name__}: {e}")
                continue
            t_a, t_b = statistics.median(map(sum, p_a)), statistics.median(map(sum, p_b))
            print(
                f"{name:<7} {dtype:<9} {1e3 * t_a:12.1f} {1e3 * t_b:11.1f} "
                f"{statistics.median(ratios):6.2f} {tokens / t_a:11.0f} {tokens / t_b:11.0f}  "
                f"{flops / t_a / peak:8.1%} {flops / t_b / peak:8.1%}"
            )
            for who, steps in (("tensorlab", p_a), ("pytorch", p_b)):  # where the time goes
                ms = ", ".join(f"{p} {v:.1f}" for p, v in zip(PHASES, _phases(steps)))
                print(f"{'':17} {who} phases (medians, ms): {ms}")
            del ours, theirs
            torch.cuda.empty_cache()


def _take_turns(ours, theirs, blocks: int):
    """Each step's seconds per phase, for both, and the per-round ratios of step times."""
    for _ in range(3):  # warm-up: kernels compiled and cached, memory pools filled
        ours()
        theirs()
    p_ours, p_ref, ratios = [], [], []
    for _ in range(blocks):
        a = [list(ours()) for _ in range(BLOCK)]
        b = [list(theirs()) for _ in range(BLOCK)]
        p_ours += a
        p_ref += b
        ratios.append(statistics.median(map(sum, a)) / statistics.median(map(sum, b)))
    return p_ours, p_ref, ratios


def run_child(args: list[str], threads: int) -> dict | None:
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    cmd = [sys.executable, os.path.abspath(__file__), *args]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if res.returncode != 0:
        if "No module named 'torch'" in res.stderr:
            return None
        raise RuntimeError(res.stderr)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--large", action="store_true")
    ap.add_argument("--blocks", type=int, default=12, help="rounds of turns (5 iterations each)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument(
        "--dtype", default=None, choices=["float32", "bfloat16", "float16"], help="GPU only"
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--config", default="tiny", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.device == "cuda":
        gpu_main(args.blocks, [args.dtype] if args.dtype else ["float32", "bfloat16"])
        return
    if args.child == "times":
        child_times(args.config, args.blocks, args.threads)
        return
    if args.child:
        child_memory(args.child, args.config, iters=10, threads=args.threads)
        return
    names = ["tiny", "large"] if args.large else ["tiny"]
    print(
        f"ms per training iteration, {args.threads} thread(s): medians over {args.blocks} "
        f"rounds of {BLOCK} iterations per framework, taken in turns; ratio = median of the "
        "per-round ratios. peak = growth of max RSS over 10 iterations (own process)."
    )
    print(
        f"{'config':<8} {'tensorlab ms':>13} {'pytorch ms':>11} {'ratio':>7} "
        f"{'tensorlab MB':>13} {'pytorch MB':>11}"
    )
    for name in names:
        blocks = args.blocks if name == "tiny" else max(3, args.blocks // 4)
        t = run_child(
            [
                "--child",
                "times",
                "--config",
                name,
                "--blocks",
                str(blocks),
                "--threads",
                str(args.threads),
            ],
            args.threads,
        )
        same = ["--config", name, "--threads", str(args.threads)]
        mem = run_child(["--child", "ours", *same], args.threads)
        ref_mem = run_child(["--child", "torch", *same], args.threads)
        ckpt_mem = run_child(["--child", "ours-checkpointed", *same], args.threads)
        has_ref = "ref_ms" in t
        ref_ms = f"{t['ref_ms']:11.1f}" if has_ref else "          -"
        ratio = f"{t['ratio']:6.2f}x" if has_ref else "     -"
        ref_mb = f"{ref_mem['peak_mb']:11.1f}" if ref_mem else "          -"
        print(f"{name:<8} {t['ours_ms']:13.1f} {ref_ms} {ratio} {mem['peak_mb']:13.1f} {ref_mb}")
        if has_ref:
            print(f"{'':8} per-round ratios: {' '.join(f'{r:.2f}' for r in t['ratios'])}")
            for who, key in (("tensorlab", "ours_phases"), ("pytorch", "ref_phases")):
                ms = ", ".join(f"{p} {v:.1f}" for p, v in zip(PHASES, t[key]))
                print(f"{'':8} {who} phases (medians, ms): {ms}")
        print(f"{'':8} tensorlab with checkpoint_activations: {ckpt_mem['peak_mb']:.1f} MB")


if __name__ == "__main__":
    main()
