#!/usr/bin/env bash
# There (the lent TPU machine, no network), from the repository root with .whl-tunix carried:
# Tunix 0.1.7 and what its GRPO path imports, into /tmp/tunix-site, leaving the machine's JAX,
# jaxlib, numpy and scipy in use. Written by bench/tunix_wheels.sh; then run with
#   PYTHONPATH=$PYTHONPATH:/tmp/tunix-site python3 bench/tunix_grpo.py ...
set -euo pipefail
site=${TUNIX_SITE:-/tmp/tunix-site}
index=file:///opt/pypi/simple
pins="absl-py==2.5.0 aiofiles==25.1.0 anyio==4.15.1 certifi==2026.7.22 click==8.5.0 etils==1.14.0 filelock==4.0.8 flax==0.12.8 fsspec==2026.9.0 h11==0.16.0 hf-xet==1.6.0 httpcore==1.0.9 httpx==0.28.1 huggingface-hub==1.33.0 humanize==4.16.0 idna==3.20 jaxtyping==0.3.11 markdown-it-py==4.2.0 mdurl==0.1.2 ml-collections==1.1.0 msgpack==1.2.3 optax==0.2.8 orbax-checkpoint==0.12.4 packaging==26.3 pillow==12.3.0 prometheus-client==0.26.0 protobuf==7.36.2 psutil==7.2.2 pygments==2.21.0 pyyaml==6.0.3 rich==15.0.0 safetensors==0.8.0 sentencepiece==0.2.2 simplejson==4.1.2 tensorboardx==2.6.5 tensorstore==0.1.85 tokenizers==0.23.2 tqdm==4.70.1 treescope==0.1.10 typing-extensions==4.16.0 uvloop==0.23.0 wadler-lindig==0.1.7 wrapt==2.5.0 zipp==4.1.0"
pip_install() {
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-deps --no-compile \
        --no-cache-dir --only-binary=:all: --upgrade --target "$site" "$@"
}
# The versions resolved against this index's mirror; where one is not there, that package's
# newest one in the index (printed, so the run's notes can say so).
if ! pip_install --index-url "$index" $pins 2>/dev/null; then
    for pin in $pins; do
        pip_install --index-url "$index" "$pin" 2>/dev/null || {
            echo "tunix_install: $pin not in the index, taking its newest" >&2
            pip_install --index-url "$index" "${pin%%==*}"
        }
    done
fi
pip_install --no-index .whl-tunix/*.whl
echo "tunix_install: $(ls "$site" | grep -c dist-info) distributions in $site"
