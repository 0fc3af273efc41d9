"""What ``<model>/train/grpo`` trains on: rollouts sampled while it trains.

The run is an ordinary training run (``run_training``: checkpoints, resume, the metrics
log, the non-finite policy, the lifecycle hooks); its recipe (``grpo.py``) changes two
things through the recipe's public seams:

* the batch source is :class:`Rollouts`, which samples with the trainer's current weights
  (handed over by ``StateTap`` after each step: no copy, no weight sync) through the
  compiled sampler of the setup's model (``theseus_sampler``: one program over the
  trainer's mesh, each process decoding its own rows); with ``grpo.iterations`` μ > 1 one
  batch serves μ steps, and is kept in ``<run>/rollouts/`` until a checkpoint passes it, so
  a run resumed inside the μ steps reuses it;
* the validation loss (a cross entropy on chat data, meaningless here) gives way to
  ``HeldOutAccuracy``, greedy answers to ``grpo.eval_prompts`` problems no step trains on.

Each process scores its own rows; the rewards of every row are then gathered, so the
advantages (a group may span processes) and the logged metrics are the same everywhere and
the same as one process would compute. The rows of a step are padded to the bucket that
holds its longest rollout (``grpo_rows``), not to ``training.seq_len``.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import jax
import numpy as np
from theseus.core.errors import JobError
from theseus.core.evaluate.target import load_tokenizer
from theseus.core.recipes.grpo_loss import group_advantages
from theseus.core.recipes.grpo_objective import old_logps_step
from theseus.core.recipes.grpo_prompts import PromptFormat, check_room
from theseus.core.recipes.grpo_rows import QUANTUM, bucket_for, rollout_rows
from theseus.core.recipes.grpo_task import load_task, row_seed, step_prompts
from theseus.core.sampler import Sampler, SamplerRequest

log = logging.getLogger(__name__)


def gather_rows(local: np.ndarray) -> np.ndarray:
    """Every process's rows of a per-row array, in process order (one process: itself)."""
    if jax.process_count() == 1:
        return local
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(local, tiled=True))


def make_sampler(setup: Any, request: SamplerRequest) -> Sampler:
    """The plugins' compiled sampler of ``setup``'s model (``theseus_sampler``)."""
    sampler = setup.registries.hook.theseus_sampler(setup=setup, request=request)
    if sampler is None:
        raise JobError(
            f"no installed plugin samples from {setup.model_class.__name__} (it needs "
            "init_cache/decode, theseus.core.model.Decoder, and theseus-models installed)"
        )
    return sampler


class Rollouts:
    """Batches of sampled completions, scored, as the trainer's data (this process's rows)."""

    def __init__(self, setup: Any, data: Any, folder: Path) -> None:
        config = setup.config
        self.folder = folder  # μ > 1: the batch of rollouts in use, for a resume
        self.cached: tuple[int, dict[str, np.ndarray], dict[str, float]] | None = None
        self.old_logps = old_logps_step(setup, config.grpo) if config.grpo.iterations > 1 else None
        self.setup, self.data, self.grpo = setup, data, config.grpo
        self.seed = config.training.seed
        self.rows, self.seq_len = config.training.global_batch_size, config.training.seq_len
        self.local = self.rows // jax.process_count()
        self.first = jax.process_index() * self.local  # this process's rows: a slice
        self.tokenizer = load_tokenizer(data.tokenizer_dir, setup.registries)
        self.format = PromptFormat(self.tokenizer)
        self.train, self.held_out = load_task(self.grpo, self.seed)
        self.rewards = [setup.registries.rewards.get(n).load() for n in self.grpo.rewards]
        self.stops = self.format.stops if self.grpo.stop_at_end else []
        self.width = max(len(self.prompt(p.question)) for p in self.train + self.held_out)
        check_room(self.width, self.grpo.max_new_tokens, self.seq_len)
        layout = setup.layout
        self.quantum = math.lcm(QUANTUM.get(layout.platform, 16), 2 * layout.context)
        request = self.request(self.rows, self.grpo.temperature, self.stops)
        self.sampler = make_sampler(setup, request)
        self.state: Any = None  # the trainer's newest state (set by StateTap)
        self.pending: dict[int, dict[str, float]] = {}  # step -> host metrics of its rollouts
        self.rolled: float | None = None  # when the last rollouts were scored (time/learn)

    def request(self, rows: int, temperature: float, stops: list[int]) -> SamplerRequest:
        """A sampler's shape: ``rows`` prompts of this task, the run's new tokens."""
        grpo = self.grpo
        return SamplerRequest(
            rows=rows,
            prompt_width=self.width,
            max_new_tokens=grpo.max_new_tokens,
            stop_tokens=tuple(stops),
            pad_id=self.format.pad_id,
            temperature=temperature,
            top_k=grpo.top_k if temperature > 0 else 0,
            top_p=grpo.top_p if temperature > 0 else 1.0,
            rows_per_pass=grpo.sample_rows if rows == self.rows else 0,
        )

    # --------------------------------------------------------------- the batch source
    def iterator(self, start: int) -> Iterator[dict[str, np.ndarray]]:
        for step in count(start):
            yield self.batch(step)

    def step_metrics(self, step: int) -> dict[str, float]:
        """The rollout metrics of ``step``, added to its record (the trainer's DataMetrics
        callback asks its data for them)."""
        for old in [s for s in self.pending if s < step]:
            del self.pending[old]
        return self.pending.pop(step, {})

    # --------------------------------------------------------------- rollouts
    def prompt(self, question: str) -> list[int]:
        return self.format.prompt(question)

    def text(self, ids: list[int]) -> str:
        return self.tokenizer.decode([t for t in ids if t not in self.format.stops])

    def batch(self, step: int) -> dict[str, np.ndarray]:
        """Step ``step``'s batch: the rollouts sampled at step ``step - step % μ``."""
        mu = self.grpo.iterations
        if mu == 1:
            batch, self.pending[step] = self.rollout(step)
            return batch
        start = step - step % mu
        if self.cached is None or self.cached[0] != start:
            self.cached = (start, *(self.load(start) or self.sample_and_keep(start)))
        _, batch, metrics = self.cached
        self.pending[step] = dict(metrics)
        return batch

    def path(self, start: int) -> Path:
        suffix = "" if jax.process_count() == 1 else f".{jax.process_index()}"
        return self.folder / f"{start}{suffix}.npz"

    def load(self, start: int) -> tuple[dict[str, np.ndarray], dict[str, float]] | None:
        if not self.path(start).is_file():
            return None
        with np.load(self.path(start)) as saved:
            arrays = {k: saved[k] for k in saved.files}
        metrics = json.loads(str(arrays.pop("metrics")))
        log.info("reusing the rollouts of step %d (%s)", start, self.path(start))
        return arrays, metrics

    def sample_and_keep(self, start: int) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Rollouts sampled now (the state must be that of step ``start``), scored by the
        policy that sampled them, and written before any step uses them."""
        if self.state is None or int(self.state.step) != start:
            at = None if self.state is None else int(self.state.step)
            raise JobError(
                f"the rollouts of step {start} are not in {self.folder} and the weights are "
                f"at step {at}: they cannot be sampled again; resume from a checkpoint at a "
                f"multiple of grpo.iterations={self.grpo.iterations}"
            )
        batch, metrics = self.scored_rollout(start)
        self.folder.mkdir(parents=True, exist_ok=True)
        partial = self.folder / f".{self.path(start).stem}.partial.npz"
        arrays: dict[str, Any] = {"metrics": np.asarray(json.dumps(metrics)), **batch}
        np.savez(partial, **arrays)
        os.replace(partial, self.path(start))
        return batch, metrics

    def scored_rollout(self, start: int) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Step ``start``'s rollouts with π_old's log-probs (μ > 1), from the current state."""
        batch, metrics = self.rollout(start)
        assert self.old_logps is not None  # made for grpo.iterations > 1
        placed = self.setup.layout.place_batch(batch)
        logps = self.old_logps(self.state, placed)
        batch["old_logps"] = local_columns(logps, self.local)
        return batch, metrics

    def replay_batch(self, step: int, state: Any) -> dict[str, np.ndarray]:
        """Step ``step``'s batch again for time travel, from ``state`` (checkpoint
        ``step``), writing nothing: sampled again from the same weights with the same seeds
        where they sampled it (every step at μ = 1, the first of each μ steps), else read
        from the run's rollouts while a checkpoint keeps them."""
        self.state = state
        mu = self.grpo.iterations
        if mu == 1:
            return self.rollout(step)[0]
        start = step - step % mu
        kept = self.load(start)
        if kept is not None:
            return kept[0]
        if start != step:
            raise JobError(
                f"the rollouts step {step} trained on were sampled at step {start} and are no "
                f"longer kept in {self.folder} (grpo.iterations={mu}); steps that are "
                f"multiples of {mu} replay"
            )
        return self.scored_rollout(start)[0]

    def prune(self, checkpoint_step: int) -> None:
        """Forget the rollouts that no step after ``checkpoint_step`` uses."""
        keep = checkpoint_step - checkpoint_step % self.grpo.iterations
        for path in self.folder.glob("*.npz"):
            stem = path.name.split(".")[0]
            if stem.isdigit() and int(stem) < keep:
                path.unlink(missing_ok=True)

    def rollout(self, step: int) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Step ``step``'s rollouts: G completions of each of its prompts (this process's
        rows sampled here), scored."""
        G = self.grpo.generations
        picked = step_prompts(self.seed, step, self.rows // G, len(self.train))
        mine = slice(self.first, self.first + self.local)
        problems = [self.train[i] for i in picked for _ in range(G)][mine]
        prompts = [self.prompt(p.question) for p in problems]
        seeds = [row_seed(self.seed, step, i, g) for i in picked for g in range(G)][mine]
        if self.state is not None:  # the updates since the last rollouts are done first
            jax.block_until_ready(self.state.params)
        started = time.perf_counter()
        learned = None if self.rolled is None else started - self.rolled
        params = self.setup.full_params(self.state)
        completions, sampler_logps = self.sampler(params, prompts, seeds)
        sampled = time.perf_counter() - started
        texts = [self.text(c) for c in completions]
        questions = [p.question for p in problems]
        answers = [p.answer for p in problems]
        metrics: dict[str, float] = {"time/sample": sampled}
        if learned is not None:
            metrics["time/learn"] = learned
        total = np.zeros(self.rows, np.float32)
        for name, reward, weight in zip(
            self.grpo.rewards, self.rewards, self.grpo.weights(), strict=True
        ):
            local = np.asarray(reward(questions, texts, answer=answers), np.float32)
            values = gather_rows(local)
            total += weight * values
            metrics[f"reward/{name}/mean"] = float(values.mean())
            metrics[f"reward/{name}/min"] = float(values.min())
            metrics[f"reward/{name}/max"] = float(values.max())
        if self.grpo.shuffle_rewards:  # the control: rewards no longer belong to their answers
            total = total[np.random.default_rng([self.seed, step, 11]).permutation(len(total))]
        lengths = gather_rows(np.asarray([len(c) for c in completions], np.int32))
        widths = gather_rows(
            np.asarray([len(p) + len(c) for p, c in zip(prompts, completions, strict=True)])
        )
        metrics["reward/total/mean"] = float(total.mean())
        metrics["rollout/completion_length"] = float(lengths.mean())
        stds = total.reshape(-1, G).std(axis=1)
        metrics["rollout/groups_without_signal"] = float(np.mean(stds == 0))
        advantages = np.asarray(
            group_advantages(total, G, self.grpo.advantage, self.grpo.scale_eps), np.float32
        )
        T = bucket_for(int(widths.max()) - 1, self.seq_len, self.quantum)
        metrics["rollout/learn_length"] = float(T)
        batch = rollout_rows(prompts, completions, advantages[mine], T, sampler_logps)
        metrics["time/score"] = time.perf_counter() - started - sampled
        self.rolled = time.perf_counter()
        return batch, metrics


def local_columns(global_array: Any, rows: int) -> np.ndarray:
    """This process's rows of a row-split global [B, T] array, as float32."""
    pieces: dict[int, np.ndarray] = {}
    for shard in global_array.addressable_shards:
        start = shard.index[0].start or 0
        pieces.setdefault(start, np.asarray(shard.data))
    local = np.concatenate([pieces[s] for s in sorted(pieces)])
    return np.asarray(local[:rows], np.float32)
