"""What `theseus serve` costs on long runs, side by side with the naive way (re-reading and
re-parsing the whole metrics log each time, as `theseus show` does once).

- a live poll after 10 new lines: the incremental column cache vs a full `read_metrics`;
- memory of one run's rows: columns vs the list of dicts;
- a run page's curves: the decimated series vs every point (JSON bytes);
- the runs table over many runs: a refresh with nothing changed vs `run_summaries`;
- a run page drawn in headless Chromium: decimated curves vs every point (when chromium,
  chromedriver and selenium are installed).

Writes bench/results/serve.json. Usage: python bench/serve_bench.py
"""

from __future__ import annotations

import json
import math
import random
import shutil
import statistics
import subprocess
import sys
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


def page_draw_times(root: Path) -> dict[str, float]:
    """Seconds from opening the run page to its four curves drawn, in headless Chromium:
    decimated (the default) and every point (``?max_points=10000000``). Skipped without
    chromium, chromedriver and selenium."""
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        return {}
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.common.by import By
    except ImportError:
        return {}
    theseus = str(Path(sys.executable).parent / "theseus")
    server = subprocess.Popen(
        [theseus, "serve", "--root", str(root), "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    times = {}
    try:
        url = server.stdout.readline().rsplit(" at ", 1)[1].strip()
        samples: dict[str, list[float]] = {"decimated": [], "every_point": []}
        for round_ in range(REPEATS + 1):  # round 0 warms the server's cache and the browser's
            for label, query in (("decimated", ""), ("every_point", "?max_points=10000000")):
                start = time.perf_counter()
                driver.get(f"{url}runs/long{query}")
                while len(driver.find_elements(By.CSS_SELECTOR, ".chart .scatterlayer .trace")) < 4:
                    time.sleep(0.02)
                if round_:
                    samples[label].append(time.perf_counter() - start)
        for label, values in samples.items():
            times[f"page_draw_{label}_s"] = statistics.median(values)
        times["page_draw_ratio"] = times["page_draw_every_point_s"] / times["page_draw_decimated_s"]
    finally:
        driver.quit()
        server.terminate()
        server.wait()
    return times


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
        result.update(page_draw_times(root))

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
