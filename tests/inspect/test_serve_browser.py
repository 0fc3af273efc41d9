"""`theseus serve` in a real headless Chromium: the runs page, a run page whose curve grows
when a metrics line is appended, the compare and lineage pages. Saves screenshots and the
timings under ``$THESEUS_TEST_ARTIFACTS`` (default ``test-artifacts/serve`` in the repo)."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from tests.inspect.serve_helpers import served, wait_until

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("THESEUS_TEST_ARTIFACTS", REPO / "test-artifacts")) / "serve"


def _missing_browser() -> str | None:
    for tool in ("chromium", "chromedriver"):
        if not shutil.which(tool):
            return f"{tool} is not installed (apt-get install chromium chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (the dev group)"
    return None


@pytest.fixture(scope="module")
def browser():
    problem = _missing_browser()
    if problem:
        if os.environ.get("THESEUS_REQUIRE_BROWSER") == "1":
            pytest.fail(f"THESEUS_REQUIRE_BROWSER=1 but {problem}")
        pytest.skip(problem)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def elements(driver, css: str) -> list:
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, css)


def text_of(driver, css: str) -> str:
    found = elements(driver, css)
    return found[0].text if found else ""


def errors_in_console(driver) -> list[str]:
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]


def test_pages_draw_and_a_run_page_follows_its_metrics(copied_root, browser):
    (copied_root / "runs" / "broken").mkdir()
    (copied_root / "runs" / "broken" / "job.json").write_text("{damaged")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    with served(copied_root) as url:
        started = time.perf_counter()
        browser.get(url)
        wait_until(lambda: len(elements(browser, "#runs tbody tr")) >= 4, 30, "the runs table")
        timings["runs page: load to table"] = time.perf_counter() - started
        rows = {tr.get_attribute("data-run"): tr for tr in elements(browser, "#runs tbody tr")}
        assert "finished" in rows["alpha"].text and "gpt/train/pretrain" in rows["alpha"].text
        assert "alpha@2" in rows["beta"].text
        assert "malformed" in rows["broken"].get_attribute("class")
        assert "unreadable" in rows["broken"].text and "job.json" in rows["broken"].text

        def order():
            return [tr.get_attribute("data-run") for tr in elements(browser, "#runs tbody tr")]

        elements(browser, "th[data-sort=name]")[0].click()  # sorted by run name
        wait_until(lambda: order() == sorted(order()), 10, "rows sorted by name")
        elements(browser, "th[data-sort=name]")[0].click()  # and the other way
        wait_until(lambda: order() == sorted(order(), reverse=True), 10, "rows sorted back")
        elements(browser, "#filter")[0].send_keys("alpha@")  # only beta's row names it
        wait_until(lambda: len(elements(browser, "#runs tbody tr")) == 1, 10, "the filter")
        assert elements(browser, "#runs tbody tr")[0].get_attribute("data-run") == "beta"
        browser.save_screenshot(str(ARTIFACTS / "runs-page.png"))
        assert errors_in_console(browser) == []

        started = time.perf_counter()
        browser.get(url + "runs/beta")
        trace = "#chart-train_loss .scatterlayer .trace path.js-line"
        wait_until(lambda: elements(browser, trace), 30, "the train/loss curve")
        timings["run page: load to drawn curve"] = time.perf_counter() - started
        metrics_path = copied_root / "runs" / "beta" / "metrics.jsonl"
        steps = [json.loads(line)["step"] for line in metrics_path.read_text().splitlines()]
        assert text_of(browser, "#last-step") == str(max(steps))
        charts = {div.get_attribute("data-metric") for div in elements(browser, ".chart")}
        assert {"train/loss", "val/loss", "train/lr"} <= charts
        assert "learning_rate: 0.003" in text_of(browser, "#config")
        assert "val-ppl" in text_of(browser, "#evaluations")
        on_disk = sorted(int(p.name) for p in (metrics_path.parent / "checkpoints").iterdir())
        assert text_of(browser, "#checkpoint-steps") == ", ".join(map(str, on_disk))

        new_step = max(steps) + 1

        def x_values():
            return browser.execute_script(
                "return Array.from(document.getElementById('chart-train_loss').data[0].x)"
            )

        assert new_step not in x_values()
        with metrics_path.open("a") as out:
            out.write(json.dumps({"step": new_step, "train/loss": 4.25}) + "\n")
        appended = time.perf_counter()
        wait_until(lambda: text_of(browser, "#last-step") == str(new_step), 20, "the new step")
        wait_until(lambda: new_step in x_values(), 10, "the new point on the curve")
        timings["run page: appended line to drawn point"] = time.perf_counter() - appended
        browser.save_screenshot(str(ARTIFACTS / "run-page.png"))
        assert errors_in_console(browser) == []

        browser.get(url + "compare?runs=alpha&runs=beta")
        overlay = "#overlay .scatterlayer .trace"
        wait_until(lambda: len(elements(browser, overlay)) == 2, 30, "two overlaid curves")
        wait_until(lambda: elements(browser, "#diff tbody tr"), 10, "the config diff")
        keys = {tr.get_attribute("data-key") for tr in elements(browser, "#diff tbody tr")}
        assert "optimizer.learning_rate" in keys
        browser.save_screenshot(str(ARTIFACTS / "compare-page.png"))

        browser.get(url + "lineage")
        wait_until(lambda: elements(browser, "#lineage-svg g.node"), 30, "the lineage graph")
        nodes = {g.get_attribute("data-run") for g in elements(browser, "#lineage-svg g.node")}
        assert nodes == {"alpha", "beta", "judge"} and "@2" in text_of(browser, "#lineage-svg")
        derived = elements(browser, "#lineage-svg path.derived")
        assert [p.get_attribute("data-via") for p in derived] == ["evaluate.checkpoint"]
        browser.save_screenshot(str(ARTIFACTS / "lineage-page.png"))
        assert errors_in_console(browser) == []

    shot = (ARTIFACTS / "run-page.png").read_bytes()
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20_000
    (ARTIFACTS / "timings.json").write_text(json.dumps(timings, indent=2) + "\n")
    print(f"\nscreenshots in {ARTIFACTS}; timings: " + json.dumps(timings))


def test_a_finished_run_says_so_and_a_one_point_metric_is_a_number(copied_root, browser):
    metrics_path = copied_root / "runs" / "alpha" / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    (first,) = [r for r in rows if "perf/first_step_time" in r]  # the compile: one point
    single = '.chart.single[data-metric="perf/first_step_time"]'
    with served(copied_root) as url:
        browser.get(url + "runs/alpha")
        wait_until(lambda: elements(browser, "#chart-train_loss .scatterlayer"), 30, "train/loss")
        wait_until(lambda: text_of(browser, "#liveness") == "finished", 10, "the status")
        wait_until(lambda: elements(browser, single), 10, "the one-point metric")
        shown = text_of(browser, single)
        assert f"perf/first_step_time (step {first['step']})" in shown
        value = browser.execute_script(
            "return theseus.format(arguments[0])", first["perf/first_step_time"]
        )
        assert shown.splitlines()[-1] == value
        assert not elements(browser, f"{single} .scatterlayer")  # no chart for one point
        with metrics_path.open("a") as out:  # a second point: now it is a curve
            out.write(json.dumps({"step": 99, "perf/first_step_time": 1.5}) + "\n")
        chart = "#chart-perf_first_step_time:not(.single) .scatterlayer"
        wait_until(lambda: elements(browser, chart), 20, "the chart of two points")
        assert errors_in_console(browser) == []
