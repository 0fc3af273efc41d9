"""The decoder-only language model every family builds on.

A family subclasses :class:`DecoderLM` and says how to build a block (``make_block``) and a
norm (``make_norm``); the stack, masks, KV cache, output head, auxiliary losses and the FLOPs
count live here once.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.models.errors import ModelError, SequenceTooLongError, VocabMismatchError
from theseus.models.layers.attention import KVCache, LayerCache, MaskInfo
from theseus.models.layers.embedding import Embedding
from theseus.models.layers.linear import Linear
from theseus.models.layers.moe import load_balancing_loss

EXPERT_PARAMS = ("w_gate", "w_up", "w_down")


def document_positions(segment_ids_BxT: jax.Array) -> jax.Array:
    """Positions restarting at 0 wherever the segment id changes (packed documents)."""
    T = segment_ids_BxT.shape[1]
    idx = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), segment_ids_BxT.shape)
    prev = jnp.pad(segment_ids_BxT[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    starts = jnp.where(segment_ids_BxT != prev, idx, 0)
    return idx - jax.lax.cummax(starts, axis=1)


def coerce_config(config: Any, cls: type | None) -> Any:
    """A private copy of ``config`` as the family's dataclass (from a dataclass or a mapping).

    The config tree hands the model its ``model`` node, which also holds ``name``.
    """
    if cls is None:
        return config
    if dataclasses.is_dataclass(config):
        values = dataclasses.asdict(config)
    else:
        from omegaconf import DictConfig, OmegaConf

        values = (
            OmegaConf.to_container(config, resolve=True)
            if isinstance(config, DictConfig)
            else dict(config)
        )
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known - {"name"})
    if unknown:
        raise ModelError(f"{cls.__name__} has no field(s) {', '.join(unknown)}")
    return cls(**{k: v for k, v in values.items() if k in known})


class DecoderLM(nnx.Module):
    """Embedding -> blocks -> final norm -> output head (tied or not)."""

    config_class: type | None = None  # the family's config dataclass

    def __init__(self, config: Any, *, rngs: nnx.Rngs) -> None:
        config = coerce_config(config, self.config_class)
        self.check_config(config)
        if config.vocab_size <= 0:
            raise ModelError(
                f"vocab_size={config.vocab_size}: set model.vocab_size (the trainer fills it "
                "from the tokenized data)"
            )
        self.config = config
        self.dtype = jnp.dtype(config.dtype)
        c = config
        self.embed = Embedding(c.vocab_size, c.d_model, std=c.init_std, dtype=self.dtype, rngs=rngs)
        self.blocks = nnx.List([self.make_block(i, rngs) for i in range(c.n_layers)])
        self.final_norm = self.make_norm(c.d_model)
        if c.tie_embeddings:
            self.lm_head = None
        else:
            self.lm_head = Linear(
                (c.d_model,),
                (c.vocab_size,),
                ("embed",),
                ("vocab",),
                std=c.init_std,
                dtype=self.dtype,
                rngs=rngs,
            )

    # ------------------------------------------------------------------ what a family provides

    def check_config(self, config: Any) -> None:
        """Raise a ModelError naming the values a family cannot build."""

    def make_block(self, index: int, rngs: nnx.Rngs) -> nnx.Module:
        raise NotImplementedError

    def make_norm(self, dim: int) -> nnx.Module:
        raise NotImplementedError

    def embed_tokens(self, tokens_BxT: jax.Array, positions_BxT: jax.Array) -> jax.Array:
        return self.embed(tokens_BxT)

    @property
    def kv_shape(self) -> tuple[int, int]:
        """(kv heads, head_dim) of the attention layers, for the cache."""
        attention = self.blocks[0].attention
        return attention.n_kv_heads, attention.head_dim

    # ------------------------------------------------------------------ the forward

    def head(self, x_BxTxD: jax.Array) -> jax.Array:
        if self.lm_head is None:
            return self.embed.attend(x_BxTxD)
        return self.lm_head(x_BxTxD).astype(jnp.float32)

    def check_vocab(self, tokenizer_vocab_size: int) -> None:
        """Refuse a tokenizer whose ids do not all fit the embedding table."""
        if tokenizer_vocab_size > self.config.vocab_size:
            raise VocabMismatchError(
                f"the tokenizer has {tokenizer_vocab_size} tokens but the model's "
                f"vocab_size={self.config.vocab_size}"
            )

    def check_length(self, length: int) -> None:
        if length > self.config.max_seq_len:
            raise SequenceTooLongError(
                f"sequence of {length} tokens is longer than the model's "
                f"max_seq_len={self.config.max_seq_len}"
            )

    def forward_with_stats(
        self,
        tokens_BxT: jax.Array,
        *,
        positions: jax.Array | None = None,
        segment_ids: jax.Array | None = None,
        cache: KVCache | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array], dict[str, jax.Array], KVCache | None]:
        """Logits (BxTxV, float32), weighted aux losses, statistics, and the updated cache."""
        B, T = tokens_BxT.shape
        self.check_length(T if cache is None else cache.length)
        if segment_ids is None:
            segment_ids = jnp.ones((B, T), jnp.int32)
        if positions is None:
            positions = document_positions(segment_ids)
        q_slot = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        if cache is None:
            info = MaskInfo(q_slot, q_slot, segment_ids, segment_ids)
        else:
            S = cache.length
            k_segment = jax.lax.dynamic_update_slice(
                cache.segment_ids, segment_ids.astype(jnp.int32), (0, cache.index)
            )
            k_slot = jnp.broadcast_to(jnp.arange(S, dtype=jnp.int32), (B, S))
            info = MaskInfo(q_slot + cache.index, k_slot, segment_ids, k_segment)
        x = self.embed_tokens(tokens_BxT, positions)
        ks, vs, stats = [], [], []
        for i, block in enumerate(self.blocks):
            layer_cache = None if cache is None else LayerCache(cache.k[i], cache.v[i], cache.index)
            x, layer_cache, block_stats = block(x, positions, info, layer_cache)
            stats.append(block_stats)
            if layer_cache is not None:
                ks.append(layer_cache.k)
                vs.append(layer_cache.v)
        logits = self.head(self.final_norm(x))
        if cache is not None:
            cache = KVCache(jnp.stack(ks), jnp.stack(vs), info.k_segment, cache.index + T)
        aux, summary = self.aux_losses(stats)
        return logits, aux, summary, cache

    def aux_losses(self, stats: list[dict]) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """The MoE load-balancing loss over all MoE layers (weighted), and the drop fraction."""
        moe = [s for s in stats if "counts" in s]
        if not moe:
            return {}, {}
        counts = sum(s["counts"] for s in moe)
        prob_sums = sum(s["prob_sums"] for s in moe)
        tokens = sum(s["tokens"] for s in moe)
        loss = load_balancing_loss(counts, prob_sums, tokens)
        coef = self.config.router_aux_loss_coef
        drop = sum(s["drop_fraction"] for s in moe) / len(moe)
        return {"moe_load_balance": coef * loss}, {
            "moe_load_balance": loss,
            "moe_drop_fraction": drop,
        }

    def forward_with_aux(
        self,
        tokens_BxT: jax.Array,
        *,
        positions: jax.Array | None = None,
        segment_ids: jax.Array | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        logits, aux, _, _ = self.forward_with_stats(
            tokens_BxT, positions=positions, segment_ids=segment_ids
        )
        return logits, aux

    def __call__(
        self,
        tokens_BxT: jax.Array,
        *,
        positions: jax.Array | None = None,
        segment_ids: jax.Array | None = None,
    ) -> jax.Array:
        return self.forward_with_aux(tokens_BxT, positions=positions, segment_ids=segment_ids)[0]

    def decode(
        self,
        tokens_BxT: jax.Array,
        cache: KVCache,
        *,
        positions: jax.Array,
        segment_ids: jax.Array,
    ) -> tuple[jax.Array, KVCache]:
        """Run ``tokens`` after what the cache holds; returns their logits and the new cache."""
        logits, _, _, cache = self.forward_with_stats(
            tokens_BxT, positions=positions, segment_ids=segment_ids, cache=cache
        )
        return logits, cache

    def init_cache(self, batch: int, length: int) -> KVCache:
        self.check_length(length)
        G, K = self.kv_shape
        return KVCache.zeros(self.config.n_layers, batch, length, G, K, self.dtype)

    # ------------------------------------------------------------------ accounting

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: forward + backward = 3 x forward, multiply-add = 2 FLOPs.

        ``6 * N`` for the N matmul weights a token goes through (the output head included,
        embedding lookups not; for MoE the router plus k of the E experts), plus attention:
        ``QK^T`` and ``PV`` at ``2 * heads * head_dim`` FLOPs per key each, over the keys a
        query actually sees (causal: on average (T + 1) / 2, capped by a sliding window).
        """
        n = 0.0
        for path, value in nnx.to_flat_state(nnx.state(self, nnx.Param)):
            array = value[...]
            names = [str(p) for p in path]
            if names[-1] not in ("kernel", "embedding", *EXPERT_PARAMS):
                continue  # biases and norm gains: elementwise, not matmuls
            if names[-1] == "embedding" and not (names[0] == "embed" and self.lm_head is None):
                continue
            size = float(array.size)
            if names[-1] in EXPERT_PARAMS:
                moe = self.config
                size *= moe.n_experts_per_token / moe.n_experts
            n += size
        attention = 0.0
        for block in self.blocks:
            a = block.attention
            window = a.sliding_window or seq_len
            keys = sum(min(t + 1, window) for t in range(seq_len)) / seq_len
            attention += 2 * 2 * a.n_heads * a.head_dim * keys
        return 6.0 * n + 3.0 * attention
