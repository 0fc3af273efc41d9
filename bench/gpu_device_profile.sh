#!/usr/bin/env bash
# Profiles on a lent GPU machine (see gpu_device.sh): GPT 124M with and without XLA's Triton
# GEMMs, and Llama 1B. Usage there: bash bench/gpu_device_profile.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: gpu_device_profile.sh OUT_DIR}"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_MEM_FRACTION=0.92
quiet() { grep -v -E "^\s*$|TF-TRT|cuda_dnn|computation_placer" | tail -n 40; }
timeout 80 python3 bench/gpu_profile.py "$out/profile_gpt_124m.json" gpt:124m:1024:64 2>&1 | quiet
XLA_FLAGS=--xla_gpu_enable_triton_gemm=false timeout 70 python3 bench/gpu_profile.py \
    "$out/profile_gpt_124m_cublas.json" gpt:124m:1024:64 2>&1 | quiet
timeout 90 python3 bench/gpu_profile.py "$out/profile_llama_1b.json" llama:1b:2048:32 2>&1 | quiet
