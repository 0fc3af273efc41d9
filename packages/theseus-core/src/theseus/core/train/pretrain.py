"""The training jobs: pretraining on packed tokens, SFT on padded chat rows."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from theseus.core.errors import JobError
from theseus.core.jobs import Job, Prerequisite, parse_reference
from theseus.core.rundir import RunDir
from theseus.core.train.configs import TrainJobConfig

log = logging.getLogger(__name__)


def check_init(config: TrainJobConfig, root: str) -> None:
    """``init.checkpoint`` must name a run with checkpoints; ``init.hf`` a folder with a
    config.json that the model config agrees with (the config filled it, see ``hf_init``);
    LoRA and DPO need one of them (:mod:`theseus.core.train.starting_weights`)."""
    from theseus.core.train.starting_weights import check_starting_weights

    check_starting_weights(config)
    if config.init.checkpoint:
        name, _ = parse_reference(config.init.checkpoint, "init.checkpoint")
        if not RunDir(root, name).checkpoint_dir.is_dir():
            raise JobError(f"init.checkpoint: run {name!r} has no checkpoints under {root}/runs")
    if config.init.hf:
        from theseus.core.train.hf_init import check_model_against_hf

        if not Path(config.init.hf).is_dir():
            raise JobError(f"init.hf: {config.init.hf} is not a directory of Hugging Face weights")
        if not (Path(config.init.hf) / "config.json").is_file():
            raise JobError(f"init.hf: {config.init.hf} has no config.json")
        check_model_against_hf(config.model, config.init.hf)


def check_evaluations(config: TrainJobConfig) -> None:
    """Unknown ``eval.tasks`` or options fail at start-up, not at the first evaluation."""
    from theseus.core.evaluate.runner import check
    from theseus.core.plugins import registries

    if config.eval.tasks:
        check(config.eval.tasks, registries(), config.eval.options)


class PretrainJob(Job):
    config_type = TrainJobConfig
    layout = "packed"  # how the data loader lays out rows: packed documents or padded chats

    @classmethod
    def prerequisites(cls, config: TrainJobConfig, root: str) -> list[Prerequisite]:
        from theseus.core.data.api import tokenize_prerequisites
        from theseus.core.plugins import registries
        from theseus.core.train.loggers import check_loggers
        from theseus.core.train.profile import parse_steps

        check_init(config, root)  # before any prerequisite spends time
        check_evaluations(config)
        parse_steps(config.logging.profile_steps)
        check_loggers(registries(), config.logging.loggers, config)  # e.g. W&B credentials
        return tokenize_prerequisites(config.data, root)

    @classmethod
    def dry_run(cls, config: TrainJobConfig, root: str, as_json: bool = False) -> Any:
        """Mesh, abstract state, per-device memory and FLOPs, printed; nothing is allocated."""
        from theseus.core.sharding.memory import dry_run

        return dry_run(config, root, as_json)

    def __call__(self) -> dict[str, Any]:
        from theseus.core.sharding.distributed import initialize_from_env

        initialize_from_env()
        from theseus.core.train.setup import TrainSetup, open_data
        from theseus.core.train.trainer import Trainer

        data = open_data(self.config, self.context.root, self.layout, run=self.run)
        setup = self.setup(TrainSetup, data.vocab_size)
        summary = Trainer(setup, data, self.context).fit()
        finite = {
            k: v if not isinstance(v, float) or math.isfinite(v) else None
            for k, v in summary.items()
        }
        text = json.dumps(finite, indent=2, allow_nan=False)  # always valid JSON (NaN -> null)
        (self.run.path / "summary.json").write_text(text + "\n")
        log.info("finished %s: %s", self.run.name, summary)
        return summary

    def setup(self, setup_class: Any, vocab_size: int) -> Any:
        """The run's ``TrainSetup`` (a job with another objective overrides this)."""
        return setup_class.build(self.config, self.context.registries, vocab_size)


class SFTJob(PretrainJob):
    layout = "padded"
