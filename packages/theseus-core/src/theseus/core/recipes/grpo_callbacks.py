"""The rollouts' callbacks: the trainer's state handed to the sampler, and the held-out
accuracy that replaces GRPO's validation loss."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np
from theseus.core.recipes.grpo_run import Rollouts, gather_rows, make_sampler
from theseus.core.recipes.rewards import exact_answer, hash_answer
from theseus.core.sampler import Sampler
from theseus.core.train.callbacks import Callback, due


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
    answers by their final number (``hash_answer``: GSM8K's ``#### <number>``).

    The problems are answered by a greedy sampler of their own over the trainer's mesh, each
    process answering its slice (padded to whole rows of the mesh's batch split)."""

    def __init__(self, rollouts: Rollouts, writer: Any, flush: Any) -> None:
        self.rollouts, self.writer, self.flush = rollouts, writer, flush
        self.score = exact_answer if rollouts.grpo.task == "addition" else hash_answer
        setup = rollouts.setup
        self.every, self.total = setup.config.eval.every, setup.total_steps
        seen = list(dict.fromkeys(rollouts.train))[: len(rollouts.held_out)]
        self.problems = {"eval/accuracy": rollouts.held_out, "eval/train_accuracy": seen}
        asked = sum(len(p) for p in self.problems.values())
        shards = setup.layout.batch_shards
        self.rows = -(-asked // shards) * shards  # padded with copies of the last problem
        self.sampler: Sampler | None = None  # made at the first evaluation

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
        if self.sampler is None:
            request = rollouts.request(self.rows, 0.0, rollouts.format.stops)
            self.sampler = make_sampler(rollouts.setup, request)
        problems = [p for group in self.problems.values() for p in group]
        problems += [problems[-1]] * (self.rows - len(problems))
        local = self.rows // jax.process_count()
        mine = problems[jax.process_index() * local :][:local]
        prompts = [rollouts.prompt(p.question) for p in mine]
        params = rollouts.setup.full_params(state)
        out, _ = self.sampler(params, prompts, [0] * len(prompts))
        texts = [rollouts.text(ids) for ids in out]
        questions, answers = [p.question for p in mine], [p.answer for p in mine]
        correct = gather_rows(np.asarray(self.score(questions, texts, answer=answers), np.float32))
        results, start = {}, 0
        for name, group in self.problems.items():
            results[name] = float(np.mean(correct[start : start + len(group)]))
            start += len(group)
        self.writer.write({"step": step, **results})
        self.events.emit("on_eval", step=step, results=results)
        return results["eval/accuracy"]
