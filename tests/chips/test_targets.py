"""Target names, the GPU target description and the quiet CPU start (no compiler needed)."""

from __future__ import annotations

import pytest
from theseus.core.chips import environment
from theseus.core.chips.gpu_config import gpu_target_config
from theseus.core.chips.specs import CHIPS, chip_of_device_kind
from theseus.core.chips.targets import TargetError, parse_target


@pytest.mark.parametrize(
    "name, chip, devices, topology",
    [
        ("v5p-8", "v5p", 4, "v5p:2x2x1"),  # v5p-N counts TensorCores: two per chip
        ("v5p-64", "v5p", 32, "v5p:2x4x4"),
        ("v5p-256", "v5p", 128, "v5p:4x4x8"),
        ("v5litepod-16", "v5e", 16, "v5e:4x4"),
        ("v5e-8", "v5e", 8, "v5e:2x4"),
        ("v6e-8", "v6e", 8, "v6e:2x4"),
        ("V6E-256", "v6e", 256, "v6e:16x16"),
        ("h100x8", "h100", 8, "1x1x8"),
        ("h100x16", "h100", 16, "1x2x8"),  # two hosts of eight
        ("h200x4", "h200", 4, "1x1x4"),
        ("b200x8", "b200", 8, "1x1x8"),
    ],
)
def test_names_as_users_say_them(name, chip, devices, topology):
    target = parse_target(name)
    assert (target.chip.name, target.devices, target.topology) == (chip, devices, topology)


@pytest.mark.parametrize(
    "name, wrap",
    [
        ("v5p-8", (False, False, False)),
        ("v5p-64", (False, False, False)),  # 2x4x4: an open mesh
        ("v5p-128", (True, True, True)),  # 4x4x4, the first full cube: a torus
        ("v5p-256", (True, True, True)),
        ("v5litepod-64", (False, False, False)),
        ("v5litepod-128", (False, True, False)),  # 8x16: only the pod-long side closes
        ("v6e-256", (True, True, False)),
        ("h100x8", (False, False, False)),
    ],
)
def test_a_slice_knows_which_sides_close_into_rings(name, wrap):
    assert parse_target(name).wrap == wrap


@pytest.mark.parametrize(
    "name, message",
    [
        ("v5p-7", "v5p-N counts TensorCores, two per chip: N is even"),
        ("v5p-12", "no such slice; v5p slices are v5p-8, v5p-16"),
        ("v6e-3", "no such slice; v6e slices are v6e-1, v6e-4, v6e-8"),
        ("a100x8", "unknown GPU 'a100'; use one of h100x8, h200x8, b200x8"),
        ("h100x12", "12 GPUs; use up to 8 (one host) or a multiple of 8"),
        ("tpu", "not a target theseus knows; use one of v5p-8"),
    ],
)
def test_unknown_targets_are_refused_in_one_line(name, message):
    with pytest.raises(TargetError) as error:
        parse_target(name)
    assert message in str(error.value) and "\n" not in str(error.value)
    assert str(error.value).startswith(f"--target {name}")


def test_each_chip_is_found_by_the_device_kind_jax_reports():
    for chip in CHIPS.values():
        assert chip_of_device_kind(chip.device_kind) is chip
    assert chip_of_device_kind("cpu") is None


def test_the_gpu_target_description_carries_the_chip_numbers():
    text = gpu_target_config(CHIPS["h100"])
    assert "core_count: 132" in text and "cuda_compute_capability { major: 9 minor: 0 }" in text
    assert f"device_memory_size: {80 * 10**9}" in text
    assert 'device_description_str: "NVIDIA H100 80GB HBM3"' in text
    assert text.count("{") == text.count("}")
    assert "major: 10 minor: 0" in gpu_target_config(CHIPS["b200"])
    with pytest.raises(ValueError):
        gpu_target_config(CHIPS["v5p"])


@pytest.fixture
def machine(monkeypatch):
    """A machine whose accelerators and installed compilers the test decides."""
    state = {"compilers": True, "accelerator": False}
    monkeypatch.setattr(environment, "aot_compilers_installed", lambda: state["compilers"])
    monkeypatch.setattr(environment, "accelerator_present", lambda: state["accelerator"])
    return state


def test_the_cpu_is_chosen_where_jax_could_start_nothing_else(machine):
    environ: dict[str, str] = {}
    assert environment.default_to_cpu(environ)
    assert environ["JAX_PLATFORMS"] == "cpu" and environ["TPU_SKIP_MDS_QUERY"] == "1"


@pytest.mark.parametrize(
    "compilers, accelerator, environ",
    [
        (False, False, {}),  # no aot extra: nothing changes
        (True, True, {}),  # a GPU or TPU machine: JAX picks its chips
        (True, False, {"JAX_PLATFORMS": "tpu"}),  # the user's choice stands
    ],
)
def test_the_cpu_is_left_alone_otherwise(machine, compilers, accelerator, environ):
    machine.update(compilers=compilers, accelerator=accelerator)
    before = dict(environ)
    assert not environment.default_to_cpu(environ)
    assert environ == before
