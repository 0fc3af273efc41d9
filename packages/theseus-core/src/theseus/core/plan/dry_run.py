"""``theseus run <training job> --dry-run [--target NAME]``: the step planned, nothing run.

The state is ``jax.eval_shape``'d, the step lowered against abstract arrays and compiled
(``plan_report``). Without a target the mesh is this machine's devices (on a CPU, when every
mesh axis is given and JAX has not started yet, that many simulated devices); with
``--target v5p-8 | h100x8 | ...`` it is the run's own sharding config over the target's
compile-only devices (``theseus.core.chips``), and the plan adds what fits, collectives
and an estimated step time on that chip. A step that does not fit its chip is reported
with the levers that would make it fit, then fails in one line. Every stage says what it
does on stderr while it runs (``progress``), and the plan ends with where its wall time
went: setting up, lowering, compiling, reading the program, the fit search.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from typing import Any

from theseus.core.chips.devices import compile_only_devices
from theseus.core.chips.targets import parse_target
from theseus.core.data.batch_plan import BatchPlan
from theseus.core.errors import TheseusError
from theseus.core.plan.fit_advice import advise
from theseus.core.plan.plan_format import format_report, rollout_lines, size
from theseus.core.plan.progress import Clock
from theseus.core.plan.recipe_summary import summary
from theseus.core.plugins import registries
from theseus.core.sharding.config import ShardingError, planned_devices
from theseus.core.train.configs import TrainJobConfig
from theseus.core.train.recipe import PRETRAIN, Recipe
from theseus.core.train.run_tokenizer import tokenizer_only

log = logging.getLogger("theseus.core.plan")


def simulate_devices(config: TrainJobConfig) -> None:
    """Ask for the mesh's device count on the CPU backend, while no backend has started
    (importing JAX is fine: its CPU client reads the count when it is created)."""
    count = planned_devices(config.sharding)
    flags = os.environ.get("XLA_FLAGS", "")
    if count is None or "xla_force_host_platform_device_count" in flags:
        return  # the mesh takes what there is, or the user chose the count
    if "jax" not in sys.modules:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()
        return
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", count)
    except RuntimeError:  # a backend has started: the mesh takes the devices there are
        pass


def vocab_size(config: TrainJobConfig, root: str, recipe: Recipe = PRETRAIN) -> tuple[int, str]:
    if config.model.vocab_size:
        return config.model.vocab_size, "model.vocab_size"
    if not recipe.reads_data:  # GRPO: no dataset, the starting weights' tokenizer
        try:
            return tokenizer_only(root, config, recipe).vocab_size, "the starting tokenizer"
        except TheseusError:  # not on disk here (a run to dispatch): the configured size
            return config.data.vocab_size, "data.vocab_size (no starting tokenizer here)"
    try:
        from theseus.core.train.setup import open_data

        sized = dataclasses.replace(config.data, verify="size")  # a plan reads no tokens
        rows = BatchPlan.of(config.training.global_batch_size)  # the target's is checked later
        opened = open_data(dataclasses.replace(config, data=sized), root, batch=rows)
        return opened.vocab_size, "tokenized data"
    except TheseusError:  # not tokenized yet: the configured tokenizer size
        return config.data.vocab_size, "data.vocab_size (data not tokenized yet)"


def target_devices(target: str) -> list[Any]:
    """The target's compile-only devices; JAX starts on the CPU (no local chip is used)."""
    parse_target(target)  # a bad name fails before JAX starts
    if "jax" not in sys.modules:
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    return compile_only_devices(target)


def plan(
    config: TrainJobConfig,
    root: str,
    target: str | None = None,
    recipe: Recipe = PRETRAIN,
) -> dict[str, Any]:
    """The plan of ``recipe``'s step (the job's) as a dict; advice added when the step does
    not fit its chip. What the job adds to the step (GRPO's rollouts) is planned first: when
    it cannot fit, the step is not compiled (``step_compiled`` false) and the plan holds only
    that part, the one to change first."""
    from theseus.core.plan.plan_report import report
    from theseus.core.train.job_layout import job_layout
    from theseus.core.train.setup import TrainSetup

    clock = Clock()
    where = target or "this machine"
    with clock.part("setup", f"setting up the step for {where}: devices, model, shardings"):
        devices = target_devices(target) if target else None
        if devices is None:
            simulate_devices(config)
        vocab, source = vocab_size(config, root, recipe)
        regs = registries()

        def make(changed: TrainJobConfig) -> Any:
            layout = job_layout(changed, devices) if devices is not None else None
            return TrainSetup.build(changed, regs, vocab, recipe, layout=layout)

        setup = make(config)
    added: dict[str, Any] = {}
    if recipe.plan is not None:
        with clock.part("job", "planning what the job adds to its step"):
            added = dict(recipe.plan(setup))
    if added.get("rollouts") and not added["rollouts"]["fits"]:
        return {**added, "step_compiled": False, **clock.fields()}
    result = report(setup, source, target or "", clock)
    result["recipe"] = summary(config)
    result.update(added)
    if result.get("fits") is False and result.get("hbm_bytes"):
        log.info("dry run: the step does not fit; looking for a change that makes it fit")
        with clock.part("fit search"):
            result["advice"] = advise(config, setup, make, result["hbm_bytes"])
    result.update(clock.fields())
    return result


def dry_run(
    config: TrainJobConfig,
    root: str,
    as_json: bool = False,
    target: str | None = None,
    recipe: Recipe = PRETRAIN,
) -> dict[str, Any]:
    result = plan(config, root, target, recipe)
    if as_json:
        print(json.dumps(result, sort_keys=True))
    elif result.get("step_compiled", True):
        print(format_report(result))
    else:
        print("\n".join(rollout_lines(result["rollouts"])))
    if result.get("fits") is False:
        raise ShardingError(not_fitting(result))
    rollouts = result.get("rollouts")
    if rollouts and not rollouts["fits"]:
        raise ShardingError(rollouts_not_fitting(rollouts))
    return result


def rollouts_not_fitting(rollouts: dict[str, Any]) -> str:
    """One line: the rollouts' need beside the trainer's state, and the levers."""
    return (
        f"the rollouts need {size(rollouts['peak_bytes']).strip()} per device with "
        f"{rollouts['rows_per_pass']} rows decoded at once, over the "
        f"{size(rollouts['budget_bytes']).strip()} a device may fill: lower "
        "grpo.max_new_tokens or grpo.sample_rows, or split the model over more devices"
    )


def not_fitting(result: dict[str, Any]) -> str:
    where = f"a {result['device_kind']} chip" if result.get("target") else "a device"
    line = (
        f"the step needs {size(result.get('peak_bytes', 0)).strip()} per device but {where} "
        f"has {size(result['hbm_bytes']).strip()}"
    )
    fixes = [fix_label(a) for a in result.get("advice", []) if a["fits"]]
    if fixes:
        return f"{line}: it fits with {' or '.join(fixes)}"
    return f"{line}: shard more (sharding.strategy=fsdp), use sharding.remat or a smaller batch"


def fix_label(advice: dict[str, Any]) -> str:
    """A lever as the overrides to type (several: "all of ... together")."""
    change = advice["change"]
    return f"all of {change} together" if " " in change else change
