"""The decoder-only language model every family builds on.

A family subclasses :class:`DecoderLM`, names its config dataclass (``config_class``) and
says how to build a norm (``make_norm``), an attention layer (``make_attention``) and a
feed-forward layer (``make_mlp``); ``make_block`` puts them in a ``block_cls``. The stack,
masks, KV cache, output head and the FLOPs count live here once. Two hooks let a family
report more: ``aux_losses`` turns the blocks' statistics into auxiliary losses, and
``matmul_share`` says how much of a parameter one token multiplies with.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.models.errors import ModelError, SequenceTooLongError, VocabMismatchError
from theseus.models.layers.attention import KVCache, LayerCache, MaskInfo
from theseus.models.layers.block import Block
from theseus.models.layers.embedding import Embedding
from theseus.models.layers.linear import Linear


def document_positions(segment_ids_BxT: jax.Array) -> jax.Array:
    """Positions restarting at 0 wherever the segment id changes (packed documents)."""
    T = segment_ids_BxT.shape[1]
    idx_BxT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), segment_ids_BxT.shape)
    prev_BxT = jnp.pad(segment_ids_BxT[:, :-1], ((0, 0), (1, 0)), constant_values=-1)
    starts_BxT = jnp.where(segment_ids_BxT != prev_BxT, idx_BxT, 0)
    return idx_BxT - jax.lax.cummax(starts_BxT, axis=1)


class DecoderLM(nnx.Module):
    """Embedding -> blocks -> final norm -> output head (tied or not).

    Built as ``Model(config, rngs=...)`` from an instance of ``config_class`` (or of a
    subclass, such as the one the config tree makes with a ``name`` field). The config is
    kept as given, never changed: it is part of the graphdef, a static ``jax.jit`` argument.
    """

    config_class: ClassVar[type]  # the family's config dataclass
    block_cls: ClassVar[type] = Block

    def __init__(self, config: Any, *, rngs: nnx.Rngs) -> None:
        if not isinstance(config, self.config_class):
            raise ModelError(
                f"{type(self).__name__} is built from a {self.config_class.__name__} "
                f"(or a subclass), not a {type(config).__name__}"
            )
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

    def make_norm(self, dim: int) -> nnx.Module:
        raise NotImplementedError

    def make_attention(self, index: int, rngs: nnx.Rngs) -> nnx.Module:
        raise NotImplementedError

    def make_mlp(self, index: int, rngs: nnx.Rngs) -> nnx.Module:
        raise NotImplementedError

    def make_block(self, index: int, rngs: nnx.Rngs) -> nnx.Module:
        """Block ``index``: norm, attention, norm, MLP (attention first: the init order)."""
        d = self.config.d_model
        return self.block_cls(
            self.make_norm(d),
            self.make_attention(index, rngs),
            self.make_norm(d),
            self.make_mlp(index, rngs),
        )

    def out_std(self) -> float:
        """Init std of the projections into the residual stream (GPT-2's 1/sqrt(2 * layers))."""
        return self.config.init_std / math.sqrt(2 * self.config.n_layers)

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
        segment_ids_BxT = jnp.ones((B, T), jnp.int32) if segment_ids is None else segment_ids
        positions_BxT = document_positions(segment_ids_BxT) if positions is None else positions
        q_slot_BxT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        if cache is None:
            info = MaskInfo(q_slot_BxT, q_slot_BxT, segment_ids_BxT, segment_ids_BxT)
        else:
            S = cache.length
            k_segment_BxS = jax.lax.dynamic_update_slice(
                cache.segment_ids, segment_ids_BxT.astype(jnp.int32), (0, cache.index)
            )
            k_slot_BxS = jnp.broadcast_to(jnp.arange(S, dtype=jnp.int32), (B, S))
            info = MaskInfo(q_slot_BxT + cache.index, k_slot_BxS, segment_ids_BxT, k_segment_BxS)
        x_BxTxD = self.embed_tokens(tokens_BxT, positions_BxT)
        ks, vs, stats = [], [], []
        for i, block in enumerate(self.blocks):
            layer_cache = None if cache is None else LayerCache(cache.k[i], cache.v[i], cache.index)
            x_BxTxD, layer_cache, block_stats = block(x_BxTxD, positions_BxT, info, layer_cache)
            stats.append(block_stats)
            if layer_cache is not None:
                ks.append(layer_cache.k)
                vs.append(layer_cache.v)
        logits_BxTxV = self.head(self.final_norm(x_BxTxD))
        if cache is not None:
            cache = KVCache(jnp.stack(ks), jnp.stack(vs), info.k_segment, cache.index + T)
        aux, summary = self.aux_losses(stats)
        return logits_BxTxV, aux, summary, cache

    def aux_losses(
        self, stats: list[dict[str, jax.Array]]
    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """Weighted auxiliary losses (the trainer adds them) and statistics to report,
        from each block's statistics (``Block.feed_forward``); none by default."""
        return {}, {}

    def forward_with_aux(
        self,
        tokens_BxT: jax.Array,
        *,
        positions: jax.Array | None = None,
        segment_ids: jax.Array | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        logits_BxTxV, aux, _, _ = self.forward_with_stats(
            tokens_BxT, positions=positions, segment_ids=segment_ids
        )
        return logits_BxTxV, aux

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
        logits_BxTxV, _, _, cache = self.forward_with_stats(
            tokens_BxT, positions=positions, segment_ids=segment_ids, cache=cache
        )
        return logits_BxTxV, cache

    def init_cache(self, batch: int, length: int) -> KVCache:
        self.check_length(length)
        G, K = self.kv_shape
        return KVCache.zeros(self.config.n_layers, batch, length, G, K, self.dtype)

    # ------------------------------------------------------------------ accounting

    def matmul_share(self, path: tuple[str, ...], size: float) -> float:
        """How many of the ``size`` entries of parameter ``path`` one token multiplies with.

        Every kernel, and the token embedding when it is the (tied) output head; not a
        lookup (the embeddings otherwise), nor the elementwise biases and norm gains.
        """
        if path[-1] == "kernel":
            return size
        if path == ("embed", "embedding") and self.lm_head is None:
            return size
        return 0.0

    def flops_per_token(self, seq_len: int) -> float:
        """Training FLOPs per token: forward + backward = 3 x forward, multiply-add = 2 FLOPs.

        ``6 * N`` for the N matmul weights a token goes through (``matmul_share`` of each
        parameter), plus attention: ``QK^T`` and ``PV`` at ``2 * heads * head_dim`` FLOPs per
        key each, over the keys a query actually sees (causal: on average (T + 1) / 2, capped
        by a sliding window).
        """
        n = 0.0
        for path, value in nnx.to_flat_state(nnx.state(self, nnx.Param)):
            n += self.matmul_share(tuple(str(p) for p in path), float(value[...].size))
        attention = 0.0
        for block in self.blocks:
            a = block.attention
            window = a.sliding_window or seq_len
            keys = sum(min(t + 1, window) for t in range(seq_len)) / seq_len
            attention += 2 * 2 * a.n_heads * a.head_dim * keys
        return 6.0 * n + 3.0 * attention
