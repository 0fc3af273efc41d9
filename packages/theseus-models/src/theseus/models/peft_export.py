"""A LoRA model's adapters as a PEFT folder, which ``PeftModel.from_pretrained`` loads onto
the Hugging Face base model:

    adapter_config.json        peft_type LORA, r, lora_alpha, lora_dropout, target_modules
                               (transformers module names), fan_in_fan_out, bias none, ...
    adapter_model.safetensors  base_model.model.<module>.lora_A.weight   (r, in)
                               base_model.model.<module>.lora_B.weight   (out, r)

Our adapter of a kernel ``W`` (in..., out...) is ``A`` (in..., r) and ``B`` (r, out...);
transformers holds ``W`` as the tensor its family's ``hf.py`` rule writes. That rule is only
reshapes, transposes and concatenations, so it is probed once per kind of layer on an array
of element indices: where each of our (input, output) pairs lands says which HF axis is the
input and in what order both axes run (a head layout or a permutation of the output comes out
of the probe like any other order). ``A`` and ``B`` are then laid out the same way:
``lora_A.weight[j, c] = A[in(c), j]`` and ``lora_B.weight[r, j] = B[j, out(r)]``, so PEFT's
``lora_B @ lora_A`` (transposed for GPT-2's ``Conv1D``, ``fan_in_fan_out``) is exactly the
rule applied to ``A @ B``.

A tensor that holds several of our kernels side by side along its output axis (GPT-2's
``c_attn``: q, k and v) gets one PEFT adapter of rank ``k * r`` for the ``k`` adapted ones:
``lora_A`` stacks their ``A``s, ``lora_B`` is block diagonal, and ``rank_pattern`` /
``alpha_pattern`` give that module ``k * r`` and ``k * alpha``, so its scale stays
``alpha / r``: the same update, exactly. What no such layout expresses (a tensor that is not
one input axis by one output axis) is refused in one line.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from theseus.core.adapters import Adapter
from theseus.models.errors import ModelError
from theseus.models.hf.checkpoint import family_of, per_layer_path, stacked_layers
from theseus.models.hf.file_modes import share_as_umask
from theseus.models.hf_mapping import ParamPath, Rule, param_path

PREFIX = "base_model.model."  # PEFT's prefix for the wrapped transformers model
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"


@dataclass
class Placement:
    """Where one rule puts the kernels it names (``rule.ours``) in its one HF matrix."""

    fan_in_fan_out: bool  # the HF matrix is (in, out) (GPT-2 Conv1D), not (out, in)
    in_order: np.ndarray  # HF input feature c -> our flattened input index
    rows: list[np.ndarray]  # per kernel of the rule: the HF output features it fills
    out_order: list[np.ndarray]  # per kernel: our flattened output index of each of those


def placement(rule: Rule, shapes: list[tuple[int, ...]], n_in: int) -> Placement | None:
    """How ``rule.to_hf`` lays out kernels of ``shapes`` (``n_in`` input axes, shared by all
    of them); ``None`` when its tensor is not one input axis by one output axis."""
    if len(rule.theirs) != 1 or len({s[:n_in] for s in shapes}) != 1:
        return None
    size_in = math.prod(shapes[0][:n_in])
    outs = np.array([math.prod(s[n_in:]) for s in shapes], dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(size_in * outs)])
    probes = [
        np.arange(offsets[k], offsets[k + 1], dtype=np.int64).reshape(shape)
        for k, shape in enumerate(shapes)
    ]
    (index,) = rule.to_hf(*probes)
    index = np.asarray(index).astype(np.int64)
    if index.ndim != 2 or not np.array_equal(np.sort(index, axis=None), np.arange(offsets[-1])):
        return None
    kernel = np.searchsorted(offsets, index, side="right") - 1
    local = index - offsets[kernel]
    i, o = np.divmod(local, outs[kernel])
    for fan_in_fan_out, (ii, kk, oo) in ((False, (i, kernel, o)), (True, (i.T, kernel.T, o.T))):
        # rows are outputs: the input index may vary along columns only, the output along rows
        if (ii == ii[:1]).all() and (kk == kk[:, :1]).all() and (oo == oo[:, :1]).all():
            rows = [np.flatnonzero(kk[:, 0] == k) for k in range(len(shapes))]
            return Placement(fan_in_fan_out, ii[0], rows, [oo[r, 0] for r in rows])
    return None


def layer_kind(path: ParamPath) -> tuple:
    """A rule's paths without layer numbers: the same probe serves every layer."""
    return tuple(None if isinstance(part, int) else part for part in path)


def peft_tensors(model: Any, family: Any) -> tuple[dict[str, np.ndarray], dict[str, int], bool]:
    """``(tensors, modules, fan_in_fan_out)`` of ``model``'s adapters: PEFT's tensor names ->
    float32 arrays, adapted transformers module -> how many of our adapters it holds."""
    from flax import nnx

    def per_layer(state: Any) -> dict[ParamPath, np.ndarray]:
        out = {}
        for path, variable in nnx.to_flat_state(state):
            value = np.asarray(variable[...], dtype=np.float32)
            layers = stacked_layers(variable)
            for i in range(layers):
                out[per_layer_path(param_path(path), i)] = value[i]
            if not layers:
                out[param_path(path)] = value
        return out

    adapters = per_layer(nnx.state(model, Adapter))
    shapes = {p: v.shape for p, v in per_layer(nnx.state(model, nnx.Param)).items()}
    rules = family.load_hf().rules(model.config)
    rule_of = {path: rule for rule in rules for path in rule.ours}
    adapted: dict[int, list[ParamPath]] = defaultdict(list)  # id(rule) -> adapted layers
    for path in adapters:
        if path[-1] != "lora_a":
            continue
        layer = path[:-1]
        rule = rule_of.get((*layer, "kernel"))
        if rule is None:
            raise ModelError(
                f"PEFT export: no {family.name} Hugging Face tensor holds the kernel of "
                f"{'.'.join(map(str, layer))}"
            )
        adapted[id(rule)].append(layer)
    tensors: dict[str, np.ndarray] = {}
    modules: dict[str, int] = {}
    layouts: set[bool] = set()
    probed: dict[tuple, Placement | None] = {}
    for rule in rules:
        layers = sorted(adapted.get(id(rule), []), key=lambda p: rule.ours.index((*p, "kernel")))
        if not layers:
            continue
        (theirs,) = rule.theirs
        a0 = adapters[(*layers[0], "lora_a")]
        n_in, rank = a0.ndim - 1, a0.shape[-1]
        kernel_shapes = [shapes[p] for p in rule.ours]
        kind = (layer_kind(rule.ours[0]), len(rule.ours), tuple(kernel_shapes), n_in)
        if kind not in probed:
            probed[kind] = placement(rule, kernel_shapes, n_in)
        place = probed[kind]
        if place is None or not theirs.endswith(".weight"):
            raise ModelError(
                f"PEFT export: {theirs} is not one input axis by one output axis of the "
                f"adapted kernels ({', '.join('.'.join(map(str, p)) for p in layers)}), so "
                "no PEFT LoRA expresses their adapters; export with hf.merge=true instead"
            )
        layouts.add(place.fan_in_fan_out)
        lora_a, lora_b = [], np.zeros((sum(len(r) for r in place.rows), len(layers) * rank))
        for t, layer in enumerate(layers):
            k = rule.ours.index((*layer, "kernel"))
            a = adapters[(*layer, "lora_a")].reshape(-1, rank)  # (in, r)
            b = adapters[(*layer, "lora_b")].reshape(rank, -1)  # (r, out)
            lora_a.append(a[place.in_order].T)
            lora_b[place.rows[k], t * rank : (t + 1) * rank] = b[:, place.out_order[k]].T
        module = theirs.removesuffix(".weight")
        # contiguous: safetensors writes an array's buffer as it lies in memory
        tensors[f"{PREFIX}{module}.lora_A.weight"] = np.ascontiguousarray(
            np.concatenate(lora_a), dtype=np.float32
        )
        tensors[f"{PREFIX}{module}.lora_B.weight"] = np.ascontiguousarray(lora_b, np.float32)
        modules[module] = len(layers)
    if len(layouts) > 1:
        raise ModelError(
            "PEFT export: the adapted modules mix torch Linear and Conv1D layouts, which one "
            "adapter_config.json (one fan_in_fan_out) cannot express; export with hf.merge=true"
        )
    if not modules:
        raise ModelError("PEFT export: the model has no adapters (is it a LoRA run?)")
    return tensors, modules, layouts.pop()


def names_for(modules: dict[str, Any], every: set[str]) -> dict[str, Any]:
    """``modules`` (full name -> value) keyed by their last name where that is unambiguous:
    every module of ``every`` with that last name is in ``modules``, with the same value."""
    by_last: dict[str, list[str]] = defaultdict(list)
    for name in every | set(modules):
        by_last[name.rsplit(".", 1)[-1]].append(name)
    out: dict[str, Any] = {}
    for name, value in sorted(modules.items()):
        last = name.rsplit(".", 1)[-1]
        same = by_last[last]
        if all(n in modules and modules[n] == value for n in same):
            out[last] = value
        else:
            out[name] = value
    return out


def adapter_config(
    lora: Any, modules: dict[str, int], every: set[str], fan_in_fan_out: bool, base: str
) -> dict[str, Any]:
    """The ``adapter_config.json`` of these adapters (``lora``: the run's ``lora`` config)."""
    alpha = float(lora.alpha)
    alpha_value: Any = int(alpha) if alpha.is_integer() else alpha
    fused = {m: k for m, k in modules.items() if k > 1}
    patterns = names_for(fused, every) if fused else {}
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base or None,
        "revision": None,
        "r": int(lora.rank),
        "lora_alpha": alpha_value,
        "lora_dropout": float(lora.dropout),
        "target_modules": sorted(names_for(modules, every)),
        "rank_pattern": {name: k * int(lora.rank) for name, k in patterns.items()},
        "alpha_pattern": {name: k * alpha_value for name, k in patterns.items()},
        "bias": "none",
        "fan_in_fan_out": fan_in_fan_out,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "modules_to_save": None,
        "inference_mode": True,
    }


def hf_modules(model: Any, family: Any) -> set[str]:
    """Every transformers module of ``model`` that holds a ``.weight`` the rules write."""
    rules = family.load_hf().rules(model.config)
    return {
        name.removesuffix(".weight")
        for rule in rules
        for name in rule.theirs
        if name.endswith(".weight")
    }


def save_peft(model: Any, lora: Any, directory: str | Path, base: str = "") -> Path:
    """Write ``model``'s adapters to ``directory`` as a PEFT LoRA folder; ``base`` is the
    ``base_model_name_or_path`` it names (a folder or hub id, ``""`` when none is known)."""
    from safetensors.numpy import save_file

    family = family_of(model)
    if family is None:
        raise ModelError(f"{type(model).__name__} has no Hugging Face mapping to export")
    tensors, modules, fan_in_fan_out = peft_tensors(model, family)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    config = adapter_config(lora, modules, hf_modules(model, family), fan_in_fan_out, base)
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    share_as_umask(out / WEIGHTS_FILE)  # written 0600 by safetensors
    return out
