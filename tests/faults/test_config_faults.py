"""Nonsense that used to "succeed" or crash is refused in one line, exit 2, before any work.

Before: ``training.total_steps=-5`` exited 0 as "finished"; ``global_batch_size=-4`` said
"-4 is not a multiple of -4"; ``seq_len=0`` raised ZeroDivisionError; ``--branch RUN@abc``
and ``init.checkpoint=RUN@abc`` ended in ValueError tracebacks; a run named ``b@2`` could
never be branched from; ``skip_nonfinite`` skipped 28 of 30 steps and exited 0; rerunning a
finished run wrote ``"train/loss": NaN`` (invalid JSON) into summary.json.
"""

from __future__ import annotations

import json

import pytest

from tests.train.conftest import TINY, run_cli
from tests.train.test_training import nan_env, train  # noqa: F401  (a fixture)

BASE = ["run", "gpt/train/pretrain", *TINY]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("training.total_steps=-5", "training.total_steps=-5: must be at least 1"),
        ("training.global_batch_size=-4", "training.global_batch_size=-4: must be at least 1"),
        ("training.seq_len=0", "training.seq_len=0: must be at least 1"),
        ("checkpoint.every=-1", "checkpoint.every=-1: must be 0 or more"),
        # issue 24: these trained (gradient ascent), failed at step 1, or failed after training
        ("optimizer.learning_rate=-1", "optimizer.learning_rate=-1.0: must be 0 or more"),
        (
            "optimizer.learning_rate=nan",
            "optimizer.learning_rate=nan: must be a finite number 0 or more",
        ),
        ("data.validation_fraction=-0.5", "data.validation_fraction=-0.5: must be in [0, 1)"),
        ("training.loss_chunks=3", "training.loss_chunks=3 does not divide training.seq_len=32"),
        (
            "init.checkpoint=trunk@abc",
            "init.checkpoint='trunk@abc': 'abc' is not a step number (use RUN@STEP)",
        ),
        # beyond what the step computes with: XLA aborted the process; an OverflowError
        (
            "model.d_model=1000000000000",
            "model.d_model=1000000000000: must be at most 2147483647: it sizes the step's "
            "arrays, whose sizes are 32-bit",
        ),
        (
            "training.seed=100000000000000000000",
            "training.seed=100000000000000000000: must be at most 9223372036854775807 in size, "
            "the largest 64-bit integer",
        ),
    ],
)
def test_bad_counts_and_references_are_one_line_before_any_work(tmp_path, override, message):
    args = [o for o in BASE if not o.startswith(override.split("=")[0] + "=")]
    done = run_cli(tmp_path, *args, override)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [f"error: {message}"]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("job", "overrides", "message"),
    [
        # issue 37: a 216-line top_k traceback at the first step, and a failed run folder
        (
            "mixtral/train/pretrain",
            ["model.n_experts=2", "model.n_experts_per_token=3"],
            "model.n_experts_per_token=3 is more than model.n_experts=2: each token picks its "
            "experts among them",
        ),
        (
            "llama/train/pretrain",
            ["model.n_heads=4", "model.n_kv_heads=3"],
            "model.n_kv_heads=3 must divide model.n_heads=4 (each key/value head serves a "
            "whole group of query heads)",
        ),
        (
            "deepseek_v3/train/pretrain",
            ["model.n_groups=4", "model.top_groups=5", "model.n_experts=8"],
            "model.top_groups=5 is more than model.n_groups=4: a token's experts come from that "
            "many of the groups",
        ),
        # an OverflowError traceback at the first step
        (
            "mixtral/train/pretrain",
            ["model.capacity_factor=1e30"],
            "model.capacity_factor=1e+30 is more than model.n_experts=4: at 4 each expert can "
            "take every assignment (nothing is dropped); more only sizes buffers past what the "
            "step can index",
        ),
    ],
)
def test_a_model_that_cannot_be_built_is_one_line_before_any_work(
    tmp_path, job, overrides, message
):
    done = run_cli(tmp_path, "run", job, "model.preset=tiny", *overrides)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [f"error: {message}"]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()


def test_an_expert_capacity_beyond_the_experts_is_one_line(tmp_path, monkeypatch):
    """Before: an OverflowError traceback of 158 lines from the dry run (240 from a run),
    with the ragged dispatch as with slabs (the same rule refuses both: a unit test in
    ``tests/core/test_ranges.py``)."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
    done = run_cli(
        tmp_path, "run", "mixtral/train/pretrain", "model.preset=tiny", "sharding.expert=4",
        "sharding.expert_dispatch=ragged", "sharding.expert_capacity=1e30", "--dry-run",
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "error: sharding.expert_capacity=1e+30: must be at most 4 (the model's experts: at "
        "that factor each expert can take every assignment)"
    )
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def test_run_names_with_at_and_branch_steps_that_are_not_numbers(tmp_path):
    named = run_cli(tmp_path, *BASE, "--name", "b@2")
    assert named.returncode == 2
    assert "'@' is reserved for RUN@STEP" in named.stderr.strip().splitlines()[-1]
    branched = run_cli(tmp_path, *BASE, "--name", "twig", "--branch", "trunk@abc")
    assert branched.returncode == 2
    assert branched.stderr.strip().splitlines() == [
        "error: --branch='trunk@abc': 'abc' is not a step number (use RUN@STEP)"
    ]


def test_a_run_that_keeps_skipping_steps_stops(shared_root, nan_env):  # noqa: F811
    args = train(8, "schedule.name=nan-at", "schedule.at=4", "training.skip_nonfinite=true")
    done = run_cli(shared_root, *args, "training.max_skipped_steps=2", "--name", "skips")
    assert done.returncode == 2, done.stderr[-2000:]
    assert "skipped 3 steps with a non-finite loss" in done.stderr.strip().splitlines()[-1]
    assert json.loads((shared_root / "runs/skips/job.json").read_text())["status"] == "failed"


def test_summary_json_stays_valid_json_when_a_finished_run_is_rerun(shared_root):
    args = train(2)
    assert run_cli(shared_root, *args, "--name", "twice").returncode == 0
    first = json.loads((shared_root / "runs/twice/summary.json").read_text())
    again = run_cli(shared_root, *args, "--name", "twice")  # nothing left to train
    assert again.returncode == 0, again.stderr[-2000:]

    def refuse(constant: str) -> None:
        raise AssertionError(f"summary.json holds {constant}")

    summary = json.loads(
        (shared_root / "runs/twice/summary.json").read_text(), parse_constant=refuse
    )
    assert summary == first  # the finished run's own summary, not a NaN loss


def test_mfu_never_exceeds_one_whatever_the_peak_said(shared_root, tmp_path):
    """Before (issue 24): MFU reached 6.22, the CPU peak having been measured once per root
    under load. With a peak far below what the run reaches (here given as 1 MFLOP/s), MFU
    is clipped to 1, with one warning."""
    done = run_cli(
        shared_root, *BASE, "training.total_steps=6", "eval.every=0", "logging.peak_flops=1e6",
        "--name", "mfu-low-peak",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(x) for x in (shared_root / "runs/mfu-low-peak/metrics.jsonl").open()]
    mfu = [row["perf/mfu"] for row in rows if "perf/mfu" in row]
    assert mfu and all(0 < value <= 1.0 for value in mfu), mfu
    assert done.stderr.count("above the peak of 1e+06 (config)") == 1


def test_one_mistimed_window_moves_nothing_and_no_run_rewrites_the_cached_peak():
    """Before (issue 37): one 0.0085 s window raised a root's cached CPU peak from 4.93e10 to
    5.96e11 for good, and every later run in that root reported MFU near 0.08. Now a window
    above the peak is clipped to MFU 1; a measured peak is raised only to the median of the
    last five such windows, for this run alone (``Peak`` has no cache to write)."""
    from theseus.core.train.peak import WINDOWS, Peak

    peak = Peak(4.0e10, "measured f32 matmul (cpu), cached", devices=2)
    assert peak.mfu(4.0e10) == 0.5  # half of two devices' peak
    assert peak.mfu(1.2e12) == 1.0  # one window timed far too short: clipped
    assert peak.mfu(4.0e10) == 0.5  # and the peak has not moved
    for _ in range(WINDOWS - 1):
        peak.mfu(1.2e11)  # a run that truly goes faster than the measurement said
    assert peak.per_device == 6.0e10  # the median of the five windows above (per device)
    assert peak.mfu(6.0e10) == 0.5
    table = Peak(1.0e6, "config", devices=1)  # a peak from the config or a chip's table
    for _ in range(2 * WINDOWS):
        assert table.mfu(1.0e9) == 1.0
    assert table.per_device == 1.0e6  # is never raised: it is not a measurement


FIX = "set init.checkpoint=RUN[@STEP] (a run of yours) or init.hf=DIR (Hugging Face weights)"


@pytest.mark.parametrize(
    ("job", "extra", "message"),
    [
        (
            "gpt/train/dpo",
            ["lora.rank=8"],
            "lora.rank=8 trains adapters on a frozen base, but no base is given and a random "
            f"one would be adapted: {FIX}",
        ),
        (
            "gpt/train/sft",
            ["lora.rank=4"],
            "lora.rank=4 trains adapters on a frozen base, but no base is given and a random "
            f"one would be adapted: {FIX}",
        ),
        (
            "gpt/train/dpo",
            [],
            "dpo.loss=sigmoid compares the policy with a frozen reference, the starting "
            f"weights, but none are given and a random model would be both: {FIX}",
        ),
    ],
)
def test_fine_tuning_without_starting_weights_is_refused(tmp_path, job, extra, message):
    """Before (issue 24): DPO with lora.rank and no init.checkpoint trained adapters on a
    random base without a word (refused rather than warned: see starting_weights.py)."""
    done = run_cli(tmp_path, "run", job, *TINY, *extra, "--name", "no-base")
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [f"error: {message}"]
    assert not (tmp_path / "runs").exists() and not (tmp_path / "data").exists()
