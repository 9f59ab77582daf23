"""PNG plots of per-round metrics in the run directory (run_dir/plots/*.png).

Uses matplotlib's object API with the Agg canvas and never imports pyplot, so no GUI backend and
no global figure state are involved (safe in a Ray driver and in threads). Each PNG is written to
a temporary name and renamed, so a reader never sees half a file.
Non-goals: interactive plots, cross-run comparison (W&B does that).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from spade_ray.records import RoundMetrics

Getter = Callable[[RoundMetrics], float | None]

# (file stem, title, y label, [(series label, getter)]). One metric family per file.
PLOTS: tuple[tuple[str, str, str, list[tuple[str, Getter]]], ...] = (
    ("validation_pass_at_1", "Validation pass@1 (fixed set)", "pass@1",
     [("pass@1", lambda m: m.validation_pass_at_1)]),
    ("new_task_pass_rate", "Pass rate on this round's tasks", "fraction passed",
     [("pass rate", lambda m: m.new_task_pass_rate)]),
    ("valid_task_rate", "Valid generated tasks", "fraction valid",
     [("valid / proposed", lambda m: m.valid_task_rate)]),
    ("mean_difficulty", "Mean task difficulty", "1 - pass rate",
     [("difficulty", lambda m: m.mean_difficulty)]),
    ("candidate_diversity", "Candidate diversity", "distinct / all",
     [("diversity", lambda m: m.candidate_diversity)]),
    ("pairs", "Preference pairs built", "pairs", [("pairs", lambda m: m.pairs)]),
    ("tokens", "Tokens generated", "tokens",
     [("generator", lambda m: m.tokens_generator), ("solver", lambda m: m.tokens_solver)]),
    ("sandbox_cpu_s", "Sandbox CPU time", "CPU-seconds",
     [("sandbox", lambda m: m.sandbox_cpu_s)]),
)


def render_plots(history: Sequence[RoundMetrics], out_dir: str | Path) -> list[Path]:
    """Write one PNG per metric family plus stage timings; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ordered = sorted(history, key=lambda m: m.round)
    written = [_plot(out / f"{stem}.png", title, ylabel, series, ordered)
               for stem, title, ylabel, series in PLOTS]
    written.append(_plot(out / "stage_timings.png", "Stage timings", "seconds",
                         _stage_series(ordered), ordered))
    return written


def _stage_series(history: Sequence[RoundMetrics]) -> list[tuple[str, Getter]]:
    stages = list(dict.fromkeys(name for m in history for name, _ in m.stage_s))

    def getter(stage: str) -> Getter:
        return lambda m: dict(m.stage_s).get(stage)

    return [(stage, getter(stage)) for stage in stages] + [("round total", lambda m: m.wall_s)]


def _plot(path: Path, title: str, ylabel: str, series: list[tuple[str, Getter]],
          history: Sequence[RoundMetrics]) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6, 3.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for label, get in series:
        points = [(m.round, get(m)) for m in history]
        points = [(r, v) for r, v in points if v is not None]  # e.g. pass@1 not measured
        if points:
            ax.plot(*zip(*points), marker="o", label=label)
    ax.set_title(title)
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize="small")
    fig.subplots_adjust(left=0.15, right=0.97, bottom=0.15, top=0.9)  # tight_layout: 2x slower
    tmp = path.with_name(path.name + ".tmp")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)
    return path
