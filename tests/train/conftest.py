"""Shared pieces of the training tests: a tiny GPT on a slice of the embedded corpus."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

#: A 2-layer, 64-wide GPT on 32-token sequences: the model every tiny training test uses.
TINY_MODEL = [
    "model.n_layers=2",
    "model.d_model=64",
    "model.n_heads=2",
    "model.max_seq_len=64",
    "training.seq_len=32",
]
TINY = [
    *TINY_MODEL,
    "training.global_batch_size=4",
    "data.max_documents=24",
    "data.vocab_size=384",
    "data.num_workers=1",
    "eval.batches=2",
    "logging.every=1",
    "logging.progress=false",
]


HAVE_TRL = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "trl"))


def trl_parity(test):
    """Marks a test of the parity group that needs trl; skipped, with the reason, without it.
    trl's deprecation chatter (gradient checkpointing, its experimental imports) is ignored."""
    marks = [
        pytest.mark.parity,
        pytest.mark.skipif(
            not HAVE_TRL, reason="trl (with torch and transformers) is not installed"
        ),
        pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing:FutureWarning"),
        pytest.mark.filterwarnings("ignore:You are importing from 'trl.experimental'"),
    ]
    for mark in marks:
        test = mark(test)
    return test


def theseus_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "theseus.cli.main", *args]


def run_cli(
    root: Path, *args: str, timeout: int = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        theseus_cmd(*args, "--root", str(root)),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def metrics(root: Path, name: str) -> list[dict]:
    path = root / "runs" / name / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def train_losses(root: Path, name: str) -> dict[int, float]:
    """Step -> loss; a resumed run's later record of a step replaces an earlier one."""
    return {m["step"]: m["train/loss"] for m in metrics(root, name) if "train/loss" in m}


def pretrain_tiny(root: Path, name: str, *args: str) -> None:
    """Run ``name``: the tiny GPT pretrained in ``root`` with ``args`` (no evaluations unless
    they say so); it must finish."""
    done = run_cli(root, "run", "gpt/train/pretrain", *TINY, "eval.every=0", *args, "--name", name)
    assert done.returncode == 0, done.stderr[-3000:]


def kill_after(
    root: Path, name: str, args: list[str], steps: int, sig: int = signal.SIGKILL
) -> int:
    """Start a run, send `sig` once `steps` steps are in its metrics, return its exit code."""
    process = subprocess.Popen(
        theseus_cmd(*args, "--root", str(root), "--name", name),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    path = root / "runs" / name / "metrics.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline:
        if process.poll() is not None:
            raise AssertionError(f"run ended before the signal: {process.stderr.read()[-2000:]}")
        if path.exists() and len(train_losses(root, name)) >= steps:
            break
        time.sleep(0.05)
    process.send_signal(sig)
    process.wait(timeout=300)
    return process.returncode


def resumed_after_kill(root: Path, name: str, args: list[str], steps: int) -> str:
    """Run ``name``, SIGKILL it once ``steps`` steps are in its metrics, run it again to its
    end; the stderr of that second (resuming) run."""
    kill_after(root, name, args, steps=steps, sig=signal.SIGKILL)
    done = run_cli(root, *args, "--name", name)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def final_params(root: Path, name: str) -> dict[str, np.ndarray]:
    """The parameters of a run's newest checkpoint, as numpy arrays keyed by path."""
    import orbax.checkpoint as ocp

    directory = root / "runs" / name / "checkpoints"
    steps = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    checkpointer = ocp.PyTreeCheckpointer()
    restored = checkpointer.restore(directory / str(steps[-1]) / "state")
    flat = {}

    def visit(prefix, node):
        if isinstance(node, dict):
            for key, value in node.items():
                visit(f"{prefix}/{key}", value)
        else:
            flat[prefix] = np.asarray(node)

    visit("", restored["params"])
    return flat


@pytest.fixture(scope="session")
def shared_root(tmp_path_factory) -> Path:
    """One root for the training tests, so the corpus is tokenized once."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    return tmp_path_factory.mktemp("train-root")
