#!/usr/bin/env bash
# The GPU benchmark on a lent machine whose image already has JAX with CUDA (no network there):
# the packages the image lacks travel as wheels in .whl/ (see docs/targets.md, "Measured on a GPU").
# Usage there: bash bench/gpu_device.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: gpu_device.sh OUT_DIR}"
source bench/gpu_device_env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
python3 -c "import jax, flax, optax; print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, jax.devices())"
# one model per process, each under its own limit, so one slow compile cannot starve the rest
for item in gpt:124m:1024:64 gpt:350m:1024:64 llama:1b:2048:32; do
    name=$(echo "$item" | cut -d: -f1-2 | tr : _)
    BENCH_MODELS="$item" timeout "${BENCH_MODEL_TIMEOUT:-110}" \
        python3 bench/gpu_bench.py "$out/gpu_$name.json" 2>&1 | grep -v -E "^\s*$|TF-TRT|cuda_dnn|computation_placer" | tail -n 25
done
