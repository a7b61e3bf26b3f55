#!/usr/bin/env bash
# The checks a lent GPU is for, in one go (the device tool runs it in a copy of the checkout):
# the CUDA tests, the GPU benches of docs/BENCHMARKS.md ("On a GPU"), then, with the GPU free
# again, training candidates for the shipped model (scripts/gpu_candidates.sh) beside the tests.
#
#     bash bench/gpu_run.sh            # logs and figures into $OUT (default /tmp/attnscope-gpu)
#
# It expects the wheels the device machine lacks in .whl/ (docs/BENCHMARKS.md says which) and,
# for the candidates, data/candidates.tar.xz (a corpus and run folders made beforehand on the CPU).
# Each step has its own time limit so the whole stays inside one device call (10 minutes).
set -u
OUT=${OUT:-/tmp/attnscope-gpu}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
fi
# the checkout is the package `attnscope`: import it by that name without installing it
mkdir -p /tmp/pkg && ln -sfn "$PWD" /tmp/pkg/attnscope
export PYTHONPATH=/tmp/pkg:/tmp/site PYTHONUNBUFFERED=1
log="$OUT/bench.log"
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
} >"$log" 2>&1

step() {  # step SECONDS TITLE COMMAND...: one bench, its output appended to the log, cut at SECONDS
    local limit=$1 title=$2
    shift 2
    echo "== $title: $*" >>"$log"
    local t0=$SECONDS
    timeout "$limit" "$@" >>"$log" 2>&1
    echo "== $title: exit $?, $((SECONDS - t0)) s" >>"$log"
}

step 150 capture python3 bench/capture_bench.py --device cuda --threads 8 --repeat 5 \
    --cases gpt2-small:256,gpt2-small:1024,smollm2:256,smollm2:1024,smollm2:4096
step 70 atlas python3 bench/atlas_bench.py --device cuda --threads 8 --cases shipped,gpt2-small \
    --batch-size 32 --tokens 200000
step 40 patching python3 bench/patching_bench.py --device cuda --tokens 32 --repeats 5
step 40 jlens python3 bench/jlens_bench.py --device cuda --threads 8 --prompts 16

# the GPU is free of benches now: the training candidates and the CUDA tests side by side
if [ -f data/candidates.tar.xz ]; then
    timeout 235 bash scripts/gpu_candidates.sh "$OUT" >"$OUT/candidates.log" 2>&1 &
fi
timeout 230 python3 -m pytest -q -m cuda -p no:cacheprovider --continue-on-collection-errors tests/model tests/app/test_device_map.py \
    >"$OUT/tests.log" 2>&1
echo "tests: exit $?" >>"$OUT/tests.log"
wait
date -u >>"$log"
