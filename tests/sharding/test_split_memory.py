"""The dry run's per-device memory as the sequence (``sharding.context``) and the experts
(``sharding.expert``) are split (tests/sharding/split_memory.py), and how it prints them."""

from __future__ import annotations

import pytest
from theseus.core.plan.plan_format import format_report

from tests.sharding.conftest import json_lines, run_module


@pytest.fixture(scope="module")
def memory() -> dict[tuple[str, int], dict]:
    done = run_module("tests.sharding.split_memory")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json_lines(done.stdout)
    return {
        ("context" if "context" in r else "expert", r.get("context", r.get("expert"))): r
        for r in rows
    }


@pytest.mark.slow
def test_activation_memory_per_device_falls_with_the_context_axis(memory):
    """T = 65536, one sequence: activations are linear in the positions a device holds
    (flash and ring keep no T x T scores), so N devices hold about 1/N of them; the
    parameters' gradients, the same on every device, are what stays (measured: 723, 395,
    206, 111 MiB at 1, 2, 4, 8)."""
    sizes = [memory[("context", n)]["activation_bytes"] for n in (1, 2, 4, 8)]
    # each doubling halves what splits (measured 0.55, 0.52, 0.54 of the size before: the
    # parameters' gradients and the optimizer's temporaries do not split)
    for before, after in zip(sizes[:-1], sizes[1:], strict=True):
        assert after < 0.6 * before, sizes
    assert memory[("context", 1)]["attention"] == "flash"
    assert memory[("context", 8)]["attention"] == "ring/flash"
    assert memory[("context", 8)]["mesh"] == "data=1 x fsdp=1 x context=8 x tensor=1"


@pytest.mark.slow
def test_expert_parameter_bytes_fall_with_the_expert_axis(memory):
    """qwen3_moe tiny: 2 layers x 4 experts x 3 matrices of 64 x 32 float32 = 196,608 bytes
    of expert weights, plus the router (2 x 64 x 4 floats, also on the experts axis)."""
    expected = 2 * 4 * 3 * 64 * 32 * 4 + 2 * 64 * 4 * 4
    for ways in (1, 2, 4):
        assert memory[("expert", ways)]["expert_params_bytes"] == expected // ways


def test_the_report_names_the_split_axes():
    report = {
        "mesh": "data=2 x fsdp=1 x context=4 x tensor=1",
        "devices": 8,
        "device_kind": "cpu",
        "strategy": "dp",
        "remat": "none",
        "parameters": 1e6,
        "vocab": "384",
        "batch": "4 x 65536 tokens, 2 per device x 1 micro-steps, each sequence over context=4",
        "params_bytes": 2**20,
        "expert_params_bytes": 2**19,
        "opt_bytes": 2**21,
        "batch_bytes": 2**10,
        "flops_per_step_model": 1e9,
        "flops_per_step_program": 1e9,
        "compile_seconds": 1.0,
        "attention": "ring/flash",
        "dtype": "float32",
    }
    text = format_report(report)
    assert "context=4" in text and "attention ring/flash" in text
    assert "    of which experts         512.0 KiB" in text
