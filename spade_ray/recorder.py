"""`Recorder`: everything a round writes down, in one place: the trace, the tally, the metrics.

Stages return values; the loop hands each to the round's `RoundRecord`, which writes its rows to
the trace store (stamped with the round and the weights versions that served it), appends the
round's pairs to pairs/round_NNN.jsonl (crash-safe, as they are built) and adds its figures to
the round's tally, from which `metrics()` makes the RoundMetrics. `Recorder.complete` marks the
round done (trace + resume state in one transaction), logs its metrics and prints its line.

Resume: a round's rows count only once the round is completed (TraceStore.complete_round holds
the RoundState); rows of a round that was killed are discarded and the round runs again.
"""

from __future__ import annotations

import collections
import dataclasses
import shutil
from collections.abc import Sequence
from pathlib import Path

from spade_ray.preferences import append_jsonl, read_jsonl, save_dataset
from spade_ray.records import (
    CheckResult,
    CompletionGroup,
    ExecStatus,
    LearnOutcome,
    PreferencePair,
    RoundMetrics,
    RoundState,
    Task,
    TaskSource,
)
from spade_ray.rollout.sampling import TokenMeter
from spade_ray.stages import CapReached, GeneratedChunk, GeneratorRewards, Scored, Solutions
from spade_ray.tasks.control import task_diversity
from spade_ray.tracking import MetricsSink, Progress, TraceStore, Versions
from spade_ray.tracking.metrics import rejection_label


class Recorder:
    """The run's trace store, metrics sink and pairs directory."""

    def __init__(self, run_id: str, run_dir: Path, store: TraceStore, sink: MetricsSink) -> None:
        self.run_id, self.run_dir, self.store, self.sink = run_id, run_dir, store, sink

    def resume(self, rounds: int) -> tuple[int, RoundState | None]:
        """The first round still to run and the state the last completed one left (None for a
        new run). Rows of an unfinished round are discarded; completed rounds' metrics are
        logged again (a kill between the trace and the metrics file loses nothing; logging a
        round twice is a no-op)."""
        last = self.store.last_completed_round()
        start = 0 if last is None else last + 1
        if start < rounds:
            dropped = self.store.discard_incomplete(start)
            if dropped:
                print(f"resume: discarded {dropped} rows of unfinished round {start}", flush=True)
            self._discard_pairs(start)
        if last is None:
            return start, None
        print(f"resume: rounds 0..{last} already completed in {self.run_dir}", flush=True)
        for metrics in self.store.round_metrics():
            self.sink.log(metrics)
        return start, self.store.round_state(last)

    def _discard_pairs(self, start: int) -> None:
        """Delete the pairs files (and their exported datasets) of rounds from `start` on: the
        pairs of a killed attempt, which the trace discards with its rows, would otherwise stay
        in the dataset TRL loads, and the round's next attempt would append to them (red-team
        pass 11)."""
        for path in (self.run_dir / "pairs").glob("round_*"):
            number = path.name.removeprefix("round_").removesuffix(".jsonl")
            if not number.isdigit() or int(number) < start:
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()

    def start_round(self, index: int, versions: Versions, outputs: int | None = None
                    ) -> RoundRecord:
        """A round's record; `outputs`: the generator outputs it asks for (the progress
        display's total)."""
        totals = {} if outputs is None else {"generated": outputs}
        return RoundRecord(self, index, versions, Progress(index, totals))

    def complete(self, metrics: RoundMetrics, state: RoundState) -> None:
        self.store.complete_round(metrics.round, metrics, state)
        self.sink.log(metrics)
        print(round_line(metrics), flush=True)

    def all_metrics(self) -> list[RoundMetrics]:
        return self.store.round_metrics()


@dataclasses.dataclass
class RoundRecord:
    """One round's writes and its running tally."""

    recorder: Recorder
    index: int
    versions: Versions  # the weights that served the round (an update comes after)
    progress: Progress
    proposed: int = 0
    new_tasks: list[Task] = dataclasses.field(default_factory=list)
    rejections: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    new_task_candidates: int = 0
    new_task_passed: int = 0
    task_pass_rates: dict[str, float] = dataclasses.field(default_factory=dict)
    pairs: list[PreferencePair] = dataclasses.field(default_factory=list)
    pairs_from_generated: int = 0  # solver pairs on tasks the generator wrote (this run)
    generator_pairs: int = 0
    generator_outputs: int = 0  # outputs written with their rewards so far
    generator_rewards: list[float] = dataclasses.field(default_factory=list)
    family_tasks: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    family_pairs: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    groups: list[CompletionGroup] = dataclasses.field(default_factory=list)
    sampled: int = 0
    distinct: int = 0
    sandbox_cpu_s: float = 0.0
    sandbox_reruns: int = 0
    sandbox_errors: int = 0
    hack_suspects: int = 0
    flaky: set[str] = dataclasses.field(default_factory=set)  # stages.control's flaky ids
    two_answers: set[str] = dataclasses.field(default_factory=set)  # Scored.two_answers
    stage_s: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def generated(self, chunk: GeneratedChunk) -> None:
        """A chunk's admitted tasks and its rejection reasons (its outputs are written once
        they have their rewards: `rewarded`)."""
        store = self.recorder.store
        for verdict in chunk.admitted:
            if verdict.task is not None:
                store.record_task(self.index, verdict.task, True, "", self.versions)
        self.timed("generate", chunk.generate_s)
        self.timed("validate_tasks", chunk.validate_s)
        self.sandbox_cpu_s += sum(v.cpu_s for v in chunk.admitted)
        self.proposed += len(chunk.inputs)
        # counted by label (`unbound`, not `unbound:<the model's name>`); the trace's
        # generator_inputs rows keep the whole reason (red-team pass 15, F8)
        self.rejections.update(rejection_label(i.outcome) for i in chunk.inputs
                               if i.outcome != "admitted")
        self.new_tasks += chunk.valid_tasks
        self.progress.advance(generated=len(chunk.inputs))

    def executed(self, solutions: Solutions, checks: Sequence[CheckResult]) -> None:
        """A batch's candidates and their executions, written as soon as they exist: a scorer
        that fails after them loses no sandbox work (red-team pass 11: a failing step after
        execution left a round's candidates nowhere in the trace)."""
        store, v = self.recorder.store, self.versions
        candidates = solutions.candidates
        for task in solutions.tasks:  # replayed seeds and archive too (a new task: a no-op)
            store.record_task(self.index, task, True, "", v)
        store.record_candidates(self.index, candidates, v)
        store.record_executions(self.index, [(c.candidate_id, c.task_id, r)
                                             for c, r in zip(candidates, checks)], v)
        self.timed("solve", solutions.solve_s)
        self.sampled += solutions.sampled
        self.distinct += len(candidates)
        self.sandbox_cpu_s += sum(c.execution.cpu_s for c in checks)
        self.sandbox_reruns += sum(c.execution.attempts > 1 for c in checks)
        self.sandbox_errors += sum(c.execution.status is ExecStatus.SANDBOX_ERROR for c in checks)
        self.hack_suspects += sum(bool(c.suspicion) for c in checks)
        self.progress.advance(solved=len(solutions.tasks), executed=len(candidates))

    def solved(self, solutions: Solutions, scored: Scored, generated: bool) -> None:
        """An executed batch's scores and pairs; `generated`: its tasks are this round's new
        ones (not replayed seeds or archive)."""
        self.recorder.store.record_scores(self.index, scored.scores, self.versions)
        self._add_pairs(scored.pairs, scored.groups)
        self.sandbox_cpu_s += scored.controls.cpu_s
        self.flaky |= scored.controls.flaky
        self.two_answers |= scored.two_answers
        self.task_pass_rates.update(scored.pass_rates)
        families = {t.task_id: t.family for t in solutions.tasks}
        sources = {t.task_id: t.source for t in solutions.tasks}
        self.family_pairs.update(families[p.task_id] for p in scored.pairs)
        self.pairs_from_generated += sum(sources[p.task_id] is TaskSource.GENERATED
                                         for p in scored.pairs)
        if generated:
            self.new_task_candidates += scored.rated
            self.new_task_passed += scored.passed

    def rewarded(self, rewards: GeneratorRewards) -> None:
        """A chunk's generator outputs with their rewards, and the generator's pairs."""
        items = rewards.inputs
        self.recorder.store.record_generator_inputs(self.index, items, self.versions)
        self.generator_outputs += len(items)
        self.generator_rewards += [i.reward for i in items if i.reward is not None]
        self.family_tasks.update(i.family for i in items if i.outcome == "admitted")
        self._add_pairs(rewards.pairs, rewards.groups)
        self.generator_pairs += len(rewards.pairs)

    def _add_pairs(self, pairs: Sequence[PreferencePair], groups: Sequence[CompletionGroup]
                   ) -> None:
        self.recorder.store.record_pairs(self.index, pairs, self.versions)
        append_jsonl(self.pairs_file, pairs)
        self.pairs += pairs
        self.groups += groups

    def generation_failed(self, topics: Sequence[str], error: Exception) -> None:
        """A chunk's generation failed (or was refused by a cap): its topics got no tasks."""
        if isinstance(error, CapReached):
            self.cap_reached(str(error))
            return
        self.rejections["generator_failed"] += len(topics)
        print(f"round {self.index}: generation failed for {list(topics)}: "
              f"{type(error).__name__}: {error}", flush=True)

    def failed(self, stage: str, error: Exception) -> None:
        """A stage call failed; the round goes on without its output."""
        self.rejections[f"stage_failed:{stage}:{type(error).__name__}"] += 1
        print(f"round {self.index}: {stage} failed: {error!r}", flush=True)

    def cap_reached(self, reason: str) -> None:
        print(f"round {self.index}: cap reached: {reason}", flush=True)

    def timed(self, stage: str, seconds: float) -> None:
        self.stage_s[stage] += seconds

    @property
    def pairs_file(self) -> Path:
        return self.recorder.run_dir / "pairs" / f"round_{self.index:03d}.jsonl"

    def export_pairs(self) -> Path:
        """The round's pairs as a `datasets` dataset TRL's DPOTrainer loads (pairs/round_N/)."""
        path = self.pairs_file
        return save_dataset(read_jsonl(path) if path.exists() else [],
                            self.recorder.run_dir / "pairs" / f"round_{self.index:03d}")

    def metrics(self, validation_pass_at_1: float | None, validation_problems: int,
                outcome: LearnOutcome | None, meters: dict[str, TokenMeter], wall_s: float,
                band: tuple[float, float] = (), level: int = 0, hints: int | None = None,
                tiers: tuple[tuple[str, float], ...] = (), injected: int = 0,
                engine_busy_s: float = 0.0) -> RoundMetrics:
        self.progress.close()  # the round's stages are done; its line follows
        rates = list(self.task_pass_rates.values())
        generated = [self.task_pass_rates[t.task_id] for t in self.new_tasks
                     if t.task_id in self.task_pass_rates]
        rewards = self.generator_rewards
        learned = {} if outcome is None else dataclasses.asdict(outcome)
        return RoundMetrics(
            run_id=self.recorder.run_id, round=self.index,
            generator_version=self.versions.generator, solver_version=self.versions.solver,
            validation_pass_at_1=validation_pass_at_1,
            validation_problems=validation_problems if validation_pass_at_1 is not None else 0,
            tasks_proposed=self.proposed, tasks_valid=len(self.new_tasks),
            rejection_reasons=tuple(self.rejections.most_common()),
            new_task_pass_rate=(self.new_task_passed / self.new_task_candidates
                                if self.new_task_candidates else None),
            new_task_candidates=self.new_task_candidates,
            mean_difficulty=1 - sum(rates) / len(rates) if rates else 0.0,
            pairs=len(self.pairs), pairs_from_generated=self.pairs_from_generated,
            generator_pairs=self.generator_pairs,
            generator_reward_mean=sum(rewards) / len(rewards) if rewards else None,
            family_tasks=tuple(sorted(self.family_tasks.items())),
            family_pairs=tuple(sorted(self.family_pairs.items())),
            topic_tasks=tuple(sorted(collections.Counter(t.topic for t in self.new_tasks)
                                     .items())),
            difficulty_band=tuple(band), control_level=level, solver_hints=hints,
            generator_difficulty=1 - sum(generated) / len(generated) if generated else None,
            task_diversity=task_diversity(self.new_tasks), hard_tasks_injected=injected,
            validation_tiers=tiers,
            candidate_diversity=self.distinct / self.sampled if self.sampled else 0.0,
            tokens_generator=meters["generator"].total, tokens_solver=meters["solver"].total,
            sandbox_cpu_s=round(self.sandbox_cpu_s, 3),
            sandbox_reruns=self.sandbox_reruns, sandbox_errors=self.sandbox_errors,
            hack_suspects=self.hack_suspects, flaky_tasks=len(self.flaky),
            two_answer_tasks=len(self.two_answers & {t.task_id for t in self.new_tasks}),
            stage_s=tuple((k, round(v, 3)) for k, v in sorted(self.stage_s.items())),
            engine_busy_s=round(engine_busy_s, 3), wall_s=round(wall_s, 3), **learned)


def round_line(m: RoundMetrics) -> str:
    val = "n/a" if m.validation_pass_at_1 is None else f"{m.validation_pass_at_1:.3f}"
    reasons = ", ".join(f"{r}={n}" for r, n in m.rejection_reasons[:3]) or "-"
    sandbox = (f"sandbox {m.sandbox_cpu_s:.1f} cpu-s, {m.sandbox_reruns} re-run, "
               f"{m.sandbox_errors} errors, {m.hack_suspects} hack suspects"
               + (f", {m.flaky_tasks} flaky tasks" if m.flaky_tasks else ""))
    return (f"round {m.round}: val pass@1 {val} ({m.validation_problems} problems) | tasks "
            f"{m.tasks_valid}/{m.tasks_proposed} valid (rejected: {reasons}) | new-task pass "
            + ("n/a" if m.new_task_pass_rate is None else f"{m.new_task_pass_rate:.2f}")
            + (f" ({m.two_answer_tasks} split between two answers)" if m.two_answer_tasks
               else "")
            + f" | difficulty {m.mean_difficulty:.2f} | pairs {m.pairs} "
            f"({m.pairs_from_generated} on generated tasks, {m.generator_pairs} generator)"
            f"{_control_part(m)}"
            f" | diversity {m.candidate_diversity:.2f} | tokens {m.tokens_generator}+"
            f"{m.tokens_solver} | {sandbox} | {m.wall_s:.0f} s" + _update_part(m))


def _control_part(m: RoundMetrics) -> str:
    """The controller's level, the band the new-task pass rate is held in, the examples the
    solver was shown (the hint lever), and any alarm."""
    if not m.difficulty_band:
        return ""
    low, high = m.difficulty_band
    hints = "" if m.solver_hints is None else f", {m.solver_hints} examples shown"
    part = f" | level {m.control_level:+d} (band {low:.1f}-{high:.1f}{hints})"
    if m.collapse_alarm:
        part += " | COLLAPSE ALARM" + ("" if m.generator_rollback is None
                                       else f", rolled back to v{m.generator_rollback}")
    return part


def _update_part(m: RoundMetrics) -> str:
    if m.update == "none":
        return ""
    return (f" | update {m.update} (step {m.learner_step}"
            + ("" if m.learner_loss is None else f", loss {m.learner_loss:.4f}")
            + ("" if m.gate_heldout_logp is None
               else f", held-out logp {m.gate_heldout_logp:.4f}")
            + (f", by {'+'.join(m.rejected_by)}" if m.rejected_by else "")
            + (f", on round {m.trained_round}'s items" if m.trained_round not in (None, m.round)
               else "")
            + (f", {m.stale_items} stale dropped" if m.stale_items else "") + ")")
