"""Cross-field checks of a model config, made when the config is built (at the command line,
before any work) rather than at the first step: each problem is one line naming the keys."""

from __future__ import annotations

from typing import Any


def shape_problems(config: Any) -> list[str]:
    """What makes ``config`` a model that cannot be built, one line per problem (none: [])."""
    get = lambda name: getattr(config, name, None)  # noqa: E731  (families differ in fields)
    problems = []
    heads, kv_heads = get("n_heads"), get("n_kv_heads")
    if heads and kv_heads and heads % kv_heads:
        problems.append(
            f"model.n_kv_heads={kv_heads} must divide model.n_heads={heads} (each key/value "
            "head serves a whole group of query heads)"
        )
    if get("head_dim") == 0 and heads and get("d_model") % heads:
        problems.append(
            f"model.d_model={get('d_model')} is not a multiple of model.n_heads={heads}, and "
            "model.head_dim=0 means d_model / n_heads: set model.head_dim"
        )
    experts, top_k = get("n_experts"), get("n_experts_per_token")
    if experts and top_k and top_k > experts:
        problems.append(
            f"model.n_experts_per_token={top_k} is more than model.n_experts={experts}: each "
            "token picks its experts among them"
        )
    capacity = get("capacity_factor")
    if experts and capacity and capacity > experts:
        problems.append(
            f"model.capacity_factor={capacity:g} is more than model.n_experts={experts}: at "
            f"{experts} each expert can take every assignment (nothing is dropped); more only "
            "sizes buffers past what the step can index"
        )
    groups, top_groups = get("n_groups"), get("top_groups")
    if groups and top_groups and top_groups > groups:
        problems.append(
            f"model.top_groups={top_groups} is more than model.n_groups={groups}: a token's "
            "experts come from that many of the groups"
        )
    if groups and experts and experts % groups:
        problems.append(
            f"model.n_groups={groups} must divide model.n_experts={experts} (experts are "
            "grouped evenly)"
        )
    rope_dim = get("qk_rope_dim")
    if rope_dim and rope_dim % 2:
        problems.append(f"model.qk_rope_dim={rope_dim}: RoPE rotates pairs, use an even width")
    return problems
