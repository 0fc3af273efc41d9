"""What ``--dry-run --target v5e-1`` predicts for every shape of ``tpu_bench.py``, made on a
CPU machine before the chip runs them: bench/results/tpu_v5e_predicted.json (per shape: the
estimated step seconds, how it was estimated, the remat level and kernel chosen, memory).

    JAX_PLATFORMS=cpu uv run python bench/tpu_predict.py [SHAPE ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))


def main() -> None:
    from theseus.core.plan.dry_run import plan
    from tpu_bench import DEFAULT_SHAPES, config

    out = HERE / "results" / "tpu_v5e_predicted.json"
    found = json.loads(out.read_text()) if out.exists() else {}
    head = ["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"]
    commit = subprocess.run(head, capture_output=True, text=True).stdout.strip()
    for shape in sys.argv[1:] or DEFAULT_SHAPES:
        started = time.perf_counter()
        cfg, _ = config(shape, [])
        result = plan(cfg, "/tmp/theseus-predict", target="v5e-1")
        found[shape] = {
            "step_s": result.get("step_seconds_estimate"),
            "method": result.get("estimate_method"),
            "predicted_mfu": result.get("predicted_mfu"),
            "remat": result.get("remat"),
            "attention": result.get("attention"),
            "peak_bytes": result.get("peak_bytes"),
            "fits": result.get("fits"),
            "plan_seconds": time.perf_counter() - started,
            "main": commit,  # the checkout the prediction was made at
        }
        print(shape, json.dumps(found[shape]), flush=True)
        out.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
