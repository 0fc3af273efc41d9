def test_training_refuses_unknown_eval_tasks_before_any_work(tmp_path):
    import subprocess
    import sys

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "theseus.cli.main",
            "run",
            "gpt/train/pretrain",
            "eval.tasks=[val-ppl, adition]",
            "--root",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "unknown evaluation 'adition'; did you mean 'addition'" in result.stderr
    assert not (tmp_path / "data").exists()  # nothing was tokenized
