"""Fixtures for core tests: extra plugins installed through real entry points."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.plugin_factory import write_plugin

WORKFLOW_PLUGIN = """
import json
from dataclasses import dataclass
from theseus.core.components import JobSpec, option
from theseus.core.hookspecs import hookimpl
from theseus.core.jobs import Job, Prerequisite


@dataclass
class NeedsValues:
    corpus: str = option(help="name of the corpus (required)")
    size: int = option(help="how many items (required)")
    label: str = option("x", "a label")


@dataclass
class Count:
    upto: int = option(3, "count to this")


class Producer(Job):
    def __call__(self):
        out = self.run.path / "produced.json"
        calls = json.loads(out.read_text())["calls"] + 1 if out.exists() else 1
        upto = self.config.count.upto if hasattr(self.config, "count") else None
        out.write_text(json.dumps({"calls": calls, "upto": upto}))
        return calls


class Consumer(Job):
    @classmethod
    def prerequisites(cls, config, root):
        return [Prerequisite("wf/produce", f"produce-{config.count.upto}", (f"count.upto={config.count.upto}",))]

    def __call__(self):
        from pathlib import Path
        produced = Path(self.context.root) / "runs" / f"produce-{self.config.count.upto}" / "produced.json"
        data = json.loads(produced.read_text())
        (self.run.path / "consumed.json").write_text(json.dumps(data))
        return data


class Fails(Job):
    def __call__(self):
        raise ValueError("deliberate failure")


@hookimpl
def theseus_register_jobs(register, registries):
    register(JobSpec("wf/needs", "wf_plugin:Producer", "needs two values", {"need": NeedsValues}))
    register(JobSpec("wf/produce", "wf_plugin:Producer", "produces a file", {"count": Count}))
    register(JobSpec("wf/consume", "wf_plugin:Consumer", "consumes the file", {"count": Count}))
    register(JobSpec("wf/fails", "wf_plugin:Fails", "always fails", {"count": Count}))
    register(
        JobSpec("wf/once", "wf_plugin:Producer", "one-shot", {"count": Count}, resumes=False)
    )
"""


@pytest.fixture
def workflow_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    write_plugin(site, "wf-dist", "wf", "wf_plugin", WORKFLOW_PLUGIN)
    return site


@pytest.fixture
def workflow_registries(workflow_site: Path, monkeypatch: pytest.MonkeyPatch):
    """The process registries with the workflow plugin installed (restored afterwards)."""
    from theseus.core import plugins

    monkeypatch.syspath_prepend(str(workflow_site))
    registries = plugins.registries(reload=True)
    yield registries
    monkeypatch.undo()
    plugins.registries(reload=True)
