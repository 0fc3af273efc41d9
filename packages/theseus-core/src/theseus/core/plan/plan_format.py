"""The dry run's plan as text for a person (``--json`` prints the dict itself)."""

from __future__ import annotations

from typing import Any

from theseus.core.plan import recipe_summary

GiB = 1024**3


def size(n: float) -> str:
    if n >= GiB / 10:
        return f"{n / GiB:9.3f} GiB"
    return f"{n / 1024**2:9.1f} MiB" if n >= 1024**2 else f"{n / 1024:9.1f} KiB"


def execution_lines(plan: list[str]) -> list[str]:
    """The execution plan's lines but its remat (printed above), under one heading."""
    shown = [line for line in plan if not line.startswith("remat:")]
    return [f"{'plan' if i == 0 else '':<12}{line}" for i, line in enumerate(shown)]


def advice_line(advice: dict[str, Any]) -> str:
    """One lever of the fit search: what it compiled to, or why it was not compiled."""
    change = advice["change"]
    label = f"all of {change} together" if " " in change else change
    peak = f"peak {size(advice['peak_bytes']).strip()}" if advice.get("peak_bytes") else ""
    answer = "fits" if advice["fits"] else advice.get("problem", "does not fit")
    speed = ""
    if "step_seconds_estimate" in advice:
        speed = (
            f"estimate {advice['step_seconds_estimate'] * 1e3:.4g} ms/step, predicted MFU "
            f"{100 * advice['predicted_mfu']:.1f}%"
        )
    took = f"built and compiled in {advice['seconds']:.1f} s" if "seconds" in advice else ""
    return f"  with {label}: {', '.join(p for p in (peak, answer, speed, took) if p)}"


def collectives_line(r: dict[str, Any]) -> str:
    """The collectives' time and how much of it the schedule hides behind compute."""
    total, hidden = r["collective_seconds_estimate"], r["collective_seconds_hidden"]
    return (
        f"collectives {total * 1e3:.3g} ms, {hidden * 1e3:.3g} ms hidden behind compute, "
        f"{r['collective_seconds_exposed'] * 1e3:.3g} ms exposed"
    )


def time_line(r: dict[str, Any]) -> str:
    """Where the plan's wall time went; the parts add up to the total."""
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in r["seconds"].items())
    return f"time        {r['wall_seconds']:.1f} s to plan, after start-up: {parts}"


def format_report(r: dict[str, Any]) -> str:
    lines = []
    if r.get("target"):
        lines.append(
            f"target      {r['target']}: {r['devices']} x {r['device_kind']} on {r['hosts']} "
            f"host(s), compiled for the chip, nothing run"
        )
    lines += [
        f"mesh        {r['mesh']} ({r['devices']} x {r['device_kind']}), strategy {r['strategy']}, "
        f"remat {r['remat']}",
        f"model       {r['parameters'] / 1e6:.1f}M parameters, vocab {r['vocab']}, "
        f"attention {r['attention']}, dtype {r['dtype']}",
        f"batch       {r['batch']}"
        + (
            f", loss over {r['loss_chunks']} pieces of the sequence"
            if r.get("loss_chunks", 1) > 1
            else ""
        ),
        *([f"remat       {r['remat']}: {r['remat_reason']}"] if r.get("remat_reason") else []),
        *execution_lines(r.get("execution", [])),
        "per device:",
        f"  parameters             {size(r['params_bytes'])}",
        *(
            [f"    of which experts     {size(r['expert_params_bytes'])}"]
            if r.get("expert_params_bytes")
            else []
        ),
        f"  optimizer state        {size(r['opt_bytes'])}",
        f"  batch                  {size(r['batch_bytes'])}",
    ]
    if "temp_bytes" in r:
        lines += [
            f"  activations + temps    {size(r['temp_bytes'])}   (compiled step, memory analysis)",
            f"  total                  {size(r['total_bytes'])}   (arguments + outputs - donated + temps)",
        ]
    elif "peak_bytes" in r:
        lines.append(f"  total                  {size(r['peak_bytes'])}   (the compiler's count)")
    else:
        lines.append("  activations            n/a (the compiler gives no memory analysis)")
    if "hbm_bytes" in r:
        verdict = (
            "fits" if r.get("fits") else f"does NOT fit: over by {size(r['over_bytes']).strip()}"
        )
        lines.append(f"  device memory          {size(r['hbm_bytes'])}   {verdict}")
    lines += [advice_line(advice) for advice in r.get("advice", [])]
    if r.get("collective_bytes") is not None:
        kinds = ", ".join(f"{k} {size(v).strip()}" for k, v in r["collective_bytes"].items())
        lines.append(f"collectives {kinds or 'none'} per step per device (compiled HLO)")
    compute = (
        f"compute     {r['flops_per_step_model'] / 1e9:.4g} GFLOP/step (model), "
        f"{r['flops_per_step_program'] / 1e9:.4g} (traced program)"
    )
    if "flops_per_step_hlo" in r:
        compute += f", {r['flops_per_step_hlo'] / 1e9:.4g} (compiled HLO)"
    lines.append(
        compute if "seconds" in r else f"{compute}, compiled in {r['compile_seconds']:.1f} s"
    )
    if "step_seconds_estimate" in r:
        lines.append(
            f"estimate    {r['step_seconds_estimate'] * 1e3:.4g} ms/step, predicted MFU "
            f"{100 * r['predicted_mfu']:.1f}%, {collectives_line(r)} ({r['estimate_method']})"
        )
    if "recipe" in r:
        lines += recipe_summary.lines(r["recipe"])
    if "rollouts" in r:
        lines += rollout_lines(r["rollouts"])
    if "seconds" in r:
        lines.append(time_line(r))
    return "\n".join(lines)


def rollout_lines(r: dict[str, Any]) -> list[str]:
    """A GRPO run's rollouts (``recipes/grpo_plan.py``)."""
    verdict = "fits" if r["fits"] else "does NOT fit"
    if r["budget_bytes"]:
        verdict += f" in {size(r['budget_bytes']).strip()}"
    lines = [
        f"rollouts    {r['rows']} rows x {r['new_tokens']} new tokens, {r['passes']} pass(es) of "
        f"{r['rows_per_pass']} rows, cache of {r['cache_slots']} slots read by {r['reader']}",
        f"  KV cache per device    {size(r['kv_cache_bytes'])}   (one pass's rows)",
        f"  weights for decoding   {size(r['weight_bytes'])}   (in their compute dtype)",
        f"  peak beside the state  {size(r['peak_bytes'])}   {verdict}",
    ]
    if "turn_seconds_estimate" in r:
        measured = (
            f"at {r['roofline_fraction']:.2f} of it, as measured on this chip"
            if r.get("roofline_fraction")
            else "the bandwidth bound (the loop was not measured on this chip)"
        )
        lines.append(
            f"  a decoding turn        reads {size(r['bytes_per_turn']).strip()}: "
            f"{r['turn_seconds_bound'] * 1e3:.3g} ms at the chip's bandwidth, est. "
            f"{r['turn_seconds_estimate'] * 1e3:.3g} ms ({measured}); "
            f"sampling a batch est. {r['sample_seconds_estimate']:.3g} s"
        )
    return lines
