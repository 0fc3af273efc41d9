"""GRPO planned before it runs, for one v5e (compile-only devices, the aot group).

* Qwen3-0.6B's GRPO and DPO steps with the jobs' defaults fit the chip (the plan's
  compiled peak), and so do GRPO's rollouts beside the trainer's state; the plan says the
  KV cache a pass of rows holds and a decoding turn's time.
* Rollouts that cannot fit beside the state (every row of a long batch decoded at once) are
  refused in one line with exit 2, after the rollouts' plan that shows why, and before the
  step is compiled (the part to change first; compiling would only cost time).
* A task file without problems is refused in one line before any work, run or dry run.
"""

from __future__ import annotations

import pytest

from tests.chips.compiling import require_aot
from tests.train.conftest import run_cli

QWEN3 = ["model.preset=0.6b"]


@pytest.fixture(autouse=True)
def _aot() -> None:
    require_aot()


def plan_of(job: str, *overrides: str) -> dict:
    from theseus.core.plan.dry_run import plan
    from theseus.core.plugins import registries
    from theseus.core.runner import config_for, job_spec

    regs = registries()
    spec = job_spec(job, regs)
    config = config_for(spec, regs, list(overrides)).to_object(spec.load().config_type)
    return plan(config, "/nonexistent-root", "v5e-1", spec.load().recipe(config))


def test_qwen3_grpo_and_dpo_with_defaults_fit_a_v5e_and_so_do_the_rollouts():
    grpo = plan_of("qwen3/train/grpo", *QWEN3)
    assert grpo["fits"] and grpo["device_kind"] == "TPU v5 lite"
    rollouts = grpo["rollouts"]
    assert rollouts["fits"] and rollouts["reader"] == "pallas"
    rows, slots = rollouts["rows_per_pass"], rollouts["cache_slots"]
    per_position = 28 * 2 * 8 * 128 * 2  # layers x (keys, values) x kv heads x head_dim, bf16
    assert rollouts["kv_cache_bytes"] == rows * slots * per_position
    assert slots % 128 == 0 and rollouts["passes"] * rows == rollouts["rows"] == 16
    assert 0 < rollouts["turn_seconds_bound"] < rollouts["turn_seconds_estimate"]
    dpo = plan_of("qwen3/train/dpo", *QWEN3)
    assert dpo["fits"] and "rollouts" not in dpo


def test_rollouts_that_cannot_fit_beside_the_state_are_refused_in_one_line(tmp_path):
    long_batch = ["training.seq_len=1088", "grpo.max_new_tokens=1024", "grpo.generations=8"]
    long_batch += ["training.global_batch_size=64", "training.per_device_batch_size=2"]
    done = run_cli(
        tmp_path, "run", "qwen3/train/grpo", *QWEN3, *long_batch, "grpo.sample_rows=64",
        "--dry-run", "--target", "v5e-1",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert "does NOT fit in" in done.stdout  # the rollouts' lines of the plan
    assert "compiled in" not in done.stdout and "compiling" not in done.stderr  # not compiled
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "the rollouts need" in errors[0] and "grpo.sample_rows" in errors[0]
    assert "Traceback" not in done.stderr


def test_a_task_file_without_problems_is_one_line_before_any_work(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    task = ["grpo.task=jsonl", f"grpo.prompts_file={empty}", "init.checkpoint=nowhere"]
    for extra in (["--dry-run"], []):
        done = run_cli(tmp_path, "run", "gpt/train/grpo", "model.preset=tiny", *task, *extra)
        assert done.returncode == 2, done.stderr[-2000:]
        assert done.stderr.strip().splitlines()[-1].startswith(f"error: {empty} has 0 problems")
        assert not (tmp_path / "data").exists()  # nothing tokenized, nothing started
