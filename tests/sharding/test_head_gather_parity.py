"""The chunked loss's head gathered once (``train/head_gather.py``) computes the same loss and
gradients as the compiler's own layout: a tiny Llama under fsdp on 8 simulated devices, its
loss in 4 pieces (tests/sharding/head_gather_parity.py).

Tolerance: the two programs differ only in where the head's matmul is summed (whole rows on
each device, or partial sums over the fsdp slices of ``embed``), so in the order of float32
sums: relative 1e-5 (about 128 terms x 2^-24 x a few, far above that order's effect and far
below a missing piece or a wrong table, which moves the loss by whole percent). Measured:
equal to the bit on CPU."""

from __future__ import annotations

import pytest

from tests.sharding.conftest import json_lines, run_module


@pytest.mark.slow
def test_the_gathered_head_computes_the_same_loss_and_gradients():
    done = run_module("tests.sharding.head_gather_parity", devices=8)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json_lines(done.stdout)
    assert result["devices"] == 8 and result["mesh"]["fsdp"] == 8 and result["float32"]
    # the two programs differ: the gathered one gathers the table, the other does not
    assert result["collectives"] != result["collectives_reference"], result
    assert result["finite"]
    assert abs(result["loss"] - result["loss_reference"]) <= 1e-5 * abs(result["loss_reference"])
    assert result["grad_relative"] <= 1e-5, result
