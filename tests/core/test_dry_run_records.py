"""A dry run plans the config as given and never reads, checks or writes a run's records: a
run of the same name that exists (of another config, or of another job) is left alone and
does not block the plan (``tests/chips/test_dry_run_target.py`` plans for a chip past a run
of the same name with another model)."""

from __future__ import annotations

from theseus.core.jobs import default_run_name
from theseus.core.plugins import registries
from theseus.core.rundir import RunDir
from theseus.core.runner import config_for, job_spec, prepare


def snapshot(root) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted((root / "runs").rglob("*")) if p.is_file()}


def test_every_job_plans_past_a_run_of_its_name_that_belongs_to_another_job(root):
    """Without ``dry_run`` each of these is refused ("belongs to job ..., not ...")."""
    regs = registries()
    keys = list(regs.jobs.names())
    assert len(keys) > 10, keys
    for index, key in enumerate(keys):
        other = keys[index - 1]  # a run of another job under this job's default name
        RunDir(root, default_run_name(key)).create(other, "x: 1\n", None)
    before = snapshot(root)
    for key in keys:
        prepare(key, [], root=root, name=default_run_name(key), dry_run=True)  # not "x: 1"
    assert snapshot(root) == before


def test_a_branch_dry_run_into_a_taken_name_plans_the_parents_config_and_writes_nothing(root):
    """Without ``dry_run`` refused: "run 'fit' already exists ... branch into a new --name"."""
    regs = registries()
    saved = config_for(job_spec("example/fit-line", regs), regs, ["task.steps=7"])
    RunDir(root, "fit").create("example/fit-line", saved.to_yaml(), None)
    before = snapshot(root)
    branched = prepare("example/fit-line", [], root=root, name="fit", branch="fit", dry_run=True)
    assert branched.config.task.steps == 7  # from the parent's saved config
    fresh = prepare("example/fit-line", [], root=root, name="fit", fresh=True, dry_run=True)
    assert fresh.config.task.steps == 300  # the job's default: the run is not read
    assert snapshot(root) == before
