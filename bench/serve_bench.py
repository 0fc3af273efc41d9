"""What `theseus serve` costs on long runs, side by side with the naive way (re-reading and
re-parsing the whole metrics log each time, as `theseus show` does once).

- a live poll after 10 new lines: the incremental column cache vs a full `read_metrics`;
- memory of one run's rows: columns vs the list of dicts;
- a run page's curves: the decimated series vs every point (JSON bytes);
- the runs table over many runs: a refresh with nothing changed vs `run_summaries`.

Writes bench/results/serve.json. Usage: python bench/serve_bench.py
"""

from __future__ import annotations

import json
import math
import random
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path

from theseus.core.inspect.runs import read_metrics, run_summaries
from theseus.core.serve.app import json_safe
from theseus.core.serve.metrics_cache import MetricsCache
from theseus.core.serve.root_view import RootView

STEPS = 200_000
TABLE_RUNS = 200
TABLE_STEPS = 20_000
REPEATS = 5


def write_run(folder: Path, steps: int, seed: int) -> None:
    folder.mkdir(parents=True)
    (folder / "job.json").write_text(json.dumps({"key": "gpt/train/pretrain", "status": "running"}))
    rng = random.Random(seed)
    with (folder / "metrics.jsonl").open("w") as out:
        for step in range(steps):
            loss = 5 * math.exp(-step / (steps / 4)) + rng.random() * 0.1
            row = {"step": step, "train/loss": loss, "train/grad_norm": 1 + rng.random()}
            out.write(json.dumps({**row, "train/lr": 3e-4}) + "\n")
            if step % 1000 == 0:
                out.write(json.dumps({"step": step, "val/loss": loss}) + "\n")


def median_time(work, repeats: int = REPEATS) -> float:
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def append(path: Path, step: int, lines: int = 10) -> None:
    with path.open("a") as out:
        for i in range(lines):
            out.write(json.dumps({"step": step + i, "train/loss": 1.0}) + "\n")


def main() -> None:
    result: dict[str, float] = {"steps": STEPS}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run = root / "runs" / "long"
        write_run(run, STEPS, 0)
        path = run / "metrics.jsonl"
        result["metrics_file_mb"] = path.stat().st_size / 2**20

        cache = MetricsCache()
        start = time.perf_counter()
        cache.read(path, lambda f: f.row_count)
        result["first_read_cache_s"] = time.perf_counter() - start
        result["first_read_dicts_s"] = median_time(lambda: read_metrics(run), 1)

        step = [STEPS]

        def poll_cache() -> None:
            append(path, step[0])
            step[0] += 10
            cache.read(path, lambda f: f.rows(f.row_count - 10))

        def poll_naive() -> None:
            append(path, step[0])
            step[0] += 10
            read_metrics(run)[-10:]

        result["poll_cache_s"] = median_time(poll_cache)
        result["poll_naive_s"] = median_time(poll_naive)
        result["poll_speedup"] = result["poll_naive_s"] / result["poll_cache_s"]

        tracemalloc.start()
        fresh = MetricsCache()
        fresh.read(path, lambda f: None)
        result["memory_columns_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        del fresh
        tracemalloc.start()
        rows = read_metrics(run)
        result["memory_dicts_mb"] = tracemalloc.get_traced_memory()[0] / 2**20
        tracemalloc.stop()
        del rows
        result["memory_ratio"] = result["memory_dicts_mb"] / result["memory_columns_mb"]

        view = RootView(root)
        view.series("long", [], 4000)  # the first read
        result["series_decimated_warm_s"] = median_time(
            lambda: json.dumps(json_safe(view.series("long", [], 4000)))
        )
        result["all_rows_warm_s"] = median_time(
            lambda: json.dumps(json_safe(view.metrics_since("long"))), 1
        )
        decimated = json.dumps(json_safe(view.series("long", [], 4000)))
        every = json.dumps(json_safe(view.metrics_since("long")))
        result["series_decimated_kb"] = len(decimated) / 1024
        result["all_rows_kb"] = len(every) / 1024
        result["payload_ratio"] = len(every) / len(decimated)

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for i in range(TABLE_RUNS):
            write_run(root / "runs" / f"run-{i:03d}", TABLE_STEPS, i)
        view = RootView(root)
        start = time.perf_counter()
        view.runs()
        result["table_first_s"] = time.perf_counter() - start
        result["table_refresh_s"] = median_time(view.runs)
        result["table_naive_s"] = median_time(lambda: run_summaries(root), 1)
        result["table_refresh_speedup"] = result["table_naive_s"] / result["table_refresh_s"]
        result["table_runs"] = TABLE_RUNS
        result["table_steps_per_run"] = TABLE_STEPS

    out = Path(__file__).parent / "results" / "serve.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    print(f"-> {out}")


if __name__ == "__main__":
    main()
