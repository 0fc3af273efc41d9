#!/usr/bin/env bash
# Profiles on a lent GPU machine (see gpu_device.sh): GPT 124M with and without XLA's Triton
# GEMMs, and Llama 1B. Usage there: bash bench/gpu_device_profile.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: gpu_device_profile.sh OUT_DIR}"
source bench/gpu_device_env.sh
quiet() { grep -v -E "^\s*$|TF-TRT|cuda_dnn|computation_placer" | tail -n 40; }
timeout 80 python3 bench/gpu_profile.py "$out/profile_gpt_124m.json" gpt:124m:1024:64 2>&1 | quiet
XLA_FLAGS=--xla_gpu_enable_triton_gemm=false timeout 70 python3 bench/gpu_profile.py \
    "$out/profile_gpt_124m_cublas.json" gpt:124m:1024:64 2>&1 | quiet
timeout 90 python3 bench/gpu_profile.py "$out/profile_llama_1b.json" llama:1b:2048:32 2>&1 | quiet
