"""What a training job asks of a rollout sampler, and what it gets (no JAX here).

A job that samples while it trains (``<model>/train/grpo``) asks the plugins once, through
``theseus_sampler``, for a :class:`Sampler` of its setup's model: a compiled decoding loop
over the setup's mesh, reading the trainer's sharded parameters where they lie. Each
process then hands it the prompts of its own rows; the rows of all processes decode as one
program, and each process gets its rows back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class SamplerRequest:
    """The shape of every batch a sampler decodes (one compilation serves the run)."""

    rows: int  # global rows of a batch (prompts x completions), over every process
    prompt_width: int  # the longest prompt in tokens: every batch is left-padded to it
    max_new_tokens: int
    stop_tokens: tuple[int, ...]  # empty: every row runs max_new_tokens
    pad_id: int
    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    rows_per_pass: int = 0  # rows decoded at once (0: as many as fit beside the trainer)


@dataclass(frozen=True)
class RolloutPlan:
    """What a sampler will hold and read, for the dry run: per device, in bytes."""

    kv_cache_bytes: int  # the KV cache of this device's rows of one pass
    weight_bytes: int  # the weights in their compute dtype (what every turn reads)
    bytes_per_turn: float  # HBM read by one decoding turn, on average over the rollout
    reader: str  # how a turn reads the cache
    cache_slots: int
    rows_per_pass: int  # rows decoded at once (every process's together)
    passes: int  # passes per batch
    resident_bytes: int  # the trainer's state, held all along
    peak_bytes: int  # the state, the weights cast for decoding and a pass's cache and logits
    budget_bytes: int  # what the device may fill (0: no limit known, a host CPU)

    @property
    def fits(self) -> bool:
        return not self.budget_bytes or self.peak_bytes <= self.budget_bytes


class Sampler(Protocol):
    """A compiled sampler of one setup's model (see the module docstring)."""

    def __call__(
        self, params: Any, prompts: list[list[int]], seeds: list[int]
    ) -> tuple[list[list[int]], list[list[float]]]:
        """This process's rows: the completion of each prompt (ending at its first stop
        token, kept) and the decoder's log-probability of each token under
        softmax(logits / temperature). Row ``i`` draws from keys of ``seeds[i]`` alone, so
        its completion does not depend on the other rows, the devices or the processes.
        ``params``: the model's parameters as the trainer holds them (every parameter)."""
        ...

    def lower(self, params: Any) -> Any:
        """The decoding loop lowered against abstract parameters (for a plan)."""
        ...

    def plan(self) -> RolloutPlan:
        """Bytes per device of the cache and the weights, and what a turn reads."""
        ...
