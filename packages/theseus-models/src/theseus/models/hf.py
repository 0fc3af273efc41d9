"""Hugging Face interop: import a local transformers checkpoint directory, export one.

A checkpoint is ``config.json`` plus ``*.safetensors``. Import reads the architecture, builds
the family's config from the HF config (``hf_configs``), and converts each tensor by a rule
(``hf_rules``). The rules are exact, so HF -> theseus -> HF is bit-exact on the weights.
"""

from __future__ import annotations

import json
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from theseus.core.components import load_target
from theseus.models import configs as C
from theseus.models.errors import CheckpointShapeError, ModelError
from theseus.models.hf_configs import (  # noqa: F401  (re-exported)
    ARCHITECTURES,
    FAMILY_ARCH,
    SPECIAL_TOKENS,
    UnsupportedArchitectureError,
    config_from_hf,
    config_to_hf,
)
from theseus.models.hf_rules import Path_, Rule, rules_for  # noqa: F401


def model_class(family: str) -> type:
    return load_target(C.FAMILIES[family][1])


def resolve(directory: str | Path) -> Path:
    """A local checkpoint directory; a hub id is downloaded when ``huggingface_hub`` can."""
    path = Path(directory)
    if path.exists() or str(directory).count("/") != 1:
        return path
    try:
        from huggingface_hub import snapshot_download

        patterns = ["config.json", "*.safetensors", "tokenizer.json", "generation_config.json"]
        return Path(snapshot_download(str(directory), allow_patterns=patterns))
    except Exception as error:  # offline, unknown id, or no huggingface_hub
        raise ModelError(
            f"{directory}: not a local directory and not downloadable as a hub id ({error})"
        ) from error


def read_config(directory: str | Path) -> dict:
    path = Path(directory) / "config.json"
    if not path.is_file():
        raise ModelError(f"{directory}: no config.json (not a transformers checkpoint directory)")
    return json.loads(path.read_text())


def read_tensors(directory: str | Path) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    files = sorted(Path(directory).glob("*.safetensors"))
    if not files:
        raise ModelError(f"{directory}: no *.safetensors files")
    tensors: dict[str, np.ndarray] = {}
    for file in files:
        with safe_open(str(file), framework="flax") as f:
            for key in f.keys():
                tensors[key] = np.asarray(f.get_tensor(key).astype("float32"))
    return tensors


def _flat_params(model: nnx.Module) -> dict[Path_, np.ndarray]:
    return {tuple(p): v for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


def params_from_hf(
    family: str, config: Any, tensors: dict[str, np.ndarray], model_cls: type | None = None
) -> nnx.Module:
    """Build a model of ``config`` whose parameters are converted from HF ``tensors``."""
    cls = model_cls or model_class(family)
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(params=0))))
    variables = {tuple(p): v for p, v in nnx.to_flat_state(abstract)}
    values: dict[Path_, np.ndarray] = {}
    for rule in rules_for(family, config):
        shapes = [tuple(variables[p].shape) for p in rule.ours]
        structs = [jax.ShapeDtypeStruct(s, np.float32) for s in shapes]
        wanted = [tuple(x.shape) for x in jax.eval_shape(lambda *a, r=rule: r.to_hf(*a), *structs)]
        arrays = []
        for key, want in zip(rule.theirs, wanted, strict=True):
            if key not in tensors:
                raise CheckpointShapeError(
                    f"checkpoint has no tensor {key!r} that the config needs"
                )
            got = tuple(tensors[key].shape)
            if got != want:
                raise CheckpointShapeError(
                    f"checkpoint tensor {key!r} has shape {got} but the config needs {want} "
                    f"({_describe(config)})"
                )
            arrays.append(tensors[key])
        for path, value in zip(rule.ours, rule.to_ours(arrays, shapes), strict=True):
            values[path] = np.ascontiguousarray(value, dtype=np.float32)
    missing = sorted(set(variables) - set(values), key=str)
    if missing:
        raise CheckpointShapeError(
            f"no checkpoint tensor fills {missing[0]} ({len(missing)} missing)"
        )
    state = nnx.from_flat_state(
        [(p, v.replace(jnp.asarray(values[p]))) for p, v in variables.items()]
    )
    return nnx.merge(graphdef, state)


def params_to_hf(family: str, model: nnx.Module) -> dict[str, np.ndarray]:
    flat_params = {p: np.asarray(v[...]) for p, v in _flat_params(model).items()}
    out: dict[str, np.ndarray] = {}
    for rule in rules_for(family, model.config):
        arrays = rule.to_hf(*[flat_params[p] for p in rule.ours])
        for key, array in zip(rule.theirs, arrays, strict=True):
            out[key] = np.ascontiguousarray(np.asarray(array, dtype=np.float32))
    return out


def _describe(config: Any) -> str:
    keys = (
        "vocab_size",
        "d_model",
        "n_layers",
        "n_heads",
        "n_kv_heads",
        "head_dim",
        "d_ff",
        "n_experts",
        "moe_d_ff",
    )
    names = {f.name for f in fields(config)} if is_dataclass(config) else set()
    return ", ".join(f"{k}={getattr(config, k)}" for k in keys if k in names)


def special_tokens(hf: dict) -> tuple:
    """bos/eos/pad ids of an HF config as a tuple of pairs (graphdefs must stay hashable)."""
    found = []
    for key in SPECIAL_TOKENS:
        value = hf.get(key)
        value = tuple(value) if isinstance(value, list) else value
        if isinstance(value, int) or (
            isinstance(value, tuple) and all(isinstance(v, int) for v in value)
        ):
            found.append((key, value))
    return tuple(found)


def load_hf(directory: str | Path, *, dtype: str | None = None, **overrides: Any) -> nnx.Module:
    """Import a transformers checkpoint directory as a theseus model (float32 parameters)."""
    directory = resolve(directory)
    family, config = config_from_hf(read_config(directory))
    if dtype:
        config.dtype = dtype
    for key, value in overrides.items():
        setattr(config, key, value)
    hf = read_config(directory)
    model = params_from_hf(family, config, read_tensors(directory))
    model.family = family
    model.special_tokens = special_tokens(hf)
    return model


def family_of(model: nnx.Module) -> str:
    for family, (_, target, _) in C.FAMILIES.items():
        if type(model) is load_target(target):
            return family
    for family, (_, target, _) in C.FAMILIES.items():  # a subclass of a family
        if isinstance(model, load_target(target)):
            return family
    raise ModelError(f"{type(model).__name__} is not a model of a family theseus can export")


def save_hf(model: nnx.Module, directory: str | Path) -> Path:
    """Write ``config.json`` and ``model.safetensors`` that ``AutoModelForCausalLM`` loads."""
    from safetensors.numpy import save_file

    family = family_of(model)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    hf_config = config_to_hf(family, model.config)
    hf_config.update({k: v for k, v in getattr(model, "special_tokens", ())})
    (out / "config.json").write_text(json.dumps(hf_config, indent=2))
    save_file(
        params_to_hf(family, model), str(out / "model.safetensors"), metadata={"format": "pt"}
    )
    return out
