"""A dry run talks while it works and says where its time went: progress lines (a start, a
line every tick from a timer thread, an end with the seconds), and times that add up."""

from __future__ import annotations

import logging
import re
import threading
import time

import pytest
from theseus.core.plan.progress import Clock, Progress

from tests.chips.compiling import tiny

LOGGER = "theseus.core.plan"


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_progress_says_what_runs_every_tick_and_when_it_ends(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with Progress("compiling a thing", tick=0.05) as progress:
        time.sleep(0.35)
        progress.outcome = "refused: out of memory"
    lines = said(caplog)
    assert lines[0] == "dry run: compiling a thing ..."
    ticks = [
        line
        for line in lines[1:-1]
        if re.fullmatch(r"dry run: compiling a thing, \d+ s so far", line)
    ]
    assert len(ticks) >= 2 and len(ticks) == len(lines) - 2
    assert re.fullmatch(
        r"dry run: compiling a thing: done in 0\.\d s \(refused: out of memory\)", lines[-1]
    )
    assert 0.35 <= progress.seconds < 5
    assert not any(t.name == "dry-run-progress" for t in threading.enumerate())


def test_progress_ends_its_lines_and_its_timer_when_the_work_fails(caplog):
    caplog.set_level(logging.INFO, logger=LOGGER)
    with pytest.raises(ValueError), Progress("lowering a thing", tick=60):
        raise ValueError("no")
    assert re.fullmatch(r"dry run: lowering a thing: stopped after 0\.0 s", said(caplog)[-1])
    assert not any(t.name == "dry-run-progress" for t in threading.enumerate())


def test_the_clock_parts_and_the_rest_add_up_to_the_wall_time():
    clock = Clock()
    with clock.part("setup"):
        time.sleep(0.05)
    clock.add("compiling", 0.01)
    time.sleep(0.03)
    fields = clock.fields()
    parts = fields["seconds"]
    assert list(parts) == ["setup", "compiling", "other"]
    assert sum(parts.values()) == pytest.approx(fields["wall_seconds"])
    assert parts["setup"] >= 0.05 and parts["other"] >= 0.02  # 0.03 slept, 0.01 added


def test_a_plan_says_what_it_compiles_and_where_its_time_went(tmp_path, caplog):
    """A tiny Llama planned on this machine's CPU (no target, no aot group needed)."""
    from theseus.core.plan.dry_run import plan
    from theseus.core.plan.plan_format import format_report

    from tests.chips.test_dry_run_target import plan_config

    caplog.set_level(logging.INFO, logger=LOGGER)
    result = plan(plan_config(*tiny("llama")), str(tmp_path))
    parts = result["seconds"]
    assert list(parts) == ["setup", "lowering", "compiling", "analysis", "other"]
    assert sum(parts.values()) == pytest.approx(result["wall_seconds"])
    assert result["compile_seconds"] == parts["compiling"] > 0
    assert result["lower_seconds"] == parts["lowering"] > 0
    lines = said(caplog)
    compiling = r"dry run: compiling the step for this machine \(\d+ x cpu\) with XLA:CPU"
    assert any(re.fullmatch(compiling + r" \.\.\.", line) for line in lines), lines
    assert any(re.fullmatch(compiling + r": done in [\d.]+ s", line) for line in lines), lines
    text = format_report(result)
    time_line = next(line for line in text.splitlines() if line.startswith("time "))
    total = float(re.search(r"([\d.]+) s to plan", time_line).group(1))
    shown = [
        float(s)
        for s in re.findall(r"(?:setup|lowering|compiling|analysis|other) ([\d.]+) s", time_line)
    ]
    assert len(shown) == 5 and abs(sum(shown) - total) <= 0.3  # rounded to tenths
    assert ", compiled in" not in text  # the time line says it, once
