"""`theseus runs`, `show` and `plot` on real runs."""

from __future__ import annotations

from tests.train.conftest import run_cli


def test_runs_table_lists_status_step_loss_and_parent(two_runs):
    result = run_cli(two_runs, "runs", str(two_runs))
    assert result.returncode == 0, result.stderr
    alpha = next(line for line in result.stdout.splitlines() if line.strip().startswith("alpha"))
    beta = next(line for line in result.stdout.splitlines() if line.strip().startswith("beta"))
    assert "gpt/train/pretrain" in alpha and "finished" in alpha and " 3 " in alpha
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
