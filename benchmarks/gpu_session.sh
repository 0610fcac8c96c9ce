#!/usr/bin/env bash
# Everything issue 15 needs a GPU for, in one call, with every log under $OUT (default out/gpu):
#
#   1. the card and the libraries (nvidia-smi, CuPy, PyTorch, NumPy versions; bfloat16 on CuPy?)
#   2. the tests marked cuda, then the whole suite on the GPU (TENSORLAB_TEST_DEVICE=cuda)
#   3. benchmarks/bench_kernels.py --device cuda: each fused kernel (GELU, SiLU, AdamW) and the
#      other block ops against PyTorch's, then benchmarks/bench_train.py --device cuda:
#      tensorlab against PyTorch eager, float32 and bfloat16, nanoGPT / 6x384 / GPT-2 small,
#      ms per step, tokens/s, MFU
#   4. with RUN_TRAINING=1: the nanoGPT config on tiny Shakespeare for 2000 iterations in
#      float32, bfloat16 and float16 (the validation losses must agree within 0.02)
#
# Usage on the GPU machine, from the repository root (the device tool's `run`):
#   bash benchmarks/gpu_session.sh                 # steps 1-3, about 10 minutes
#   RUN_TRAINING=1 bash benchmarks/gpu_session.sh  # and step 4
# Step 4 reads TEXT (default .data/tinyshakespeare.txt): ../shared does not travel to the GPU
# machine, so copy the corpus into a folder that .git/info/exclude ignores and `carry` it.
# Each step has its own time limit, so one that hangs does not take the others down; a step
# that fails is logged and the script goes on. Nothing is downloaded: the machine's image has
# CuPy, PyTorch, NumPy, hypothesis, pytest, safetensors, regex, tqdm and ml-dtypes; the
# graphviz Python package is only needed by the drawing tests (they skip without it).
set -u
OUT=${OUT:-out/gpu}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HYPOTHESIS_PROFILE=ci PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PY:-python3}
step() {  # step NAME SECONDS COMMAND...: run, log to $OUT/NAME.log, report the exit status
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit}s): $*" | tee -a "$OUT/summary.txt"
    local start=$SECONDS
    timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    echo "   exit $rc after $((SECONDS - start)) s; last line: $(tail -n 1 "$OUT/$name.log")" |
        tee -a "$OUT/summary.txt"
}

step environment 60 bash -c "nvidia-smi; $PY - <<'EOF'
import cupy, numpy, torch
print('numpy', numpy.__version__, 'cupy', cupy.__version__, 'torch', torch.__version__)
print('device', cupy.cuda.runtime.getDeviceProperties(0)['name'].decode())
try:
    import ml_dtypes
    a = cupy.asarray(numpy.ones(4, ml_dtypes.bfloat16))
    print('bfloat16 on CuPy: yes,', a.dtype, (a * a).dtype)
except Exception as e:
    print('bfloat16 on CuPy: no,', type(e).__name__, e)
EOF"
step tests_cuda 300 "$PY" -m pytest -q -m cuda -p no:cacheprovider -o addopts=""
step suite_on_gpu 900 env TENSORLAB_TEST_DEVICE=cuda "$PY" -m pytest -q -p no:cacheprovider \
    --maxfail=300 --deselect tests/test_notebooks.py
step bench_kernels_cuda 300 "$PY" benchmarks/bench_kernels.py --device cuda --rounds 3
step bench_train_cuda 900 "$PY" benchmarks/bench_train.py --device cuda --blocks 5
if [ "${RUN_TRAINING:-0}" = 1 ]; then
    for dtype in float32 bfloat16 float16; do
        step "train_$dtype" 900 "$PY" -m gpt train --text "${TEXT:-.data/tinyshakespeare.txt}" \
            --device cuda --dtype "$dtype" --out-dir "/tmp/gpu-runs/$dtype" --overwrite
    done
fi
echo "logs: $OUT" | tee -a "$OUT/summary.txt"
