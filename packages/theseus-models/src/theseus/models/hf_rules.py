"""Tensor rules: which HF tensors fill which theseus parameters, by exact transforms only.

A rule pairs our parameter paths with HF tensor names and two functions (transpose,
reshape, split, stack: no arithmetic), so HF -> theseus -> HF is bit-exact.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import numpy as np
from theseus.models import configs as C

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Rule:
    """Our parameters ``ours`` <-> HF tensors ``theirs``, by two exact functions."""

    ours: tuple[Path_, ...]
    theirs: tuple[str, ...]
    to_hf: Callable[..., list]  # our arrays -> HF arrays
    to_ours: Callable[[list, list[tuple[int, ...]]], list]  # HF arrays, our shapes -> ours


def same(ours: Path_, theirs: str) -> Rule:
    return Rule((ours,), (theirs,), lambda x: [x], lambda w, s: [w[0].reshape(s[0])])


def flat(ours: Path_, theirs: str) -> Rule:
    """A bias stored (heads, head_dim) here and flat in HF."""
    return Rule((ours,), (theirs,), lambda x: [x.reshape(-1)], lambda w, s: [w[0].reshape(s[0])])


def torch_linear(ours: Path_, theirs: str, n_in: int) -> Rule:
    """Our kernel (in..., out...) <-> torch ``Linear.weight`` (out, in)."""

    def to_hf(k):
        return [k.reshape(math.prod(k.shape[:n_in]), -1).T]

    return Rule((ours,), (theirs,), to_hf, lambda w, s: [w[0].T.reshape(s[0])])


def conv1d(ours: Path_, theirs: str, n_in: int) -> Rule:
    """Our kernel (in..., out...) <-> GPT-2 ``Conv1D.weight`` (in, out)."""

    def to_hf(k):
        return [k.reshape(math.prod(k.shape[:n_in]), -1)]

    return Rule((ours,), (theirs,), to_hf, lambda w, s: [w[0].reshape(s[0])])


def fused_qkv(ours: tuple[Path_, Path_, Path_], theirs: str, axis: int) -> Rule:
    """GPT-2's ``c_attn`` holds q, k and v side by side along its last axis."""

    def to_hf(q, k, v):
        lead = q.shape[:1] if axis else ()
        return [jnp.concatenate([x.reshape(*lead, -1) for x in (q, k, v)], axis=axis)]

    def to_ours(w, shapes):
        return [p.reshape(s) for p, s in zip(np.split(w[0], 3, axis=axis), shapes, strict=True)]

    return Rule(ours, (theirs,), to_hf, to_ours)


def experts(ours: Path_, theirs: list[str]) -> Rule:
    """Our stacked expert kernel (E, in, out) <-> E torch ``Linear.weight`` (out, in)."""
    return Rule(
        (ours,),
        tuple(theirs),
        lambda k: [k[e].T for e in range(len(theirs))],
        lambda w, s: [np.stack([x.T for x in w])],
    )


def gpt_rules(c: C.GPTConfig) -> list[Rule]:
    t = "transformer"
    rules = [
        same(("embed", "embedding"), f"{t}.wte.weight"),
        same(("wpe", "embedding"), f"{t}.wpe.weight"),
        same(("final_norm", "scale"), f"{t}.ln_f.weight"),
        same(("final_norm", "bias"), f"{t}.ln_f.bias"),
    ]
    for i in range(c.n_layers):
        b, h = ("blocks", i), f"{t}.h.{i}"
        att = (*b, "attention")
        qkv = [(*att, f"{p}_proj") for p in "qkv"]
        rules += [
            same((*b, "attn_norm", "scale"), f"{h}.ln_1.weight"),
            same((*b, "attn_norm", "bias"), f"{h}.ln_1.bias"),
            fused_qkv(tuple((*p, "kernel") for p in qkv), f"{h}.attn.c_attn.weight", 1),
            fused_qkv(tuple((*p, "bias") for p in qkv), f"{h}.attn.c_attn.bias", 0),
            conv1d((*att, "o_proj", "kernel"), f"{h}.attn.c_proj.weight", 2),
            same((*att, "o_proj", "bias"), f"{h}.attn.c_proj.bias"),
            same((*b, "mlp_norm", "scale"), f"{h}.ln_2.weight"),
            same((*b, "mlp_norm", "bias"), f"{h}.ln_2.bias"),
            conv1d((*b, "mlp", "up_proj", "kernel"), f"{h}.mlp.c_fc.weight", 1),
            same((*b, "mlp", "up_proj", "bias"), f"{h}.mlp.c_fc.bias"),
            conv1d((*b, "mlp", "down_proj", "kernel"), f"{h}.mlp.c_proj.weight", 1),
            same((*b, "mlp", "down_proj", "bias"), f"{h}.mlp.c_proj.bias"),
        ]
    if not c.tie_embeddings:
        rules.append(torch_linear(("lm_head", "kernel"), "lm_head.weight", 1))
    return rules


def llama_rules(c: Any, family: str) -> list[Rule]:
    rules = [
        same(("embed", "embedding"), "model.embed_tokens.weight"),
        same(("final_norm", "scale"), "model.norm.weight"),
    ]
    for i in range(c.n_layers):
        b, h = ("blocks", i), f"model.layers.{i}"
        att, hatt = (*b, "attention"), f"{h}.self_attn"
        rules += [
            same((*b, "attn_norm", "scale"), f"{h}.input_layernorm.weight"),
            same((*b, "mlp_norm", "scale"), f"{h}.post_attention_layernorm.weight"),
            torch_linear((*att, "o_proj", "kernel"), f"{hatt}.o_proj.weight", 2),
        ]
        for p in "qkv":
            rules.append(torch_linear((*att, f"{p}_proj", "kernel"), f"{hatt}.{p}_proj.weight", 1))
            if c.qkv_bias:
                rules.append(flat((*att, f"{p}_proj", "bias"), f"{hatt}.{p}_proj.bias"))
        if c.out_bias:
            rules.append(same((*att, "o_proj", "bias"), f"{hatt}.o_proj.bias"))
        if c.qk_norm:
            rules += [
                same((*att, "q_norm", "scale"), f"{hatt}.q_norm.weight"),
                same((*att, "k_norm", "scale"), f"{hatt}.k_norm.weight"),
            ]
        mlp, hmlp = (*b, "mlp"), f"{h}.mlp"
        if family == "qwen3_moe":
            names = [f"{hmlp}.experts.{e}" for e in range(c.n_experts)]
            rules += [
                torch_linear((*mlp, "router", "kernel"), f"{hmlp}.gate.weight", 1),
                experts((*mlp, "w_gate"), [f"{n}.gate_proj.weight" for n in names]),
                experts((*mlp, "w_up"), [f"{n}.up_proj.weight" for n in names]),
                experts((*mlp, "w_down"), [f"{n}.down_proj.weight" for n in names]),
            ]
            continue
        for p in ("gate", "up", "down"):
            rules.append(torch_linear((*mlp, f"{p}_proj", "kernel"), f"{hmlp}.{p}_proj.weight", 1))
            if getattr(c, "mlp_bias", False):
                rules.append(same((*mlp, f"{p}_proj", "bias"), f"{hmlp}.{p}_proj.bias"))
    if not c.tie_embeddings:
        rules.append(torch_linear(("lm_head", "kernel"), "lm_head.weight", 1))
    return rules


def rules_for(family: str, config: Any) -> list[Rule]:
    return gpt_rules(config) if family == "gpt" else llama_rules(config, family)
