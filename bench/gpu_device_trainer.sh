#!/usr/bin/env bash
# The whole training loop against its bare step, on a lent GPU machine (see gpu_device.sh):
# `theseus run gpt/train/pretrain` (GPT 124M, the embedded corpus tokenized there, the Grain
# loader, metrics, a checkpoint) and bench/gpu_bench.py's timed step at the same shapes.
# Usage there: bash bench/gpu_device_trainer.sh OUT_DIR
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: gpu_device_trainer.sh OUT_DIR}"
source bench/gpu_device_env.sh
cli='import sys; from theseus.cli.main import main; sys.argv[0] = "theseus"; main()'
shape=(model.preset=124m model.vocab_size=8192 training.seq_len=1024 training.global_batch_size=64
    precision.compute_dtype=bfloat16 optimizer.name=adamw schedule.name=constant)
start=$(date +%s)
timeout 200 python3 -c "$cli" run gpt/train/pretrain "${shape[@]}" training.total_steps=80 \
    logging.every=10 eval.every=0 checkpoint.every=0 --root /tmp/runs > "$out/trainer.log" 2>&1
echo "theseus run: rc $? in $(( $(date +%s) - start )) s"; tail -n 6 "$out/trainer.log"
cp /tmp/runs/runs/gpt-train-pretrain/metrics.jsonl "$out/trainer_metrics.jsonl" 2>/dev/null
BENCH_MODELS=gpt:124m:1024:64 BENCH_VOCAB=8192 BENCH_STEPS=20 timeout 90 \
    python3 bench/gpu_bench.py "$out/bare_step.json" 2>&1 | grep -E "^\{|TFLOP" | tail -n 3
