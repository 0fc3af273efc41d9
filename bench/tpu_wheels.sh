#!/usr/bin/env bash
# Here (a machine with network): the wheels a lent TPU machine needs in .whl-tpu/ (it has JAX,
# jaxlib, libtpu, numpy and scipy, and no network): theseus's own packages, built from this
# checkout, and the locked versions of everything else they import (pyarrow and tiktoken, only
# for reading parquet and tiktoken vocabularies, stay behind). About 50 MiB.
# Usage: bash bench/tpu_wheels.sh   (then bench/tpu_device.sh runs there with carry .whl-tpu)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.local/bin:$PATH"
mkdir -p .whl-tpu
rm -f .whl-tpu/theseus_*.whl
skip=" jax jaxlib numpy scipy ml-dtypes opt-einsum colorama truststore httpx2-jsfetch uvloop hf-xet huggingface-hub httpx2 httpcore2 pyarrow tiktoken "
uv export --package theseus-models --package theseus-data --no-hashes --no-dev --no-emit-workspace --frozen \
    | grep -E '^[A-Za-z0-9_.-]+==' | sed 's/ ;.*//' | sort -u > /tmp/tpu_requirements.all
: > /tmp/tpu_requirements.txt
while IFS= read -r line; do
    name=$(echo "${line%%==*}" | tr 'A-Z_' 'a-z-')
    case "$skip" in *" $name "*) continue;; esac
    version=$(uv pip show "$name" 2>/dev/null | sed -n 's/^Version: //p' || true)
    if [ -n "$version" ]; then echo "$name==$version" >> /tmp/tpu_requirements.txt; fi
done < /tmp/tpu_requirements.all
sort -u -o /tmp/tpu_requirements.txt /tmp/tpu_requirements.txt
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    $(for n in 1 17 24 27 28 31 34 35; do echo --platform manylinux_2_${n}_x86_64; done) \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    -r /tmp/tpu_requirements.txt -d .whl-tpu
for package in theseus-core theseus-models theseus-data; do
    uv build -q --package "$package" --wheel -o .whl-tpu
done
ls .whl-tpu | wc -l; du -sh .whl-tpu
