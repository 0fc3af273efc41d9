"""The chunked loss on each device's rows (``train/sharded_loss.py``) and with its head gathered
once by a constraint (``train/head_gather.py``) compute the compiler's own loss and gradients: a
tiny Llama, its loss in 4 pieces, on 8 simulated devices under fsdp, and under fsdp + tp with
a data axis (the table's gradient then summed over ``data`` as well)
(tests/sharding/head_gather_parity.py).

Tolerance: the programs differ only in where the head's matmul and the loss are summed (whole
rows on each device, the pieces' totals added over the devices, or partial sums over the fsdp
slices of ``embed``), so in the order of float32 sums: relative 1e-5 (about 128 terms x 2^-24
x a few, far above that order's effect and far below a missing piece, a missing device's rows
or a wrong table, which move the loss by whole percent). Measured: 1.7e-7 and 8.7e-7.

Collectives: on each device's rows the table's gradient goes round a ring of permutes, each
device sending (f - 1) / f of it (f: the fsdp ways), and the whole-table all-reduce of the
constrained layout is gone."""

from __future__ import annotations

import pytest

from tests.sharding.conftest import json_lines, run_module

LAYOUTS = {
    "fsdp": (),
    "data-fsdp-tp": ("sharding.strategy=fsdp+tp", "sharding.tensor=2", "sharding.data=2"),
}


@pytest.mark.slow
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_head_on_each_devices_rows_computes_the_same_loss_and_gradients(layout):
    done = run_module("tests.sharding.head_gather_parity", *LAYOUTS[layout], devices=8)
    assert done.returncode == 0, done.stderr[-3000:]
    (result,) = json_lines(done.stdout)
    assert result["devices"] == 8 and result["float32"] and result["finite"]
    reference = result["loss_reference"]
    for loss in (result["loss_per_shard"], result["loss"]):
        assert abs(loss - reference) <= 1e-5 * abs(reference), result
    assert result["grad_relative_per_shard"] <= 1e-5, result
    assert result["grad_relative"] <= 1e-5, result

    fsdp, table = result["mesh"]["fsdp"], result["table_bytes"]
    per_shard, gathered = result["collectives_per_shard"], result["collectives"]
    ring = per_shard.get("collective-permute", 0.0) - gathered.get("collective-permute", 0.0)
    assert ring >= (fsdp - 1) / fsdp * table, result
    assert per_shard.get("all-reduce", 0.0) <= gathered["all-reduce"] - table, result
