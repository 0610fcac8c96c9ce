#!/usr/bin/env bash
# Everything issue 15 needs a GPU for, in one call of the device tool. A session that draws a
# GPU has 15 device-minutes in all, the machine's start (a minute or two) included, and a
# machine stays warm only 30 s after a call: plan on one call, so `all` (the default) ends
# by itself within BUDGET seconds (default 500) and the call's limit leaves a margin:
#
#   echo /.data/ >> .git/info/exclude; mkdir -p .data; cp ../shared/data/tinyshakespeare.txt .data/
#   run(command="bash benchmarks/gpu_session.sh", carry=[".data"], timeout_s=560)
#
# `all`, in order, each step with its own time limit (a step that hangs is killed, logged, and
# the script goes on; the limits shrink to what is left of BUDGET):
#   1. the card and libraries (does CuPy take ml_dtypes' bfloat16?);
#   2. alone on the card: bench_train.py --device cuda (tensorlab against PyTorch eager in
#      turns, float32 and bfloat16: ms/step, tokens/s, MFU, and each phase of the step);
#   3. beside 4: the fused kernels and the ops that use them, compiled, against their CPU forms;
#   4. side by side: the whole suite on the GPU in SHARDS shards (pytest --shard K/SHARDS,
#      default 8), and the
#      nanoGPT config trained for 2000 iterations in float32, bfloat16 and float16 (the
#      validation losses must agree within 0.02; the corpus comes from TEXT, default
#      .data/tinyshakespeare.txt, since ../shared does not travel to the GPU machine);
#   5. bench_kernels.py --device cuda (each op against PyTorch's, and the row kernels for 32 to
#      256 threads a block), if time is left.
# The parts can also run alone, each under the same BUDGET: `check` (1, `profile_step.py`
# for GPT-2 small in bfloat16 and float32, `bench_attention_blocks.py`, and the suite),
# `train` (the three runs), `bench` (2 and 5), and `published`, which is not part of `all`:
# nanoGPT's GPU run on Shakespeare's characters (configs/shakespeare_char.toml, 5000 steps of
# 64 × 256 in bfloat16), whose best validation loss nanoGPT's README gives as 1.4697; it took
# 335 s on an H200 in session 20 (about 43 ms a step, and 21 evaluations of 2 × 200 batches),
# so give it a call of its own:
#
#   run(command="BUDGET=540 bash benchmarks/gpu_session.sh published", carry=[".data"],
#       timeout_s=580)
# `flash` (issue 46; first, about two minutes with the machine's start): attention's CUDA
# kernels, written in a session without a GPU (run there by tests/cuda_emulator.py), on the
# GPU for the first time: tests/nn/test_flash_attention.py and test_attention.py on the
# device, then bench_attention_blocks.py --device cuda (the kernels against PyTorch's SDPA at
# one layer's shapes, GPT-2 small's 8 × 1024 among them), in float32 (CUDA cores) and
# bfloat16 (tensor cores):
#
#   run(command="BUDGET=280 bash benchmarks/gpu_session.sh flash", timeout_s=320)
# `issue46` (the first call of a session that draws a GPU, since a machine left idle 30 s
# starts again from nothing): what issue 46 is judged by, most important first, in one call,
# each step alone on the machine but the suite's shards: `flash` (the attention kernels' first
# real run and their speed against SDPA), then the kernels written without a GPU since (the
# CUDA row kernels reading half arrays, the half runner, cuBLAS with float32 results: their
# tests on the device), bench_train.py --device cuda (the step against PyTorch eager, float32
# and bfloat16), the suite in SHARDS shards, and the MPI sweep with whatever is left:
#
#   run(command="BUDGET=560 SHARDS=12 bash benchmarks/gpu_session.sh issue46", carry=[".data"],
#       timeout_s=595)
# `scaling` (issue 46, the machine's 16 CPU cores, no GPU): bench_distributed.py's sweep over
# 1, 2, 4 and 8 MPI ranks, the nanoGPT CPU config at a global batch of 24 and the 6 × 384 one
# at 8; its table goes into docs/distributed.md beside the model's (about 8 minutes, untimed
# on that machine so far: the 6 × 384 step took 1.57 s on two cores here):
#
#   run(command="BUDGET=500 bash benchmarks/gpu_session.sh scaling", carry=[".data"],
#       timeout_s=540)
# Measured on an H100 (session 17): `all` took 411 s of its 545 (bench_train 67 s,
# 8 shards 129-286 s beside the three 2000-iteration runs of 105-143 s); `check` with
# SHARDS=12 took 114 s on an H200 in session 20 (12 shards of 54-77 s, the profiles 18 s,
# bench_attention_blocks.py 10 s, the card 7 s), and the machine's start about 30 s more:
#
#   run(command="BUDGET=260 SHARDS=12 bash benchmarks/gpu_session.sh check", carry=[".data"],
#       timeout_s=300)
#
# Logs go to $OUT (default out/gpu): summary.txt (also printed, so the reply's tail shows it)
# and logs.tgz with every step's full log (the tool brings back at most 8 files). Nothing is
# downloaded: the image has CuPy, PyTorch, NumPy, hypothesis, pytest, safetensors, regex, tqdm
# and ml-dtypes; the graphviz Python package is only needed by the drawing tests (they skip
# without it).
set -u
part=${1:-all}
OUT=${OUT:-out/gpu}
LOGS=$(mktemp -d)
mkdir -p "$OUT"
# (the machine runs commands as root, which Open MPI's mpiexec refuses unless told)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HYPOTHESIS_PROFILE=ci PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}
deadline=$((SECONDS + ${BUDGET:-500}))
# the tests read the corpus from ../shared/data, which does not travel: the carried copy goes
# there (without it the tokenizer tests train on a fallback corpus, not CI's)
if [[ ! -e ../shared/data/tinyshakespeare.txt && -e .data/tinyshakespeare.txt ]]; then
    mkdir -p ../shared/data && cp .data/tinyshakespeare.txt ../shared/data/
fi

n=0
step() {  # step NAME SECONDS COMMAND...: run, log to $LOGS/NAME.log, report the exit status
    n=$((n + 1))
    _step "$(printf %02d $n)-$1" "$@"
}

step_aside() {  # the same, in the background (`wait` for it)
    n=$((n + 1))
    _step "$(printf %02d $n)-$1" "$@" &
}

_step() {
    local summary=$LOGS/$1.summary name=$2 limit=$3 start=$SECONDS
    shift 3
    local left=$((deadline - SECONDS))
    ((limit > left)) && limit=$left
    if ((limit < 10)); then
        echo "== $name: not run, the budget is spent" >"$summary"
        return
    fi
    timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
    local rc=$?
    {  # one file per step: steps may run side by side
        echo "== $name (limit ${limit}s): exit $rc after $((SECONDS - start)) s: $*"
        tail -n 3 "$LOGS/$name.log" | sed 's/^/   /'
    } >"$summary"
}

save() {  # the summaries and logs so far into $OUT (written aside, then moved: never half)
    cat "$LOGS"/*.summary >"$OUT/summary.txt.part" 2>/dev/null
    mv "$OUT/summary.txt.part" "$OUT/summary.txt"
    tar czf "$OUT/logs.tgz.part" -C "$LOGS" . && mv "$OUT/logs.tgz.part" "$OUT/logs.tgz"
}

finish() {
    kill "$saver" 2>/dev/null
    save
    cat "$OUT/summary.txt"
}
trap finish EXIT
# saved every 20 s too, so that a call cut short at the tool's limit still brings logs back
# (disowned: the parts' `wait` is for their steps, and would wait for this loop forever)
(while sleep 20; do save; done) &>/dev/null &
saver=$!
disown "$saver"

environment() {
    step environment 60 bash -c "nvidia-smi; $PY - <<'EOF'
import cupy, numpy, torch
print('numpy', numpy.__version__, 'cupy', cupy.__version__, 'torch', torch.__version__)
print('device', cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())
try:
    import ml_dtypes
    a = cupy.asarray(numpy.ones((4, 4), ml_dtypes.bfloat16))
    print('bfloat16 on CuPy: yes,', a.dtype, (a * a).dtype, (a @ a).dtype)
except Exception as e:
    print('bfloat16 on CuPy: no,', type(e).__name__, e)
EOF"
}

kernels() {  # the fused kernels, each op that uses one, and the tests marked cuda (beside the suite)
    step_aside kernels 120 env TENSORLAB_TEST_DEVICE=cuda "$PY" -m pytest -q -p no:cacheprovider \
        tests/tensorlab/test_fused.py tests/tensorlab/test_fused_compiles.py \
        tests/nn/test_activation.py tests/nn/test_norm.py tests/nn/test_optim.py \
        tests/nn/test_amp.py tests/nn/test_attention.py tests/nn/test_flash_attention.py \
        tests/nn/test_loss.py
}

flash() {  # attention's CUDA kernels (nn/flash_attention.cu): their tests, then against SDPA
    step flash_tests 150 env TENSORLAB_TEST_DEVICE=cuda "$PY" -m pytest -q -rfEs \
        -p no:cacheprovider tests/nn/test_flash_attention.py tests/nn/test_attention.py
    step attention 60 "$PY" benchmarks/bench_attention_blocks.py --device cuda
    step attention_bf16 60 "$PY" benchmarks/bench_attention_blocks.py --device cuda --dtype bfloat16
}

suite() {  # the whole suite with the GPU as the default device: SHARDS (8) shards at once
    local k shards=${SHARDS:-8} hang=()
    # a test that hangs fails alone (pytest-timeout, in the GPU image) instead of taking its
    # shard's summary down when the shard's own limit kills it
    "$PY" -c "import pytest_timeout" 2>/dev/null && hang=(-p timeout --timeout 120)
    for ((k = 1; k <= shards; k++)); do
        step_aside "suite_$k" 300 env TENSORLAB_TEST_DEVICE=cuda OMP_NUM_THREADS=2 \
            OPENBLAS_NUM_THREADS=2 "$PY" -m pytest -q -rfEs -p no:cacheprovider "${hang[@]}" \
            --maxfail=300 --durations=10 --shard "$k/$shards" --deselect tests/test_notebooks.py
    done
}

train() {  # nanoGPT config, 2000 iterations, three dtypes side by side
    local dtype
    for dtype in float32 bfloat16 float16; do
        step_aside "train_$dtype" 300 "$PY" -m gpt train --text "${TEXT:-.data/tinyshakespeare.txt}" \
            --device cuda --dtype "$dtype" --out-dir "/tmp/gpu-runs/$dtype" --overwrite
    done
}

suite_counts() {  # the shards' last lines added up (a shard killed at its limit has none)
    tail -q -n 1 "$LOGS"/suite_*.log 2>/dev/null | grep -oE '[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed)' |
        awk '{ sum[$2] += $1 } END { printf "suite on the GPU, all shards:"; for (k in sum) printf " %d %s", sum[k], k; print "" }' \
            >"$LOGS/97-suite-counts.summary"
}

val_losses() {  # the last evaluation of each run
    for dtype in float32 bfloat16 float16; do
        echo "$dtype: $(grep val_loss "/tmp/gpu-runs/$dtype/log.jsonl" 2>/dev/null | tail -n 1)"
    done >"$LOGS/98-val-losses.summary"
}

published() {  # nanoGPT's published run, and its best validation loss (nanoGPT: 1.4697)
    step published 560 "$PY" -m gpt train --config configs/shakespeare_char.toml \
        --text "${TEXT:-.data/tinyshakespeare.txt}" --device cuda --dtype bfloat16 \
        --out-dir /tmp/gpu-runs/published --overwrite
    "$PY" - >"$LOGS/99-published.summary" 2>&1 <<'EOF'
from gpt.run_folder import RunFolder
evals = [r for r in RunFolder("/tmp/gpu-runs/published").read_log() if "val_loss" in r]
best = min(evals, key=lambda r: r["val_loss"])
print(f"published run: best val_loss {best['val_loss']:.4f} at iter {best['iter']}, last "
      f"{evals[-1]['val_loss']:.4f} at iter {evals[-1]['iter']} (nanoGPT's README: 1.4697)")
EOF
    # the loss curve and the log come back beside the summary (look at the picture)
    cp /tmp/gpu-runs/published/loss.png "$OUT/published-loss.png" 2>/dev/null
    cp /tmp/gpu-runs/published/log.jsonl "$OUT/published-log.jsonl" 2>/dev/null
}

bench_train() {
    step bench_train 170 "$PY" benchmarks/bench_train.py --device cuda --blocks 5
}

profile() {  # GPT-2 small's step op by op, alone on the card: where the time goes
    local dtype
    for dtype in bfloat16 float32; do
        step "profile_$dtype" 60 "$PY" benchmarks/profile_step.py --device cuda --config gpt2 \
            --dtype "$dtype"
    done
    # causal attention (the flash kernels) against PyTorch's SDPA, one layer's shapes
    step attention 60 "$PY" benchmarks/bench_attention_blocks.py --device cuda
}

written_without_a_gpu() {  # the kernels of sessions 28-31, their tests on the device
    step device_kernels 120 env TENSORLAB_TEST_DEVICE=cuda "$PY" -m pytest -q -rfEs \
        -p no:cacheprovider tests/tensorlab/test_fused_op.py tests/tensorlab/test_float16.py \
        tests/tensorlab/test_c_runner.py tests/nn/test_norm.py tests/nn/test_loss.py \
        tests/nn/test_amp.py tests/nn/test_linear.py
}

bench_kernels() {
    step bench_kernels 150 "$PY" benchmarks/bench_kernels.py --device cuda --rounds 3 \
        --row-threads 32,64,128,256
}

scaling() {  # issue 46: MPI on the machine's CPU cores (no GPU): ranks x ms x seq/s x efficiency
    step scaling_tiny 150 "$PY" benchmarks/bench_distributed.py --ranks 1,2,4,8 --batch 24 \
        --rounds 3
    step scaling_large 330 "$PY" benchmarks/bench_distributed.py --large --ranks 1,2,4,8 \
        --rounds 1
    tail -q -n 6 "$LOGS"/scaling_*.log >"$LOGS/98-scaling.summary" 2>&1
}

case $part in
all)
    environment
    bench_train
    kernels
    suite
    train
    wait
    suite_counts
    val_losses
    bench_kernels
    ;;
check)
    environment
    profile
    suite
    wait
    suite_counts
    ;;
train)
    train
    wait
    val_losses
    ;;
bench)
    bench_train
    bench_kernels
    ;;
published)
    environment
    published
    ;;
flash)
    environment
    flash
    ;;
issue46)
    environment
    flash
    written_without_a_gpu
    bench_train
    suite
    wait
    suite_counts
    scaling
    ;;
scaling)
    scaling
    ;;
*)
    echo "usage: bash benchmarks/gpu_session.sh [all|check|train|bench|published|scaling|flash|issue46]" >&2
    exit 2
    ;;
esac
