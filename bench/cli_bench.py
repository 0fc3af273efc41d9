"""Wall time of `theseus jobs` (plugin discovery, no JAX) against a bare `python -c pass`.

Writes bench/results/cli.json. Usage: python bench/cli_bench.py
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPEATS = 7


def timed(command: list[str]) -> float:
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        subprocess.run(command, check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    theseus = str(Path(sys.executable).parent / "theseus")
    jobs = timed([theseus, "jobs"])
    bare = timed([sys.executable, "-c", "pass"])
    jax = timed([sys.executable, "-c", "import jax"])
    result = {
        "theseus_jobs_s": jobs,
        "python_startup_s": bare,
        "import_jax_s": jax,
        "jobs_over_startup": jobs / bare,
        "repeats": REPEATS,
    }
    out = Path(__file__).parent / "results" / "cli.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"theseus jobs {jobs:.2f}s   python -c pass {bare:.2f}s   import jax {jax:.2f}s   -> {out}"
    )


if __name__ == "__main__":
    main()
