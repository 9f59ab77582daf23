"""Per-round metrics: run_dir/metrics.jsonl, W&B (offline by default), PNG plots, summary table.

`MetricsSink.log(m)` appends `to_dict(m)` as one JSON line (fsynced), logs the same numbers to
W&B with `step=m.round` (the report's series: plots.round_charts), and re-renders run_dir/plots/;
`close` logs the report's sample tasks (report.sample_tasks) as a W&B table. W&B runs offline
unless the caller passes wandb_mode="online" (the user's config); offline files land in
run_dir/wandb and can be uploaded later with `wandb sync run_dir/wandb/offline-run-*`. The W&B
run id is derived from the run id, so a resumed run continues the same W&B run.

Resume: call `log` after `TraceStore.complete_round`, so the file can lag the trace but never lead
it; on resume, replay `TraceStore.round_metrics()` into `log` - rounds already in the file with
equal content are skipped, missing ones are appended. A line half-written by a killed process is
cut off when the sink opens. When two lines carry the same round, the last one wins.
`load_metric_rows` reads the file as plain JSON rows, for readers that must take any version's
fields (the run report).

Never fatal: if wandb is missing or fails, or a plot cannot be drawn, the sink warns once and goes
on with the rest. Non-goals: system metrics, cross-run dashboards, model checkpoints in W&B.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from spade_ray.records import RoundMetrics, from_dict, to_dict
from spade_ray.tracking.plots import render_plots
from spade_ray.tracking.query import format_table

log = logging.getLogger(__name__)

WANDB_MODES = ("offline", "online", "disabled")

# Rejection reasons whose suffix is a name the generator wrote: tasks/static.py's
# `unbound:<free name>` and `forbidden:<module, attribute, def or dunder name>` (its few fixed
# suffixes, `forbidden:type` or `forbidden:global`, are counted under `forbidden` too), and
# tasks/guesses.py's guesses named after one of the task's parameters,
# `trivial_passes:echo_<param>` and `trivial_passes:item_<param>`. Every other reason is one of
# our fixed labels (`module_code`, `trivial_passes:lookup`, `signature:default`,
# `validation_twin:<validation problem id>`, `stage_failed:<stage>:<exception class>`) and is
# counted as it is.
NAMED_KINDS = frozenset({"unbound", "forbidden"})
PARAMETER_GUESSES = ("echo_", "item_")


class MetricsSink:
    """Where round metrics go: a JSON-lines file, W&B and plots (see the module docstring)."""

    def __init__(self, run_dir: str | Path, run_id: str, config: dict[str, Any],
                 wandb_mode: str = "offline", wandb_project: str = "spade-ray",
                 wandb_group: str | None = None, wandb_tags: tuple[str, ...] = ()) -> None:
        if wandb_mode not in WANDB_MODES:
            raise ValueError(f"wandb_mode={wandb_mode!r}; choose one of {WANDB_MODES}")
        self.run_dir = Path(run_dir)
        self.run_id = run_id
        self.path = self.run_dir / "metrics.jsonl"
        self.plots_dir = self.run_dir / "plots"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._warned: set[str] = set()
        self._history = {m.round: m for m in load_metrics(self.path, repair=True)}
        self._wandb = None
        if wandb_mode != "disabled":
            self._wandb = self._start_wandb(config, wandb_mode, wandb_project, wandb_group,
                                            wandb_tags)
        # The id W&B actually gave the run (None without W&B); equal across resumes.
        self.wandb_id: str | None = getattr(self._wandb, "id", None)

    @property
    def history(self) -> list[RoundMetrics]:
        return [self._history[r] for r in sorted(self._history)]

    def log(self, metrics: RoundMetrics) -> bool:
        """Record one round; False if this exact round was already logged (a resume replay)."""
        if metrics.run_id != self.run_id:
            raise ValueError(f"metrics of run {metrics.run_id!r} sent to the sink of run "
                             f"{self.run_id!r}")
        if self._history.get(metrics.round) == metrics:
            return False
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(to_dict(metrics), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._history[metrics.round] = metrics
        if self._wandb is not None:
            try:
                self._wandb.log(wandb_payload(metrics), step=metrics.round)
            except Exception as e:  # W&B is a mirror of metrics.jsonl, never worth a crash
                self._warn_once("wandb", f"W&B logging failed ({e!r}); W&B is off for the rest "
                                f"of this run, metrics still go to {self.path}")
                self._wandb = None
        try:
            render_plots(self.history, self.plots_dir)
        except Exception as e:  # plots are a view of metrics.jsonl; losing them loses no data
            self._warn_once("plots", f"could not draw plots in {self.plots_dir}: {e!r}")
        return True

    def close(self) -> None:
        if self._wandb is not None:
            self._log_sample_tasks()
            try:
                self._wandb.finish()
            except Exception as e:
                self._warn_once("wandb", f"W&B finish failed: {e!r}")
            self._wandb = None

    def __enter__(self) -> MetricsSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start_wandb(self, config: dict[str, Any], mode: str, project: str,
                     group: str | None, tags: tuple[str, ...]) -> Any:
        try:
            import wandb
        except ImportError:
            self._warn_once("wandb", "wandb is not installed; metrics go to metrics.jsonl and "
                            "plots only (pip install wandb to mirror them to W&B)")
            return None
        try:
            return wandb.init(
                project=project, id=wandb_run_id(self.run_id), name=self.run_id,
                resume="allow", dir=str(self.run_dir), mode=mode, config=config,
                group=group, tags=list(tags) or None,
                # create_new: never hand back (or finish) another sink's run in this process.
                reinit="create_new",
                # console="off": W&B must not wrap the driver's stdout/stderr.
                settings=wandb.Settings(console="off", silent=True))
        except Exception as e:
            self._warn_once("wandb", f"W&B init failed in {mode} mode ({e!r}); metrics go to "
                            "metrics.jsonl and plots only")
            return None

    def _log_sample_tasks(self) -> None:
        """The run report's sample tasks (run_dir/trace.sqlite) as a W&B table."""
        trace = self.run_dir / "trace.sqlite"
        if not trace.is_file():
            return
        try:
            import wandb

            # report.py imports this module (metrics.jsonl readers), hence the late import
            from spade_ray.tracking.report import sample_table, sample_tasks

            columns, rows = sample_table(sample_tasks(trace, self.run_id))
            if rows:
                self._wandb.log({"samples/tasks": wandb.Table(columns=columns, data=rows)})
        except Exception as e:  # like every W&B call: a mirror, never worth a crash
            self._warn_once("wandb-samples", f"could not log sample tasks to W&B: {e!r}")

    def _warn_once(self, topic: str, message: str) -> None:
        if topic not in self._warned:
            self._warned.add(topic)
            log.warning(message)


def wandb_run_id(run_id: str) -> str:
    """A W&B-safe id (letters, digits, '-', '_'; at most 64 chars) that is stable per run id."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "-", run_id)
    if safe == run_id and len(safe) <= 64:
        return safe
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:8]  # keeps distinct ids distinct
    return f"{safe[:55]}-{digest}"


def rejection_label(reason: str) -> str:
    """The label a rejection reason is counted under (RoundMetrics, W&B keys, the round line,
    diagnose's counts): the reason without a name the model wrote, so the model cannot choose
    how many metric keys a run has or what they are called (red-team pass 15, F8: 201 outputs
    with 201 free names gave 201 `rejections/unbound:<name>` W&B keys). The trace's rows keep
    the whole reason."""
    kind, _, rest = reason.partition(":")
    if kind in NAMED_KINDS:
        return kind
    if kind == "trivial_passes" and rest.startswith(PARAMETER_GUESSES):
        return f"{kind}:{rest.split('_', 1)[0]}"
    return reason


def wandb_payload(m: RoundMetrics) -> dict[str, float]:
    """RoundMetrics as W&B keys, grouped by panel prefix."""
    payload: dict[str, float] = {
        "round": m.round, "generator_version": m.generator_version,
        "solver_version": m.solver_version,
        "tasks/proposed": m.tasks_proposed, "tasks/valid": m.tasks_valid,
        "tasks/valid_rate": m.valid_task_rate,
        "tasks/new_task_candidates": m.new_task_candidates,
        "tasks/mean_difficulty": m.mean_difficulty, "pairs": m.pairs,
        "pairs/solver": m.pairs - m.generator_pairs, "pairs/generator": m.generator_pairs,
        "candidates/diversity": m.candidate_diversity, "tokens/generator": m.tokens_generator,
        "tokens/solver": m.tokens_solver, "sandbox/cpu_s": m.sandbox_cpu_s,
        "time/round_s": m.wall_s,
    }
    if m.new_task_pass_rate is not None:
        payload["tasks/new_task_pass_rate"] = m.new_task_pass_rate
    if m.validation_pass_at_1 is not None:
        payload["validation/pass_at_1"] = m.validation_pass_at_1
        payload["validation/problems"] = m.validation_problems
    if m.update != "none":
        payload["learner/step"] = m.learner_step
        payload["learner/accepted"] = float(m.update == "accepted")
        payload["learner/rejected"] = float(m.update == "rejected")
        payload["learner/buffering"] = float(m.update == "buffering")
        payload.update({f"learner/rejected_by/{signal}": 1.0 for signal in m.rejected_by})
        payload.update({f"learner/{name}": value for name, value in m.learner_stats})
        for key, value in (("learner/loss", m.learner_loss),
                           ("learner/gate_pass_at_1", m.gate_pass_at_1),
                           ("learner/gate_heldout_logp", m.gate_heldout_logp)):
            if value is not None:
                payload[key] = value
    payload.update({f"rejections/{reason}": n for reason, n in m.rejection_reasons})
    payload.update({f"time/{stage}_s": s for stage, s in m.stage_s})
    payload.update({f"tasks/family/{family}": n for family, n in m.family_tasks})
    payload.update(_control_payload(m))
    return payload


def _control_payload(m: RoundMetrics) -> dict[str, float]:
    """The co-evolution control's figures (records/rounds.py), each only when the round has it."""
    payload = {f"validation/{tier}/pass_at_1": p for tier, p in m.validation_tiers}
    payload.update({f"tasks/topic/{topic}": n for topic, n in m.topic_tasks})
    if len(m.difficulty_band) == 2:
        payload["tasks/difficulty_band_low"], payload["tasks/difficulty_band_high"] = (
            m.difficulty_band)
        payload["tasks/control_level"] = m.control_level
    for key, value in (("tasks/diversity", m.task_diversity),
                       ("tasks/generator_difficulty", m.generator_difficulty),
                       ("tasks/solver_hints", m.solver_hints),
                       ("collapse/rollback_version", m.generator_rollback)):
        if value is not None:
            payload[key] = value
    payload["collapse/alarm"] = float(bool(m.collapse_alarm))
    if m.warm_start is not None:  # round 0 of a warm-started run
        w = m.warm_start
        payload["warm_start/accepted"] = float(w.update == "accepted")
        payload.update({f"warm_start/{key}": value for key, value in (
            ("steps", w.steps), ("loss", w.loss), ("pass_at_1", w.pass_at_1_after),
            ("heldout_logp", w.heldout_logp_after), ("wall_s", w.wall_s)) if value is not None})
    return payload


def load_metrics(path: str | Path, repair: bool = False) -> list[RoundMetrics]:
    """Read metrics.jsonl (last line per round wins). With `repair`, cut a torn last line."""
    by_round: dict[int, RoundMetrics] = {}
    for number, data in _json_lines(Path(path), repair):
        try:
            metrics = from_dict(RoundMetrics, data)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{path}:{number} is not a RoundMetrics line ({e}); fix or move "
                             "the file") from e
        by_round[metrics.round] = metrics
    return [by_round[r] for r in sorted(by_round)]


def load_metric_rows(path: str | Path) -> list[dict[str, Any]]:
    """metrics.jsonl as JSON objects, fields unchecked (last line per round wins), for readers
    that must cope with files of other versions (the run report). Lines without an integer
    `round` are skipped; a line that is not JSON is an error."""
    by_round: dict[int, dict[str, Any]] = {}
    for number, data in _json_lines(Path(path), repair=False):
        if isinstance(data, dict) and isinstance(data.get("round"), int):
            by_round[data["round"]] = data
        else:
            log.warning("%s:%d has no integer round; skipped", path, number)
    return [by_round[r] for r in sorted(by_round)]


def _json_lines(path: Path, repair: bool) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) per non-blank line; a torn last line is dropped (and cut from
    the file with `repair`)."""
    if not path.exists():
        return
    raw = path.read_bytes()
    body, _, tail = raw.rpartition(b"\n")
    if tail:  # no final newline: a write was cut short by a crash
        log.warning("%s: dropping a half-written last line (%d bytes)", path, len(tail))
        if repair:
            with open(path, "r+b") as f:
                f.truncate(len(raw) - len(tail))
                os.fsync(f.fileno())
    for number, line in enumerate(body.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as e:
            raise ValueError(f"{path}:{number} is not a JSON line ({e}); fix or move the "
                             "file") from e


def summary_table(metrics_list: Sequence[RoundMetrics]) -> str:
    """The end-of-run table: one row per round, then the most common rejection reasons."""
    columns = ["round", "gen_v", "sol_v", "val_pass@1", "new_pass", "difficulty", "valid_rate",
               "valid/proposed", "pairs", "diversity", "tokens", "cpu_s", "wall_s"]
    rows = [(m.round, m.generator_version, m.solver_version, m.validation_pass_at_1,
             m.new_task_pass_rate, m.mean_difficulty, m.valid_task_rate,
             f"{m.tasks_valid}/{m.tasks_proposed}", m.pairs, m.candidate_diversity,
             m.tokens_generator + m.tokens_solver, m.sandbox_cpu_s, m.wall_s)
            for m in sorted(metrics_list, key=lambda m: m.round)]
    text = format_table(rows, columns)
    reasons: Counter[str] = Counter()
    for m in metrics_list:
        reasons.update(dict(m.rejection_reasons))
    if reasons:
        top = ", ".join(f"{reason} x{n}" for reason, n in reasons.most_common(5))
        text += f"\nrejections (all rounds): {top}"
    return text
