"""What a plan says about how the run trains: its length, learning-rate schedule, evaluation
and checkpoint cadence and where its metrics go, with the derived values resolved (a
warm-up of ``-1`` is printed as its count), and one warning line when a long run keeps
values sized for a short one. Cheap to import (no JAX): ``theseus submit --dry-run`` prints
it too.
"""

from __future__ import annotations

from typing import Any

from theseus.core.optim.configs import warmup_steps
from theseus.core.train.configs import eval_every

#: a run of this many steps or more is "long": values sized for a 100-step run are warned of
LONG_RUN = 2000
#: ... a warm-up under this share of the schedule, more evaluations or checkpoints than this
SHORT_WARMUP = 0.005
MANY = 100


def summary(
    config: Any,
    metrics_at: str = "the run folder (metrics.jsonl)",
    idle_loggers: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The run's recipe as plain numbers (``config``: the typed groups ``training``,
    ``optimizer``, ``schedule``, ``eval``, ``checkpoint``, ``logging``); ``metrics_at``
    names where the metrics log is written; ``idle_loggers``: logger -> the credential a
    launch forwards for it while ``logging.loggers`` leaves it off (warned of)."""
    training, schedule = config.training, config.schedule
    steps = training.steps()
    span = schedule.total_steps or steps
    peak = config.optimizer.learning_rate
    found: dict[str, Any] = {
        "steps": steps,
        "tokens_per_step": training.global_batch_size * training.seq_len,
        "optimizer": config.optimizer.name,
        "learning_rate": peak,
        "schedule": schedule.name,
        "schedule_steps": span,
        "warmup_steps": warmup_steps(schedule, span),
        "decay": decay_text(schedule, peak, span),
        "eval_every": eval_every(config.eval.every, steps),
        "eval_batches": config.eval.batches,
        "checkpoint_every": config.checkpoint.every,
        "checkpoint_keep_last": config.checkpoint.keep_last,
        "log_every": config.logging.every,
        "loggers": list(config.logging.loggers),
        "metrics_at": metrics_at,
    }
    warnings = [toy_values(found, config)]
    for logger, secret in sorted((idle_loggers or {}).items()):
        warnings.append(
            f"{secret} is forwarded but logging.loggers leaves {logger} off: metrics go only "
            f"to the run folder (add 'logging.loggers=[{logger}]')"
        )
    found["warnings"] = [w for w in warnings if w]
    return found


def rate(value: float) -> str:
    """A learning rate as people write one: 0.02, 3e-4, 1.5e-5."""
    if value == 0 or value >= 0.01:
        return f"{value:.3g}"
    mantissa, exponent = f"{value:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def amount(count: int) -> str:
    """A token count: 204,800; 52.4M; 9.44B."""
    if count >= 1e9:
        return f"{count / 1e9:.3g}B"
    return f"{count / 1e6:.3g}M" if count >= 1e6 else f"{count:,}"


def decay_text(schedule: Any, peak: float, span: int) -> str:
    """After the warm-up: what the built-in schedules do over ``span`` steps."""
    final = rate(peak * getattr(schedule, "final_fraction", 1.0))
    if schedule.name == "cosine":
        return f"cosine decay to {final} at step {span}"
    if schedule.name == "wsd":
        decay = max(1, round(span * schedule.decay_fraction))
        return f"constant, then linear decay to {final} over steps {span - decay}-{span}"
    if schedule.name in ("constant", "linear-warmup"):
        return "constant"
    return f"the {schedule.name} schedule over {span} steps"


def toy_values(found: dict[str, Any], config: Any) -> str:
    """One line naming the values of a long run that are sized for a short one ("": none)."""
    steps = found["steps"]
    if steps < LONG_RUN:
        return ""
    problems = []
    warmup, span = found["warmup_steps"], found["schedule_steps"]
    if warmup < SHORT_WARMUP * span:
        problems.append(
            f"schedule.warmup_steps={config.schedule.warmup_steps} ({warmup / span:.1%} of the "
            "schedule; -1 takes 1%)"
        )
    every = found["eval_every"]
    if every and steps / every > MANY:
        problems.append(f"eval.every={every} ({steps // every} evaluations; -1 takes 20)")
    every = found["checkpoint_every"]
    if every and steps / every > MANY:
        problems.append(f"checkpoint.every={every} ({steps // every} checkpoints)")
    if not problems:
        return ""
    return f"a {steps}-step run with values sized for a short one: {', '.join(problems)}"


def lines(found: dict[str, Any]) -> list[str]:
    """The summary as plan lines (label in 12 columns, as the rest of the plan)."""
    steps, span, warmup = found["steps"], found["schedule_steps"], found["warmup_steps"]
    tokens = steps * found["tokens_per_step"]
    share = f" ({warmup / span:.1%})" if warmup else ""
    beyond = f"; steps after {span} at its final lr" if span < steps else ""
    every = found["eval_every"]
    evaluations = (
        f"every {every} steps ({(steps - 1) // every + 1} in the run, the last at the end)"
        if every
        else "at the end"
    )
    saves = (
        f"every {found['checkpoint_every']} steps"
        if found["checkpoint_every"]
        else "at the end only"
    )
    loggers = "".join(f" and {name}" for name in found["loggers"])
    out = [
        f"steps       {steps} of {found['tokens_per_step']:,} tokens ({amount(tokens)} tokens)",
        f"schedule    {found['optimizer']} at peak lr {rate(found['learning_rate'])}: warm-up "
        f"{warmup} steps{share}, then {found['decay']}{beyond}",
        f"evaluation  {evaluations} over {found['eval_batches']} batches; checkpoints {saves}, "
        f"the last {found['checkpoint_keep_last']} kept",
        f"metrics     every {found['log_every']} steps to {found['metrics_at']}{loggers}",
    ]
    return out + [f"warning     {warning}" for warning in found.get("warnings", [])]
