"""bench/scale_vs_maxtext.py reads MaxText's compile as the plan reads theseus's: its memory
line through ``step_compile.memory``, rows chosen by ``--only``, and only cells that are
bench/scale.py's own work kept in scale.json."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
# MaxText's line for Llama 3.1 8B on v5p-64 (T=8192, 2 rows per chip), as its log prints it.
LINE = (
    "Memory analysis: CompiledMemoryStats(generated_code_size_in_bytes=43595776, "
    "argument_size_in_bytes=3014801408, output_size_in_bytes=3014479680, "
    "alias_size_in_bytes=3014473728, temp_size_in_bytes=18763888896, "
    "host_generated_code_size_in_bytes=0, host_argument_size_in_bytes=0, "
    "host_output_size_in_bytes=0, host_alias_size_in_bytes=0, host_temp_size_in_bytes=0)"
)


def load(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_memory_line_read_as_the_plan_reads_its_own() -> None:
    bench = load("scale_vs_maxtext")
    got = bench.memory_from_log(f"I1205 noise\n{LINE}\nmore noise")
    args, out, alias = 3014801408, 3014479680, 3014473728
    temp, code = 18763888896, 43595776
    assert got["argument_bytes"] == args and got["temp_bytes"] == temp
    assert got["peak_bytes"] == args + out - alias + temp + code
    with pytest.raises(ValueError, match="CompiledMemoryStats"):
        bench.memory_from_log("Jitting and compiling train step...\n")


def test_only_picks_rows_by_regex() -> None:
    bench = load("scale_vs_maxtext")

    def chosen(pattern: str) -> list[str]:
        return [r.key for r in bench.ROWS if re.search(pattern, r.key, re.IGNORECASE)]

    assert chosen("qwen3") == [
        "Qwen3-30B-A3B v5p-64",
        "Qwen3-30B-A3B (fsdp, dropless) v5p-64",
        "Qwen3-30B-A3B (expert 8) v5p-64",
    ]
    assert chosen("8B v5p-8$") == ["Llama 3.1 8B v5p-8"]
    assert len(chosen("8b")) == 2


def test_a_cell_that_is_not_scale_py_work_is_not_recorded(tmp_path: Path) -> None:
    scale = load("scale")
    scale.OUT = tmp_path / "scale.json"
    # GPT-2 350M is remat "none" in bench/scale.py: a remat-full plan is other work
    assert not scale.record("GPT-2 350M", "v5p-8", 1024, "full", 8, {"peak_bytes": 1})
    assert not scale.record("Llama 3.1 8B", "v5p-256", 8192, "full", 2, {"peak_bytes": 1})
    assert not scale.OUT.exists()


RAGGED = """HloModule m

ENTRY %main (p0: bf16[64,2,1024], p1: bf16[512,2,1024], p2: s64[8], p3: s64[8], p4: s64[8], p5: s64[8]) -> bf16[512,2,1024] {
  %p0 = bf16[64,2,1024]{2,1,0} parameter(0)
  %p1 = bf16[512,2,1024]{2,1,0} parameter(1)
  %p2 = s64[8]{0} parameter(2)
  %p3 = s64[8]{0} parameter(3)
  %p4 = s64[8]{0} parameter(4)
  %p5 = s64[8]{0} parameter(5)
  ROOT %ragged_all_to_all.1 = bf16[512,2,1024]{2,1,0} ragged-all-to-all(%p0, %p1, %p2, %p3, %p4, %p5), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}
}
"""


def test_a_ragged_all_to_all_counts_what_balanced_routing_sends() -> None:
    """Both programs of a row are read by ``hlo_stats``, which counts MaxText's dispatch
    (and theseus's, since 270e0f6) as the bench's own counter did."""
    from theseus.core.plan.hlo_stats import analyze

    # 64 token rows of 2 x 1024 bf16 sent; the 512-row receive buffer is the worst case
    counted = analyze(RAGGED).collective_bytes
    assert counted == {"ragged-all-to-all": 64 * 2 * 1024 * 2}
    plain = analyze(RAGGED.replace("ragged-all-to-all(", "all-to-all(")).collective_bytes
    assert "ragged-all-to-all" not in plain


def test_each_side_states_its_work_and_a_row_whether_it_is_the_same() -> None:
    """The published Qwen3 row: theseus's default mesh puts the experts on 32 chips, MaxText
    runs fsdp over them; the same-work row runs fsdp 32 on both, dropless on both."""
    work = load("scale_work")
    plan = {
        "mesh": "data=1 x fsdp=1 x expert=32 x context=1 x tensor=1",
        "remat": "full",
        "per_device_batch": 2,
        "execution": [
            "attention: splash",
            "experts: all_to_all over expert=32, ragged_all_to_all of exactly the assignments "
            "(auto on tpu, the model being dropless), dropless (sharding.expert_capacity=0, "
            "the model being dropless) (experts split over the expert axis, ...)",
        ],
    }
    ours = work.theseus_work(plan)
    assert ours == {"strategy": "expert 32", "dropless": True, "remat": "full", "batch": 2}
    theirs = work.maxtext_work(32, "decoder_block=qwen3_moe num_experts=128", "full", 2)
    assert theirs == {"strategy": "fsdp 32", "dropless": True, "remat": "full", "batch": 2}
    row = work.compared(ours, theirs)
    assert row["same_work"] is False
    assert row["work"]["strategy"] == {"theseus": "expert 32", "maxtext": "fsdp 32"}
    assert row["work"]["dropless"] is True
    # fsdp over all 32 chips on both: the same work
    fsdp = work.theseus_work({**plan, "mesh": "data=1 x fsdp=32 x expert=1 x tensor=1"})
    assert work.compared(fsdp, theirs) == {"work": theirs, "same_work": True}
    # a capacity drops tokens; MaxText's expert axis and capacity are read from its settings
    capped = [line.replace("dropless (", "capacity factor 1.25 per expert (") + "; what "
              "overflows is dropped" for line in plan["execution"]]  # fmt: skip
    assert work.theseus_work({**plan, "execution": capped})["dropless"] is False
    eight = work.maxtext_work(32, "num_experts=128 ici_expert_parallelism=8", "full", 2)
    assert eight["strategy"] == "fsdp 4 x expert 8" and eight["dropless"] is True
    assert (
        work.maxtext_work(32, "num_experts=8 capacity_factor=1.25", "full", 2)["dropless"] is False
    )
    assert work.maxtext_work(4, "rope_max_timescale=500000", "full", 2)["dropless"] is None
