"""What the trainer expects of a registered model family (documentation and a Protocol).

A model family is registered as ``Component(name, config=<Config dataclass>,
target="pkg.module:Model", extra={"presets": {"tiny": {...}, "124m": {...}}})``.

The config dataclass has at least:

* ``preset: str``        -- the size preset applied (``""`` for none)
* ``vocab_size: int``    -- ``0`` means "take it from the tokenized data" (the trainer fills it)
* ``max_seq_len: int``   -- the longest sequence the model accepts

The target class is a ``flax.nnx.Module``::

    model = Model(config, rngs=nnx.Rngs(params=key))
    logits_BxTxV = model(tokens_BxT, positions=positions_BxT, segment_ids=segment_ids_BxT)
    logits_BxTxV, aux = model.forward_with_aux(tokens_BxT, positions=..., segment_ids=...)
    model.flops_per_token(seq_len)   # training FLOPs per token (forward + backward)

``segment_ids`` (int, 0 = padding) restricts attention to tokens of the same document;
``positions`` restart at 0 in each document of a packed row. ``aux`` is a dict of scalar
auxiliary losses already weighted (e.g. the MoE load-balancing loss); the trainer adds them.
Parameters carry logical axis names (``vocab``, ``embed``, ``mlp``, ``heads``, ``kv_heads``,
``head_dim``, ``experts``, ``layers``) in their ``sharding`` metadata.
"""

from __future__ import annotations

from typing import Any, Protocol


class LanguageModel(Protocol):
    config: Any

    def __call__(self, tokens: Any, *, positions: Any = None, segment_ids: Any = None) -> Any: ...

    def forward_with_aux(
        self, tokens: Any, *, positions: Any = None, segment_ids: Any = None
    ) -> tuple[Any, dict[str, Any]]: ...

    def flops_per_token(self, seq_len: int) -> float: ...
