"""The decoder-only language model every family builds on.

A family subclasses :class:`DecoderLM`, names its config dataclass (``config_class``) and
says how to build a norm (``make_norm``), an attention layer (``make_attention``) and a
feed-forward layer (``make_mlp``); ``make_block`` puts them in a ``block_cls``. The stack,
masks, KV cache, output head and the FLOPs count live here once. Two hooks let a family
report more: ``aux_losses`` turns the blocks' statistics into auxiliary losses, and
``matmul_share`` says how much of a parameter one token multiplies with.

The blocks are stacked: ``self.blocks`` is one block module whose parameters have a leading
``layers`` axis (``blocks.mlp.up_proj.kernel`` is LxDxF), run by ``nnx.scan``, so the
compiled step is the same size at any depth. A family whose blocks differ from layer to
layer sets ``scan_layers = False`` and gets an ``nnx.List`` of blocks run by a Python loop
(``blocks.3.mlp...``); ``unrolled()`` gives that form of any model (what time travel records).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, ClassVar, TypedDict

import jax
import jax.numpy as jnp
from flax import nnx
from theseus.core.execution import AttentionKernel, ContextSplit, ExecutionPlan
from theseus.core.sharding.remat import checkpointed
from theseus.models.config import unplanned_execution
from theseus.models.errors import ModelError, SequenceTooLongError, VocabMismatchError
from theseus.models.layers.attention import Attention, MaskInfo
from theseus.models.layers.block import (
    LAYER_METADATA,
    Block,
    LayerIndex,
    layer_of,
    stack_blocks,
)
from theseus.models.layers.decode_attention import KERNEL_SLOTS
from theseus.models.layers.embedding import Embedding
from theseus.models.layers.kv_cache import KVCache, LayerCache
from theseus.models.layers.linear import Linear
from theseus.models.layers.moe import MoE


class LayerInit(TypedDict):
    """The keyword arguments a layer is built with besides its shape (``init_options``)."""

    std: float
    out_std: float
    dtype: Any
    rngs: nnx.Rngs


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

    config_class: ClassVar[type[Any]]  # the family's config dataclass
    block_cls: ClassVar[type] = Block
    scan_layers: ClassVar[bool] = True  # False: blocks that differ per layer, in a Python loop
    # a model imported from (or exported to) Hugging Face (``hf/checkpoint.py``): its
    # family's name and config.json's bos/eos/pad ids, as (key, id) pairs
    family: str
    special_tokens: tuple[tuple[str, Any], ...]

    def __init__(
        self, config: Any, *, rngs: nnx.Rngs, execution: ExecutionPlan | None = None
    ) -> None:
        if not isinstance(config, self.config_class):
            raise ModelError(
                f"{type(self).__name__} is built from a {self.config_class.__name__} "
                f"(or a subclass), not a {type(config).__name__}"
            )
        self.config = config
        self.check_config()
        if config.vocab_size <= 0:
            raise ModelError(
                f"vocab_size={config.vocab_size}: set model.vocab_size (the trainer fills it "
                "from the tokenized data)"
            )
        self.execution = execution or unplanned_execution(config)
        self.dtype = jnp.dtype(self.execution.compute_dtype)  # the plan's, decided once
        c = config
        self.embed = Embedding(c.vocab_size, c.d_model, std=c.init_std, dtype=self.dtype, rngs=rngs)
        self.blocks: Any = self.make_blocks(rngs)  # a stack under one module, or an nnx.List
        self.check_planned()
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

    def check_config(self) -> None:
        """Raise a ModelError naming the values of ``self.config`` a family cannot build."""

    def make_norm(self, dim: int) -> nnx.Module:
        raise NotImplementedError

    def make_attention(self, index: LayerIndex, rngs: nnx.Rngs) -> nnx.Module:
        raise NotImplementedError

    def make_mlp(self, index: LayerIndex, rngs: nnx.Rngs) -> nnx.Module:
        raise NotImplementedError

    def make_block(self, index: LayerIndex, rngs: nnx.Rngs) -> nnx.Module:
        """Block ``index``: norm, attention, norm, MLP (attention first: the init order).

        With ``scan_layers`` this runs once for all layers, under ``nnx.vmap``: ``index`` is
        then a traced int32 scalar, and the block must have the same structure at every index.
        """
        d = self.config.d_model
        return self.block_cls(
            self.make_norm(d),
            self.make_attention(index, rngs),
            self.make_norm(d),
            self.make_mlp(index, rngs),
        )

    def make_blocks(self, rngs: nnx.Rngs) -> nnx.Module:
        """Every layer's block: stacked on a leading ``layers`` axis (``scan_layers``), or an
        ``nnx.List`` of ``make_block(i)``."""
        if self.scan_layers:
            return stack_blocks(self.make_block, self.config.n_layers, rngs)
        return nnx.List([self.make_block(i, rngs) for i in range(self.config.n_layers)])

    @property
    def stacked(self) -> bool:
        """Whether ``blocks`` holds every layer stacked (run under a scan)."""
        return not isinstance(self.blocks, nnx.List)

    def layer(self, index: int) -> Any:
        """Block ``index`` as a module of its own; from a stack its parameters are copies."""
        if not self.stacked:
            return self.blocks[index]
        if not 0 <= index < self.config.n_layers:
            raise IndexError(f"layer {index} of a {self.config.n_layers}-layer model")
        return layer_of(self.blocks, index)

    def per_layer(self) -> list[Any]:
        """A block per layer for reading static attributes (heads, windows): a stack's one
        module stands for every layer (its parameters keep the leading ``layers`` axis)."""
        if self.stacked:
            return [self.blocks] * self.config.n_layers
        return list(self.blocks)

    def unrolled(self) -> DecoderLM:
        """This model with ``blocks`` an ``nnx.List`` run by a Python loop: module paths
        ``blocks.<i>.<name>`` an eager pass can record. Parameters outside the blocks are
        shared; the blocks' are slices of the stack. A model already unrolled is returned."""
        if not self.stacked:
            return self
        view = nnx.merge(*nnx.split(self))
        view.blocks = nnx.List([self.layer(i) for i in range(self.config.n_layers)])
        return view

    def out_std(self) -> float:
        """Init std of the projections into the residual stream (GPT-2's 1/sqrt(2 * layers))."""
        return self.config.init_std / math.sqrt(2 * self.config.n_layers)

    def init_options(self, rngs: nnx.Rngs) -> LayerInit:
        """What every layer of the model is built with: its init scales (``out_std`` for the
        projections into the residual stream), the compute dtype and the random streams."""
        c = self.config
        return LayerInit(std=c.init_std, out_std=self.out_std(), dtype=self.dtype, rngs=rngs)

    def embed_tokens(self, tokens_BxT: jax.Array, positions_BxT: jax.Array) -> jax.Array:
        return self.embed(tokens_BxT)

    def check_planned(self) -> None:
        """Every attention and expert layer built with the model's plan (a family passes
        ``execution=self.execution``): one built without it would not split its work over
        the mesh as the step does. A ModelError naming the layer otherwise."""
        plan = self.execution
        for _, layer in nnx.iter_graph(self.blocks):
            if isinstance(layer, Attention) and layer.context == plan.context:
                planned = layer.mesh_sizes == plan.mesh_axes
            elif isinstance(layer, MoE):
                planned = layer.mesh_sizes == plan.mesh_axes
            else:
                planned = not isinstance(layer, Attention)
            if not planned:
                raise ModelError(
                    f"{type(self).__name__}: its {type(layer).__name__} layer was built without "
                    "the model's execution plan; build it with execution=self.execution"
                )

    def attention_layers(self) -> list[Attention]:
        """Every attention layer (a stack's one module stands for all its layers)."""
        return [m for _, m in nnx.iter_graph(self.blocks) if isinstance(m, Attention)]

    def choose_attention(
        self,
        seq_len: int,
        platform: str,
        device_kind: str = "",
        head_shards: int = 1,
        context: ContextSplit | None = None,
    ) -> AttentionKernel:
        """The kernel the attention layers would run at ``seq_len`` on ``platform`` (a chip
        of ``device_kind``, the heads split ``head_shards`` ways, the sequence split as
        ``context`` says): a question for the execution plan, nothing is stored. Layers that
        override a stage run the reference stages beside it (each layer is built with the plan)."""
        chosen = [
            (layer.choose(seq_len, platform, device_kind, head_shards, context), layer)
            for layer in self.attention_layers()
        ]
        if not chosen:
            return AttentionKernel("none", why="no attention layer")
        own = [kernel for kernel, layer in chosen if not layer.overridden_stages()]
        kernel = (own or [chosen[0][0]])[0]
        if own and len(own) < len(chosen):
            return replace(kernel, why="layers that override a stage run reference")
        return kernel

    @property
    def kv_shape(self) -> tuple[int, int]:
        """(kv heads, head_dim) of the attention layers, for the cache."""
        attention = self.per_layer()[0].attention
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
        hidden_BxTxD, aux, summary, cache = self.hidden_with_stats(
            tokens_BxT, positions=positions, segment_ids=segment_ids, cache=cache
        )
        return self.head(hidden_BxTxD), aux, summary, cache

    def hidden_with_stats(
        self,
        tokens_BxT: jax.Array,
        *,
        positions: jax.Array | None = None,
        segment_ids: jax.Array | None = None,
        cache: KVCache | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array], dict[str, jax.Array], KVCache | None]:
        """``forward_with_stats`` up to the final norm: hidden states BxTxD, not logits."""
        B, T = tokens_BxT.shape
        if cache is None:  # a cache was checked when it was made (``init_cache``)
            self.check_length(T)
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
        x_BxTxD, kv, stats = self.run_blocks(x_BxTxD, positions_BxT, info, cache)
        if cache is not None:
            assert kv is not None  # a cache in, new keys and values out
            cache = cache.written(*kv, info.k_segment, T)
        aux, summary = self.aux_losses(stats)
        return self.final_norm(x_BxTxD), aux, summary, cache

    def run_blocks(
        self,
        x_BxTxD: jax.Array,
        positions_BxT: jax.Array,
        info: MaskInfo,
        cache: KVCache | None,
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array] | None, dict[str, jax.Array]]:
        """Every block in turn: the output, the cache's new keys and values (with a cache:
        :meth:`run_cached_blocks`) and the blocks' statistics, each stacked on a leading L
        axis. A stack runs under ``nnx.scan``, each step one layer's parameters."""
        if cache is not None:
            return self.run_cached_blocks(x_BxTxD, positions_BxT, info, cache)

        def layer(block: nnx.Module, x_BxTxD: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
            x_BxTxD, _, stats = block(x_BxTxD, positions_BxT, info, None)
            return x_BxTxD, stats

        # every block at the plan's remat level (in a scan: once per layer)
        run = checkpointed(layer, self.execution.remat.level, scanned=self.stacked)
        if self.stacked:
            scan = nnx.scan(
                run,
                unroll=min(getattr(self.config, "scan_unroll", 1), self.config.n_layers),
                in_axes=(0, nnx.Carry),
                out_axes=(nnx.Carry, 0),
                transform_metadata=LAYER_METADATA,
            )
            x_BxTxD, stats = scan(self.blocks, x_BxTxD)
            return x_BxTxD, None, stats
        outputs = []
        for block in self.blocks:
            x_BxTxD, stats = run(block, x_BxTxD)
            outputs.append(stats)
        return x_BxTxD, None, stack_layers(outputs)

    def run_cached_blocks(
        self, x_BxTxD: jax.Array, positions_BxT: jax.Array, info: MaskInfo, cache: KVCache
    ) -> tuple[jax.Array, tuple[jax.Array, jax.Array], dict[str, jax.Array]]:
        """Every block in turn with the cache: the whole cache is carried from layer to
        layer and each writes its own slots in place (``LayerCache``); the output, the
        cache's new keys and values and the blocks' statistics (nothing is recomputed)."""

        def layer(
            block: nnx.Module, carry: tuple[jax.Array, jax.Array, jax.Array], index: Any
        ) -> tuple[tuple[jax.Array, jax.Array, jax.Array], dict[str, jax.Array]]:
            x_BxTxD, k, v = carry
            view = LayerCache(k, v, cache.index, index, cache.reader, cache.fresh)
            x_BxTxD, view, stats = block(x_BxTxD, positions_BxT, info, view)
            return (x_BxTxD, view.k, view.v), stats

        carry = (x_BxTxD, cache.k, cache.v)
        if self.stacked:
            scan = nnx.scan(
                layer,
                in_axes=(0, nnx.Carry, 0),
                out_axes=(nnx.Carry, 0),
                transform_metadata=LAYER_METADATA,
            )
            layers = jnp.arange(self.config.n_layers, dtype=jnp.int32)
            (x_BxTxD, k, v), stats = scan(self.blocks, carry, layers)
            return x_BxTxD, (k, v), stats
        outputs = []
        for index, block in enumerate(self.blocks):
            carry, stats = layer(block, carry, index)
            outputs.append(stats)
        x_BxTxD, k, v = carry
        return x_BxTxD, (k, v), stack_layers(outputs)

    def aux_losses(
        self, stats: dict[str, jax.Array]
    ) -> tuple[dict[str, jax.Array], dict[str, jax.Array]]:
        """Weighted auxiliary losses (the trainer adds them) and statistics to report, from
        the blocks' statistics (``Block.feed_forward``), each stacked on a leading L axis
        (``stats["counts"]`` is LxE); none by default."""
        return {}, {}

    def hidden_with_aux(
        self,
        tokens_BxT: jax.Array,
        *,
        positions: jax.Array | None = None,
        segment_ids: jax.Array | None = None,
    ) -> tuple[jax.Array, dict[str, jax.Array]]:
        """The final (normed) hidden states BxTxD and the aux losses: ``forward_with_aux``
        without the output head, for a loss that runs ``head`` on a few positions at a time
        (its logits never all in memory at once)."""
        hidden_BxTxD, aux, _, _ = self.hidden_with_stats(
            tokens_BxT, positions=positions, segment_ids=segment_ids
        )
        return hidden_BxTxD, aux

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
        logits_BxTxV, _, _, after = self.forward_with_stats(
            tokens_BxT, positions=positions, segment_ids=segment_ids, cache=cache
        )
        assert after is not None  # a cache in, a cache out
        return logits_BxTxV, after

    def init_cache(self, batch: int, length: int, reader: str = "reference") -> KVCache:
        """An empty cache for ``length`` positions of ``batch`` rows, read by decoding steps
        as ``reader`` says (``layers/decode_attention.py``; the kernel's cache is rounded up
        to whole blocks of ``KERNEL_SLOTS``)."""
        self.check_length(length)
        (G, K), value_shape = self.per_layer()[0].attention.cache_shape()
        slots = length if reader == "reference" else -(-length // KERNEL_SLOTS) * KERNEL_SLOTS
        L = self.config.n_layers
        return KVCache.zeros(L, batch, slots, G, K, self.dtype, value_shape, reader)

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
        parameter), plus attention: ``QK^T`` at ``2 * heads * head_dim`` and ``PV`` at
        ``2 * heads * v_head_dim`` FLOPs per key, over the keys a query actually sees (causal:
        on average (T + 1) / 2, capped by a sliding window).
        """
        n = 0.0
        for path, value in nnx.to_flat_state(nnx.state(self, nnx.Param)):
            n += self.matmul_share(tuple(str(p) for p in path), float(value[...].size))
        attention = 0.0
        for block in self.per_layer():
            a = block.attention
            window = a.sliding_window or seq_len
            keys = sum(min(t + 1, window) for t in range(seq_len)) / seq_len
            v_head_dim = getattr(a, "v_head_dim", a.head_dim)
            attention += 2 * a.n_heads * (a.head_dim + v_head_dim) * keys
        return 6.0 * n + 3.0 * attention


def stack_layers(per_layer: list[dict[str, jax.Array]]) -> dict[str, jax.Array]:
    """The blocks' statistics of a Python loop of layers, stacked on a leading L axis."""
    if not per_layer:
        return {}
    return jax.tree.map(lambda *values: jnp.stack(values), *per_layer)
