"""Import a local transformers checkpoint directory as a theseus model, export one.

A checkpoint is ``config.json`` plus ``*.safetensors``. Import reads the architecture, finds
the family whose HF module names it, builds the config with that module's ``config_from_hf``
and converts each tensor by its ``rules``. The rules are exact, so HF -> theseus -> HF is
bit-exact on the weights.

Rules name one layer's parameters as ``("blocks", i, ...)``. Where the model stacks its
blocks (a parameter ``("blocks", ...)`` with a leading ``layers`` axis), that path is row i
of it: import fills each row and stacks them, export slices them (both exact).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from theseus.models.errors import CheckpointShapeError, ModelError, UnsupportedArchitectureError
from theseus.models.families import FAMILIES, family_named
from theseus.models.family import Family
from theseus.models.hf.file_modes import share_as_umask
from theseus.models.hf.files import check_tensor_files, read_config, resolve  # noqa: F401
from theseus.models.hf_mapping import ParamPath, param_path
from theseus.models.layers.block import LAYERS
from theseus.models.layers.decoder import DecoderLM

SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")

# ---------------------------------------------------------------------------- configs


# Model fields a config.json does not decide: how the model computes, not what it is.
FREE_FIELDS = ("name", "preset", "dtype", "attention")


def architectures() -> dict[str, Family]:
    """transformers architecture name (``GPT2LMHeadModel``, ...) -> the family importing it."""
    return {family.load_hf().ARCHITECTURE: family for family in FAMILIES if family.hf}


def model_types() -> dict[str, Family]:
    """``model_type`` of a config.json (``gpt2``, ``llama``, ...) -> the family importing it."""
    return {family.load_hf().MODEL_TYPE: family for family in FAMILIES if family.hf}


def architecture_of(hf: dict) -> str:
    return (hf.get("architectures") or [hf.get("model_type", "?")])[0]


def family_for(hf: dict) -> Family | None:
    """The family that imports the checkpoint of config ``hf`` (by its ``architectures``,
    else its ``model_type``), or ``None``."""
    if hf.get("architectures"):
        return architectures().get(hf["architectures"][0])
    return model_types().get(hf.get("model_type", ""))


def unsupported(hf: dict) -> UnsupportedArchitectureError:
    """The one-line refusal of a config.json that no family imports, naming what it says."""
    known = ", ".join(
        f"{name} ({family.load_hf().MODEL_TYPE})"
        for name, family in sorted(architectures().items())
    )
    return UnsupportedArchitectureError(
        f"Hugging Face architecture {architecture_of(hf)!r} is not supported (config.json: "
        f"architectures={hf.get('architectures')}, model_type={hf.get('model_type')!r}); "
        f"supported: {known}"
    )


def config_from_hf(hf: dict) -> tuple[str, Any]:
    """(family name, theseus config) of a ``config.json``; refuses what we cannot run."""
    family = family_for(hf)
    if family is None:
        raise unsupported(hf)
    return family.name, family_config(family, hf)


def family_config(family: Family, hf: dict) -> Any:
    """``family``'s config of ``hf``; a key the family reads and config.json lacks is one
    line naming it."""
    try:
        return family.load_hf().config_from_hf(hf)
    except KeyError as error:
        key = error.args[0] if error.args else "?"
        raise ModelError(
            f"config.json lacks {key!r}, which a {family.name} model needs (model_type "
            f"{hf.get('model_type')!r})"
        ) from error


def model_values(name: str, hf: dict) -> dict[str, Any]:
    """The ``model.*`` values of model ``name`` that config.json ``hf`` decides.

    What core's ``init.hf`` fills (``Family.component`` names this function in the
    component's ``extra["hf_config"]``). Leaves out the fields that choose how the model
    computes (``FREE_FIELDS``, and a family's own ``FREE_FIELDS`` in its ``hf.py``).
    Refuses a checkpoint of another family, naming the job that takes it.
    """
    family, config = config_from_hf(hf)
    if family != name:
        raise ModelError(
            f"the checkpoint is a {architecture_of(hf)} (model_type "
            f"{hf.get('model_type')!r}), a {family} model, not {name}: use the {family}/... jobs"
        )
    free = {*FREE_FIELDS, *getattr(family_named(family).load_hf(), "FREE_FIELDS", ())}
    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if f.name not in free and not f.metadata.get("resume_safe")
    }


def config_to_hf(family: str, config: Any) -> dict:
    """A ``config.json`` transformers builds the same model from."""
    hf = family_named(family).load_hf()
    return {
        "architectures": [hf.ARCHITECTURE],
        "model_type": hf.MODEL_TYPE,
        "vocab_size": config.vocab_size,
        "tie_word_embeddings": config.tie_embeddings,
        "initializer_range": config.init_std,
        "dtype": "float32",
        **hf.config_to_hf(config),
    }


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


def family_of(model: nnx.Module | type) -> Family | None:
    """The family whose Hugging Face mapping writes ``model`` (an instance or a class): that
    of its class, or of its nearest base class that has one; ``None`` for none.

    A subclass changes what the model computes as easily as it changes nothing, and a
    mapping cannot tell: a class between ``model``'s and the family's that does not set
    ``hf_mapping_exact = True`` in its own body is refused (:class:`ModelError`), since
    transformers would load the export as the parent architecture, a different model.
    """
    model_class = model if isinstance(model, type) else type(model)
    by_class = {family.load_model(): family for family in FAMILIES if family.hf}
    for position, cls in enumerate(model_class.__mro__):
        if cls in by_class:
            check_inherited_mapping(model_class.__mro__[:position], cls, by_class[cls])
            return by_class[cls]
    return None


def check_inherited_mapping(subclasses: tuple[type, ...], parent: type, family: Family) -> None:
    """Refuse ``subclasses`` of ``parent`` (most derived first) when one of them has not
    declared, in its own body, that ``parent``'s mapping is exact for it."""
    unsure = [cls for cls in subclasses if cls.__dict__.get("hf_mapping_exact") is not True]
    if not unsure:
        return
    cls = unsure[0]
    architecture = family.load_hf().ARCHITECTURE
    raise ModelError(
        f"{cls.__module__}.{cls.__qualname__} subclasses {parent.__qualname__} "
        f"({family.name}) and declares no Hugging Face mapping of its own: exporting it would "
        f"silently reuse {parent.__qualname__}'s ({architecture}), which transformers loads as "
        f"a plain {family.name} model; if that mapping is exact for it (same computation, "
        f"not only the same parameters), set hf_mapping_exact = True in {cls.__qualname__}"
    )


# ---------------------------------------------------------------------------- files


def read_tensors(directory: str | Path) -> dict[str, np.ndarray]:
    from safetensors import safe_open

    tensors: dict[str, np.ndarray] = {}
    for file in check_tensor_files(directory):
        try:
            with safe_open(str(file), framework="flax") as f:
                for key in f.keys():
                    tensors[key] = np.asarray(f.get_tensor(key).astype("float32"))
        except ModelError:
            raise
        except Exception as error:  # a file that changed since it was checked
            raise ModelError(
                f"{file} is not a readable safetensors file ({' '.join(str(error).split())})"
            ) from error
    return tensors


# ---------------------------------------------------------------------------- parameters


def stacked_layers(variable: nnx.Variable) -> int:
    """The length of a parameter's leading ``layers`` axis; 0 when it is not stacked."""
    axes = variable.get_metadata().get("out_sharding") or ()
    return variable.shape[0] if axes and axes[0] == LAYERS else 0


def per_layer_path(path: ParamPath, index: int) -> ParamPath:
    """Where the rules find row ``index`` of the stacked parameter ``path``."""
    return (path[0], index, *path[1:])


def per_layer(variables: dict[ParamPath, Any]) -> dict[ParamPath, tuple[ParamPath, int | None]]:
    """Every path the rules may name -> (our parameter, its row, or None: the whole of it)."""
    out: dict[ParamPath, tuple[ParamPath, int | None]] = {}
    for path, variable in variables.items():
        layers = stacked_layers(variable)
        if not layers:
            out[path] = (path, None)
        for i in range(layers):
            out[per_layer_path(path, i)] = (path, i)
    return out


def params_from_hf(
    family: str, config: Any, tensors: dict[str, np.ndarray], model_cls: type | None = None
) -> DecoderLM:
    """A model of ``config`` (``model_cls``, else the family's) holding HF ``tensors``."""
    spec = family_named(family)
    cls = model_cls or spec.load_model()
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(params=0))))
    variables = {param_path(p): v for p, v in nnx.to_flat_state(abstract)}
    targets = per_layer(variables)
    values: dict[ParamPath, np.ndarray] = {}
    used: set[str] = set()
    for rule in spec.load_hf().rules(config):
        shapes = []
        for p in rule.ours:
            if p not in targets:
                raise ModelError(f"the {family} rules name {p}, which {cls.__name__} lacks")
            ours, row = targets[p]
            shape = tuple(variables[ours].shape)
            shapes.append(shape if row is None else shape[1:])
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
                    f"({describe(config)})"
                )
            arrays.append(tensors[key])
            used.add(key)
        for path, value in zip(rule.ours, rule.to_ours(arrays, shapes), strict=True):
            values[path] = np.ascontiguousarray(value, dtype=np.float32)
    missing = sorted(set(targets) - set(values), key=str)
    if missing:
        raise CheckpointShapeError(
            f"no checkpoint tensor fills {missing[0]} ({len(missing)} missing)"
        )
    unused = sorted(
        key for key in set(tensors) - used if not ignorable(spec.load_hf(), config, key)
    )
    if unused:
        raise CheckpointShapeError(
            f"checkpoint tensor {unused[0]!r} is used by no part of the model config.json "
            f"describes ({len(unused)} unused; {describe(config)}): do config.json and the "
            "weights belong together?"
        )
    filled = []
    for path, variable in variables.items():
        layers = stacked_layers(variable)
        if layers:
            value = np.stack([values[per_layer_path(path, i)] for i in range(layers)])
        else:
            value = values[path]
        filled.append((path, variable.replace(jnp.asarray(value))))
    return nnx.merge(graphdef, nnx.from_flat_state(filled))


def ignorable(hf_module: Any, config: Any, key: str) -> bool:
    """A checkpoint tensor an import may leave unread: rotary buffers some exports carry, a
    tied head's copy, and what the family's ``hf.py`` names (``IGNORED(config, key)``)."""
    if key.endswith("rotary_emb.inv_freq"):
        return True
    if key == "lm_head.weight" and getattr(config, "tie_embeddings", False):
        return True
    own = getattr(hf_module, "IGNORED", None)
    return bool(own and own(config, key))


def params_to_hf(family: str, model: DecoderLM) -> dict[str, np.ndarray]:
    """HF tensor name -> float32 array, for every parameter of ``model``."""
    params: dict[ParamPath, np.ndarray] = {}
    for path, variable in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        value = np.asarray(variable[...])
        for i in range(stacked_layers(variable)):
            params[per_layer_path(param_path(path), i)] = value[i]
        params[param_path(path)] = value
    out: dict[str, np.ndarray] = {}
    for rule in family_named(family).load_hf().rules(model.config):
        arrays = rule.to_hf(*[params[p] for p in rule.ours])
        for key, array in zip(rule.theirs, arrays, strict=True):
            out[key] = np.ascontiguousarray(np.asarray(array, dtype=np.float32))
    return out


def describe(config: Any) -> str:
    """The size fields of ``config`` that decide tensor shapes, for error messages."""
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
    return ", ".join(f"{k}={getattr(config, k)}" for k in keys if hasattr(config, k))


# ---------------------------------------------------------------------------- directories


def load_hf(directory: str | Path, *, dtype: str | None = None) -> DecoderLM:
    """Import a transformers checkpoint directory as a theseus model (float32 parameters).

    ``dtype`` sets the compute dtype (default: the family's). The model also carries
    ``family`` (its family's name) and ``special_tokens`` (bos/eos/pad ids of config.json).
    """
    directory = resolve(directory)
    hf = read_config(directory)
    family, config = config_from_hf(hf)
    if dtype:
        config = dataclasses.replace(config, dtype=dtype)
    model = params_from_hf(family, config, read_tensors(directory))
    model.family = family
    model.special_tokens = special_tokens(hf)
    return model


def save_hf(model: DecoderLM, directory: str | Path) -> Path:
    """Write ``config.json`` and ``model.safetensors`` that ``AutoModelForCausalLM`` loads."""
    from safetensors.numpy import save_file

    family = family_of(model)
    if family is None:
        raise ModelError(f"{type(model).__name__} is not a model of a family theseus can export")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    hf_config = config_to_hf(family.name, model.config)
    hf_config.update(dict(getattr(model, "special_tokens", ())))
    (out / "config.json").write_text(json.dumps(hf_config, indent=2))
    save_file(
        params_to_hf(family.name, model), str(out / "model.safetensors"), metadata={"format": "pt"}
    )
    share_as_umask(out / "model.safetensors")  # written 0600 by safetensors
    return out
