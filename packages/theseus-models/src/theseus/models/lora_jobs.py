"""The ``lora/merge`` job: a LoRA run's adapters folded into its base, as a plain run.

``theseus run lora/merge merge.run=RUN[@STEP] --name NEW`` makes run NEW a run of RUN's own
job (``llama/train/sft``, ...) at step 0, so everything that takes a training run takes it
(``--branch NEW``, ``init.checkpoint=NEW``, ``generate.run=NEW``, ``hf/export``, evaluation,
time travel):

    <run>/config.yaml     RUN's config with lora.rank=0 and no init.hf / init.checkpoint (the
                          weights are in the checkpoint; model.* was resolved already)
    <run>/job.json        RUN's job key, merged_from RUN@STEP
    <run>/checkpoints/0   every parameter (float32): the base with ``kernel + (alpha / rank)
                          * A @ B`` in each adapted layer, and a fresh optimizer state

The merge is done in float32 whatever ``lora.base_dtype`` stored the base in (the adapted
run computed ``base + A @ B`` from that stored base, so its outputs are kept up to the sums'
rounding). ``hf/export hf.merge=true`` writes the same merged weights as a Hugging Face
folder.
"""

from __future__ import annotations

import logging
from typing import Any

from theseus.core.adapters import split_trainable
from theseus.core.errors import TheseusError
from theseus.core.jobs import Job, parse_reference
from theseus.core.rundir import RunDir, write_atomic
from theseus.core.runner import config_for, job_spec
from theseus.core.train.opening import open_run, recipe_of
from theseus.core.train.state import split_params
from theseus.core.train.step_zero import write_step_zero
from theseus.core.train.weights import placed_like
from theseus.models.errors import ModelError

log = logging.getLogger(__name__)


def saved_lora_rank(root: str, reference: str, what: str) -> int | None:
    """``lora.rank`` in the saved config of run ``RUN[@STEP]``; ``None`` when it cannot be
    read here (no such run, no config: ``open_run`` says so)."""

    name, _ = parse_reference(reference, what)
    try:
        saved = RunDir(root, name).read_config()
    except TheseusError:
        return None
    lora = saved.get("lora") if isinstance(saved, dict) else None
    return int(lora.get("rank") or 0) if isinstance(lora, dict) else 0


def merged_model(model: Any) -> Any:
    """``model`` (a LoRA model) with every adapter folded into its kernel, in float32."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    graphdef, params, rest = split_params(model)
    params = jax.tree.map(
        lambda x: x.astype(jnp.float32) if jnp.issubdtype(x.dtype, jnp.floating) else x, params
    )
    merged = nnx.merge(graphdef, params, rest)
    if hasattr(merged, "merge_adapters"):
        merged.merge_adapters()
    for name in ("family", "special_tokens"):
        if hasattr(model, name):
            setattr(merged, name, getattr(model, name))
    return merged


def plain_params(model: Any) -> Any:
    """The parameters of ``model`` that are not adapters: what the unadapted model holds."""
    from flax import nnx

    return split_trainable(nnx.split(model, nnx.Param, ...)[1], True)[1]


class MergeJob(Job):
    """Typed config: ``merge`` (:class:`~theseus.models.hf_jobs_config.MergeConfig`)."""

    @classmethod
    def prerequisites(cls, config: Any, root: str) -> list:
        """No other job; a run that trained no adapters is refused here, before the run
        folder exists."""
        rank = saved_lora_rank(root, config.merge.run, "merge.run")
        if rank == 0:
            raise ModelError(
                f"merge.run: run {config.merge.run!r} trained no adapters (lora.rank=0): its "
                "checkpoints hold every weight already; branch or export it as it is"
            )
        return []

    def __call__(self) -> dict[str, Any]:

        regs, run = self.context.registries, self.run
        opened = open_run(
            self.context.root,
            self.config.merge.run,
            registries=regs,
            what="merge.run",
            error=ModelError,
        )
        if opened.config.lora.rank <= 0:
            raise ModelError(f"merge.run: run {opened.run.name!r} trained no adapters")
        source = f"{opened.run.name}@{opened.step}"
        weights = plain_params(merged_model(opened.model))
        tree = config_for(job_spec(opened.key, regs), regs, [], opened.run.read_config())
        tree.apply([("lora.rank", 0), ("init.hf", ""), ("init.checkpoint", "")])
        config_type = type(opened.config)  # the job's: DPO's has its dpo group
        config = tree.to_object(config_type)
        if not config.model.vocab_size:  # taken from the data by RUN: keep it with the run
            tree.apply([("model.vocab_size", int(opened.model.config.vocab_size))])
            config = tree.to_object(config_type)
        if run.checkpoint_dir.exists():  # an attempt that failed
            import shutil

            shutil.rmtree(run.checkpoint_dir)
        count = write_step_zero(
            config,
            regs,
            run,
            lambda like: placed_like(weights, like, f"merge.run={source}"),
            {"merged_from": source},
            recipe_of(opened.job_class, config),
        )
        write_atomic(run.config_path, tree.to_yaml())
        run.update_record(key=opened.key, merged_from=source, checkpoint_step=0)
        print(
            f"merged the adapters of run {source} into its base as {opened.key} run "
            f"{run.name} at step 0 ({count / 1e6:.3g}M parameters); export it with: theseus "
            f"run hf/export hf.run={run.name}"
        )
        return {"run": run.name, "key": opened.key, "merged_from": source, "parameters": count}
