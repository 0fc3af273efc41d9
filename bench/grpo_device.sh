#!/usr/bin/env bash
# One device call: theseus's GRPO at a shape, then Tunix 0.1.7's on the same SFT weights
# (exported), side by side on the same chip. Carry .whl-tpu and .whl-tunix (bench/TUNIX.md).
#   bash bench/grpo_device.sh OUT SHAPE:NEW [PART...]   (PART: more grpo_tpu.py parts)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: grpo_device.sh OUT SHAPE:NEW [PART...]}"; case_="${2:?}"; shift 2
shape=${case_%%:*}; new=${case_#*:}
PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site .whl-tpu/*.whl || exit 1
bash bench/tunix_install.sh > "$out/tunix_install.log" 2>&1 || { tail -5 "$out/tunix_install.log"; exit 1; }
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}/tmp/site" PYTHONUNBUFFERED=1
end=$((SECONDS + ${BUDGET_S:-570}))
timeout $((end - SECONDS - 240)) python3 bench/grpo_tpu.py "$out/theseus.json" "export:$shape" \
    "$case_" "$@" > "$out/theseus.log" 2>&1
echo "theseus rc=$? $(grep -E '^\[|^[a-z_0-9]+:[0-9]+ ' "$out/theseus.log" | cut -c1-300)"
left=$((end - SECONDS)); [ $left -lt 150 ] && { echo "tunix skipped: ${left}s left"; exit 0; }
PYTHONPATH=$PYTHONPATH:/tmp/tunix-site timeout $left python3 bench/tunix_grpo.py \
    "/tmp/grpo-bench/hf-$shape" --rows 128 --generations 8 --new-tokens "$new" --steps 3 \
    --warmup 1 --out "$out/tunix.json" 2>&1 | tail -c 100000 > "$out/tunix.log"
echo "tunix rc=${PIPESTATUS[0]} $(grep -h '^tunix_grpo:' "$out/tunix.log")"
