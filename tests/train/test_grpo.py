"""GRPO end to end: a tiny GPT SFT'd briefly on one-digit addition, then reinforced.

The learning evidence, with margins fixed before the runs were measured (docs/grpo.md has
the numbers): over 100 steps of 16 prompts x 8 completions, the sampled exact-match reward on
the training prompts (the quantity GRPO maximises) must rise by at least 0.08 between the
mean of the first 20 steps and that of the last 20, and the same run with the rewards
shuffled across completions (a control: the updates are as large, the signal is gone) must
not rise by more than 0.02; at the end, the greedy accuracy on training prompts must be at
least 0.2 above the control's. The held-out accuracy is recorded, not asserted: a 2-layer,
64-wide model memorises the 100 one-digit sums pair by pair and does not generalise to pairs
it is not trained on (measured: it falls). The SFT run and the two learning runs are long
runs, compiled as a user's are (``runtime_env``): the curve is one trajectory of float32
sums, and the suite's fast-compile flags round some of them otherwise.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from theseus.core.inspect import open_step
from theseus.core.inspect.timetravel import InspectError

from tests.conftest import runtime_env
from tests.train.conftest import metrics, resumed_after_kill, run_cli, train_losses

COMMON = [
    "model.n_layers=2",
    "model.d_model=64",
    "model.n_heads=2",
    "model.max_seq_len=64",
    "training.seq_len=32",
    "data.num_workers=1",
    "data.tokenizer=byte",
    "data.suffix=byte1",
    "data.dataset_options={max_digits: 1}",
    "logging.every=1",
    "logging.progress=false",
]
GRPO = [
    "run",
    "gpt/train/grpo",
    *COMMON,
    "init.checkpoint=grpo-sft",
    "grpo.max_digits=1",
    "grpo.max_new_tokens=4",
]
LEARN = [
    *GRPO,
    "training.global_batch_size=128",
    "training.total_steps=100",
    "eval.every=50",
    "grpo.generations=8",
    "schedule.name=constant",
    "optimizer.learning_rate=0.0003",
    "grpo.rewards=[addition_exact]",
]


@pytest.fixture(scope="module")
def sft(shared_root) -> str:
    args = ["run", "gpt/train/sft", *COMMON, "training.global_batch_size=16"]
    args += ["training.total_steps=150", "eval.every=0", "optimizer.learning_rate=0.003"]
    done = run_cli(shared_root, *args, "--name", "grpo-sft", env=runtime_env())
    assert done.returncode == 0, done.stderr[-3000:]
    return "grpo-sft"


def reward_curve(root, name: str) -> tuple[list[float], list[dict]]:
    rows = metrics(root, name)
    rewards = [r["reward/addition_exact/mean"] for r in rows if "reward/addition_exact/mean" in r]
    return rewards, [r for r in rows if "eval/accuracy" in r]


def test_grpo_raises_the_reward_and_a_shuffled_control_does_not(shared_root, sft):
    for name, shuffle in (("grpo-learn", "false"), ("grpo-control", "true")):
        args = [*LEARN, f"grpo.shuffle_rewards={shuffle}", "--name", name]
        done = run_cli(shared_root, *args, env=runtime_env())
        assert done.returncode == 0, done.stderr[-3000:]
    rewards, evals = reward_curve(shared_root, "grpo-learn")
    control, control_evals = reward_curve(shared_root, "grpo-control")
    assert len(rewards) == len(control) == 100
    rise = np.mean(rewards[-20:]) - np.mean(rewards[:20])
    control_rise = np.mean(control[-20:]) - np.mean(control[:20])
    print(
        f"\nsampled reward {np.mean(rewards[:20]):.3f} -> {np.mean(rewards[-20:]):.3f} "
        f"(control {np.mean(control[:20]):.3f} -> {np.mean(control[-20:]):.3f}); "
        f"greedy accuracy (step, held-out, train): {[tuple(e.values()) for e in evals]}, "
        f"control {[tuple(e.values()) for e in control_evals]}"
    )
    assert rise >= 0.08
    assert control_rise <= 0.02
    assert evals[0]["eval/train_accuracy"] == control_evals[0]["eval/train_accuracy"]  # same start
    assert evals[-1]["eval/train_accuracy"] >= control_evals[-1]["eval/train_accuracy"] + 0.2


def test_lora_grpo_on_a_jsonl_task_starts_with_zero_kl_to_its_base(shared_root, sft, tmp_path):
    """A user's jsonl prompts (GSM8K-style answers, ``hash_answer``), LoRA, β > 0, truncated
    importance sampling on. Its ``data`` group names a dataset no step reads (its suffix
    ``unread``): nothing tokenizes it, the tokenizer is the SFT run's."""
    path = tmp_path / "sums.jsonl"
    rows = [
        {"q": f"What is {a}+{b}?", "a": f"{a}+{b}\n#### {a + b}"}
        for a in range(4)
        for b in range(4)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    unread = [arg if arg != "data.suffix=byte1" else "data.suffix=unread" for arg in GRPO]
    args = [*unread, "training.global_batch_size=16", "training.total_steps=3", "eval.every=0"]
    args += ["grpo.beta=0.04", "lora.rank=4", "grpo.eval_prompts=4", "grpo.task=jsonl"]
    args += [f"grpo.prompts_file={path}", "grpo.prompt_field=q", "grpo.answer_field=a"]
    args += ["grpo.rewards=[hash_answer]", "grpo.tis_cap=2"]
    done = run_cli(shared_root, *args, "--name", "grpo-lora")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not list((shared_root / "data").glob("*/*-unread"))  # no dataset tokenized
    assert not list((shared_root / "runs").glob("data-tokenize-*-unread-*"))
    rows = metrics(shared_root, "grpo-lora")
    train = [r for r in rows if "train/kl" in r]
    assert train[0]["train/kl"] == 0.0  # adapters start at zero output: policy == reference
    assert all(np.isfinite(r["train/loss"]) and r["train/entropy"] > 0 for r in train)
    # the step's time split: sampling every step, learning from the second rollouts on
    assert all(r["time/sample"] > 0 and r["time/score"] >= 0 for r in train)
    assert "time/learn" not in train[0] and all(r["time/learn"] > 0 for r in train[1:])
    assert any(r["reward/hash_answer/max"] == 1.0 for r in train)  # some sums are right
    # the KV-cache decoder and the trainer's forward pass score the tokens alike (float32)
    assert all(r["train/sampler_logp_diff"] < 1e-4 for r in train)
    accuracy = [r["eval/accuracy"] for r in rows if "eval/accuracy" in r]
    assert len(accuracy) == 2 and all(0.0 <= a <= 1.0 for a in accuracy)


def test_a_killed_grpo_run_resumes_with_the_same_rollouts_and_losses(shared_root, sft):
    """μ = 2 updates per batch of rollouts, a checkpoint every 5 steps: the run is killed
    after step 8 and resumes at step 5, inside the μ steps of the rollouts of step 4, which it
    reads back from the run instead of sampling them again from other weights."""
    args = [*GRPO, "training.global_batch_size=16", "training.total_steps=12", "eval.every=0"]
    args += ["checkpoint.every=5", "checkpoint.asynchronous=false", "grpo.eval_prompts=8"]
    args += ["grpo.iterations=2"]
    done = run_cli(shared_root, *args, "--name", "grpo-whole")
    assert done.returncode == 0, done.stderr[-3000:]
    resumed = resumed_after_kill(shared_root, "grpo-killed", args, steps=8)
    assert "resumed grpo-killed from step 5" in resumed
    assert "reusing the rollouts of step 4" in resumed
    assert train_losses(shared_root, "grpo-killed") == train_losses(shared_root, "grpo-whole")

    def rollouts(name: str) -> dict[int, tuple]:
        keys = ("reward/total/mean", "rollout/completion_length", "train/clip_fraction")
        rows = metrics(shared_root, name)
        return {r["step"]: tuple(r[k] for k in keys) for r in rows if keys[0] in r}

    whole = rollouts("grpo-whole")
    assert rollouts("grpo-killed") == whole  # the same completions, scored, clipped
    assert all(whole[s][:2] == whole[s + 1][:2] for s in range(0, 12, 2))  # reused
    # the first update on a batch: the policy is the one that sampled, ratio 1, no clipping
    assert all(whole[s][2] == 0.0 for s in range(0, 12, 2))
    losses = train_losses(shared_root, "grpo-whole")
    assert losses[0] == losses[1]  # the warmup's learning rate is 0 at step 0: same weights
    # time travel samples step 10's rollouts again from checkpoint 10 (the first of its μ
    # updates) and replays the logged GRPO loss bitwise, not a cross entropy of chat rows
    assert open_step(shared_root, "grpo-whole", 10).replay()["loss"] == losses[10]
    # step 5 trained on the rollouts of step 4, which no checkpoint keeps any more
    with pytest.raises(InspectError, match="sampled at step 4 and are no longer kept"):
        open_step(shared_root, "grpo-whole", 5).replay()


def test_grpo_from_random_weights_is_refused_in_one_line(tmp_path):
    done = run_cli(tmp_path, "run", "gpt/train/grpo", *COMMON)
    assert done.returncode == 2
    assert "set init.checkpoint=RUN[@STEP]" in done.stderr and "GRPO" in done.stderr
