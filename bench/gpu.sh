#!/usr/bin/env bash
# Accelerator benchmark: GPT 124M / 350M and Llama 1B, bf16, largest batch that fits.
# Usage on a CUDA 12 machine: bash bench/gpu.sh [OUT_JSON]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
uv sync --all-packages --no-group cpu --group cuda12 --inexact
OUT="${1:-bench/results/gpu.json}"
uv run --no-sync python bench/gpu_bench.py "$OUT"
