"""What a compiled training step computes, as ``bench/scale_vs_maxtext.py`` states it for
each side of a row: its strategy (the mesh axes over more than one chip), whether a mixture
is dropless (None for a dense model), its remat policy and its rows per chip. A row compares
the same work when both sides say the same."""

from __future__ import annotations

import re
from typing import Any

WORK_KEYS = ("strategy", "dropless", "remat", "batch")


def strategy_of_mesh(mesh: str) -> str:
    """``fsdp 4 x expert 8`` from ``data=1 x fsdp=4 x expert=8 x tensor=1``."""
    axes = re.findall(r"(\w+)=(\d+)", mesh)
    split = [f"{name} {size}" for name, size in axes if int(size) > 1]
    return " x ".join(split) or "one device"


def theseus_work(plan: dict[str, Any]) -> dict[str, Any]:
    """The work of theseus's plan (``plan_report.report``'s dict): its experts line says
    whether tokens are dropped."""
    experts = next((line for line in plan.get("execution", []) if line.startswith("experts:")), "")
    dropless = (
        None
        if experts in ("", "experts: none (no experts (a dense model))")
        else ("dropped" not in experts)
    )
    return {
        "strategy": strategy_of_mesh(plan.get("mesh", "")),
        "dropless": dropless,
        "remat": plan.get("remat"),
        "batch": plan.get("per_device_batch"),
    }


def maxtext_work(chips: int, knobs: str, remat: str, per_chip: int) -> dict[str, Any]:
    """The work of MaxText's run from its settings (``knobs``: run.sh's EXTRA): fsdp over
    the chips the expert axis leaves (``ici_expert_parallelism``); a mixture dropless unless
    a ``capacity_factor`` above 0 is set (its default, -1, is dropless)."""
    settings = dict(re.findall(r"(\w+)=(\S+)", knobs))
    experts = int(settings.get("ici_expert_parallelism", "1"))
    strategy = f"fsdp {chips // experts}" + (f" x expert {experts}" if experts > 1 else "")
    mixture = int(settings.get("num_experts", "1")) > 1
    dropless = float(settings.get("capacity_factor", "-1")) <= 0 if mixture else None
    return {"strategy": strategy, "dropless": dropless, "remat": remat, "batch": per_chip}


def compared(theseus: dict[str, Any] | None, maxtext: dict[str, Any] | None) -> dict[str, Any]:
    """The row's ``work`` (each key one value where both sides agree, else both sides') and
    ``same_work``; an unknown side's work is unknown: not the same."""
    if not theseus or not maxtext:
        return {"work": theseus or maxtext or {}, "same_work": False}
    work: dict[str, Any] = {}
    for key in WORK_KEYS:
        mine, theirs = theseus.get(key), maxtext.get(key)
        work[key] = mine if mine == theirs else {"theseus": mine, "maxtext": theirs}
    same = all(theseus.get(k) == maxtext.get(k) for k in WORK_KEYS)
    return {"work": work, "same_work": same}
