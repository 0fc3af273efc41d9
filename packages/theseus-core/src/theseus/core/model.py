"""What core expects of a registered model family's class (checked when a run is set up).

A model family is registered as ``Component(name, config=<Config dataclass>,
target="pkg.module:Model", extra={"presets": {"tiny": {...}, "124m": {...}}})``.

The config dataclass has at least:

* ``preset: str``        -- the size preset applied (``""`` for none)
* ``vocab_size: int``    -- ``0`` means "take it from the tokenized data" (the trainer fills it)
* ``max_seq_len: int``   -- the longest sequence the model accepts
* ``dtype: str``         -- the compute dtype (``precision.compute_dtype`` overrides it)

It must be hashable (``@dataclass(unsafe_hash=True)``): the model's graph definition is a
static argument of ``jax.jit``. The model is built as
``Model(config, rngs=nnx.Rngs(params=key), execution=plan)`` from the typed config (an
instance of the config dataclass, never a mapping) and the run's execution plan.

Parameters are ``nnx.Param`` variables carrying logical axis names (``vocab``, ``embed``,
``mlp``, ``heads``, ``kv_heads``, ``head_dim``, ``experts``, ``layers`` for a stack of blocks,
or None) in their ``out_sharding`` metadata: ``nnx.Param(value, out_sharding=("embed", "mlp"),
eager_sharding=False)``. ``theseus.core.sharding.rules`` maps the names onto the mesh, and the
optimizers read them to tell matrices (weight decay) from norm gains and biases
(``theseus.core.optim.optimizers``). Name norm gains ``scale`` and biases ``bias``.

Besides the members of :class:`LanguageModel`, nothing is required: a model without a KV
cache trains and runs the likelihood evaluations; one that also implements :class:`Decoder`
can generate. ``docs/plugins.md`` builds a complete model plugin.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, runtime_checkable

from theseus.core.errors import PluginError

STAT_PREFIX = "stat/"  # aux entries a model reports for logging only (not added to the loss)


class ModelConfig(Protocol):
    """The fields of a model family's config that core reads (see the module docstring);
    the config tree adds ``name``, the registered model the group chose. A dataclass."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    name: str
    preset: str
    vocab_size: int
    max_seq_len: int
    dtype: str


@runtime_checkable
class LanguageModel(Protocol):
    """The members the trainer, time travel and the evaluations use.

    * ``model(tokens_BxT, positions=, segment_ids=) -> logits_BxTxV`` (``segment_ids``:
      0 = padding, attention stays within a document; ``positions`` restart per document).
    * ``forward_with_aux(...) -> (logits_BxTxV, aux)``: ``aux`` maps names to scalar
      auxiliary losses already weighted (e.g. MoE load balancing); the trainer adds them,
      except entries named ``stat/...`` (``STAT_PREFIX``), which it only logs. Every entry
      is logged as ``model/<name>``.
    * ``flops_per_token(seq_len)``: training FLOPs per token (forward + backward).
    * ``blocks``: the transformer blocks, either a sequence of block modules or one module
      whose parameters are stacked over a leading ``layers`` axis and which the model runs
      under a scan; the model checkpoints each block at the plan's remat level (per layer
      inside the scan).
    * ``unrolled()``: the same model with one block module per layer, run by a Python loop
      (module paths ``blocks.<i>.<name>``, what time travel records); ``self`` when the
      blocks are not stacked.
    * ``choose_attention(seq_len, platform, device_kind, head_shards=1, context=None)``:
      what attention would run at this length on this platform, with the heads split
      ``head_shards`` ways over the ``tensor`` mesh axis and the sequence split as
      ``context`` (a ``theseus.core.execution.ContextSplit``) says: a question, nothing is
      stored. The answer is a ``theseus.core.execution.AttentionKernel`` (with its block
      sizes), or just its name (``none`` for a model without attention, which therefore
      cannot split a sequence). The setup puts it in the run's ``ExecutionPlan``.

    The model is built as ``Model(config, rngs=..., execution=plan)``: it runs what the plan
    says (its attention kernel, context split and expert routing) and checkpoints each block
    at ``plan.remat.level`` (``theseus.core.sharding.remat.checkpointed``). Built with
    ``execution=None`` it runs the plainest choice (the reference attention, nothing
    recomputed).
    """

    config: Any
    blocks: Any

    def __call__(self, tokens: Any, *, positions: Any = None, segment_ids: Any = None) -> Any: ...

    def forward_with_aux(
        self, tokens: Any, *, positions: Any = None, segment_ids: Any = None
    ) -> tuple[Any, dict[str, Any]]: ...

    def flops_per_token(self, seq_len: int) -> float: ...

    def choose_attention(
        self,
        seq_len: int,
        platform: str,
        device_kind: str = "",
        head_shards: int = 1,
        context: Any = None,
    ) -> Any: ...

    def unrolled(self) -> Any: ...


@runtime_checkable
class Decoder(Protocol):
    """What generation needs besides :class:`LanguageModel`: a KV cache.

    * ``init_cache(batch, length)``: an empty cache for ``length`` positions.
    * ``decode(tokens_BxT, cache, positions=, segment_ids=) -> (logits_BxTxV, cache)``.
    """

    def init_cache(self, batch: int, length: int) -> Any: ...

    def decode(self, tokens: Any, cache: Any, *, positions: Any, segment_ids: Any) -> Any: ...


def check_model(model: Any, name: str) -> None:
    """A one-line error naming what a registered model class lacks."""
    missing = [
        m
        for m in ("config", "blocks", "forward_with_aux", "flops_per_token")
        if not hasattr(model, m)
    ]
    if missing or not isinstance(model, LanguageModel):
        raise PluginError(
            f"model {name!r} ({type(model).__name__}) does not implement "
            f"theseus.core.model.LanguageModel: missing {', '.join(missing) or '__call__'}"
        )
