"""Feed-forward layers: GELU MLP (GPT-2), SwiGLU (Llama), GeGLU (Gemma). Stages: up, activate,
down."""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.ad_checkpoint import checkpoint_name
from theseus.core.sharding.remat import MLP_HIDDEN
from theseus.models.layers.linear import Linear


class MLP(nnx.Module):
    """``down(gelu_tanh(up(x)))``, the GPT-2 MLP (``gelu_new`` is the tanh approximation)."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        bias: bool = True,
        std: float = 0.02,
        out_std: float | None = None,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self.up_proj = Linear(
            (d_model,), (d_ff,), ("embed",), ("mlp",), bias=bias, std=std, dtype=dtype, rngs=rngs
        )
        self.down_proj = Linear(
            (d_ff,),
            (d_model,),
            ("mlp",),
            ("embed",),
            bias=bias,
            std=std if out_std is None else out_std,
            dtype=dtype,
            rngs=rngs,
        )

    def up(self, x: jax.Array) -> jax.Array:
        return self.up_proj(x)

    def activate(self, h: jax.Array) -> jax.Array:
        return jax.nn.gelu(h, approximate=True)

    def down(self, h: jax.Array) -> jax.Array:
        return self.down_proj(h)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(self.activate(checkpoint_name(self.up(x), MLP_HIDDEN)))


class SwiGLU(nnx.Module):
    """``down(silu(gate(x)) * up(x))``."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        bias: bool = False,
        std: float = 0.02,
        out_std: float | None = None,
        dtype=jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        kw = dict(bias=bias, std=std, dtype=dtype, rngs=rngs)
        self.gate_proj = Linear((d_model,), (d_ff,), ("embed",), ("mlp",), **kw)
        self.up_proj = Linear((d_model,), (d_ff,), ("embed",), ("mlp",), **kw)
        kw["std"] = std if out_std is None else out_std
        self.down_proj = Linear((d_ff,), (d_model,), ("mlp",), ("embed",), **kw)

    def up(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        return self.gate_proj(x), self.up_proj(x)

    def activate(self, h: tuple[jax.Array, jax.Array]) -> jax.Array:
        gate, up = h
        return jax.nn.silu(gate) * up

    def down(self, h: jax.Array) -> jax.Array:
        return self.down_proj(h)

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.down(self.activate(checkpoint_name(self.up(x), MLP_HIDDEN)))


class GeGLU(SwiGLU):
    """``down(gelu_tanh(gate(x)) * up(x))`` (Gemma's ``gelu_pytorch_tanh`` gate)."""

    def activate(self, h: tuple[jax.Array, jax.Array]) -> jax.Array:
        gate, up = h
        return jax.nn.gelu(gate, approximate=True) * up
