#!/usr/bin/env bash
# The TPU benchmark on a lent v5e machine (JAX, libtpu, numpy and scipy installed, no network).
# Here first: bash bench/tpu_wheels.sh (theseus and what it imports, as wheels in .whl-tpu/), and
# for MaxText a copy of ../shared/peers/maxtext in .peers-maxtext/ (both ignored, both carried).
#
# There:  bash bench/tpu_device.sh OUT_DIR PART...   with PART one of
#   sweep     splash block sizes x lengths x head dims       -> OUT/sweep.json
#   theseus   the step at every shape, defaults (+ BENCH_VARIANTS, BENCH_PROFILE)
#                                                             -> OUT/theseus.json
#   maxtext   MaxText's train.py at the same shapes          -> OUT/maxtext.json
# Every part logs to OUT/PART.log. bench/tpu_merge.py joins them into bench/results/tpu_v5e.json.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: tpu_device.sh OUT_DIR PART...}"
shift
mkdir -p "$out"
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site .whl-tpu/*.whl || exit 1
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site" PYTHONUNBUFFERED=1
python3 -c "import jax; print('jax', jax.__version__, jax.devices())"

# MaxText's knobs for each shape (its GPT-124M class is its Llama block with MLP 2048: the same
# FLOPs as GPT-2's; its Qwen3 block for the 0.6B preset)
declare -A MAXTEXT=(
    [llama350_t2048]="LAYERS=24 EMB=1024 HEADS=16 KV=16 HEAD_DIM=64 MLP=2816 VOCAB=32000 SEQ=2048 BATCH=8 REMAT=full"
    [gpt124m_t1024]="LAYERS=12 EMB=768 HEADS=12 KV=12 HEAD_DIM=64 MLP=2048 VOCAB=8192 SEQ=1024 BATCH=16 REMAT=minimal"
    [qwen3_06b_t2048]="LAYERS=28 EMB=1024 HEADS=16 KV=8 HEAD_DIM=128 MLP=3072 VOCAB=32000 SEQ=2048 BATCH=8 REMAT=full"
    [llama350_t8192]="LAYERS=24 EMB=1024 HEADS=16 KV=16 HEAD_DIM=64 MLP=2816 VOCAB=32000 SEQ=8192 BATCH=1 REMAT=full"
    [llama350_t32768]="LAYERS=24 EMB=1024 HEADS=16 KV=16 HEAD_DIM=64 MLP=2816 VOCAB=32000 SEQ=32768 BATCH=1 REMAT=full"
)
MAXTEXT_EXTRA_qwen3_06b_t2048="decoder_block=qwen3 logits_via_embedding=true"
SHAPES="${BENCH_SHAPES:-llama350_t2048 gpt124m_t1024 qwen3_06b_t2048 llama350_t8192 llama350_t32768}"

for part in "$@"; do
    case "$part" in
    sweep)
        timeout "${SWEEP_TIMEOUT:-420}" python3 bench/tpu_attention_sweep.py "$out/sweep.json" \
            > "$out/sweep.log" 2>&1
        tail -n 3 "$out/sweep.log"
        ;;
    theseus)
        # shellcheck disable=SC2086
        timeout "${THESEUS_TIMEOUT:-540}" python3 bench/tpu_bench.py "$out/theseus.json" $SHAPES \
            2>&1 | grep -v -E "^(W|I)[0-9]{4}" > "$out/theseus.log"
        grep -E "^[a-z0-9_]+ [a-z_]+ \{" "$out/theseus.log" | cut -c1-400
        ;;
    maxtext)
        for shape in $SHAPES; do
            extra_var="MAXTEXT_EXTRA_$shape"
            # shellcheck disable=SC2046
            env $(echo "${MAXTEXT[$shape]}") STEPS="${MAXTEXT_STEPS:-12}" WARMUP=5 \
                EXTRA="${!extra_var:-}" timeout "${MAXTEXT_TIMEOUT:-200}" \
                bash .peers-maxtext/run.sh "/tmp/mt_$shape" > "/tmp/mt_$shape.log" 2>&1
            echo "maxtext $shape exit $?: $(tail -c 300 /tmp/mt_$shape/maxtext.json 2>/dev/null | tr '\n' ' ')"
            tail -n 30 "/tmp/mt_$shape.log" >> "$out/maxtext.log"
        done
        python3 - "$out/maxtext.json" $SHAPES <<'PY'
import json, sys
found = {}
for shape in sys.argv[2:]:
    try:
        found[shape] = json.load(open(f"/tmp/mt_{shape}/maxtext.json"))
    except (OSError, ValueError) as error:
        found[shape] = {"ok": False, "error": str(error)}
json.dump(found, open(sys.argv[1], "w"), indent=1)
PY
        ;;
    *) echo "unknown part $part" >&2 ;;
    esac
done
