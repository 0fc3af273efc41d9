"""The quick API: build a job by key, adjust its typed config, create it, call it.

from theseus.quick import quick
with quick("/runs") as q:
    q.build("gpt/train/pretrain", "my-training-job", config="base.yaml")  # config: optional
    q.config.training.per_device_batch_size = 8
    job = q.create()
    job()
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

from theseus.core.config import ConfigView
from theseus.core.config_sources import ConfigSource
from theseus.core.errors import TheseusError
from theseus.core.runner import PreparedRun, default_root, prepare


class QuickError(TheseusError):
    """The quick API was used out of order."""


class Quick:
    """A session bound to one root directory."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = str(root or default_root())
        self._prepared: PreparedRun | None = None

    def __enter__(self) -> Quick:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._prepared = None

    def build(
        self,
        key: str,
        name: str | None = None,
        overrides: Iterable[str] = (),
        *,
        fresh: bool = False,
        branch: str | None = None,
        config: ConfigSource | Iterable[ConfigSource] = (),
    ) -> Quick:
        """Resolve job ``key`` as run ``name`` (default: the key with '-' for '/').

        ``config``: a YAML config file (or a mapping), or several applied left to right,
        before ``overrides``; as ``theseus run KEY --config FILE ... key=value``.
        """
        configs = [config] if isinstance(config, (str, os.PathLike, Mapping)) else list(config)
        self._prepared = prepare(
            key,
            overrides,
            root=self.root,
            name=name,
            fresh=fresh,
            branch=branch,
            configs=configs,
        )
        return self

    @property
    def config(self) -> ConfigView:
        """The job's strict, typed config (an OmegaConf tree behind a checking view)."""
        if self._prepared is None:
            raise QuickError("q.config is not available before q.build(job_key, run_name)")
        return ConfigView(self._prepared.tree)

    def create(self) -> PreparedRun:
        """Validate the whole config and return the job, ready to call."""
        if self._prepared is None:
            raise QuickError("q.create() needs q.build(job_key, run_name) first")
        self._prepared.tree.validate()
        return self._prepared


def quick(root: str | os.PathLike | None = None) -> Quick:
    return Quick(root)
