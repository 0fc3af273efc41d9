"""Cross-field checks of a model config, made when the config is built (at the command line,
before any work) rather than at the first step: each problem is one line naming the keys."""

from __future__ import annotations

from typing import Any


def shape_problems(config: Any) -> list[str]:
    """What makes ``config`` a model that cannot be built, one line per problem (none: [])."""
    get = lambda name: getattr(config, name, None)  # noqa: E731  (families differ in fields)
    heads, experts = get("n_heads"), get("n_experts")
    serves = "each key/value head serves a whole group of query heads"
    problems = divides(config, "n_kv_heads", "n_heads", serves)
    if get("head_dim") == 0 and heads and get("d_model") % heads:
        problems.append(
            f"model.d_model={get('d_model')} is not a multiple of model.n_heads={heads}, and "
            "model.head_dim=0 means d_model / n_heads: set model.head_dim"
        )
    picks = "each token picks its experts among them"
    problems += at_most(config, "n_experts_per_token", "n_experts", picks)
    dropless = (
        f"at {experts} each expert can take every assignment (nothing is dropped); more only "
        "sizes buffers past what the step can index"
    )
    problems += at_most(config, "capacity_factor", "n_experts", dropless)
    among = "a token's experts come from that many of the groups"
    problems += at_most(config, "top_groups", "n_groups", among)
    problems += divides(config, "n_groups", "n_experts", "experts are grouped evenly")
    rope_dim = get("qk_rope_dim")
    if rope_dim and rope_dim % 2:
        problems.append(f"model.qk_rope_dim={rope_dim}: RoPE rotates pairs, use an even width")
    return problems


def divides(config: Any, part: str, whole: str, why: str) -> list[str]:
    """The problem when ``model.<part>`` does not divide ``model.<whole>`` (both set)."""
    some, total = getattr(config, part, None), getattr(config, whole, None)
    if some and total and total % some:
        return [f"model.{part}={some} must divide model.{whole}={total} ({why})"]
    return []


def at_most(config: Any, part: str, whole: str, why: str) -> list[str]:
    """The problem when ``model.<part>`` is more than ``model.<whole>`` (both set)."""
    some, total = getattr(config, part, None), getattr(config, whole, None)
    if some and total and some > total:
        return [f"model.{part}={some:g} is more than model.{whole}={total}: {why}"]
    return []
