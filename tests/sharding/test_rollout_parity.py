"""GRPO's rollouts and learning steps do not depend on the devices or the processes: one
device, 8 simulated devices (fsdp 4 x tensor 2: parameters, heads and rows split) and two
processes on loopback (jax.distributed, gloo; fsdp over their 4 devices), each running
``tests/sharding/rollout_parity.py``.

Every row draws from keys of its own seed, so the tokens must be identical; a token could
only differ where two Gumbel-perturbed logits tie within the float32 rounding of a sharded
reduction (about 1e-6 relative), which 192 draws from a 50-token vocabulary never meet. The
decoder's log-probabilities sum the same terms in another order: 2e-5 absolute (a log-softmax
of magnitude ~4). The gradient norms of the two training steps: 1e-4 relative (float32 sums
of gradients over 4 to 8 shards).
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.sharding.conftest import REPO
from tests.sharding.test_multihost import env_with, free_port


def env(devices: int, **extra: str) -> dict[str, str]:
    """A scenario process's environment: its simulated devices, and no persistent compile
    cache (XLA:CPU has run a collective program read back from the cache with a device
    never reaching its collective: the processes then wait for each other for ever)."""
    return env_with(devices, JAX_ENABLE_COMPILATION_CACHE="false", **extra)


def run(out, devices: int, *overrides: str, processes: int = 1) -> dict:
    command = [sys.executable, "-m", "tests.sharding.rollout_parity", str(out), *overrides]
    if processes == 1:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=900, cwd=REPO, env=env(devices)
        )
        assert done.returncode == 0, done.stderr[-3000:]
    else:
        port = free_port()
        logs = [out.with_suffix(f".{index}.log") for index in range(processes)]
        group = [
            subprocess.Popen(
                command,
                stdout=log.open("w"),  # files, not pipes: a full pipe would stall a process
                stderr=subprocess.STDOUT,  # that its partner then waits for in a collective
                text=True,
                cwd=REPO,
                env=env(
                    devices,
                    THESEUS_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                    THESEUS_NUM_PROCESSES=str(processes),
                    THESEUS_PROCESS_ID=str(index),
                ),
            )
            for index, log in enumerate(logs)
        ]
        for process, log in zip(group, logs, strict=True):
            process.wait(timeout=900)
            assert process.returncode == 0, log.read_text()[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_rollouts_and_losses_match_on_one_device_eight_and_two_processes(tmp_path):
    one = run(tmp_path / "one.json", 1)
    eight = run(tmp_path / "eight.json", 8, "sharding.strategy=fsdp+tp", "sharding.tensor=2")
    two = run(tmp_path / "two.json", 2, "sharding.strategy=fsdp", processes=2)
    assert (one["devices"], eight["devices"], two["devices"]) == (1, 8, 4)
    assert (eight["mesh"]["fsdp"], eight["mesh"]["tensor"], two["processes"]) == (4, 2, 2)
    for other in (eight, two):
        assert other["tokens"] == one["tokens"]
        np.testing.assert_allclose(other["logps"], one["logps"], rtol=0, atol=2e-5)
        np.testing.assert_allclose(other["grad_norms"], one["grad_norms"], rtol=1e-4)
        np.testing.assert_allclose(other["losses"], one["losses"], rtol=1e-4, atol=1e-6)
    assert one["grad_norms"][0] > 0 and one["grad_norms"][0] != one["grad_norms"][1]
