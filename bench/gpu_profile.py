"""Where a training step's time goes on a GPU: a profiled step, its kernels by kind.

Runs one ``family:preset:seq_len:batch`` (argv[2]) like ``gpu_bench.py``, traces a few steps with
the JAX profiler, and sums the GPU kernels' time by kind (matmul, attention, other fusions,
copies). Writes JSON to argv[1]. The step time against the sum of kernel time says how much is
launch and host overhead; the kinds say which kernels fall short of the roofline estimate.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

PROFILED_STEPS = 3
KINDS = {  # kind -> substrings of kernel names (lower case), tried in this order
    "attention": ("cudnn", "fmha", "flash", "sdpa", "attention"),
    "matmul": ("gemm", "cutlass", "cublas", "nvjet", "xmma", "matmul", "dot"),
    "copy": ("memcpy", "memset", "copy"),
    "collective": ("nccl", "all-reduce", "all_reduce"),
}


def kind_of(kernel: str) -> str:
    lowered = kernel.lower()
    for kind, needles in KINDS.items():
        if any(needle in lowered for needle in needles):
            return kind
    return "fusion/other"


def gpu_kernels(trace_dir: str) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """(seconds by kind, by kernel name, by plane/line) over the GPU planes of a trace."""
    from jax.profiler import ProfileData

    path = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)[0]
    by_kind: dict[str, float] = defaultdict(float)
    by_kernel: dict[str, float] = defaultdict(float)
    lines: dict[str, float] = {}
    for plane in ProfileData.from_file(path).planes:
        if "gpu" not in plane.name.lower():
            continue
        for line in plane.lines:
            events = list(line.events)
            lines[f"{plane.name}/{line.name}"] = sum(event.duration_ns for event in events) / 1e9
            if "stream" not in line.name.lower() or "xla ops" in line.name.lower():
                continue  # kernels are on the stream lines; op and module lines repeat them
            for event in events:
                seconds = event.duration_ns / 1e9
                by_kind[kind_of(event.name)] += seconds
                by_kernel[event.name] += seconds
    return dict(by_kind), dict(by_kernel), lines


def main() -> None:
    sys.path.insert(0, str(Path(__file__).parent))
    import jax
    from gpu_bench import config_tree
    from synthetic import synthetic_batch, timed_steps
    from theseus.core.train.configs import TrainJobConfig
    from theseus.core.train.setup import TrainSetup

    out = Path(sys.argv[1])
    family, preset, seq_len, batch_size = sys.argv[2].split(":")
    seq_len, batch_size = int(seq_len), int(batch_size)
    tree, regs, vocab = config_tree(family, preset, seq_len)
    tree.set("training.global_batch_size", batch_size)
    setup = TrainSetup.build(tree.to_object(TrainJobConfig), regs, vocab)
    state = setup.init_state()
    batch = setup.layout.place_batch(synthetic_batch(batch_size, seq_len, vocab))
    state, _, elapsed = timed_steps(setup.train_step, state, batch, 3, 5)
    trace_dir = tempfile.mkdtemp()
    jax.profiler.start_trace(trace_dir)
    start = time.perf_counter()
    for _ in range(PROFILED_STEPS):
        state, metrics = setup.train_step(state, batch)
    metrics["loss"].block_until_ready()
    traced = time.perf_counter() - start
    jax.profiler.stop_trace()
    by_kind, by_kernel, lines = gpu_kernels(trace_dir)
    kernel_s = sum(by_kind.values()) / PROFILED_STEPS
    step_s = elapsed / 5
    flops = setup.flops_per_token * batch_size * seq_len
    report = {
        "model": sys.argv[2],
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "attention": setup.attention,
        "step_s": step_s,
        "step_s_while_traced": traced / PROFILED_STEPS,
        "kernel_s_per_step": kernel_s,
        "idle_fraction": 1 - kernel_s / step_s,
        "model_tflops_per_step": flops / 1e12,
        "seconds_per_step_by_kind": {k: v / PROFILED_STEPS for k, v in sorted(by_kind.items())},
        "top_kernels_s_per_step": {
            name[:120]: seconds / PROFILED_STEPS
            for name, seconds in sorted(by_kernel.items(), key=lambda item: -item[1])[:25]
        },
        "seconds_per_step_by_line": {k: v / PROFILED_STEPS for k, v in lines.items()},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "top_kernels_s_per_step"}, indent=1))


if __name__ == "__main__":
    main()
