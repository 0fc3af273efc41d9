"""What ``<model>/train/grpo`` trains on: rollouts made on the host, while it trains.

The run is an ordinary training run (``run_training``: checkpoints, resume, the metrics
log, the non-finite policy, the lifecycle hooks); its recipe (``grpo.py``) changes two
things through the recipe's public seams:

* the batch source is :class:`Rollouts`, which samples with the trainer's current weights
  (handed over by :class:`StateTap` after each step: no copy, no weight sync); with
  ``grpo.iterations`` μ > 1 one batch serves μ steps, and is kept in ``<run>/rollouts/``
  until a checkpoint passes it, so a run resumed inside the μ steps reuses it;
* the validation loss (a cross entropy on chat data, meaningless here) gives way to
  :class:`HeldOutAccuracy`, greedy answers to ``grpo.eval_prompts`` problems no step
  trains on.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from itertools import count
from pathlib import Path
from typing import Any

import jax
import numpy as np
from theseus.core.errors import ConfigError, JobError
from theseus.core.evaluate.target import load_tokenizer
from theseus.core.recipes.grpo_loss import group_advantages
from theseus.core.recipes.grpo_objective import old_logps_step
from theseus.core.recipes.grpo_task import load_task, row_seed, step_prompts
from theseus.core.recipes.rewards import exact_answer, hash_answer
from theseus.core.train.callbacks import Callback, due

log = logging.getLogger(__name__)


class Rollouts:
    """Batches of sampled completions, scored, as the trainer's data."""

    def __init__(self, setup: Any, data: Any, folder: Path) -> None:
        config = setup.config
        self.folder = folder  # μ > 1: the batch of rollouts in use, for a resume
        self.cached: tuple[int, dict[str, np.ndarray], dict[str, float]] | None = None
        self.old_logps = old_logps_step(setup, config.grpo) if config.grpo.iterations > 1 else None
        self.setup, self.data, self.grpo = setup, data, config.grpo
        self.seed = config.training.seed
        self.rows, self.seq_len = config.training.global_batch_size, config.training.seq_len
        self.tokenizer = load_tokenizer(data.tokenizer_dir, setup.registries)
        self.train, self.held_out = load_task(self.grpo, self.seed)
        self.rewards = [setup.registries.rewards.get(n).load() for n in self.grpo.rewards]
        self.stops = [self.tokenizer.eos_id]
        end = self.tokenizer.special_id("<|end|>")  # the chat template's end of turn
        if end is not None:
            self.stops.append(end)
        self.state: Any = None  # the trainer's newest state (set by StateTap)
        self.pending: dict[int, dict[str, float]] = {}  # step -> host metrics of its rollouts
        self.rolled: float | None = None  # when the last rollouts were scored (time/learn)
        longest = max(len(self.prompt(p.question)) for p in self.train + self.held_out)
        if longest + self.grpo.max_new_tokens - 1 > self.seq_len:
            raise ConfigError(
                f"a prompt of {longest} tokens + grpo.max_new_tokens={self.grpo.max_new_tokens}"
                f" does not fit training.seq_len={self.seq_len}: raise it or lower the other"
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
        """``<|user|>question<|end|><|assistant|>`` as the SFT data renders a chat."""

        def marker(token: str) -> list[int]:
            found = self.tokenizer.special_id(token)
            return [found] if found is not None else list(self.tokenizer.encode(token))

        user = list(self.tokenizer.encode(question))
        return marker("<|user|>") + user + marker("<|end|>") + marker("<|assistant|>")

    def sample(
        self, prompts: list[list[int]], seeds: list[int]
    ) -> tuple[list[list[int]], list[list[float]]]:
        model = self.setup.model(self.setup.full_params(self.state))
        grpo = self.grpo
        out = self.setup.registries.hook.theseus_sample(
            model=model,
            prompts=prompts,
            max_new_tokens=grpo.max_new_tokens,
            stop_tokens=self.stops,
            pad_id=0,
            temperature=grpo.temperature,
            top_k=grpo.top_k,
            top_p=grpo.top_p,
            seeds=seeds,
        )
        if out is None:
            raise JobError(
                f"no installed plugin samples from {type(model).__name__} (it needs "
                "init_cache/decode, theseus.core.model.Decoder, and theseus-models installed)"
            )
        return out

    def text(self, ids: list[int]) -> str:
        return self.tokenizer.decode([t for t in ids if t not in self.stops])

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
        return self.folder / f"{start}.npz"

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
        partial = self.folder / f".{start}.partial.npz"
        arrays: dict[str, Any] = {"metrics": np.asarray(json.dumps(metrics)), **batch}
        np.savez(partial, **arrays)
        os.replace(partial, self.path(start))
        return batch, metrics

    def scored_rollout(self, start: int) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Step ``start``'s rollouts with π_old's log-probs (μ > 1), from the current state."""
        batch, metrics = self.rollout(start)
        assert self.old_logps is not None  # made for grpo.iterations > 1
        placed = self.setup.layout.place_batch(batch)
        batch["old_logps"] = np.asarray(self.old_logps(self.state, placed), np.float32)
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
            if path.stem.isdigit() and int(path.stem) < keep:
                path.unlink(missing_ok=True)

    def rollout(self, step: int) -> tuple[dict[str, np.ndarray], dict[str, float]]:
        """Step ``step``'s rollouts: G completions of each of its prompts, scored."""
        G = self.grpo.generations
        picked = step_prompts(self.seed, step, self.rows // G, len(self.train))
        problems = [self.train[i] for i in picked for _ in range(G)]
        prompts = [self.prompt(p.question) for p in problems]
        seeds = [row_seed(self.seed, step, i, g) for i in picked for g in range(G)]
        if self.state is not None:  # the updates since the last rollouts are done first
            jax.block_until_ready(self.state.params)
        started = time.perf_counter()
        learned = None if self.rolled is None else started - self.rolled
        completions, sampler_logps = self.sample(prompts, seeds)
        sampled = time.perf_counter() - started
        texts = [self.text(c) for c in completions]
        questions = [p.question for p in problems]
        answers = [p.answer for p in problems]
        total = np.zeros(len(texts), np.float32)
        metrics: dict[str, float] = {"time/sample": sampled}
        if learned is not None:
            metrics["time/learn"] = learned
        for name, reward, weight in zip(
            self.grpo.rewards, self.rewards, self.grpo.weights(), strict=True
        ):
            values = np.asarray(reward(questions, texts, answer=answers), np.float32)
            total += weight * values
            metrics[f"reward/{name}/mean"] = float(values.mean())
            metrics[f"reward/{name}/min"] = float(values.min())
            metrics[f"reward/{name}/max"] = float(values.max())
        if self.grpo.shuffle_rewards:  # the control: rewards no longer belong to their answers
            total = total[np.random.default_rng([self.seed, step, 11]).permutation(len(total))]
        metrics["reward/total/mean"] = float(total.mean())
        metrics["rollout/completion_length"] = float(np.mean([len(c) for c in completions]))
        stds = total.reshape(-1, G).std(axis=1)
        metrics["rollout/groups_without_signal"] = float(np.mean(stds == 0))
        advantages = np.asarray(
            group_advantages(total, G, self.grpo.advantage, self.grpo.scale_eps), np.float32
        )
        batch = rollout_rows(prompts, completions, advantages, self.seq_len, sampler_logps)
        metrics["time/score"] = time.perf_counter() - started - sampled
        self.rolled = time.perf_counter()
        return batch, metrics


def rollout_rows(
    prompts: list[list[int]],
    completions: list[list[int]],
    advantages: np.ndarray,
    T: int,
    sampler_logps: list[list[float]] | None = None,
) -> dict[str, np.ndarray]:
    """Rows of prompt + completion, right-padded to ``T`` inputs: the loss mask is 1 on the
    targets that are completion tokens; ``advantages`` fills each row's columns;
    ``sampler_logps`` (the decoder's log-prob of each completion token) sit on the columns
    whose target that token is."""
    B = len(prompts)
    batch = {
        "inputs": np.zeros((B, T), np.int32),
        "targets": np.zeros((B, T), np.int32),
        "positions": np.zeros((B, T), np.int32),
        "segment_ids": np.zeros((B, T), np.int32),
        "loss_mask": np.zeros((B, T), np.float32),
        "advantages": np.repeat(advantages[:, None], T, axis=1).astype(np.float32),
        "sampler_logps": np.zeros((B, T), np.float32),
    }
    for row, (prompt, completion) in enumerate(zip(prompts, completions, strict=True)):
        tokens = np.asarray(prompt + completion, np.int32)
        n = len(tokens) - 1  # inputs: every token but the last
        batch["inputs"][row, :n] = tokens[:-1]
        batch["targets"][row, :n] = tokens[1:]
        batch["positions"][row, :n] = np.arange(n)
        batch["segment_ids"][row, :n] = 1
        batch["loss_mask"][row, len(prompt) - 1 : n] = 1.0
        if sampler_logps is not None:
            batch["sampler_logps"][row, len(prompt) - 1 : n] = sampler_logps[row]
    return batch


class StateTap(Callback):
    """Hands the state to the rollouts: the starting one, then each step's new one (the next
    rollouts are sampled from it)."""

    def __init__(self, rollouts: Rollouts) -> None:
        self.rollouts = rollouts

    def on_train_start(self, step: int, state: Any) -> None:
        self.rollouts.state = state

    def on_step(self, step: int, state: Any, metrics: dict) -> None:
        self.rollouts.state = state

    def on_checkpoint(self, step: int) -> None:
        if self.rollouts.grpo.iterations > 1:
            self.rollouts.prune(step)


class HeldOutAccuracy(Callback):
    """Greedy exact-match accuracy on the held-out problems (``eval/accuracy``) and on as
    many training problems (``eval/train_accuracy``, the first ones drawn): at the start,
    every ``eval.every`` steps and at the end. Addition answers must match exactly; jsonl
    answers by their final number (``hash_answer``: GSM8K's ``#### <number>``)."""

    def __init__(self, rollouts: Rollouts, writer: Any, flush: Any) -> None:
        self.rollouts, self.writer, self.flush = rollouts, writer, flush
        self.score = exact_answer if rollouts.grpo.task == "addition" else hash_answer
        setup = rollouts.setup
        self.every, self.total = setup.config.eval.every, setup.total_steps

    def on_train_start(self, step: int, state: Any) -> None:
        self.evaluate(state, step)

    def on_step(self, step: int, state: Any, metrics: dict) -> None:
        if due(step + 1, self.every, self.total):
            self.flush()
            self.evaluate(state, step + 1)

    def on_train_end(self, state: Any, summary: dict[str, Any]) -> None:
        summary["eval/accuracy"] = self.evaluate(state, int(state.step))

    def evaluate(self, state: Any, step: int) -> float:
        rollouts = self.rollouts
        model = rollouts.setup.model(rollouts.setup.full_params(state))
        seen = list(dict.fromkeys(rollouts.train))[: len(rollouts.held_out)]
        results = {
            "eval/accuracy": self.accuracy(model, rollouts.held_out),
            "eval/train_accuracy": self.accuracy(model, seen),
        }
        self.writer.write({"step": step, **results})
        self.events.emit("on_eval", step=step, results=results)
        return results["eval/accuracy"]

    def accuracy(self, model: Any, problems: list[Any]) -> float:
        rollouts = self.rollouts
        out = rollouts.setup.registries.hook.theseus_generate(
            model=model,
            prompts=[rollouts.prompt(p.question) for p in problems],
            max_new_tokens=rollouts.grpo.max_new_tokens,
            stop_tokens=rollouts.stops,
            pad_id=0,
        )
        texts = [rollouts.text(ids) for ids in out]
        questions = [p.question for p in problems]
        return float(np.mean(self.score(questions, texts, answer=[p.answer for p in problems])))
