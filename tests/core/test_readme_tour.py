"""The README in its own order, as a newcomer runs it: the main job, then the fine-tuning
section's four commands, unchanged, in one root. Each step's wall time is printed; the
numbers a person would look at are asserted:

* the main job learns: its last validation loss is 1.5 nats under the loss of a uniform
  guess over the BPE vocabulary (ln 8192 = 9.01 nats), and half a nat under its first, and
  within 0.2 of the one the README says to expect;
* SFT learns addition: greedy exact match on held-out two-digit problems (none of them in the
  training set, ``theseus.core.addition``) is at least ``EXACT_MATCH``. Chance is about one
  in 199 (sums run from 0 to 198), so the threshold is far above it;
* DPO learns the preference on held-out pairs: the validation reward margin at the last
  evaluation is above that at the first, and the accuracy is above one half;
* the fine-tuned model answers the README's question as the README shows, from theseus
  (``generate.chat=true``) and from ``transformers`` (the export's chat template);
GRPO's learning from the tour's SFT run (docs/grpo.md) is a measurement, not part of the
tour: two 100-step runs cost about 2 CPU-minutes that CI's budget has no room for, and GRPO's
rise over its shuffled control is asserted by ``tests/train/test_grpo.py``.
"""

from __future__ import annotations

import math
import os
import re
import resource
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import runtime_env
from tests.core.test_readme import REPO, readme_commands
from tests.train.conftest import metrics

EXACT_MATCH = 0.3  # chosen before measuring: 60x chance on 0..198
BPE_VOCAB = 8192


def readme() -> str:
    return (REPO / "README.md").read_text()


def fine_tuning_section() -> str:
    return readme().split("## Fine-tuning", 1)[1].split("\n## ", 1)[0]


def fine_tuning_blocks() -> list[list[str]]:
    return [
        block.splitlines()
        for block in re.findall(r"```bash\n(.+?)\n```", fine_tuning_section(), re.S)
    ]


def shown_answer() -> str:
    """The line the README says the question prints."""
    return re.search(r"It prints `([^`]+)`", fine_tuning_section()).group(1)


def fine_tuning_lines() -> list[str]:
    return fine_tuning_blocks()[0]


def cpu_seconds() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run_line(line: str, env: dict, cwd: Path) -> tuple[float, str]:
    """Run one README line; print its wall time and CPU time (on a shared machine the wall
    time says more about the neighbours than about the command); return the wall time and
    the standard output."""
    words = shlex.split(line)
    assert words[:2] == ["uv", "run"], line
    program = Path(os.sys.executable).parent / words[2]  # already inside the environment
    started, cpu = time.perf_counter(), cpu_seconds()
    done = subprocess.run(
        [str(program), *words[3:]], capture_output=True, text=True, env=env, cwd=cwd, timeout=900
    )
    took, cpu = time.perf_counter() - started, cpu_seconds() - cpu
    assert done.returncode == 0, (line, done.stderr[-3000:])
    print(f"\n{took:6.1f} s wall, {cpu:6.1f} s CPU  {line}\n{done.stderr[-1500:]}", flush=True)
    return took, done.stdout


def training_runs(root: Path) -> set[str]:
    return {p.parent.name for p in (root / "runs").glob("*/metrics.jsonl")}


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about 7 minutes on two idle cores; shared machines are slower
def test_the_readme_in_order_is_fast_and_visibly_learns(tmp_path: Path):
    root = tmp_path / "runs"
    env = runtime_env(THESEUS_ROOT=str(root))
    took, out = run_line(readme_commands()[0], env, tmp_path)
    times = {"main job": took}
    assert "run " in out and str(root) in out  # where the run went
    (main,) = training_runs(root)
    val = [r["val/loss"] for r in metrics(root, main) if "val/loss" in r]
    assert val[-1] < math.log(BPE_VOCAB) - 1.5 and val[-1] < val[0] - 0.5, val
    expected = float(re.search(r"validation loss ends at about ([\d.]+)", readme()).group(1))
    assert abs(val[-1] - expected) <= 0.2, (val, expected)

    lines = fine_tuning_lines()
    names = ["base", "sft", "dpo", "export"]
    assert len(lines) == len(names), lines
    for name, line in zip(names, lines, strict=True):
        times[name] = run_line(line, env, tmp_path)[0]
    summary = ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
    print(f"\nREADME times: {summary}; tour {sum(times.values()) - times['main job']:.0f} s")

    sft = [r for r in metrics(root, "sft") if "eval/addition/exact_match" in r]
    exact = [r["eval/addition/exact_match"] for r in sft]
    dpo = [r for r in metrics(root, "dpo") if "val/rewards/accuracy" in r]
    accuracy = [r["val/rewards/accuracy"] for r in dpo]
    margin = [r["val/rewards/margin"] for r in dpo]
    print(f"SFT exact match {exact}; DPO validation reward accuracy {accuracy}, margin {margin}")
    assert exact[-1] >= EXACT_MATCH, exact
    # the reward margin grows; the accuracy, counted over 128 validation pairs (steps of
    # 1/128), moves by a pair or two between evaluations, so it is held against chance: 3
    # standard deviations of a coin over 128 pairs above 0.5
    assert margin[-1] > margin[0] > -1e-6, margin
    assert len(accuracy) >= 2 and accuracy[-1] > 0.5 + 3 * 0.5 / math.sqrt(128), accuracy
    assert (tmp_path / "dpo-hf" / "config.json").is_file()
    check_the_export_comes_back(env, tmp_path, root)
    (asking,) = fine_tuning_blocks()[2]
    answered = run_line(asking, env, tmp_path)[1].strip().splitlines()
    assert answered[0] == shown_answer(), answered  # "What is 47+38? -> 85", printed once
    assert answered.count(answered[0]) == 1, answered


def check_the_export_comes_back(env: dict, cwd: Path, root: Path) -> None:
    """The README's second block: the export imports back as a run, and loads in
    ``transformers`` when the parity group is installed (its install line is not run),
    which answers the README's question in the export's chat template."""
    importing, install, loading = fine_tuning_blocks()[1]
    assert "hf/import" in importing and "pip install" in install, (importing, install)
    run_line(importing, env, cwd)
    assert (root / "runs" / "dpo-back").is_dir()
    try:
        import transformers  # noqa: F401
    except ImportError:
        return
    _, out = run_line(loading, env, cwd)
    # the question asked through the export's chat template, answered as theseus answers it
    assert out.strip().splitlines()[-1] == shown_answer().split(" -> ")[1], out
