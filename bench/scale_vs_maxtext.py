"""theseus's plan beside MaxText's own compiled step, same work, same libtpu, no chip used.

For each row (a model, a TPU target, a sequence length, a per-chip batch and a remat policy)
both training steps are compiled by XLA:TPU for the target's compile-only devices on this
CPU machine:

* **MaxText**: the bundle in ``../shared/peers/maxtext`` (copied to ``.peers-maxtext/``, an
  ignored folder of the checkout), ``run.sh`` with ``AOT_TOPOLOGY=<target>`` (it only
  compiles) and ``dump_hlo=true``: its optimized HLO and its ``CompiledMemoryStats`` line.
  MaxText's defaults otherwise: fsdp over every chip (``ici_fsdp_parallelism=-1``), scanned
  layers, bf16 compute with float32 weights and AdamW, splash attention, and for MoE its
  dropless megablox (``sparse_matmul``) with no expert parallelism.
* **theseus**: ``bench/scale.py``'s own cell (``plan_cell``: the ``--dry-run --target``
  path, ``plan_report.report``) with fsdp over every chip, in a child process whose
  ``XLA_FLAGS`` dump the same files.

Both are read the same way: memory per chip from the compiler's memory stats (arguments +
outputs - aliased + temporaries + code: ``step_compile.memory``), collective bytes per chip
per step by kind from the optimized HLO with scanned loops counted by their trip counts
(``hlo_stats.analyze``: result sizes), the same collectives priced as what they send over
the links (``link_bytes``: a ring all-reduce twice (n - 1) / n of its size, an all-gather,
a reduce-scatter or an all-to-all (n - 1) / n, a permute as sent), and the roofline step
estimate (``step_estimate``) for both. Each side states its work (``scale_work``: strategy,
dropless or not, remat, rows per chip) and each row whether the two sides do the same.

Writes ``bench/results/scale_vs_maxtext.json`` after every side of every row (a long run
keeps what finished; other rows are kept, this run's replace theirs) and the table in
``docs/scale.md``. A finished MaxText compile (its log says so) is reused unless
``--fresh``; ``--side theseus`` recompiles only theseus's step (to rerun a row after a
change to the plan). One compile at a time: a real-size step takes minutes on 2 cores.
Each side's log, HLO dump and memory reports go to ``$SCALE_VS_MAXTEXT_WORK/<row>/<side>``
(default /tmp/scale_vs_maxtext); the JSON names the optimized module relative to it.

Usage: python bench/scale_vs_maxtext.py [--only REGEX] [--side both|maxtext|theseus]
       [--fresh] [--table-only]
(``--only`` searches "model target" in any case: ``qwen3``, ``"8B v5p-8$"``.)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_work import compared, maxtext_work, theseus_work  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "scale_vs_maxtext.json"
DOC = ROOT / "docs" / "scale.md"
PEER = ROOT / ".peers-maxtext"  # a copy of ../shared/peers/maxtext (git-ignored)
WORK = Path(os.environ.get("SCALE_VS_MAXTEXT_WORK", "/tmp/scale_vs_maxtext"))
MT_SITES = {"MT_SITE": "/tmp/site_maxtext_scale", "MT_SITE2": "/tmp/site2_maxtext_scale"}
GiB = 1024**3

LLAMA3_8B = {"LAYERS": 32, "EMB": 4096, "HEADS": 32, "KV": 8, "HEAD_DIM": 128, "MLP": 14336}
LLAMA3_70B = {"LAYERS": 80, "EMB": 8192, "HEADS": 64, "KV": 8, "HEAD_DIM": 128, "MLP": 28672}
QWEN3_30B = {"LAYERS": 48, "EMB": 2048, "HEADS": 32, "KV": 4, "HEAD_DIM": 128, "MLP": 768}
# MaxText's own configs/models/qwen3-30b-a3b.yml (the bundle carries no model configs).
QWEN3_MOE = (
    "decoder_block=qwen3_moe use_qk_norm=true num_experts=128 num_experts_per_tok=8 "
    "base_moe_mlp_dim=768 norm_topk_prob=true rope_max_timescale=10000000 "
    "normalization_layer_epsilon=1e-6"
)
# GPT-2 medium's shape in MaxText's Llama block: the MLP's three matrices at 2752 (8/3 x 1024,
# rounded to 64) do GPT's two at 4 x 1024 (+0.8%); the head tied to the embedding as in GPT-2.
GPT_350M = {"LAYERS": 24, "EMB": 1024, "HEADS": 16, "KV": 16, "HEAD_DIM": 64, "MLP": 2752}


@dataclass(frozen=True)
class Row:
    model: str
    target: str
    family: str  # theseus's model family and preset
    preset: str
    vocab: int
    seq: int
    per_chip: int  # rows per chip
    remat: str
    maxtext: dict[str, int] = field(default_factory=dict)  # run.sh's shape knobs
    extra: str = ""  # more MaxText settings (run.sh's EXTRA)
    note: str = ""
    theseus_values: tuple[str, ...] = ()  # more theseus overrides, after bench/scale.py's

    @property
    def key(self) -> str:
        return f"{self.model} {self.target}"

    @property
    def slug(self) -> str:
        return re.sub(r"[^a-z0-9.]+", "-", self.key.lower()).strip("-")


ROWS = [
    Row("Qwen3-30B-A3B", "v5p-64", "qwen3_moe", "30b-a3b", 151936, 4096, 2, "full",
        QWEN3_30B, QWEN3_MOE),
    Row("Qwen3-30B-A3B (fsdp, dropless)", "v5p-64", "qwen3_moe", "30b-a3b", 151936, 4096, 2,
        "full", QWEN3_30B, QWEN3_MOE,
        "the same work on both sides: fsdp over all 32 chips, dropless (theseus "
        "sharding.expert=1; MaxText's defaults)",
        ("sharding.expert=1",)),
    Row("Qwen3-30B-A3B (expert 8)", "v5p-64", "qwen3_moe", "30b-a3b", 151936, 4096, 2, "full",
        QWEN3_30B, f"{QWEN3_MOE} ici_expert_parallelism=8",
        "experts over an expert axis of 8 (fsdp 4 x expert 8) on both sides",
        ("sharding.expert=8",)),
    Row("Llama 3.1 8B", "v5p-64", "llama", "8b", 128256, 8192, 2, "full",
        LLAMA3_8B, "rope_max_timescale=500000"),
    Row("Llama 3.1 8B", "v5p-8", "llama", "8b", 128256, 8192, 2, "full",
        LLAMA3_8B, "rope_max_timescale=500000"),
    Row("GPT-2 350M", "v5p-8", "gpt", "350m", 50257, 1024, 8, "full", GPT_350M,
        "logits_via_embedding=true",
        "MaxText has no GPT-2 block: its Llama block (RMSNorm, RoPE, SwiGLU MLP 2752) at "
        "GPT-2 medium's FLOPs, head tied; remat full on both (MaxText has no 'none')"),
    Row("Llama 3.1 70B", "v5p-256", "llama", "70b", 128256, 8192, 1, "full",
        LLAMA3_70B, "rope_max_timescale=500000"),
]  # fmt: skip


def log(line: str) -> None:
    print(time.strftime("%H:%M:%S"), line, flush=True)


# ------------------------------------------------------------------ reading a compile


def chip_of(target: str) -> Any:
    from theseus.core.chips.targets import parse_target

    return parse_target(target).chip


def program_fields(text: str, target: str) -> dict[str, Any]:
    """Collectives by kind and the roofline estimate of one device's optimized HLO, read as
    ``plan_report`` reads theseus's own."""
    from theseus.core.plan.hlo_stats import analyze
    from theseus.core.plan.step_estimate import estimate_step, splash_pricer

    chip = chip_of(target)
    stats = analyze(
        text,
        chip.peak_flops,
        chip.hbm_bandwidth,
        chip.float32_matmul_flops,
        splash_pricer(text, chip.device_kind),
    )
    estimate = estimate_step(text, stats, chip)
    counted = {k: int(v) for k, v in stats.collective_bytes.items()}
    return {
        "collective_bytes": dict(sorted(counted.items())),
        "collective_bytes_total": int(sum(counted.values())),
        "collective_counts": dict(sorted(stats.collective_counts.items())),
        "flops_per_chip_hlo": stats.flops,
        "step_seconds_estimate": estimate.seconds,
        "collective_seconds_estimate": estimate.collective_seconds,
        "collective_seconds_exposed": estimate.exposed_seconds,
        "collective_seconds_hidden": estimate.hidden_seconds,
        "opaque_kernels": stats.opaque_kernels,
        "hlo_dynamic_loops": stats.dynamic_loops,
        **link_fields(text),
    }


def link_fields(text: str) -> dict[str, Any]:
    """The collectives as link traffic (``core/plan/link_bytes.py``), by kind and in all."""
    from theseus.core.plan.link_bytes import link_bytes

    sent = {k: int(v) for k, v in link_bytes(text).items()}
    return {"link_bytes": int(sum(sent.values())), "link_bytes_by_kind": sent}


_STATS = re.compile(r"Memory analysis: CompiledMemoryStats\(([^)]*)\)")


def memory_from_log(text: str) -> dict[str, int]:
    """``step_compile.memory`` of the ``CompiledMemoryStats(...)`` line MaxText prints."""
    from theseus.core.plan.step_compile import memory

    found = _STATS.findall(text)
    if not found:
        raise ValueError("no 'Memory analysis: CompiledMemoryStats(...)' line in MaxText's log")
    fields = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found[-1])}
    analysis = SimpleNamespace(**fields)
    return memory(SimpleNamespace(memory_analysis=lambda: analysis), None)


def optimized_module(dump: Path, name: str = "train_step") -> Path:
    """The largest ``*after_optimizations.txt`` of a module named like ``name`` in a dump."""
    found = [p for p in dump.glob("*after_optimizations.txt") if name in p.name]
    if not found:
        raise FileNotFoundError(f"no optimized {name} module in {dump}")
    return max(found, key=lambda p: p.stat().st_size)


# ------------------------------------------------------------------ MaxText's side


def maxtext_side(row: Row, fresh: bool) -> dict[str, Any]:
    out = WORK / row.slug / "maxtext"
    dump = out / "hlo"
    logfile = out / "maxtext_aot.log"
    done = logfile.exists() and "Finished train_compile.py successfully" in logfile.read_text(
        errors="replace"
    )
    if fresh or not done:
        if not (PEER / "run.sh").exists():
            raise SystemExit(f"copy ../shared/peers/maxtext to {PEER} first (see its README)")
        out.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            **MT_SITES,
            "PYTHON": sys.executable,
            "AOT_TOPOLOGY": row.target,
            "SEQ": str(row.seq),
            "BATCH": str(row.per_chip),
            "REMAT": row.remat,
            "VOCAB": str(row.vocab),
            **{k: str(v) for k, v in row.maxtext.items()},
            "EXTRA": f"{row.extra} dump_hlo=true dump_hlo_local_dir={dump} "
            "dump_hlo_delete_local_after=false".strip(),
        }
        install_maxtext(env)
        log(f"MaxText {row.key}: compiling for {row.target}")
        started = time.time()
        with open(out / "run.out", "w") as sink:
            rc = subprocess.call(
                ["bash", str(PEER / "run.sh"), str(out)], env=env, stdout=sink, stderr=sink
            )
        wall = time.time() - started
        if rc != 0:
            tail = (out / "run.out").read_text(errors="replace")[-600:]
            return {"error": f"run.sh exit {rc}: {tail}", "wall_seconds": wall}
        (out / "wall_seconds").write_text(f"{wall:.1f}\n")
    text = logfile.read_text(errors="replace")
    module = optimized_module(dump)
    result: dict[str, Any] = {
        **memory_from_log(text),
        **program_fields(module.read_text(), row.target),
    }
    result["work"] = maxtext_work(chip_count(row.target), row.extra, row.remat, row.per_chip)
    params = re.findall(r"number parameters: ([\d.]+) billion", text)
    if params:
        result["parameters_billion"] = float(params[-1])
    result["hlo"] = str(module.relative_to(WORK))  # the dump, under WORK
    if (out / "wall_seconds").exists():  # the compile's, also when it is reused
        result["wall_seconds"] = float((out / "wall_seconds").read_text())
    return result


def install_maxtext(env: dict[str, str]) -> None:
    """MaxText's packages, once, into ``MT_SITES`` by ``run.sh`` itself: with ``pip`` of
    ``$MT_PIP_PYTHON`` (default python3, the same Python minor version; this project's
    virtual environment has no pip), then every compile skips the install."""
    stamp = Path(env["MT_SITE2"]) / ".maxtext_stamp"
    if not stamp.exists():
        installer = os.environ.get("MT_PIP_PYTHON", "python3")
        log(f"installing MaxText's packages into {env['MT_SITE']} with {installer}'s pip")
        scratch = WORK / "install"
        scratch.mkdir(parents=True, exist_ok=True)
        with open(scratch / "run.out", "w") as sink:  # it installs, then stops (no jax there)
            subprocess.call(
                ["bash", str(PEER / "run.sh"), str(scratch)],
                env={**env, "PYTHON": installer},
                stdout=sink,
                stderr=sink,
            )
        if not stamp.exists():
            raise OSError(f"MaxText's install failed: see {scratch / 'run.out'}")
    env["SKIP_INSTALL"] = "1"


# ------------------------------------------------------------------ theseus's side


def theseus_side(row: Row) -> dict[str, Any]:
    """Compiles in a child process (its own XLA dump folder and memory)."""
    out = WORK / row.slug / "theseus"
    out.mkdir(parents=True, exist_ok=True)
    dump, result_file = out / "hlo", out / "plan.json"
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} --xla_dump_to={dump}".strip(),
    }
    log(f"theseus {row.key}: compiling for {row.target}")
    started = time.time()
    command = [sys.executable, __file__, "--theseus-row", row.key, "--result", str(result_file)]
    with open(out / "run.out", "w") as sink:
        rc = subprocess.call(command, env=env, stdout=sink, stderr=sink)
    wall = time.time() - started
    if rc != 0:
        tail = (out / "run.out").read_text(errors="replace")[-600:]
        return {"error": f"exit {rc}: {tail}", "wall_seconds": wall}
    plan = json.loads(result_file.read_text())
    sys.path.insert(0, str(ROOT / "bench"))
    from scale import record

    if record(row.model, row.target, row.seq, row.remat, row.per_chip, plan):
        log(f"theseus {row.key}: the plan is also bench/results/scale.json's cell")
    keys = (
        "peak_bytes", "argument_bytes", "output_bytes", "alias_bytes", "temp_bytes",
        "code_bytes", "params_bytes", "opt_bytes", "collective_bytes", "collective_bytes_total",
        "step_seconds_estimate", "collective_seconds_estimate", "collective_seconds_hidden",
        "collective_seconds_exposed", "predicted_mfu", "parameters",
        "strategy", "mesh", "attention", "per_device_batch", "compile_seconds", "fits",
        "estimate_method", "hlo_dynamic_loops", "error", "remat", "execution",
    )  # fmt: skip
    result = {k: plan[k] for k in keys if k in plan}
    result["work"] = theseus_work(plan)
    try:
        module = optimized_module(dump, "jit_")  # theseus's step: jit_traced
        result["hlo"] = str(module.relative_to(WORK))
        result.update(link_fields(module.read_text()))
    except FileNotFoundError:
        pass
    result["wall_seconds"] = wall
    return result


def plan_row(key: str, result_file: Path) -> None:
    """The child: ``bench/scale.py``'s cell for this row, its plan as JSON."""
    sys.path.insert(0, str(ROOT / "bench"))
    from scale import overrides, plan_cell
    from theseus.core.chips.environment import quiet_libtpu
    from theseus.core.chips.targets import parse_target

    quiet_libtpu()
    row = next(r for r in ROWS if r.key == key)
    chips = parse_target(row.target).devices
    values = overrides(row.family, row.preset, row.vocab, row.seq, row.per_chip, chips, row.remat)
    plan = plan_cell(row.family, [*values, *row.theseus_values], row.target)
    result_file.write_text(json.dumps(plan, default=str, indent=1))


# ------------------------------------------------------------------ results


def entry(row: Row, old: dict[str, Any] | None) -> dict[str, Any]:
    base = dict(old or {})
    base.update(
        model=row.model, target=row.target, seq=row.seq, per_chip_batch=row.per_chip,
        remat=row.remat, theseus_preset=f"{row.family} {row.preset}",
        maxtext_knobs={**row.maxtext, "EXTRA": row.extra},
        theseus_values=list(row.theseus_values),
    )  # fmt: skip
    if row.note:
        base["note"] = row.note
    return base


def chip_count(target: str) -> int:
    from theseus.core.chips.targets import parse_target

    return parse_target(target).devices


def ratios(r: dict[str, Any]) -> dict[str, float]:
    t, m = r.get("theseus") or {}, r.get("maxtext") or {}
    out = {}
    for name in ("peak_bytes", "collective_bytes_total", "link_bytes", "step_seconds_estimate"):
        if t.get(name) and m.get(name):
            out[name] = t[name] / m[name]
    return out


def save(rows: dict[str, dict[str, Any]]) -> None:
    import jax

    order = [r.key for r in ROWS]
    ordered = [rows[k] for k in order if k in rows] + [v for k, v in rows.items() if k not in order]
    for r in ordered:
        r["theseus_over_maxtext"] = ratios(r)
        sides = ((r.get(side) or {}).get("work") for side in ("theseus", "maxtext"))
        r.update(compared(*sides))
    OUT.write_text(json.dumps({"jax": jax.__version__, "rows": ordered}, indent=2) + "\n")
    write_doc(ordered)


def gib(n: float | None) -> str:
    return "n/a" if n is None else f"{n / GiB:.1f}"


def comms(c: dict[str, float] | None) -> str:
    if not c:
        return "n/a"
    return ", ".join(f"{k} {v / GiB:.2f}" for k, v in c.items() if v >= 0.005 * GiB) or "0"


def side_cells(s: dict[str, Any] | None) -> list[str]:
    if not s:
        return ["not run"] * 4
    if "error" in s and "peak_bytes" not in s:
        return [f"error: {s['error'][:60]}", "", "", ""]
    split = f"{gib(s.get('argument_bytes'))} + {gib(s.get('temp_bytes'))}"
    step = s.get("step_seconds_estimate")
    links = f", links {gib(s.get('link_bytes'))}" if "link_bytes" in s else ", links not read"
    return [
        f"{gib(s.get('peak_bytes'))} ({split})",
        f"{comms(s.get('collective_bytes'))} (all {gib(s.get('collective_bytes_total'))}{links})",
        f"{step:.3g} s" if step else "n/a",
        f"{s['compile_seconds']:.0f} s" if "compile_seconds" in s else "",
    ]


RATIO_NAMES = {
    "peak_bytes": "memory",
    "collective_bytes_total": "collectives",
    "link_bytes": "link bytes",
    "step_seconds_estimate": "est. step",
}


def differences(r: dict[str, Any]) -> str:
    """What differs between the sides' work (``theseus / MaxText`` for each key)."""
    work = r.get("work") or {}
    parts = [
        f"{key} {value['theseus']} / {value['maxtext']}"
        for key, value in work.items()
        if isinstance(value, dict)
    ]
    return "; ".join(parts) or "not stated"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model, target, T, rows/chip, remat | side | peak GiB (args + temps) | collectives GiB per chip per step | est. step | ratio theseus / MaxText |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        what = f"{r['model']}, {r['target']}, {r['seq']}, {r['per_chip_batch']}, {r['remat']}"
        what += "; same work" if r.get("same_work") else f"; other work: {differences(r)}"
        ratio = r.get("theseus_over_maxtext", {})
        said = ", ".join(f"{RATIO_NAMES[k]} {v:.2f}x" for k, v in ratio.items())
        for side in ("maxtext", "theseus_before", "theseus"):
            if side == "theseus_before" and side not in r:
                continue  # a row planned once: no earlier plan kept beside it
            cells = side_cells(r.get(side))
            label = {
                "maxtext": "MaxText",
                "theseus_before": "theseus, earlier",  # its commit is in the JSON
                "theseus": "theseus",
            }[side]
            lines.append(
                f"| {what if side == 'maxtext' else ''} | {label} | {cells[0]} | {cells[1]} | "
                f"{cells[2]} | {said if side == 'theseus' else ''} |"
            )
    return "\n".join(lines)


def write_doc(rows: list[dict[str, Any]]) -> None:
    text = DOC.read_text() if DOC.exists() else ""
    start, end = "<!-- scale vs maxtext table -->", "<!-- /scale vs maxtext table -->"
    block = f"{start}\n{table(rows)}\n{end}"
    if start in text and end in text:
        text = text[: text.index(start)] + block + text[text.index(end) + len(end) :]
    else:
        text += "\n" + block + "\n"
    DOC.write_text(text)


def commit() -> str:
    """The checkout's commit (what a side was compiled at)."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    )
    return done.stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--only", default="", help="rows whose 'model target' this finds (a regex, any case)"
    )
    parser.add_argument("--side", choices=("both", "maxtext", "theseus"), default="both")
    parser.add_argument("--fresh", action="store_true", help="recompile MaxText's step too")
    parser.add_argument("--table-only", action="store_true", help="rewrite docs/scale.md")
    parser.add_argument("--theseus-row", help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.theseus_row:
        plan_row(args.theseus_row, args.result)
        return 0
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    existing = json.loads(OUT.read_text())["rows"] if OUT.exists() else []
    rows = {f"{r['model']} {r['target']}": r for r in existing}
    if args.table_only:
        save(rows)
        return 0
    chosen = [r for r in ROWS if re.search(args.only, r.key, re.IGNORECASE)]
    if not chosen:
        print(f"no row matches {args.only!r}; rows: {[r.key for r in ROWS]}", file=sys.stderr)
        return 2
    for row in chosen:
        sides = ("maxtext", "theseus") if args.side == "both" else (args.side,)
        for side in sides:
            started = time.time()
            try:
                result = maxtext_side(row, args.fresh) if side == "maxtext" else theseus_side(row)
            except (OSError, ValueError) as error:
                result = {"error": f"{type(error).__name__}: {error}"}
            result["commit"] = commit()
            current = entry(row, rows.get(row.key))
            current[side] = result
            rows[row.key] = current
            save(rows)
            log(
                f"{side} {row.key}: peak {gib(result.get('peak_bytes'))} GiB, collectives "
                f"{gib(result.get('collective_bytes_total'))} GiB "
                f"({time.time() - started:.0f} s){' ERROR ' + result['error'][:200] if 'error' in result else ''}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
