"""LoRA: a low-rank update beside a frozen linear layer (Hu et al., 2021).

    y = base(x) + (alpha / rank) * dropout(x) @ A @ B,   A: in x rank,  B: rank x out

``B`` starts at zero, so an adapted model computes exactly its base until it trains; ``A``
starts uniform in +-1/sqrt(fan_in) (PEFT's default). Both are ``Adapter`` variables: the
trainer optimizes them alone.

Adapters are added by composition: :func:`adapted_class` subclasses a model family and
overrides one stage, ``make_block``, to wrap the chosen linear layers of each block it
builds. Under a stack of blocks that runs once under ``nnx.vmap``, so every adapter gets the
leading ``layers`` axis, its own random init per layer and its layer's index (for dropout).
"""

from __future__ import annotations

import functools
import math
import zlib
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.adapters import Adapter, LayerIndex, current_dropout_key
from theseus.core.sharding.rules import CONTEXT_AXIS
from theseus.models.errors import ModelError
from theseus.models.layers.linear import Linear, contract
from theseus.models.layers.mesh_axes import axis_size

GROUPS = {"attention": "attention", "mlp": "mlp"}  # a group name: every linear layer under it
NOT_IN_GROUPS = ("router",)  # a MoE router is adapted only when named: it is not a projection


class LoRALinear(Linear):
    """A :class:`Linear` whose output gains ``scale * dropout(x) @ A @ B``.

    It takes over the base layer's ``kernel`` and ``bias`` (same variables, same paths:
    ``q_proj.kernel`` stays ``q_proj.kernel``), so checkpoints, Hugging Face import and
    export see the base model unchanged, plus ``lora_a`` and ``lora_b`` beside them.
    """

    def __init__(
        self,
        base: Linear,
        name: str,
        rank: int,
        alpha: float,
        dropout: float,
        layer: Any,
        rngs: nnx.Rngs,
    ) -> None:
        n = base.n_in
        shape = base.kernel[...].shape
        in_shape, out_shape = shape[:n], shape[n:]
        axes = tuple(base.kernel.get_metadata().get("out_sharding") or (None,) * len(shape))
        in_axes, out_axes = axes[:n], axes[n:]
        bound = 1.0 / math.sqrt(math.prod(in_shape))
        a = jax.random.uniform(rngs.params(), (*in_shape, rank), minval=-bound, maxval=bound)
        self.kernel, self.bias, self.n_in, self.dtype = base.kernel, base.bias, n, base.dtype
        self.gather = base.gather
        self.lora_a = Adapter(a, out_sharding=(*in_axes, None), eager_sharding=False)
        self.lora_b = Adapter(
            jnp.zeros((rank, *out_shape)), out_sharding=(None, *out_axes), eager_sharding=False
        )
        self.layer = LayerIndex(jnp.asarray(layer, jnp.int32))
        self.scale = alpha / rank
        self.rate = dropout
        self.stream = zlib.crc32(name.encode())  # a fixed number per target name

    def __call__(self, x: jax.Array) -> jax.Array:
        y = super().__call__(x)
        n, dtype = self.n_in, self.dtype
        a, b = self.lora_a[...].astype(dtype), self.lora_b[...].astype(dtype)
        if axis_size(CONTEXT_AXIS) > 1:  # the sequence is split: keep (batch, sequence) apart
            delta = contract(contract(self.drop(x.astype(dtype)), a, n), b, 1)
            return y + (self.scale * delta).astype(y.dtype)
        lead = x.shape[: x.ndim - n]
        x2 = self.drop(x.astype(dtype).reshape(math.prod(lead), -1))
        delta = (x2 @ a.reshape(x2.shape[1], -1)) @ b.reshape(a.shape[-1], -1)
        return y + (self.scale * delta).reshape(y.shape).astype(y.dtype)

    def merge(self) -> None:
        """Fold the update into the kernel (``kernel += scale * A @ B``) and zero ``B``: the
        layer then computes the same outputs from its kernel alone."""
        a, b = self.lora_a[...], self.lora_b[...]
        kernel = self.kernel[...]
        stack = a.ndim - self.n_in - 1  # leading axes of a stack of layers
        lead = a.shape[:stack]
        a2 = a.reshape(*lead, -1, a.shape[-1])
        b2 = b.reshape(*lead, b.shape[stack], -1)
        delta = jnp.matmul(a2, b2).reshape(kernel.shape)
        self.kernel[...] = (kernel + self.scale * delta).astype(kernel.dtype)
        self.lora_b[...] = jnp.zeros_like(b)

    def drop(self, x: jax.Array) -> jax.Array:
        key = current_dropout_key()
        if not self.rate or key is None:
            return x
        key = jax.random.fold_in(jax.random.fold_in(key, self.layer[...]), self.stream)
        keep = jax.random.bernoulli(key, 1.0 - self.rate, x.shape)
        return jnp.where(keep, x / (1.0 - self.rate), 0).astype(x.dtype)


def linear_layers(module: nnx.Module, prefix: str = "") -> list[tuple[str, nnx.Module, str]]:
    """``(path, parent, attribute)`` of every :class:`Linear` under ``module``."""
    found = []
    for attribute, child in vars(module).items():
        path = f"{prefix}.{attribute}" if prefix else attribute
        if isinstance(child, LoRALinear):
            continue
        if isinstance(child, Linear):
            found.append((path, module, attribute))
        elif isinstance(child, nnx.Module):
            found.extend(linear_layers(child, path))
    return found


def add_adapters(block: nnx.Module, lora: Any, layer: Any, rngs: nnx.Rngs) -> nnx.Module:
    """Wrap the linear layers of ``block`` that ``lora.targets`` names, in place."""
    layers = linear_layers(block)
    chosen = []
    for target in lora.targets:
        group = GROUPS.get(target)
        matches = [
            entry
            for entry in layers
            if entry[2] == target
            or (group and entry[0].split(".")[0] == group and entry[2] not in NOT_IN_GROUPS)
        ]
        if not matches:
            names = sorted({attribute for _, _, attribute in layers} | set(GROUPS))
            raise ModelError(
                f"lora.targets: {target!r} names no linear layer of {type(block).__name__} "
                f"(it has {', '.join(names)})"
            )
        chosen += [m for m in matches if m not in chosen]
    for path, parent, attribute in chosen:
        base = getattr(parent, attribute)
        wrapped = LoRALinear(base, path, lora.rank, lora.alpha, lora.dropout, layer, rngs)
        setattr(parent, attribute, wrapped)
    return block


def adapted_class(model_class: type, lora: Any) -> type | None:
    """``model_class`` with adapters on every block (``None`` if it builds no blocks)."""
    if not hasattr(model_class, "make_block"):
        return None
    key = (model_class, lora.rank, float(lora.alpha), float(lora.dropout), tuple(lora.targets))
    return _cached(key)


@functools.cache
def _cached(key: tuple) -> type:
    model_class, rank, alpha, dropout, targets = key
    settings = _Settings(rank, alpha, dropout, targets)

    def make_block(self: Any, index: Any, rngs: nnx.Rngs) -> nnx.Module:
        block = model_class.make_block(self, index, rngs)
        return add_adapters(block, settings, index, rngs)

    def merge_adapters(self: Any) -> None:
        """Fold every adapter into its kernel, in place (the model's outputs are unchanged)."""
        for _, module in nnx.iter_graph(self):
            if isinstance(module, LoRALinear):
                module.merge()

    return type(
        f"LoRA{model_class.__name__}",
        (model_class,),
        {
            "make_block": make_block,
            "merge_adapters": merge_adapters,
            "lora": settings,
            # hf/export merges the adapters or writes them as PEFT: the base's mapping is exact
            "hf_mapping_exact": True,
            "__module__": __name__,
        },
    )


class _Settings:
    """The LoRA settings a class was made with (plain and hashable)."""

    def __init__(self, rank: int, alpha: float, dropout: float, targets: tuple[str, ...]):
        if rank <= 0:
            raise ModelError(f"lora.rank={rank}: adapters need a rank of 1 or more")
        self.rank, self.alpha, self.dropout, self.targets = rank, alpha, dropout, targets

    def __repr__(self) -> str:
        return f"LoRA(rank={self.rank}, alpha={self.alpha}, dropout={self.dropout})"
