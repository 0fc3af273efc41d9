"""The sharding config, mesh sizes, layout errors and the multi-host environment (no devices)."""

from __future__ import annotations

import pytest
from theseus.core.sharding.config import (
    ShardingConfig,
    ShardingError,
    mesh_shape,
    parse_strategy,
    planned_devices,
)
from theseus.core.sharding.distributed import DistributedError, expand_nodelist, process_group
from theseus.core.sharding.rules import rules_for


def test_strategies_parse_and_combine():
    assert parse_strategy("dp") == ("dp", False)
    assert parse_strategy("tp") == ("dp", True)
    assert parse_strategy("fsdp+tp") == ("fsdp", True)
    assert parse_strategy("fsdp x tp") == ("fsdp", True)
    for bad in ("fsdp+zero1", "pp", "", "tp+tp"):
        with pytest.raises(ShardingError, match="sharding.strategy"):
            parse_strategy(bad)
    rules = rules_for("zero1+tp")
    assert rules.params == {
        "layers": (),
        "experts": ("expert",),
        "heads": ("tensor",),
        "kv_heads": ("tensor",),
        "mlp": ("tensor",),
    }
    # the expert axis is one more data axis outside the expert layers: ZeRO splits over it too
    assert rules.optimizer["embed"] == ("data", "fsdp", "expert")
    assert rules.optimizer["mlp"] == ("tensor",)


@pytest.mark.parametrize(
    "config, devices, sizes",
    [
        (ShardingConfig(), 8, {"data": 8, "fsdp": 1, "expert": 1, "context": 1, "tensor": 1}),
        (
            ShardingConfig(strategy="fsdp"),
            8,
            {"data": 1, "fsdp": 8, "expert": 1, "context": 1, "tensor": 1},
        ),
        (
            ShardingConfig(strategy="fsdp+tp", tensor=2),
            8,
            {"data": 1, "fsdp": 4, "expert": 1, "context": 1, "tensor": 2},
        ),
        (
            ShardingConfig(strategy="fsdp+tp", data=2, tensor=2),
            8,
            {"data": 2, "fsdp": 2, "expert": 1, "context": 1, "tensor": 2},
        ),
        (
            ShardingConfig(strategy="tp", data=1, tensor=-1),
            4,
            {"data": 1, "fsdp": 1, "expert": 1, "context": 1, "tensor": 4},
        ),
        (
            ShardingConfig(data=2, fsdp=4),
            8,
            {"data": 2, "fsdp": 4, "expert": 1, "context": 1, "tensor": 1},
        ),
    ],
)
def test_mesh_sizes(config, devices, sizes):
    assert mesh_shape(config, devices) == sizes


def test_meshes_that_do_not_match_the_devices_are_refused():
    with pytest.raises(
        ShardingError, match=r"\(data=2, fsdp=2, tensor=1\) has 4 devices, but there are 8"
    ):
        mesh_shape(ShardingConfig(data=2, fsdp=2), 8)
    with pytest.raises(ShardingError, match="needs a multiple of 3 devices, but there are 8"):
        mesh_shape(ShardingConfig(tensor=3), 8)
    with pytest.raises(ShardingError, match="only one mesh axis may be -1"):
        mesh_shape(ShardingConfig(data=-1, fsdp=-1), 8)
    assert planned_devices(ShardingConfig(strategy="fsdp", fsdp=8)) == 8
    assert planned_devices(ShardingConfig(strategy="fsdp")) is None


def test_a_dimension_that_does_not_divide_its_axis_names_parameter_shape_and_axis():
    from theseus.core.sharding.placement import spec_for

    sizes = {"data": 1, "fsdp": 1, "expert": 1, "context": 1, "tensor": 4}
    rules = rules_for("tp").params
    assert tuple(spec_for("w", (64, 8, 16), ("embed", "heads", "head_dim"), rules, sizes)) == (
        None,
        "tensor",
        None,
    )
    with pytest.raises(ShardingError) as error:
        spec_for(
            "blocks.0.attention.q_proj.kernel",
            (64, 2, 32),
            ("embed", "heads", "head_dim"),
            rules,
            sizes,
        )
    message = str(error.value)
    assert "blocks.0.attention.q_proj.kernel" in message and "(64, 2, 32)" in message
    assert "'heads' dimension (2)" in message and "tensor=4" in message


@pytest.mark.parametrize("strategy", ["dp", "zero1", "fsdp", "tp", "fsdp+tp", "zero1+tp"])
def test_the_stacked_layers_axis_is_never_split(strategy):
    from theseus.core.sharding.placement import spec_for

    sizes = {"data": 2, "fsdp": 2, "expert": 1, "context": 1, "tensor": 2}
    rules = rules_for(strategy)
    axes = ("layers", "embed", "heads", "head_dim")
    for table in (rules.params, rules.optimizer):
        spec = tuple(spec_for("blocks.attention.q_proj.kernel", (2, 64, 4, 16), axes, table, sizes))
        unstacked = tuple(spec_for("q_proj.kernel", (64, 4, 16), axes[1:], table, sizes))
        assert spec[0] is None and spec[1:] == unstacked


def test_process_group_from_theseus_slurm_and_volcano_variables():
    assert process_group({}) is None
    assert process_group({"THESEUS_NUM_PROCESSES": "1"}) is None
    group = process_group(
        {
            "THESEUS_NUM_PROCESSES": "2",
            "THESEUS_PROCESS_ID": "1",
            "THESEUS_COORDINATOR_ADDRESS": "10.0.0.1:1234",
        }
    )
    assert (group.coordinator, group.num_processes, group.process_id) == ("10.0.0.1:1234", 2, 1)
    slurm = process_group(
        {"SLURM_NTASKS": "4", "SLURM_PROCID": "3", "SLURM_JOB_NODELIST": "gpu[07-08],cpu1"}
    )
    assert (slurm.coordinator, slurm.num_processes, slurm.process_id, slurm.source) == (
        "gpu07:8476",
        4,
        3,
        "SLURM",
    )
    volcano = process_group(
        {
            "VC_WORKER_HOSTS": "job-worker-0.job,job-worker-1.job",
            "VC_WORKER_NUM": "2",
            "VC_TASK_INDEX": "0",
            "THESEUS_COORDINATOR_PORT": "9000",
        }
    )
    assert (volcano.coordinator, volcano.num_processes, volcano.process_id) == (
        "job-worker-0.job:9000",
        2,
        0,
    )
    assert expand_nodelist("n[1-3,7],login") == ["n1", "n2", "n3", "n7", "login"]
    with pytest.raises(DistributedError, match="process id 2 is not in"):
        process_group(
            {
                "THESEUS_NUM_PROCESSES": "2",
                "THESEUS_PROCESS_ID": "2",
                "THESEUS_COORDINATOR_ADDRESS": "h:1",
            }
        )
    with pytest.raises(DistributedError, match="no coordinator"):
        process_group({"THESEUS_NUM_PROCESSES": "2", "THESEUS_PROCESS_ID": "0"})
