#!/usr/bin/env bash
# Everything issue 15 needs a GPU for, in three parts that each fit one call of the device
# tool (10 minutes at most per call, 30 device-minutes per session; a machine stays warm for
# only 30 s after a call, so plan on each call starting a fresh one):
#
#   bash benchmarks/gpu_session.sh check   # the card and libraries; the kernel and cuda tests;
#                                          # the whole suite on the GPU in 4 parallel shards
#   bash benchmarks/gpu_session.sh bench   # bench_kernels.py and bench_train.py --device cuda
#   bash benchmarks/gpu_session.sh train   # nanoGPT config, 2000 iterations, float32, bfloat16
#                                          # and float16 side by side (val losses within 0.02?)
#
# `train` reads TEXT (default .data/tinyshakespeare.txt): ../shared does not travel to the GPU
# machine, so copy the corpus into a folder that .git/info/exclude ignores and `carry` it:
#   echo /.data/ >> .git/info/exclude; mkdir -p .data; cp ../shared/data/tinyshakespeare.txt .data/
#   run(command="bash benchmarks/gpu_session.sh train", carry=[".data"], timeout_s=600)
#
# Logs go to $OUT (default out/gpu): summary.txt (also printed, so the reply's tail shows it)
# and logs.tgz with every step's full log (the tool brings back at most 8 files). Each step has
# its own time limit, so one that hangs does not take the others down; a failing step is
# logged and the part goes on. Nothing is downloaded: the image has CuPy, PyTorch, NumPy,
# hypothesis, pytest, safetensors, regex, tqdm and ml-dtypes; the graphviz Python package is
# only needed by the drawing tests (they skip without it).
set -u
part=${1:-check}
OUT=${OUT:-out/gpu}
LOGS=$(mktemp -d)
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}

n=0
step() {  # step NAME SECONDS COMMAND...: run, log to $LOGS/NAME.log, report the exit status
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    n=$((n + 1))
    timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
    local rc=$?
    {  # one file per step: steps may run side by side
        echo "== $name (limit ${limit}s): exit $rc after $((SECONDS - start)) s: $*"
        tail -n 3 "$LOGS/$name.log" | sed 's/^/   /'
    } >"$LOGS/$(printf %02d $n)-$name.summary"
}

finish() {
    cat "$LOGS"/*.summary >"$OUT/summary.txt" 2>/dev/null
    tar czf "$OUT/logs.tgz" -C "$LOGS" .
    cat "$OUT/summary.txt"
}
trap finish EXIT

case $part in
check)
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
    # The fused kernels compiled and compared with their CPU forms, and the tests marked cuda.
    step kernels 150 env TENSORLAB_TEST_DEVICE=cuda "$PY" -m pytest -q -p no:cacheprovider \
        tests/tensorlab/test_fused.py tests/tensorlab/test_fused_compiles.py \
        tests/nn/test_activation.py tests/nn/test_norm.py tests/nn/test_optim.py \
        tests/nn/test_attention.py tests/nn/test_loss.py
    step tests_cuda 120 "$PY" -m pytest -q -m cuda -p no:cacheprovider -o addopts=""
    # The whole suite with the GPU as the default device, in four shards at once (16 cores).
    suite=(env TENSORLAB_TEST_DEVICE=cuda "$PY" -m pytest -q -p no:cacheprovider --maxfail=300)
    step suite_tensorlab 330 "${suite[@]}" tests/tensorlab &
    step suite_nn 330 "${suite[@]}" tests/nn &
    step suite_gpt 330 "${suite[@]}" tests/gpt &
    step suite_rest 330 "${suite[@]}" tests --ignore=tests/tensorlab --ignore=tests/nn \
        --ignore=tests/gpt --deselect tests/test_notebooks.py &
    wait
    ;;
bench)
    step bench_kernels 150 "$PY" benchmarks/bench_kernels.py --device cuda --rounds 3
    step bench_train 400 "$PY" benchmarks/bench_train.py --device cuda --blocks 5
    ;;
train)
    for dtype in float32 bfloat16 float16; do
        step "train_$dtype" 540 "$PY" -m gpt train --text "${TEXT:-.data/tinyshakespeare.txt}" \
            --device cuda --dtype "$dtype" --out-dir "/tmp/gpu-runs/$dtype" --overwrite &
    done
    wait
    for dtype in float32 bfloat16 float16; do  # the last evaluation of each run
        echo "$dtype: $(grep val_loss "/tmp/gpu-runs/$dtype/log.jsonl" | tail -n 1)"
    done >"$LOGS/99-val-losses.summary"
    ;;
*)
    echo "usage: bash benchmarks/gpu_session.sh check|bench|train" >&2
    exit 2
    ;;
esac
