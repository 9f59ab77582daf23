"""Charts of per-round metrics: the PNG files in run_dir/plots and the run report's SVGs.

`round_charts(rows)` turns metrics rows (RoundMetrics in JSON form: a line of metrics.jsonl, or
`records.to_dict`) into `Chart` specs, one per metric family; `render_plots` writes each as a PNG
and the report (report.py) inlines `render(chart, "svg")`. Rows are read field by field: a field
that is absent, null or malformed leaves its points out, so a file written by an older or newer
version still draws. Optional fields drawn when present: `validation_tiers` ([tier, pass@1]
pairs), `difficulty_band` ([low, high]), `generator_difficulty`, `task_diversity`,
`topic_tasks`.

Uses matplotlib's object API with the Agg canvas and never imports pyplot, so no GUI backend and
no global figure state are involved (safe in a Ray driver and in threads). Each PNG is written to
a temporary name and renamed, so a reader never sees half a file.
Non-goals: interactive plots, cross-run comparison (W&B does that).
"""

from __future__ import annotations

import dataclasses
import io
import math
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spade_ray.records import RoundMetrics, UpdateStatus, to_dict

Row = Mapping[str, Any]
Getter = Callable[[Row], float | None]

# The pass-rate band the generator aims its tasks at (a task every candidate passes, or none
# does, teaches nothing); drawn when a round's metrics do not state their own `difficulty_band`.
DEFAULT_DIFFICULTY_BAND = (0.3, 0.7)
# The gate chart's categorical axis, bottom to top, and each decision's colour.
UPDATE_COLORS = {UpdateStatus.NONE: "tab:gray", UpdateStatus.BUFFERING: "tab:blue",
                 UpdateStatus.REJECTED: "tab:red", UpdateStatus.ACCEPTED: "tab:green"}
UPDATE_LEVELS = tuple(status.value for status in UPDATE_COLORS)


@dataclasses.dataclass(frozen=True)
class Series:
    label: str
    points: tuple[tuple[int, float], ...]  # (round, value), rounds ascending
    color: str | None = None  # None: the next colour of matplotlib's cycle


@dataclasses.dataclass(frozen=True)
class Chart:
    """One figure: its series over rounds and how to draw them."""

    stem: str  # the PNG's file stem; the report's anchor
    title: str
    ylabel: str
    series: tuple[Series, ...]
    band: tuple[float, float] | None = None  # a shaded target range of y
    stacked_bars: bool = False  # bars stacked per round (counts) instead of lines
    levels: tuple[str, ...] = ()  # categorical y axis: values are indexes into these labels

    @property
    def empty(self) -> bool:
        return not any(s.points for s in self.series)


def round_charts(rows: Sequence[Row]) -> list[Chart]:
    """Every chart of the run, in report order (see the module docstring for what rows hold)."""
    rows = in_round_order(rows)
    line = _line_chart
    return [
        line(rows, "validation_pass_at_1", "Validation pass@1 (fixed set)", "pass@1",
             [("pass@1", _field("validation_pass_at_1"))], by_label="validation_tiers"),
        line(rows, "valid_task_rate", "Admitted tasks", "admitted / proposed",
             [("admitted / proposed", _admitted_rate)]),
        dataclasses.replace(
            line(rows, "new_task_pass_rate", "Pass rate on this round's tasks", "fraction passed",
                 [("pass rate", _field("new_task_pass_rate"))]),
            band=_difficulty_band(rows)),
        line(rows, "mean_difficulty", "Mean task difficulty", "1 - pass rate",
             [("all tasks", _field("mean_difficulty")),
              ("generated tasks", _field("generator_difficulty"))]),
        line(rows, "diversity", "Diversity", "distinct / all",
             [("candidates", _field("candidate_diversity")), ("tasks", _field("task_diversity"))]),
        line(rows, "pairs", "Preference pairs per role", "pairs",
             [("solver", _solver_pairs), ("generator", _field("generator_pairs"))]),
        line(rows, "learner_loss", "Learner loss", "loss", [("loss", _field("learner_loss"))]),
        _gate_chart(rows),
        line(rows, "stage_timings", "Time per round", "seconds",
             [("round total", _field("wall_s"))], by_label="stage_s"),
        line(rows, "tokens", "Tokens generated", "tokens",
             [("generator", _field("tokens_generator")), ("solver", _field("tokens_solver"))]),
        line(rows, "sandbox_cpu_s", "Sandbox CPU time", "CPU-seconds",
             [("sandbox", _field("sandbox_cpu_s"))]),
        _bar_chart(rows, "family_tasks", "Admitted tasks per family", "tasks"),
        _bar_chart(rows, "topic_tasks", "Admitted tasks per topic", "tasks"),
    ]


def render_plots(history: Sequence[RoundMetrics], out_dir: str | Path) -> list[Path]:
    """Write one PNG per chart of `round_charts`; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for chart in round_charts([to_dict(m) for m in history]):
        path = out / f"{chart.stem}.png"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(render(chart, "png"))
        os.replace(tmp, path)
        written.append(path)
    return written


def render(chart: Chart, fmt: str) -> bytes:
    """The chart as an image file's bytes; `fmt` is a matplotlib format ("png", "svg")."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(6, 3.5), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    if chart.band is not None:
        low, high = chart.band
        ax.axhspan(low, high, color="tab:green", alpha=0.15, label=f"target {low:g}-{high:g}")
    if chart.stacked_bars:
        _draw_stacked_bars(ax, chart.series)
    else:
        for s in chart.series:
            if s.points:
                ax.plot(*zip(*s.points), marker="o", label=s.label, color=s.color,
                        linestyle="none" if chart.levels else "-")
    if chart.levels:
        ax.set_yticks(range(len(chart.levels)), chart.levels)
        ax.set_ylim(-0.5, len(chart.levels) - 0.5)
    ax.set_title(chart.title)
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if chart.stacked_bars:  # counts
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(chart.ylabel)
    ax.grid(alpha=0.3)
    if len(ax.get_legend_handles_labels()[1]) > 1:
        ax.legend(fontsize="small")
    left = 0.2 if chart.levels else 0.15  # room for the level names
    fig.subplots_adjust(left=left, right=0.97, bottom=0.15, top=0.9)  # tight_layout: 2x slower
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()


def in_round_order(rows: Sequence[Row]) -> list[Row]:
    """The rows that have an integer round, sorted by it."""
    return sorted((r for r in rows if isinstance(r.get("round"), int)), key=lambda r: r["round"])


def _draw_stacked_bars(ax: Any, series: Sequence[Series]) -> None:
    bottom: dict[int, float] = {}
    for s in series:
        if not s.points:
            continue
        rounds, heights = zip(*s.points)
        ax.bar(rounds, heights, width=0.6, label=s.label,
               bottom=[bottom.get(r, 0.0) for r in rounds])
        for r, h in s.points:
            bottom[r] = bottom.get(r, 0.0) + h


def _line_chart(rows: Sequence[Row], stem: str, title: str, ylabel: str,
                getters: Sequence[tuple[str, Getter]], by_label: str | None = None) -> Chart:
    """Series from getters, then (with `by_label`) one per label of a [label, value] list field."""
    series = [Series(label, _points(rows, get)) for label, get in getters]
    if by_label is not None:
        series += _labelled_series(rows, by_label)
    return Chart(stem, title, ylabel, tuple(series))


def _bar_chart(rows: Sequence[Row], key: str, title: str, ylabel: str) -> Chart:
    return Chart(key, title, ylabel, tuple(_labelled_series(rows, key)), stacked_bars=True)


def _gate_chart(rows: Sequence[Row]) -> Chart:
    series = []
    for level, (status, color) in enumerate(UPDATE_COLORS.items()):
        points = tuple((r["round"], float(level)) for r in rows if r.get("update") == status)
        series.append(Series(status.value, points, color))
    return Chart("gate", "Learner update per round", "update", tuple(series),
                 levels=UPDATE_LEVELS)


def _points(rows: Sequence[Row], get: Getter) -> tuple[tuple[int, float], ...]:
    values = ((r["round"], get(r)) for r in rows)
    return tuple((rnd, v) for rnd, v in values if v is not None)  # e.g. pass@1 not measured


def _labelled_series(rows: Sequence[Row], key: str) -> list[Series]:
    """One series per label of a field holding [label, number] pairs, labels in first-seen order."""
    per_row = [(r["round"], labelled(r.get(key))) for r in rows]
    labels = dict.fromkeys(label for _, pairs in per_row for label in pairs)
    return [Series(label, tuple((rnd, pairs[label]) for rnd, pairs in per_row if label in pairs))
            for label in labels]


def labelled(value: Any) -> dict[str, float]:
    """A [[label, number], ...] field as a dict; malformed entries are left out."""
    if not isinstance(value, (list, tuple)):
        return {}
    pairs = (item for item in value if isinstance(item, (list, tuple)) and len(item) == 2)
    return {str(label): n for label, n in ((p[0], number(p[1])) for p in pairs) if n is not None}


def number(value: Any) -> float | None:
    """A finite int or float as float, else None (bools, strings, nulls, NaN are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _field(key: str) -> Getter:
    return lambda row: number(row.get(key))


def _admitted_rate(row: Row) -> float | None:
    valid, proposed = number(row.get("tasks_valid")), number(row.get("tasks_proposed"))
    return valid / proposed if valid is not None and proposed else None


def _solver_pairs(row: Row) -> float | None:
    pairs = number(row.get("pairs"))
    # a file from before generator pairs existed has only solver pairs
    return None if pairs is None else pairs - (number(row.get("generator_pairs")) or 0.0)


def _difficulty_band(rows: Sequence[Row]) -> tuple[float, float]:
    """The latest band a round states, else the default."""
    for row in reversed(rows):
        band = row.get("difficulty_band")
        if isinstance(band, (list, tuple)) and len(band) == 2:
            low, high = number(band[0]), number(band[1])
            if low is not None and high is not None and low <= high:
                return low, high
    return DEFAULT_DIFFICULTY_BAND
