"""`theseus runs`, `show` and `plot` on real runs."""

from __future__ import annotations

import json

from tests.train.conftest import run_cli


def test_runs_table_lists_status_step_loss_and_parent(two_runs):
    result = run_cli(two_runs, "runs", str(two_runs))
    assert result.returncode == 0, result.stderr
    alpha = next(line for line in result.stdout.splitlines() if line.strip().startswith("alpha"))
    beta = next(line for line in result.stdout.splitlines() if line.strip().startswith("beta"))
    # 4 steps, checkpointed at 4: the step reached is 4 (its last training loss is "step 3")
    assert "gpt/train/pretrain" in alpha and "finished" in alpha and " 4 " in alpha
    assert "alpha@2" in beta
    tokenize = [
        line for line in result.stdout.splitlines() if "data/tokenize/python-stdlib" in line
    ]
    assert tokenize and "finished" in tokenize[0]


def test_show_prints_lineage_checkpoints_and_final_metrics(two_runs):
    result = run_cli(two_runs, "show", "beta")
    assert result.returncode == 0, result.stderr
    assert "lineage: beta <- alpha@2" in result.stdout
    assert "checkpoints: 4" in result.stdout
    assert '"val/loss"' in result.stdout and "learning_rate: 0.003" in result.stdout


def test_plot_writes_a_png_comparing_runs(two_runs, tmp_path):
    out = tmp_path / "loss.png"
    result = run_cli(
        two_runs,
        "plot",
        "alpha",
        "beta",
        "--metric",
        "train/loss",
        "--metric",
        "val/loss",
        "--smoothing",
        "0.5",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_plot_errors_name_the_missing_run_or_metric(two_runs, tmp_path):
    missing = run_cli(two_runs, "plot", "gamma", "--out", str(tmp_path / "x.png"))
    assert missing.returncode == 2 and "no run named 'gamma'" in missing.stderr
    metric = run_cli(
        two_runs, "plot", "alpha", "--metric", "train/lsos", "--out", str(tmp_path / "x.png")
    )
    assert (
        metric.returncode == 2
        and "metric 'train/lsos' is in none of the runs alpha" in metric.stderr
    )


def test_plot_from_python(two_runs, tmp_path):
    from theseus.core.inspect.plot import plot_runs

    path = plot_runs(two_runs, ["alpha"], ["train/loss"], tmp_path / "p.png")
    assert path.stat().st_size > 5_000


def test_runs_lists_trainings_first_and_filters_by_kind(two_runs):
    listed = run_cli(two_runs, "runs", str(two_runs))
    names = [line.split()[0] for line in listed.stdout.splitlines()[1:] if line.strip()]
    assert names[:2] == ["alpha", "beta"]  # the trainings, then the other kinds
    assert names.index("judge") > 1 and any(n.startswith("data-tokenize") for n in names[2:])
    only = run_cli(two_runs, "runs", str(two_runs), "--kind", "evaluate")
    assert only.returncode == 0, only.stderr
    rows = [line.split()[0] for line in only.stdout.splitlines()[1:] if line.strip()]
    assert rows == ["judge"]
    bad = run_cli(two_runs, "runs", str(two_runs), "--kind", "trian")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "--kind trian: no run of that kind" in bad.stderr
    assert "data, evaluate, train" in bad.stderr


def test_an_evaluation_shares_the_row_of_its_step(two_runs):
    """eval.every=2 over 4 steps: the evaluation at step 2 joins the training row of step 2
    (the loss of the same state), the last one (step 4, after the last update) is alone."""
    lines = (two_runs / "runs" / "alpha" / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    steps = [row["step"] for row in rows]
    assert steps == sorted(set(steps)), steps  # one row per step
    by_step = {row["step"]: row for row in rows}
    assert "train/loss" in by_step[2] and "val/loss" in by_step[2]
    assert "eval/val-ppl/loss" in by_step[2]  # the tasks' metrics in the same row
    assert "val/loss" in by_step[4] and "train/loss" not in by_step[4]


def test_a_finished_training_ends_with_a_readable_line(two_runs):
    from theseus.core.recipes.training_run import finished_line

    log = (two_runs / "runs" / "alpha" / "logs" / "run.log").read_text()
    line = next(line for line in log.splitlines() if "finished alpha" in line)
    assert "finished alpha at step 4: train/loss " in line and ", val/loss " in line
    assert "{" not in line and "skipped" not in line  # no dict, no zero count
    summary = {"step": 100, "train/loss": 2.3141, "skipped": 2, "val/loss": float("nan")}
    assert finished_line("r", summary) == (
        "finished r at step 100: train/loss 2.314, skipped 2, val/loss nan"
    )
