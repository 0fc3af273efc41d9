"""Every ``--target`` name: its chips and hosts as Cloud TPU and NVIDIA machines have them,
its compile-only devices, and a tiny step compiled for each kind of TPU slice.

Hosts, from the Cloud TPU tables (cloud.google.com/tpu/docs/v5p, /v5e, /v6e): a v5p host
holds 4 chips (``v5p-N`` counts TensorCores, two per chip: v5p-128 is 64 chips on 16
hosts); v5e and v6e slices of 1, 4 and 8 chips are one host, larger ones hosts of 4 chips
(v5litepod-16: 4 hosts). NVIDIA machines hold 8 GPUs.
"""

from __future__ import annotations

import pytest
from theseus.core.chips.targets import parse_target, tpu_target_names

from tests.chips.compiling import compile_train, require_aot, target_setup, tiny

# name -> (chip, chips, hosts)
V5P = {f"v5p-{2 * c}": ("v5p", c, c // 4) for c in (4, 8, 16, 32, 64, 128, 256, 512)}
V5P.update({f"v5p-{2 * c}": ("v5p", c, c // 4) for c in (1024, 2048, 4096, 6144)})
LITE_HOSTS = {1: 1, 4: 1, 8: 1, 16: 4, 32: 8, 64: 16, 128: 32, 256: 64}
EXPECTED = {
    **V5P,
    **{f"v5litepod-{c}": ("v5e", c, h) for c, h in LITE_HOSTS.items()},
    **{f"v5e-{c}": ("v5e", c, h) for c, h in LITE_HOSTS.items()},
    **{f"v6e-{c}": ("v6e", c, h) for c, h in LITE_HOSTS.items()},
    "h100x1": ("h100", 1, 1),
    "h100x8": ("h100", 8, 1),
    "h100x16": ("h100", 16, 2),
    "h200x64": ("h200", 64, 8),
    "b200x4": ("b200", 4, 1),
    "b200x8": ("b200", 8, 1),
}
GPU_NAMES = [name for name in EXPECTED if "x" in name]


def test_the_list_of_tpu_names_is_the_one_the_tables_give():
    assert sorted(tpu_target_names()) == sorted(n for n in EXPECTED if n not in GPU_NAMES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_name_has_its_chips_and_hosts(name):
    target = parse_target(name)
    assert (target.chip.name, target.devices, target.hosts) == EXPECTED[name]


def test_every_target_makes_its_devices_on_its_hosts():
    """The compiler's own devices: as many as the slice has chips, on as many hosts."""
    require_aot()
    from theseus.core.chips.devices import compile_only_devices

    for name in [*tpu_target_names(), *GPU_NAMES]:
        _, chips, hosts = EXPECTED[name]
        devices = compile_only_devices(name)
        assert (len(devices), len({d.process_index for d in devices})) == (chips, hosts), name


# one of each kind of slice: a single chip, one host of 8, a v5p host, many v5p hosts, hosts
# of 4 v5e chips
KINDS = ["v5e-1", "v5e-8", "v6e-1", "v6e-8", "v5p-8", "v5p-128", "v5litepod-16"]


@pytest.mark.slow  # ~5 s per target on 2 cores
@pytest.mark.parametrize("name", KINDS)
def test_a_tiny_step_compiles_for_each_kind_of_slice(name):
    require_aot()
    chips = parse_target(name).devices
    # the same tiny model everywhere: one layer, fsdp over every chip, a row per chip
    overrides = tiny("llama", "sharding.strategy=fsdp", "model.n_layers=1", batch=max(8, chips))
    setup = target_setup("llama", name, overrides)
    assert setup.layout.sizes["fsdp"] == chips and setup.attention == "splash"
    memory = compile_train(setup).memory_analysis()
    assert memory.temp_size_in_bytes > 0
