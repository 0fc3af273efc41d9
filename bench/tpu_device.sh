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
#             (MAXTEXT_REMATS="minimal full ...": each of those remat policies, keyed shape/remat)
#   moe       a mixture layer's pieces timed alone (moe_ops_tpu.py) -> OUT/moe_ops.json
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
    [mixtral_t2048]="LAYERS=12 EMB=1024 HEADS=16 KV=8 HEAD_DIM=64 MLP=1024 VOCAB=32000 SEQ=2048 BATCH=8 REMAT=minimal"
)
MAXTEXT_EXTRA_qwen3_06b_t2048="decoder_block=qwen3 logits_via_embedding=true"
# its defaults for a mixture are theseus's: dropless (capacity_factor=-1), megablox grouped matmuls
MAXTEXT_EXTRA_mixtral_t2048="decoder_block=mixtral num_experts=8 num_experts_per_tok=2 base_moe_mlp_dim=1024"
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
        runs=()
        for shape in $SHAPES; do
            for remat in ${MAXTEXT_REMATS:-default}; do
                key="$shape"; [ "$remat" = default ] || key="$shape/$remat"
                runs+=("$key")
                extra_var="MAXTEXT_EXTRA_$shape"
                knobs="${MAXTEXT[$shape]}"
                [ "$remat" = default ] || knobs="$knobs REMAT=$remat"
                # shellcheck disable=SC2046,SC2086
                env $knobs STEPS="${MAXTEXT_STEPS:-12}" WARMUP=5 \
                    EXTRA="${!extra_var:-}" timeout "${MAXTEXT_TIMEOUT:-200}" \
                    bash .peers-maxtext/run.sh "/tmp/mt_${key/\//_}" > "/tmp/mt_${key/\//_}.log" 2>&1
                echo "maxtext $key exit $?: $(tail -c 300 "/tmp/mt_${key/\//_}/maxtext.json" 2>/dev/null | tr '\n' ' ')"
                tail -n 30 "/tmp/mt_${key/\//_}.log" >> "$out/maxtext.log"
            done
        done
        python3 - "$out/maxtext.json" "${runs[@]}" <<'PY'
import json, sys
found = {}
for key in sys.argv[2:]:
    try:
        found[key] = json.load(open(f"/tmp/mt_{key.replace('/', '_')}/maxtext.json"))
    except (OSError, ValueError) as error:
        found[key] = {"ok": False, "error": str(error)}
json.dump(found, open(sys.argv[1], "w"), indent=1)
PY
        ;;
    moe)
        timeout "${MOE_TIMEOUT:-240}" python3 bench/moe_ops_tpu.py "$out/moe_ops.json" 2>&1 \
            | grep -v -E "^(W|I)[0-9]{4}" > "$out/moe.log"
        tail -n 12 "$out/moe.log"
        ;;
    *) echo "unknown part $part" >&2 ;;
    esac
done
