"""Hugging Face interop: import a local transformers checkpoint directory, export one.

A checkpoint is ``config.json`` plus ``*.safetensors``. Import reads the architecture,
builds the family's config from the HF config, and converts each tensor by a *rule*: which
of our parameters it fills and how (transpose, reshape, split, stack). The rules are exact
(no arithmetic), so HF -> theseus -> HF is bit-exact on the weights.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, fields, is_dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from theseus.core.components import load_target
from theseus.models import configs as C
from theseus.models.errors import CheckpointShapeError, ModelError, UnsupportedArchitectureError

ARCHITECTURES = {
    "GPT2LMHeadModel": "gpt",
    "LlamaForCausalLM": "llama",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
}
FAMILY_ARCH = {family: arch for arch, family in ARCHITECTURES.items()}
MODEL_TYPES = {
    "gpt": "gpt2",
    "llama": "llama",
    "qwen2": "qwen2",
    "qwen3": "qwen3",
    "qwen3_moe": "qwen3_moe",
}

Path_ = tuple[str | int, ...]
SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")


# ----------------------------------------------------------------------------- configs


def _rope_from_hf(hf: dict, arch: str) -> dict:
    rope = dict(hf.get("rope_parameters") or {})
    if not rope:  # transformers 4.x keeps them at the top level
        rope = dict(hf.get("rope_scaling") or {})
        rope.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    kind = rope.get("rope_type", rope.get("type", "default"))
    out: dict[str, Any] = {"rope_theta": float(rope.get("rope_theta", 10000.0))}
    if kind == "llama3":
        out.update(
            rope_scaling="llama3",
            rope_factor=float(rope["factor"]),
            rope_low_freq_factor=float(rope["low_freq_factor"]),
            rope_high_freq_factor=float(rope["high_freq_factor"]),
            rope_original_max_len=int(rope["original_max_position_embeddings"]),
        )
    elif kind != "default":
        raise UnsupportedArchitectureError(
            f"{arch} with rope_type={kind!r} is not supported (supported: default, llama3)"
        )
    return out


def config_from_hf(hf: dict) -> tuple[str, Any]:
    """(family, theseus config) of a transformers ``config.json``; refuses what we cannot run."""
    arch = (hf.get("architectures") or [hf.get("model_type", "?")])[0]
    if arch not in ARCHITECTURES:
        raise UnsupportedArchitectureError(
            f"Hugging Face architecture {arch!r} is not supported; supported: "
            + ", ".join(sorted(ARCHITECTURES))
        )
    family = ARCHITECTURES[arch]
    if family == "gpt":
        if (
            hf.get("activation_function", "gelu_new") != "gelu_new"
            or hf.get("scale_attn_by_inverse_layer_idx")
            or not hf.get("scale_attn_weights", True)
        ):
            raise UnsupportedArchitectureError(f"{arch}: only GPT-2's gelu_new/scaled attention")
        d = hf["n_embd"]
        return family, C.GPTConfig(
            vocab_size=hf["vocab_size"],
            max_seq_len=hf["n_positions"],
            n_layers=hf["n_layer"],
            d_model=d,
            n_heads=hf["n_head"],
            d_ff=hf.get("n_inner") or 4 * d,
            norm_eps=hf.get("layer_norm_epsilon", 1e-5),
            tie_embeddings=hf.get("tie_word_embeddings", True),
            init_std=hf.get("initializer_range", 0.02),
        )
    if hf.get("hidden_act", "silu") != "silu":
        raise UnsupportedArchitectureError(f"{arch} with hidden_act={hf['hidden_act']!r}")
    if hf.get("use_sliding_window"):
        raise UnsupportedArchitectureError(
            f"{arch} with use_sliding_window=true (per-layer windows)"
        )
    n_heads = hf["num_attention_heads"]
    bias = bool(hf.get("attention_bias", False))
    kw: dict[str, Any] = dict(
        vocab_size=hf["vocab_size"],
        max_seq_len=hf["max_position_embeddings"],
        n_layers=hf["num_hidden_layers"],
        d_model=hf["hidden_size"],
        n_heads=n_heads,
        n_kv_heads=hf.get("num_key_value_heads") or n_heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // n_heads,
        d_ff=hf["intermediate_size"],
        norm_eps=hf["rms_norm_eps"],
        tie_embeddings=hf.get("tie_word_embeddings", False),
        init_std=hf.get("initializer_range", 0.02),
        qkv_bias=bias,
        out_bias=bias,
        **_rope_from_hf(hf, arch),
    )
    if family == "llama":
        return family, C.LlamaConfig(mlp_bias=bool(hf.get("mlp_bias", False)), **kw)
    if family == "qwen2":
        return family, C.Qwen2Config(**{**kw, "qkv_bias": True, "out_bias": False})
    if family == "qwen3":
        return family, C.Qwen3Config(qk_norm=True, **kw)
    if hf.get("decoder_sparse_step", 1) != 1 or hf.get("mlp_only_layers"):
        raise UnsupportedArchitectureError(
            f"{arch} with dense layers (mlp_only_layers/sparse step)"
        )
    return family, C.Qwen3MoeConfig(
        qk_norm=True,
        n_experts=hf.get("num_experts") or hf["num_local_experts"],
        n_experts_per_token=hf["num_experts_per_tok"],
        moe_d_ff=hf["moe_intermediate_size"],
        norm_topk_prob=bool(hf.get("norm_topk_prob")),
        router_aux_loss_coef=hf.get("router_aux_loss_coef", 0.001),
        **kw,
    )


def config_to_hf(family: str, c: Any) -> dict:
    """A ``config.json`` transformers builds the same model from."""
    base = {
        "architectures": [FAMILY_ARCH[family]],
        "model_type": MODEL_TYPES[family],
        "vocab_size": c.vocab_size,
        "tie_word_embeddings": c.tie_embeddings,
        "initializer_range": c.init_std,
        "dtype": "float32",
    }
    if family == "gpt":
        if c.positions != "learned" or not c.bias:
            raise ModelError(
                "only GPT-2 proper (learned positions, biases) exports to transformers"
            )
        return {
            **base,
            "n_embd": c.d_model,
            "n_layer": c.n_layers,
            "n_head": c.n_heads,
            "n_positions": c.max_seq_len,
            "n_inner": c.d_ff or 4 * c.d_model,
            "activation_function": "gelu_new",
            "layer_norm_epsilon": c.norm_eps,
        }
    if c.sliding_window:
        raise ModelError(
            f"sliding_window={c.sliding_window} has no {FAMILY_ARCH[family]} equivalent"
        )
    expected = {"llama": (c.qkv_bias, c.qkv_bias), "qwen2": (True, False)}.get(
        family, (c.qkv_bias, c.qkv_bias)
    )
    if (c.qkv_bias, c.out_bias) != expected or c.qk_norm != family.startswith("qwen3"):
        raise ModelError(
            f"this {family} config (biases/q-k norm) has no {FAMILY_ARCH[family]} equivalent"
        )
    rope: dict[str, Any] = {"rope_theta": c.rope_theta, "rope_type": "default"}
    if c.rope_scaling == "llama3":
        rope.update(
            rope_type="llama3",
            factor=c.rope_factor,
            low_freq_factor=c.rope_low_freq_factor,
            high_freq_factor=c.rope_high_freq_factor,
            original_max_position_embeddings=c.rope_original_max_len,
        )
    out = {
        **base,
        "hidden_size": c.d_model,
        "intermediate_size": c.d_ff,
        "num_hidden_layers": c.n_layers,
        "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads or c.n_heads,
        "head_dim": c.head_dim or c.d_model // c.n_heads,
        "hidden_act": "silu",
        "max_position_embeddings": c.max_seq_len,
        "rms_norm_eps": c.norm_eps,
        "rope_parameters": rope,
        "rope_theta": c.rope_theta,
        "rope_scaling": rope if c.rope_scaling == "llama3" else None,
    }
    if family in ("llama", "qwen3", "qwen3_moe"):
        out["attention_bias"] = c.qkv_bias
    if family == "llama":
        out["mlp_bias"] = c.mlp_bias
    if family == "qwen3_moe":
        out.update(
            num_experts=c.n_experts,
            num_local_experts=c.n_experts,
            num_experts_per_tok=c.n_experts_per_token,
            moe_intermediate_size=c.moe_d_ff,
            norm_topk_prob=c.norm_topk_prob,
            router_aux_loss_coef=c.router_aux_loss_coef,
            decoder_sparse_step=1,
            mlp_only_layers=[],
        )
    return out


# ----------------------------------------------------------------------------- tensor rules


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


# ----------------------------------------------------------------------------- import / export


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
