"""Where a TPU step's time goes: a few traced steps, the chip's ops summed by kind.

``profile_steps(step, state, batch, step_s)`` traces ``PROFILED_STEPS`` steps with the JAX
profiler and reads the trace's ``/device:TPU:0`` "XLA Ops" events: their time by XLA's own
``hlo_category`` and by kind (``kind_of``: the splash kernels, matmul fusions, the scan's
dynamic-update-slice / dynamic-slice / copy, other fusions), and the costliest ops, each as a
share of the step.
"""

from __future__ import annotations

import glob
import gzip
import json
import tempfile
from collections import defaultdict
from typing import Any

PROFILED_STEPS = 3
TOP = 15


def kind_of(name: str, category: str) -> str:
    lowered = name.lower()
    if "splash" in lowered or "custom-call" in lowered and "mha" in lowered:
        return "attention kernel"
    for needle in ("dynamic-update-slice", "dynamic_update_slice"):
        if needle in lowered:
            return "dynamic-update-slice"
    if "dynamic-slice" in lowered or "dynamic_slice" in lowered:
        return "dynamic-slice"
    if lowered.startswith("copy") or category == "data formatting":
        return "copy / layout"
    if "convolution" in lowered or category in ("convolution", "convolution fusion"):
        return "matmul"
    return category or "other"


def device_ops(trace_dir: str) -> list[tuple[str, str, float]]:
    """(name, hlo_category, seconds) of every op the chip ran in the trace."""
    path = glob.glob(f"{trace_dir}/**/*.trace.json.gz", recursive=True)[0]
    with gzip.open(path) as f:
        trace = json.load(f)
    processes, threads = {}, {}
    for event in trace["traceEvents"]:
        if event.get("ph") == "M" and event.get("name") == "process_name":
            processes[event["pid"]] = event["args"]["name"]
        if event.get("ph") == "M" and event.get("name") == "thread_name":
            threads[(event["pid"], event["tid"])] = event["args"]["name"]
    ops = []
    for event in trace["traceEvents"]:
        if event.get("ph") != "X" or "TPU:0" not in processes.get(event.get("pid"), ""):
            continue
        if threads.get((event["pid"], event.get("tid"))) != "XLA Ops":
            continue
        args = event.get("args", {})
        ops.append((event["name"], args.get("hlo_category", ""), event.get("dur", 0) / 1e6))
    return ops


def profile_steps(step: Any, state: Any, batch: Any, step_s: float) -> dict:
    import jax

    trace_dir = tempfile.mkdtemp()
    with jax.profiler.trace(trace_dir):
        for _ in range(PROFILED_STEPS):
            state, metrics = step(state, batch)
        metrics["loss"].block_until_ready()
    ops = device_ops(trace_dir)
    total = PROFILED_STEPS * step_s
    by_kind: dict[str, float] = defaultdict(float)
    by_category: dict[str, float] = defaultdict(float)
    by_op: dict[str, float] = defaultdict(float)
    by_name: dict[str, float] = defaultdict(float)
    for name, category, seconds in ops:
        by_kind[kind_of(name, category)] += seconds
        by_category[category or "?"] += seconds
        by_op[name.split(".")[0]] += seconds
        by_name[name] += seconds

    def shares(table: dict[str, float], limit: int = 0) -> dict[str, float]:
        items = sorted(table.items(), key=lambda kv: -kv[1])
        return {k: round(v / total, 4) for k, v in (items[:limit] if limit else items)}

    busy = sum(seconds for _, _, seconds in ops)
    return {
        "steps": PROFILED_STEPS,
        "busy_share": round(busy / total, 4),
        "by_kind": shares(by_kind),
        "by_category": shares(by_category),
        "top_ops": shares(by_op, TOP),
        "top_named": shares(by_name, 2 * TOP),
    }
