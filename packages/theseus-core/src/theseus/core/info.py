"""The ``core/info`` job: what is installed and which devices JAX sees."""

from __future__ import annotations

import json

from theseus.core.jobs import Job
from theseus.core.rundir import package_versions


class InfoJob(Job):
    def __call__(self) -> dict:
        import jax

        info = {
            "versions": package_versions(),
            "plugins": [p.name for p in self.context.registries.plugins],
            "devices": [str(d) for d in jax.devices()],
        }
        print(json.dumps(info, indent=2))
        (self.run.path / "info.json").write_text(json.dumps(info, indent=2))
        return info
