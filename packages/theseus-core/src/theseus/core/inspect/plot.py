"""Compare runs' metrics in one matplotlib figure."""

from __future__ import annotations

from pathlib import Path

from theseus.core.errors import TheseusError
from theseus.core.folders import make_folder
from theseus.core.inspect.runs import is_number, read_metrics
from theseus.core.requirements import require
from theseus.core.rundir import RunDir, missing_run


def writable(out: str | Path) -> Path:
    """``out`` with its folder created (a researcher expects ``--out plots/a/x.png`` to work)."""
    out = Path(out)
    make_folder(out.parent, out.name)
    return out


def smooth(values: list[float], weight: float) -> list[float]:
    """Exponential moving average with bias correction (weight 0: raw values)."""
    out, average = [], 0.0
    for i, value in enumerate(values, start=1):
        average = weight * average + (1 - weight) * value
        out.append(average / (1 - weight**i) if weight else value)
    return out


def plot_runs(
    root: str | Path, runs: list[str], metrics: list[str], out: str | Path, smoothing: float = 0.0
) -> Path:
    require("matplotlib", "plotting").use("Agg")
    import matplotlib.pyplot as plt

    if not 0.0 <= smoothing < 1.0:
        raise TheseusError(f"--smoothing {smoothing} must be in [0, 1)")
    figure, axes = plt.subplots(1, len(metrics), figsize=(6 * len(metrics), 4), squeeze=False)
    for axis, metric in zip(axes[0], metrics, strict=True):
        plotted = 0
        for run in runs:
            run_path = Path(root) / "runs" / run
            if not (run_path / "job.json").exists():
                raise TheseusError(missing_run(RunDir(root, run)))
            rows = [
                r
                for r in read_metrics(run_path)
                if is_number(r.get(metric)) and isinstance(r.get("step"), int)
            ]
            if not rows:
                continue
            steps = [r["step"] for r in rows]
            axis.plot(steps, smooth([r[metric] for r in rows], smoothing), label=run)
            plotted += 1
        if not plotted:
            raise TheseusError(f"metric {metric!r} is in none of the runs {', '.join(runs)}")
        axis.set_xlabel("step")
        axis.set_ylabel(metric)
        axis.set_title(metric)
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    out = writable(out)
    try:
        figure.savefig(out, dpi=120)
    except OSError as error:
        raise TheseusError(f"cannot write {out}: {error.strerror or error}") from error
    finally:
        plt.close(figure)
    return out
