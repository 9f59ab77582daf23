"""A self-contained HTML report of one run: `write_report(run_dir)` writes run_dir/report.html.

Inputs: run_dir/metrics.jsonl, read as JSON rows (`load_metric_rows`), not as RoundMetrics, so a
field this version does not know, or one it expects and an older file lacks, never breaks the
page: each section shows what the rows have and says "none recorded" otherwise; and
run_dir/trace.sqlite, read-only through query.py, for a few sample tasks.

The page: a header (run id, rounds, model versions); the round curves, gate decisions and cost
per round, drawn by the same `plots.round_charts` specs as run_dir/plots but as SVG images inlined
as data: URIs; the collapse events; the task family and topic mix per round; sample tasks (admitted
generated tasks with their reference and their best and worst candidate). Every text from the run
is HTML-escaped, and the page's Content-Security-Policy allows no script and no network fetch, so
it opens offline and a task's text can never run in the reader's browser. Characters that escaping
leaves alone but that hide or reorder what the reader sees (bidi and zero-width controls, C0 / C1
controls but newline and tab) are shown as ⟨U+XXXX⟩ markers, so the code on the page reads as the
code that ran.
Non-goals: interactivity, cross-run comparison (W&B does that), serving the page.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import html
import logging
import os
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from spade_ray.tracking.metrics import load_metric_rows
from spade_ray.tracking.plots import (
    Chart,
    in_round_order,
    labelled,
    number,
    render,
    round_charts,
)
from spade_ray.tracking.query import list_candidates, list_tasks, run_sql, schema_note

Row = Mapping[str, Any]

SAMPLE_TASKS = 6  # enough to see what the generator writes; each shows three programs
CURVES = ("validation_pass_at_1", "valid_task_rate", "new_task_pass_rate", "mean_difficulty",
          "diversity", "pairs", "learner_loss")
COST = ("stage_timings", "tokens", "sandbox_cpu_s")
MIX = ("family_tasks", "topic_tasks")

# No script, no fetch: charts are data: images, the style is inline.
_CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"
_STYLE = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1260px; color: #222; }
h2 { border-bottom: 1px solid #ccc; margin-top: 1.6em; }
.charts { display: flex; flex-wrap: wrap; gap: 8px; }
.charts figure { margin: 0; }
img.chart { width: 600px; max-width: 100%; height: auto; border: 1px solid #eee; }
table { border-collapse: collapse; margin: 0.5em 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
pre { background: #f6f6f6; padding: 6px; white-space: pre-wrap; overflow-wrap: anywhere;
      overflow: auto; max-height: 22em; margin: 0.3em 0; }
.task { border: 1px solid #ddd; padding: 0 1em 0.6em; margin: 1em 0; }
.pair { display: flex; gap: 1em; } .pair > div { flex: 1; min-width: 0; }
.empty { color: #777; font-style: italic; }
.ctl { color: #b00000; background: #fde0e0; font-size: 0.85em; }
"""


@dataclasses.dataclass(frozen=True)
class SampleCandidate:
    candidate_id: str
    code: str
    score: float
    status: str
    tests_passed: int | None
    tests_total: int | None


@dataclasses.dataclass(frozen=True)
class SampleTask:
    """An admitted generated task, in the round it was admitted, and how the solver fared."""

    round: int
    task_id: str
    family: str
    topic: str
    description: str
    reference: str
    candidates: int  # scored candidates in that round
    pass_rate: float | None
    best: SampleCandidate | None  # the highest score (None: no candidate was scored)
    worst: SampleCandidate | None  # the lowest score (None: at most one candidate)


def write_report(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Write the run's report (default run_dir/report.html) and return its path."""
    run_dir = Path(run_dir)
    metrics, trace = run_dir / "metrics.jsonl", run_dir / "trace.sqlite"
    if not metrics.is_file() and not trace.is_file():
        raise FileNotFoundError(f"{run_dir} has neither metrics.jsonl nor trace.sqlite; pass a "
                                "run directory (e.g. runs/cpu_gemma)")
    rows = load_metric_rows(metrics)
    run_ids = list(dict.fromkeys(str(r["run_id"]) for r in rows if "run_id" in r))
    try:
        trace_note = schema_note(trace)
        traced = [r for (r,) in run_sql(trace, "SELECT DISTINCT run_id FROM rounds")[0]]
        samples = sample_tasks(trace, run_ids[0] if run_ids else None)
    except (OSError, sqlite3.Error, ValueError) as e:  # no trace, or one this code cannot read
        samples, trace_note = [], f"could not read {trace}: {e}"
        if trace.exists():  # a damaged trace said so only inside the page (bad-input audit s26)
            logging.getLogger(__name__).warning("%s; the report has no sample tasks", trace_note)
    else:
        if run_ids and traced and not set(run_ids) & set(traced):  # bad-input audit s26, F11
            mixed = (f"metrics.jsonl holds run(s) {run_ids}, the trace holds {traced}: the "
                     "page shows the metrics' run, without sample tasks")
            logging.getLogger(__name__).warning("%s", mixed)
            trace_note = "; ".join(filter(None, (trace_note, mixed)))
    page = render_report(rows, samples, trace_note, title=" + ".join(run_ids) or run_dir.name)
    path = _report_path(run_dir, out)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(page, encoding="utf-8")
        os.replace(tmp, path)  # a reader never sees half a page
    except OSError as e:
        with contextlib.suppress(OSError):  # never leave half a page beside the target
            tmp.unlink(missing_ok=True)
        hint = "; pass --out FILE somewhere writable" if out is None else ""
        raise OSError(f"cannot write the report to {path}: {e.strerror or e}{hint}") from e
    return path


def _report_path(run_dir: Path, out: str | Path | None) -> Path:
    """Where the page goes: run_dir/report.html, `out`, or out/report.html for a directory."""
    if out is None:
        return run_dir / "report.html"
    path = Path(out)
    if path.is_dir():
        return path / "report.html"
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot write the report to {path}: no directory "
                                f"{path.parent} (create it, or give --out a file in one)")
    return path


def render_report(rows: Sequence[Row], samples: Sequence[SampleTask], trace_note: str = "",
                  title: str = "run") -> str:
    """The whole page as text (see the module docstring)."""
    rows = in_round_order(rows)
    charts = {chart.stem: chart for chart in round_charts(rows)}
    body = [
        _header(rows, title),
        _section("curves", "Round curves", _charts(charts, CURVES)),
        _section("gate", "Gate decisions", _charts(charts, ("gate",)) + _gate_table(rows)),
        _section("cost", "Cost per round", _charts(charts, COST)),
        _section("collapse", "Collapse events", _collapse_table(rows)),
        _section("mix", "Task families and topics per round",
                 _charts(charts, MIX) + _mix_table(rows)),
        _section("samples", "Sample tasks", _samples(samples, trace_note)),
    ]
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
            f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">\n'
            f"<title>spade-ray report: {_e_plain(title)}</title><style>{_STYLE}</style></head>\n"
            f"<body>\n{''.join(body)}</body></html>\n")


def sample_tasks(db: str | Path, run_id: str | None = None,
                 limit: int = SAMPLE_TASKS) -> list[SampleTask]:
    """Up to `limit` admitted generated tasks, each in the round that admitted it, spread evenly
    over the run; only tasks with scored candidates, unless no task has any."""
    rows, columns = list_tasks(db, valid=True, run_id=run_id)
    first: dict[str, dict[str, Any]] = {}  # a replayed task has a row in each later round too
    for row in rows:
        task = dict(zip(columns, row))
        if task["source"] == "generated":
            first.setdefault(task["task_id"], task)
    pool = [t for t in first.values() if t["candidates"]] or list(first.values())
    if not pool:
        return []
    picks = sorted({round(i * (len(pool) - 1) / max(limit - 1, 1)) for i in range(limit)})
    return [_sample(db, pool[i]) for i in picks if i < len(pool)]


def sample_table(samples: Iterable[SampleTask]) -> tuple[list[str], list[list[Any]]]:
    """Sample tasks as (columns, rows) of flat values, for a W&B table."""
    columns = ["round", "task_id", "family", "topic", "pass_rate", "candidates", "description",
               "reference"] + [f"{which}_{field}" for which in ("best", "worst")
                               for field in ("score", "status", "code")]
    rows = []
    for s in samples:
        ends = [(c.score, c.status, c.code) if c else (None, None, None) for c in (s.best, s.worst)]
        rows.append([s.round, s.task_id, s.family, s.topic, s.pass_rate, s.candidates,
                     s.description, s.reference, *ends[0], *ends[1]])
    return columns, rows


def _sample(db: str | Path, task: dict[str, Any]) -> SampleTask:
    key = (task["run_id"], task["round"])
    found, _ = run_sql(db, "SELECT reference FROM tasks WHERE run_id=? AND round=? AND "
                           "task_id=?", (*key, task["task_id"]))
    rows, columns = list_candidates(db, task["task_id"], run_id=task["run_id"])
    scored = [c for c in (dict(zip(columns, r)) for r in rows)
              if c["round"] == task["round"] and c["value"] is not None]
    scored.sort(key=lambda c: -c["value"])  # stable: the first of equals stays first
    ends = [scored[0], scored[-1]] if len(scored) > 1 else scored
    ids = [c["candidate_id"] for c in ends]
    marks = ", ".join("?" * len(ids))
    codes = dict(run_sql(db, f"SELECT candidate_id, code FROM candidates WHERE run_id=? AND "
                             f"round=? AND candidate_id IN ({marks})", (*key, *ids))[0])
    picked = [SampleCandidate(c["candidate_id"], codes.get(c["candidate_id"], ""), c["value"],
                              c["status"], c["tests_passed"], c["tests_total"]) for c in ends]
    return SampleTask(
        round=task["round"], task_id=task["task_id"], family=task["family"], topic=task["topic"],
        description=task["description"], reference=found[0][0] if found else "",
        candidates=task["candidates"], pass_rate=task["pass_rate"],
        best=picked[0] if picked else None, worst=picked[1] if len(picked) > 1 else None)


def _header(rows: Sequence[Row], title: str) -> str:
    if not rows:
        return f"<header><h1>Run {_e(title)}</h1><p class='empty'>no rounds recorded</p></header>"
    first, last = rows[0], rows[-1]
    facts = [
        ("rounds", f"{len(rows)} ({first['round']}–{last['round']})"),
        ("generator version", _span(first, last, "generator_version")),
        ("solver version", _span(first, last, "solver_version")),
        ("learner steps", _fmt(last.get("learner_step"))),
        ("updates accepted", _fmt(sum(r.get("update") == "accepted" for r in rows))),
        ("wall time", f"{sum(number(r.get('wall_s')) or 0.0 for r in rows) / 60:.1f} min"),
        ("written", datetime.datetime.now().astimezone().isoformat(timespec="seconds")),
    ]
    items = "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    return f"<header><h1>Run {_e(title)}</h1><table>{items}</table></header>\n"


def _span(first: Row, last: Row, key: str) -> str:
    start, end = _fmt(first.get(key)), _fmt(last.get(key))
    return start if start == end else f"{start} → {end}"


def _section(anchor: str, heading: str, content: str) -> str:
    return f'<section id="{anchor}"><h2>{_e(heading)}</h2>\n{content}</section>\n'


def _charts(charts: Mapping[str, Chart], stems: Sequence[str]) -> str:
    figures = []
    for stem in stems:
        chart = charts[stem]
        if chart.empty:
            figures.append(f"<p class='empty'>{_e(chart.title)}: none recorded</p>")
            continue
        svg = base64.b64encode(render(chart, "svg")).decode("ascii")
        figures.append(f'<figure id="chart-{stem}"><img class="chart" '
                       f'alt="{_e_plain(chart.title)}" width="600" height="350" '
                       f'src="data:image/svg+xml;base64,{svg}"></figure>')
    return f"<div class='charts'>{''.join(figures)}</div>\n"


def _gate_table(rows: Sequence[Row]) -> str:
    columns = ["round", "update", "learner step", "loss", "gate pass@1", "gate held-out logp",
               "rejected by"]
    keys = ("round", "update", "learner_step", "learner_loss", "gate_pass_at_1",
            "gate_heldout_logp", "rejected_by")
    return _table(columns, [[r.get(k) for k in keys] for r in rows])


def _collapse_table(rows: Sequence[Row]) -> str:
    events = [[r["round"], r.get("collapse_alarm"), r.get("generator_rollback")] for r in rows
              if r.get("collapse_alarm") or r.get("generator_rollback") is not None]
    return _table(["round", "alarm (evidence)", "generator rolled back to version"], events)


def _mix_table(rows: Sequence[Row]) -> str:
    def counts(value: Any) -> str:
        return ", ".join(f"{label} {n:g}" for label, n in labelled(value).items())

    return _table(["round", "tasks per family", "tasks per topic"],
                  [[r["round"], counts(r.get("family_tasks")), counts(r.get("topic_tasks"))]
                   for r in rows])


def _samples(samples: Sequence[SampleTask], trace_note: str) -> str:
    note = f"<p class='empty'>{_e(trace_note)}</p>\n" if trace_note else ""
    if not samples:
        return note or ("<p class='empty'>none recorded (no admitted generated task in the "
                        "trace)</p>\n")
    return note + "".join(_sample_html(s) for s in samples)


def _sample_html(s: SampleTask) -> str:
    solved = (f"pass rate {_fmt(s.pass_rate)} over {s.candidates} candidates" if s.candidates
              else "no candidate scored")
    ends = [("best candidate", s.best), ("worst candidate", s.worst)]
    programs = [("reference", None, s.reference)] + [
        (name, c, c.code) for name, c in ends if c is not None]
    cells = "".join(f"<div><h4>{_e(name)}{_candidate_facts(c)}</h4><pre><code>{_e(code)}"
                    f"</code></pre></div>" for name, c, code in programs)
    return (f"<article class='task'><h3>round {_e(s.round)} · {_e(s.family)} / {_e(s.topic)} · "
            f"{_e(s.task_id)}</h3><p>{_e(solved)}</p><p>{_e(s.description)}</p>"
            f"<div class='pair'>{cells}</div></article>\n")


def _candidate_facts(c: SampleCandidate | None) -> str:
    if c is None:
        return ""
    tests = f", {c.tests_passed}/{c.tests_total} tests" if c.tests_total is not None else ""
    return f": score {_e(_fmt(c.score))}, {_e(c.status)}{_e(tests)}"


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    if not rows:
        return "<p class='empty'>none recorded</p>\n"
    head = "".join(f"<th>{_e(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{_e(_fmt(v))}</td>" for v in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>\n"


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return "; ".join(_fmt(v) for v in value)
    return str(value)


# Kept as they are: the layout of code in <pre>, and nothing a browser hides or reorders.
_LAYOUT = frozenset("\n\t")


def _e(value: Any) -> str:
    """`value` as HTML element content: escaped, and each character `str.isprintable` refuses
    (newline and tab aside) shown as a red ⟨U+XXXX⟩ marker. html.escape leaves those alone, and
    bidi overrides (U+202A-202E, U+2066-2069) make the page show code in another order than the
    one that ran ("Trojan Source"), zero-width ones (U+200B-200F, U+FEFF) hide characters:
    red-team pass 15, F7."""
    return _marked(html.escape(str(value), quote=True), '<span class="ctl">⟨U+{:04X}⟩</span>')


def _e_plain(value: Any) -> str:
    """`_e` for an attribute value or the <title>, where markup is not parsed: bare markers."""
    return _marked(html.escape(str(value), quote=True), "⟨U+{:04X}⟩")


def _marked(text: str, marker: str) -> str:
    if text.isprintable():  # the common case, at C speed
        return text
    return "".join(ch if ch.isprintable() or ch in _LAYOUT else marker.format(ord(ch))
                   for ch in text)
