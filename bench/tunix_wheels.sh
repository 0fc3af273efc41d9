#!/usr/bin/env bash
# Here (a machine with network): what a lent TPU machine needs to run Tunix 0.1.7's GRPO
# (bench/tunix_grpo.py) offline. That machine has JAX 0.10.2, jaxlib, numpy and scipy, and its
# own package index (file:///opt/pypi/simple, mirrored here at the same path) holds flax, optax,
# orbax and the rest of what Tunix's GRPO import path needs, except three packages: google-tunix
# itself, google-metrax (tunix.sft.metrics_logger imports it) and clu (metrax's __init__ imports
# clu.metrics). Those three travel as wheels in .whl-tunix/ (about 0.7 MiB).
#
# It also writes bench/tunix_install.sh, the commands to run there: the index's packages pinned
# to the versions resolved here against /opt/pypi/simple (jax, jaxlib, numpy, scipy, ml-dtypes
# and opt-einsum left out, so the machine's own stay in use), then the carried wheels, all with
# --no-deps into /tmp/tunix-site.
# Usage: bash bench/tunix_wheels.sh   (then carry .whl-tunix; see bench/TUNIX.md)
set -euo pipefail
cd "$(dirname "$0")/.."
index=/opt/pypi/simple
if [ ! -d "$index" ]; then
    echo "tunix_wheels.sh: $index (the mirror of the TPU machine's package index) is missing" >&2
    exit 2
fi
rm -rf .whl-tunix
mkdir -p .whl-tunix
PIP_CONFIG_FILE=/dev/null python3 -m pip download -q --isolated --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --platform manylinux_2_28_x86_64 \
    --index-url https://pypi.org/simple -d .whl-tunix \
    google-tunix==0.1.7 google-metrax==0.2.4 clu==0.0.12

# The import path's third-party modules (read off Tunix's sources: tunix.rl.grpo.grpo_learner,
# tunix.rl.rl_cluster, tunix.generate.sampler, tunix.models.{qwen3,llama3}.params), as
# distributions, plus the declared needs of metrax and clu; the resolver adds their closure.
roots="flax optax orbax-checkpoint jaxtyping safetensors sentencepiece tokenizers etils[epath]
humanize fsspec huggingface-hub pillow tqdm typing-extensions absl-py tensorboardx"
report=$(mktemp)
# shellcheck disable=SC2086
PIP_CONFIG_FILE=/dev/null python3 -m pip install -q --isolated --dry-run --ignore-installed \
    --only-binary=:all: --index-url "file://$index" --find-links .whl-tunix \
    --report "$report" $roots google-metrax==0.2.4 clu==0.0.12
pins=$(python3 - "$report" <<'EOF'
import json
import sys

machine = {"jax", "jaxlib", "numpy", "scipy", "ml-dtypes", "opt-einsum"}
carried = {"google-metrax", "clu", "google-tunix"}
names = []
for item in json.load(open(sys.argv[1]))["install"]:
    name = item["metadata"]["name"].lower().replace("_", "-")
    if name not in machine | carried:
        names.append(f"{name}=={item['metadata']['version']}")
print(" ".join(sorted(names)))
EOF
)
rm -f "$report"

cat > bench/tunix_install.sh <<EOF
#!/usr/bin/env bash
# There (the lent TPU machine, no network), from the repository root with .whl-tunix carried:
# Tunix 0.1.7 and what its GRPO path imports, into /tmp/tunix-site, leaving the machine's JAX,
# jaxlib, numpy and scipy in use. Written by bench/tunix_wheels.sh; then run with
#   PYTHONPATH=\$PYTHONPATH:/tmp/tunix-site python3 bench/tunix_grpo.py ...
set -euo pipefail
site=\${TUNIX_SITE:-/tmp/tunix-site}
index=file:///opt/pypi/simple
pins="$pins"
pip_install() {
    PIP_CONFIG_FILE=/dev/null python3 -m pip install --isolated -q --no-deps --no-compile \\
        --no-cache-dir --only-binary=:all: --upgrade --target "\$site" "\$@"
}
# The versions resolved against this index's mirror; where one is not there, that package's
# newest one in the index (printed, so the run's notes can say so).
if ! pip_install --index-url "\$index" \$pins 2>/dev/null; then
    for pin in \$pins; do
        pip_install --index-url "\$index" "\$pin" 2>/dev/null || {
            echo "tunix_install: \$pin not in the index, taking its newest" >&2
            pip_install --index-url "\$index" "\${pin%%==*}"
        }
    done
fi
pip_install --no-index .whl-tunix/*.whl
echo "tunix_install: \$(ls "\$site" | grep -c dist-info) distributions in \$site"
EOF
chmod +x bench/tunix_install.sh
ls -la .whl-tunix; du -sh .whl-tunix
