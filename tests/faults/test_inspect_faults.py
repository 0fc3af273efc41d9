"""The read-only commands (``runs``, ``show``, ``plot``, ``inspect``) on damaged runs.

They never crash: a damaged run is flagged or its bad lines skipped, with one line naming the
file, or, when the command cannot do what was asked, one ``error:`` line and exit 2. They
never write into a run: every test compares the run folders byte for byte, before and after.

Before (main at f5da985): ``theseus runs`` died with a 49-line JSONDecodeError traceback
(exit 1) on one run with a truncated job.json, and with an AttributeError on a job.json that
held a list; ``show``/``runs``/``plot`` died with a UnicodeDecodeError traceback (exit 1) on
a metrics.jsonl with invalid bytes; ``plot --out`` into a missing folder died with a
FileNotFoundError traceback; ``inspect`` died with tracebacks (exit 1; 46 to 405 lines, Orbax
coroutines still printing at exit) on a missing, malformed, empty, non-UTF-8 or truncated
config.yaml and on a checkpoint with a missing item or a truncated array file.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.train.conftest import pretrain_tiny, run_cli

BASE = "inspect-faults"


@pytest.fixture(scope="module")
def finished(shared_root) -> Path:
    """A tiny finished run (checkpoint at step 2) in the shared root, made once."""
    path = shared_root / "runs" / BASE
    if not (path / "checkpoints" / "2").is_dir():
        pretrain_tiny(shared_root, BASE, "training.total_steps=2")
    return path


@pytest.fixture
def root(tmp_path, shared_root, finished) -> Path:
    """A private root: runs/ of its own (so listings hold only this test's runs) and the
    shared tokenized data (``inspect`` rebuilds the batch)."""
    root = tmp_path / "root"
    (root / "runs").mkdir(parents=True)
    (root / "data").symlink_to(shared_root / "data", target_is_directory=True)
    return root


def copy_run(root: Path, finished: Path, name: str) -> Path:
    path = root / "runs" / name
    shutil.copytree(finished, path)
    return path


def snapshot(path: Path) -> dict[str, bytes | None]:
    """Every file's bytes and every folder (None) under ``path``."""
    return {
        p.relative_to(path).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(path.rglob("*"))
    }


def cli(root: Path, *args: str):
    """Run a command; check that it left every run folder byte-identical."""
    before = snapshot(root / "runs")
    done = run_cli(root, *args)
    assert snapshot(root / "runs") == before, f"{args[0]} changed a run folder"
    assert "Traceback" not in without_orbax_leftovers(done.stderr), done.stderr[-3000:]
    return done


def without_orbax_leftovers(stderr: str) -> str:
    """stderr without the tracebacks TensorStore's threads may print after a failed Orbax
    read ("Event loop is closed": they come from another thread, after our one line or
    before it; theseus holds stderr around the read and its close, which catches most)."""
    blocks = re.split(r"(?=Traceback \(most recent call last\):)", stderr)
    kept = [b for b in blocks if not (b.startswith("Traceback") and "Event loop is closed" in b)]
    return "".join(kept)


def one_error(done, fragment: str) -> str:
    """Exit 2 and exactly one ``error:`` line, the last one, holding ``fragment``."""
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2, done.stderr[-3000:]
    assert [line for line in lines if line.startswith("error:")] == lines[-1:], lines
    assert fragment in lines[-1], lines[-1]
    return lines[-1]


# --------------------------------------------------------------------- damaged job.json
def _truncated(data: bytes) -> bytes:
    return data[:100]


def _binary(data: bytes) -> bytes:
    return data[:50] + b"\xff\xfe\x00\x80" + data[50:]


def _a_list(data: bytes) -> bytes:
    return b"[1, 2]\n"


JOB_DAMAGE = [
    (_truncated, "job.json is not valid JSON: "),
    (_binary, "job.json is not UTF-8 text"),
    (_a_list, "job.json holds a JSON list, not an object"),
]


@pytest.mark.parametrize(("damage", "message"), JOB_DAMAGE, ids=["truncated", "binary", "list"])
def test_runs_lists_the_others_and_flags_a_run_with_a_damaged_job_json(
    root, finished, damage, message
):
    copy_run(root, finished, "good")
    broken = copy_run(root, finished, "broken") / "job.json"
    broken.write_bytes(damage(broken.read_bytes()))
    done = cli(root, "runs")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert rows["good"][1:4] == ["gpt/train/pretrain", "finished", "2"]  # the step reached
    assert rows["broken"][1:3] == ["-", "unreadable"]
    warnings = done.stderr.strip().splitlines()
    assert len(warnings) == 1 and str(broken) in warnings[0] and message in warnings[0]


def test_runs_flags_a_run_folder_without_job_json(root, finished):
    copy_run(root, finished, "good")
    bare = root / "runs" / "bare"
    bare.mkdir()
    shutil.copy(finished / "config.yaml", bare)
    shutil.copy(finished / "metrics.jsonl", bare)
    done = cli(root, "runs")
    assert done.returncode == 0, done.stderr[-3000:]
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert rows["good"][2] == "finished" and rows["bare"][2] == "unreadable"
    assert done.stderr.strip().splitlines() == [
        f"run 'bare' is unreadable: {bare / 'job.json'} is missing"
    ]


@pytest.mark.parametrize(("damage", "message"), JOB_DAMAGE, ids=["truncated", "binary", "list"])
def test_show_on_a_damaged_job_json_is_one_line(root, finished, damage, message):
    broken = copy_run(root, finished, "broken") / "job.json"
    broken.write_bytes(damage(broken.read_bytes()))
    done = cli(root, "show", "broken")
    assert one_error(done, message).startswith(f"error: {broken} ")
    assert done.stdout == ""


def test_inspect_on_a_truncated_job_json_is_one_line(root, finished):
    broken = copy_run(root, finished, "broken") / "job.json"
    broken.write_bytes(broken.read_bytes()[:100])
    done = cli(root, "inspect", "broken", "--step", "2", "--list")
    one_error(done, f"{broken} is not valid JSON")


# --------------------------------------------------------------------- damaged metrics.jsonl
def test_show_skips_a_metrics_line_with_invalid_bytes_and_names_it(root, finished):
    metrics = copy_run(root, finished, "bytes") / "metrics.jsonl"
    lines = metrics.read_bytes().splitlines(keepends=True)
    metrics.write_bytes(
        lines[0] + b'{"step": 1, "train/loss": 5.9\xff\xfe}\n' + b"".join(lines[2:])
    )
    done = cli(root, "show", "bytes")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("run bytes: gpt/train/pretrain [finished]\n")
    assert '"train/loss": 5.93' in done.stdout and '"val/loss"' in done.stdout
    assert done.stderr.strip().splitlines() == [f"{metrics}: skipped unreadable line 2 (not UTF-8)"]


def test_random_bytes_appended_to_metrics_are_named_by_runs_show_and_plot(root, finished, tmp_path):
    metrics = copy_run(root, finished, "tail") / "metrics.jsonl"
    with metrics.open("ab") as out:
        out.write(b"\x8f\xa0\x00\xc3garbage")  # no newline, and not text: not a torn write
    warning = f"{metrics}: skipped unreadable line 4 (not UTF-8)"
    for args in (["show", "tail"], ["runs"], ["plot", "tail", "--out", str(tmp_path / "t.png")]):
        done = cli(root, *args)
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stderr.strip().splitlines() == [warning], args
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"


def test_a_metrics_line_cut_short_by_a_crash_is_dropped_silently(root, finished):
    metrics = copy_run(root, finished, "cut") / "metrics.jsonl"
    data = metrics.read_bytes()
    metrics.write_bytes(data[: data.rindex(b'"val/loss"') + 8])  # the last line, half written
    done = cli(root, "show", "cut")
    assert done.returncode == 0 and done.stderr == "", done.stderr[-3000:]
    assert '"train/loss": 5.93' in done.stdout and '"val/loss"' not in done.stdout


def test_a_non_json_line_in_the_middle_is_skipped_and_named(root, finished):
    metrics = copy_run(root, finished, "mid") / "metrics.jsonl"
    lines = metrics.read_text().splitlines(keepends=True)
    metrics.write_text(lines[0] + '{"step": 1, "train/lo\n' + "".join(lines[1:]))
    warning = f"{metrics}: skipped unreadable line 2 (not JSON)"
    runs = cli(root, "runs")
    assert runs.returncode == 0 and runs.stderr.strip().splitlines() == [warning]
    row = next(line.split() for line in runs.stdout.splitlines() if line.split()[0] == "mid")
    assert row[2:5] == ["finished", "2", "5.9321"]  # 2 steps done; the last loss is step 1's
    show = cli(root, "show", "mid")
    assert show.returncode == 0 and show.stderr.strip().splitlines() == [warning]


# --------------------------------------------------------------------- plot --out
def test_plot_creates_the_missing_folders_of_out(root, finished, tmp_path):
    copy_run(root, finished, "good")
    out = tmp_path / "missing" / "folder" / "x.png"
    done = cli(root, "plot", "good", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"wrote {out}"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_into_a_folder_that_is_a_file_is_one_line(root, finished, tmp_path):
    copy_run(root, finished, "good")
    (tmp_path / "afile").write_text("not a folder")
    done = cli(root, "plot", "good", "--out", str(tmp_path / "afile" / "x.png"))
    one_error(done, f"cannot create the folder {tmp_path / 'afile'} for x.png")
    assert (tmp_path / "afile").read_text() == "not a folder"


# --------------------------------------------------------------------- inspect
def _cut_before_d_model(text: str) -> str:  # truncated at a line boundary
    return text[: text.index("  d_model:")]


def _cut_in_a_value(text: str) -> str:  # truncated inside "max_seq_len: 64"
    return text[: text.index("max_seq_len: 64") + len("max_seq_len: 6")]


CONFIG_DAMAGE = [
    (lambda t: t + "  bad: [unclosed\n", ["config.yaml is not valid YAML: "]),
    (lambda t: "", ["config.yaml is empty"]),
    (lambda t: "- a\n- b\n", ["config.yaml is a YAML list, not a mapping"]),
    (
        _cut_before_d_model,  # the defaults build another model: the checkpoint does not fit
        [" holds ", " but this config builds ", "config.yaml lacks ", "(model.d_model, "],
    ),
    (
        _cut_in_a_value,
        [
            "config.yaml: training.seq_len=32 is longer than model.max_seq_len=6; it lacks ",
            "is it truncated?",
        ],
    ),
]


@pytest.mark.parametrize(
    ("damage", "fragments"),
    CONFIG_DAMAGE,
    ids=["invalid-yaml", "empty", "a-list", "cut-at-a-line", "cut-in-a-value"],
)
def test_inspect_on_a_damaged_config_is_one_line_naming_it(root, finished, damage, fragments):
    config = copy_run(root, finished, "conf") / "config.yaml"
    config.write_text(damage(config.read_text()))
    done = cli(root, "inspect", "conf", "--step", "2", "--list")
    line = one_error(done, fragments[0])
    assert str(config) in line and all(fragment in line for fragment in fragments), line


def test_inspect_on_a_config_that_is_not_utf8_or_missing(root, finished):
    config = copy_run(root, finished, "binary") / "config.yaml"
    config.write_bytes(config.read_bytes()[:40] + b"\n\xff\xfe\n")
    one_error(cli(root, "inspect", "binary", "--step", "2"), f"{config} is not UTF-8 text (line")
    config = copy_run(root, finished, "gone") / "config.yaml"
    config.unlink()
    one_error(cli(root, "inspect", "gone", "--step", "2"), f"has no config.yaml ({config})")


def test_inspect_without_checkpoints_names_the_folder(root, finished):
    run = copy_run(root, finished, "nockpt")
    shutil.rmtree(run / "checkpoints")
    done = cli(root, "inspect", "nockpt", "--step", "2", "--list")
    one_error(
        done,
        "run 'nockpt' has no checkpoint at step 2; nearest checkpointed steps: none "
        f"(nothing in {run / 'checkpoints'})",
    )


def test_inspect_on_a_damaged_checkpoint_is_one_line(root, finished):
    run = copy_run(root, finished, "torn")
    step = run / "checkpoints" / "2"
    shutil.rmtree(step / "state")
    one_error(
        cli(root, "inspect", "torn", "--step", "2", "--list"),
        f"checkpoint {step} cannot be restored: ",
    )
    run = copy_run(root, finished, "short")
    step = run / "checkpoints" / "2"
    arrays = [p for p in (step / "state").rglob("*") if p.is_file() and "/d/" in p.as_posix()]
    biggest = max(arrays, key=lambda p: p.stat().st_size)
    biggest.write_bytes(biggest.read_bytes()[:1000])
    one_error(
        cli(root, "inspect", "short", "--step", "2", "--list"),
        f"checkpoint {step} cannot be restored: ",
    )


def test_inspect_on_an_intact_copy_works_and_writes_nothing_into_the_run(root, finished, tmp_path):
    copy_run(root, finished, "intact")
    out = tmp_path / "new" / "acts.npz"
    done = cli(
        root, "inspect", "intact", "--step", "2", "--module", "blocks.0.mlp", "--out", str(out)
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"wrote {out}: blocks.0.mlp/input0 (4, 32, 64)")
    assert out.is_file() and "lacks" not in done.stderr


# ------------------------------------------------------------------ a lost job.json
def test_a_run_without_job_json_says_how_to_recover_and_its_record_can_be_rebuilt(
    root, finished, tmp_path
):
    """Before: show, inspect, --branch, init.checkpoint, hf/export and generate all said only
    "no run named 'lost'" of a run whose job.json was gone and whose checkpoints were intact.
    Each now says what is wrong and how to recover; ``theseus rebuild-record`` makes the
    record again from config.yaml and the checkpoints, and the run opens."""
    from theseus.core.train.opening import OpenRunError, open_run
    from theseus.models.errors import ModelError
    from theseus.models.hf_jobs import check_export
    from theseus.models.hf_jobs_config import ExportConfig

    lost = copy_run(root, finished, "lost")
    record = (lost / "job.json").read_text()
    (lost / "job.json").unlink()
    says = (
        f"run 'lost' under {root} has no job.json (its record), but its folder holds "
        "checkpoints 2, config.yaml"
    )
    rebuild = f"or rebuild it from config.yaml and the checkpoints with `theseus rebuild-record lost --root {root}`"
    for args in (
        ["show", "lost"],
        ["run", "gpt/train/pretrain", "--name", "child", "--branch", "lost@2"],
    ):
        line = one_error(cli(root, *args), says)
        assert line.endswith(rebuild), line
    assert sorted(p.name for p in (root / "runs").iterdir()) == ["lost"]  # no failed run left
    # hf/export says so before its run folder is made; inspect, replay, init.checkpoint and
    # generate open the run through open_run
    export = ExportConfig(run="lost", dir=str(tmp_path / "out"))
    with pytest.raises(ModelError, match=re.escape(f"hf.run: {says}") + ".*" + re.escape(rebuild)):
        check_export(export, str(root))
    with pytest.raises(OpenRunError, match=re.escape(says) + ".*" + re.escape(rebuild)):
        open_run(str(root), "lost@2", what="init.checkpoint")

    done = run_cli(root, "rebuild-record", "lost")
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == (
        f"rebuilt {root}/runs/lost/job.json: job gpt/train/pretrain, newest checkpoint at step "
        "2; its parent and history are unknown"
    )
    rebuilt, original = json.loads((lost / "job.json").read_text()), json.loads(record)
    assert rebuilt["key"] == original["key"] and rebuilt["checkpoint_step"] == 2
    assert rebuilt["status"] == "rebuilt" and rebuilt["parent"] is None
    shown = cli(root, "show", "lost")
    assert shown.returncode == 0 and "run lost: gpt/train/pretrain [rebuilt]" in shown.stdout
    assert "checkpoints: 2" in shown.stdout


def test_a_record_rebuilt_without_a_log_needs_the_job_when_the_config_fits_several(root, finished):
    from theseus.core.errors import JobError
    from theseus.core.inspect.rebuild import rebuild_record
    from theseus.core.plugins import registries

    bare = copy_run(root, finished, "bare")
    (bare / "job.json").unlink()
    shutil.rmtree(bare / "logs")
    with pytest.raises(JobError) as caught:
        rebuild_record(str(root), "bare", None, registries())
    assert str(caught.value) == (
        "run 'bare': its config.yaml fits 2 jobs (gpt/train/pretrain, gpt/train/sft); name the "
        "run's job with --job KEY"
    )
    assert not (bare / "job.json").exists()
    with pytest.raises(JobError, match="job gpt/train/dpo has checkpoint, data, dpo, "):
        rebuild_record(str(root), "bare", "gpt/train/dpo", registries())
    assert (
        rebuild_record(str(root), "bare", "gpt/train/sft", registries())["key"] == "gpt/train/sft"
    )
