"""The learning step's rows of a batch of rollouts, as long as the rollouts and no longer.

A row is a prompt and its completion, right-padded. Padding it to ``training.seq_len``
(room for the longest prompt and ``grpo.max_new_tokens``) would make every step pay for
completions that stopped early: 40 real tokens cost the same as 288. The rows are padded
instead to the shortest *bucket* that holds the batch's longest row: the quantum times a
power of two, up to ``training.seq_len``, so a run compiles its step for a handful of
lengths (each once) and a step's cost follows the tokens its rollouts hold. Padding at the
end changes nothing a row's loss sees (causal attention; the loss mask is 0 there), so the
loss and its gradient are those of the rows padded to ``training.seq_len``.
"""

from __future__ import annotations

import numpy as np

#: the quantum of a bucket per platform: a TPU's lane width (and the attention kernels'
#: smallest block), a few tokens elsewhere
QUANTUM = {"tpu": 128, "gpu": 64, "cpu": 16}


def bucket_lengths(seq_len: int, quantum: int) -> list[int]:
    """The lengths a step may be compiled for: ``quantum * 2**k`` below ``seq_len``, then
    ``seq_len`` itself."""
    lengths, length = [], quantum
    while length < seq_len:
        lengths.append(length)
        length *= 2
    return [*lengths, seq_len]


def bucket_for(longest: int, seq_len: int, quantum: int) -> int:
    """The shortest bucket holding ``longest`` inputs."""
    return next(b for b in bucket_lengths(seq_len, quantum) if b >= min(longest, seq_len))


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
