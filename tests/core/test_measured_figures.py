"""Figures tied to their source: the measured tables the code reads come from one file
(theseus-core's ``chips/measured.json``), which agrees with the bench results it was measured
in; and every test a comment or a page names exists."""

from __future__ import annotations

import ast
import importlib.util
import json
import re
from pathlib import Path

from theseus.core.chips import kernel_rates
from theseus.core.chips.measured import measured
from theseus.core.train import remat_choice
from theseus.models import splash_blocks

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"


def sweep() -> object:
    spec = importlib.util.spec_from_file_location("sweep", REPO / "bench/tpu_attention_sweep.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sweep_rows() -> list[dict]:
    """Every row the sweeps wrote: the full one, and the head_dim 128 one (JSON lines)."""
    rows = json.loads((RESULTS / "tpu_attention_sweep.json").read_text())["rows"]
    extra = (RESULTS / "tpu_attention_sweep_d128.jsonl").read_text().splitlines()
    return rows + [json.loads(line) for line in extra if line.strip()]


def row_for(rows: list[dict], length: int) -> dict:
    """The blocks a table of ``{up_to, blocks}`` rows gives for ``length``."""
    return next(r["blocks"] for r in rows if r["up_to"] is None or length <= r["up_to"])


def test_the_code_reads_its_measured_tables_from_the_one_file():
    data = measured()
    blocks = splash_blocks.measured_rows(data["splash_blocks"])
    assert splash_blocks.MEASURED == blocks and blocks  # not a copy that can drift
    rates = data["splash_rates"]["chips"]
    assert {
        c: {int(d): [tuple(r) for r in rows] for d, rows in dims.items()}
        for c, dims in rates.items()
    } == kernel_rates.SPLASH_TFLOPS
    assert kernel_rates.KERNEL_SHARE == data["splash_rates"]["kernel_share"]
    assert remat_choice.WORKING == data["remat"]["working"]
    assert remat_choice.FIT_FRACTION == data["remat"]["fit_fraction"]


def test_the_decoding_loops_fraction_of_the_roofline_is_what_the_bench_measured():
    """The figure a GRPO dry run estimates a decoding turn with (``grpo_plan``) is the one
    ``bench/grpo_merge.py`` takes from the decoding bench's results."""
    spec = importlib.util.spec_from_file_location("merge", REPO / "bench/grpo_merge.py")
    assert spec is not None and spec.loader is not None
    merge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(merge)
    results = json.loads((RESULTS / "grpo_tpu.json").read_text())
    fraction = measured()["decode"]["roofline_fraction"][results["device"]]
    assert fraction == merge.decode_fraction(results["decode"]) and 0 < fraction < 1


def test_the_splash_tables_are_what_the_sweep_measured():
    """At every length the sweep measured, the table's blocks are the sweep's fastest and its
    rate the one measured for them (what the sweep itself writes into the file)."""
    derived_blocks, derived_rates = sweep().tables(sweep_rows())
    data = measured()
    chip = "TPU v5 lite"
    table = data["splash_blocks"]["chips"][chip]
    lengths = sorted({(r["head_dim"], r["seq_len"]) for r in sweep_rows()})
    assert len(lengths) == 7  # head_dim 64 from 512 to 16384, 128 at 2048
    for dim, length in lengths:
        ours = row_for(table[str(dim)], length)
        assert ours == row_for(derived_blocks[str(dim)], length), (dim, length)
    for dim, rows in data["splash_rates"]["chips"][chip].items():
        assert rows == derived_rates[dim], dim


def product_texts() -> list[Path]:
    packages = REPO / "packages"
    return [
        *packages.rglob("*.py"),
        *packages.rglob("*.md"),
        *(REPO / "docs").rglob("*.md"),
        REPO / "README.md",
    ]


def test_every_test_a_comment_or_a_page_names_exists():
    defined: set[str] = set()
    for path in (REPO / "tests").rglob("*.py"):
        defined.add(path.stem)
        tree = ast.parse(path.read_text())
        defined.update(n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))
    named: dict[str, str] = {}
    for path in product_texts():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for found in re.findall(r"\btest_[a-z0-9_]+", line):
                named.setdefault(found, f"{path.relative_to(REPO)}:{number}")
    assert len(named) > 40  # the walk reads the product (a broken walk would pass vacuously)
    missing = [f"{where}: {name}" for name, where in sorted(named.items()) if name not in defined]
    assert not missing, "named, but no such test:\n" + "\n".join(missing)
