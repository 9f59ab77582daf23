"""Sections 3 and 4 of `spade-ray diagnose` (see diagnose.py): how the candidates ran and how
they were scored.
  environment  the limits in use, env_hash per round (WARN on a change), limits enforced in a
               degraded way (WARN), sandbox errors and re-runs (FAIL when one was never re-run)
  evaluator    every recorded score against the scorer re-run on its execution row (FAIL on a
               difference); with `recheck` N, N sampled candidates re-executed in a sandbox and
               their outcome compared with the recorded one
Non-goals: choosing or starting a sandbox (the caller passes an Executor), repairing a score.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence

from spade_ray.evaluation import score
from spade_ray.execution import Executor
from spade_ray.records import Candidate, CheckResult, ExecStatus, Limits, Score, Task
from spade_ray.tasks import executable
from spade_ray.tracking.diagnose_findings import (
    EXAMPLES,
    Check,
    CheckName,
    Count,
    Example,
    Level,
    Section,
    group_counts,
    one_line,
    round_span,
)
from spade_ray.tracking.diagnose_run import RunTrace


def environment_section(trace: RunTrace) -> Section:
    limits = Counter(t.task.limits for _, t in trace.tasks)
    notes = [f"limits {_limits_text(lim)}: {n} task rows" for lim, n in limits.most_common()]
    hashes: dict[str, set[int]] = defaultdict(set)
    enforced: dict[str, set[str]] = defaultdict(set)
    for (r, _), ch in trace.checks.items():
        hashes[ch.execution.env_hash].add(r)
        enforced[ch.execution.env_hash].add(ch.execution.limits_enforced_by)
    notes += [f"env_hash {h}: rounds {round_span(rounds)}, limits enforced by "
              f"{', '.join(sorted(enforced[h]))}" for h, rounds in hashes.items()]
    ran = trace.checks.items()
    sandbox_errors = [("sandbox_error", Example(cid, f"attempts {ch.execution.attempts}: "
                                                     f"{one_line(ch.execution.detail)}"))
                      for (_, cid), ch in ran if ch.execution.status is ExecStatus.SANDBOX_ERROR]
    reruns = [("re-run (attempts > 1)", Example(cid, f"{ch.execution.status.value} after "
                                                     f"{ch.execution.attempts} attempts"))
              for (_, cid), ch in ran if ch.execution.attempts > 1]
    counts = group_counts([*sandbox_errors, *reruns])
    checks = (_env_check(trace), _enforced_check(trace), _sandbox_errors_check(trace),
              _metrics_check(trace))
    return Section("environment", "Environment", counts, tuple(notes), checks)


def _env_check(trace: RunTrace) -> Check:
    by_round: dict[int, set[str]] = defaultdict(set)
    for (r, _), ch in trace.checks.items():
        by_round[r].add(ch.execution.env_hash)
    changes, previous = [], None
    for r in sorted(by_round):
        if len(by_round[r]) > 1 or (previous is not None and by_round[r] != previous[1]):
            before = f"round {previous[0]} {'/'.join(sorted(previous[1]))}" if previous else ""
            changes.append(Example(f"round {r}", f"{before} -> {'/'.join(sorted(by_round[r]))}"))
        previous = (r, by_round[r])
    if changes:
        return Check(CheckName.ENV_STABLE, Level.WARN, f"the execution environment changed "
                     f"{len(changes)} time(s): results across the change may not compare",
                     tuple(changes[:EXAMPLES]))
    every = {h for hs in by_round.values() for h in hs}
    return Check(CheckName.ENV_STABLE, Level.OK,
                 f"one env_hash in every round ({', '.join(sorted(every)) or 'no executions'})")


def _enforced_check(trace: RunTrace) -> Check:
    degraded = Counter(ch.execution.limits_enforced_by for ch in trace.checks.values()
                       if "degraded" in ch.execution.limits_enforced_by)
    if degraded:
        return Check(CheckName.LIMITS_ENFORCED, Level.WARN,
                     f"{degraded.total()} executions ran with degraded limits",
                     tuple(Example(f"x{n}", one_line(how)) for how, n in degraded.most_common(2)))
    return Check(CheckName.LIMITS_ENFORCED, Level.OK, "no execution ran with degraded limits")


def _sandbox_errors_check(trace: RunTrace) -> Check:
    errors = [(cid, ch) for (_, cid), ch in trace.checks.items()
              if ch.execution.status is ExecStatus.SANDBOX_ERROR]
    once = [Example(cid, one_line(ch.execution.detail)) for cid, ch in errors
            if ch.execution.attempts < 2]
    cured = sum(ch.execution.attempts > 1 for ch in trace.checks.values()) - len(errors)
    if once:
        return Check(CheckName.SANDBOX_ERRORS, Level.FAIL, f"{len(once)} sandbox_error "
                     "candidates were never re-run (attempts 1); the sandbox re-runs each once",
                     tuple(once[:EXAMPLES]))
    if errors:
        return Check(CheckName.SANDBOX_ERRORS, Level.WARN, f"{len(errors)} candidates are still "
                     "sandbox_error after their re-run (kept out of pairs)",
                     tuple(Example(cid, one_line(ch.execution.detail)) for cid, ch in errors[:2]))
    return Check(CheckName.SANDBOX_ERRORS, Level.OK,
                 f"no sandbox_error left ({cured} cured by a re-run)")


def _metrics_check(trace: RunTrace) -> Check:
    """metrics.jsonl beside the trace holds this run's rounds: one of another run beside it
    (a copied or reused directory) was read without a word, and the metrics section vanished
    (bad-input audit s26, F11)."""
    others = [r for r in trace.metrics_run_ids if r != trace.run_id]
    if others:
        return Check(CheckName.METRICS_MATCH, Level.WARN,
                     f"metrics.jsonl holds rows of run(s) {others}, the trace is run "
                     f"{trace.run_id!r}: only the rows of {trace.run_id!r} are read")
    missing = sorted(set(trace.completed) - {m.round for m in trace.metrics})
    if missing:
        return Check(CheckName.METRICS_MATCH, Level.WARN,
                     f"metrics.jsonl has no line of completed round(s) {round_span(missing)}")
    return Check(CheckName.METRICS_MATCH, Level.OK,
                 f"a metrics line for each of the {len(trace.completed)} completed rounds")


def evaluator_section(trace: RunTrace, recheck: int, executor: Executor | None,
                       seed: int) -> Section:
    scored = [(r, c) for r, c in trace.candidates
              if (r, c.candidate_id) in trace.checks and (r, c.candidate_id) in trace.scores]
    tasks, hints = trace.known_tasks(), {m.round: m.solver_hints for m in trace.metrics}
    fresh = [score(c, trace.checks[(r, c.candidate_id)], tasks.get(c.task_id), hints.get(r))
             for r, c in scored]
    recorded = [trace.scores[(r, c.candidate_id)] for r, c in scored]
    checks = [_agreement(CheckName.RESCORE, "re-scored", recorded, fresh, _same_score)]
    notes = ["re-execution skipped (--recheck N re-runs N sampled candidates in the sandbox)"]
    if recheck:
        assert executor is not None  # diagnose() checked
        notes = []
        eligible = [(r, c) for r, c in scored if c.task_id in tasks]
        if len(eligible) < recheck:
            notes.append(f"only {len(eligible)} scored candidates have a task row to re-run")
        sample = random.Random(seed).sample(eligible, min(recheck, len(eligible)))
        rerun = _reexecute([c for _, c in sample], tasks, executor)
        checks.append(_agreement(CheckName.RECHECK, "re-executed",
                                 [trace.scores[(r, c.candidate_id)] for r, c in sample], rerun,
                                 _same_outcome))
    counts = (Count("re-scored", len(fresh)),)
    return Section("evaluator", "Evaluator consistency", counts, tuple(notes), tuple(checks))


def _reexecute(candidates: Sequence[Candidate], tasks: dict[str, Task],
               executor: Executor) -> list[Score]:
    """Each candidate's program checked again, the way stages.execute builds it."""
    by_limits: dict[Limits, list[int]] = defaultdict(list)
    for i, c in enumerate(candidates):
        by_limits[tasks[c.task_id].limits].append(i)
    results: dict[int, CheckResult] = {}
    for limits, indexes in by_limits.items():
        group = [candidates[i] for i in indexes]
        checks = executor.check_many([executable(tasks[c.task_id], c.code) for c in group],
                                     [tasks[c.task_id].tests for c in group], limits=limits)
        results.update(zip(indexes, checks))
    return [score(c, results[i], tasks[c.task_id]) for i, c in enumerate(candidates)]


def _agreement(name: CheckName, how: str, recorded: Sequence[Score], fresh: Sequence[Score],
               same) -> Check:
    bad = [Example(old.candidate_id, f"recorded {_verdict(old)}; {how} {_verdict(new)}")
           for old, new in zip(recorded, fresh) if not same(old, new)]
    level = Level.FAIL if bad else Level.OK
    return Check(name, level, f"{len(recorded) - len(bad)} of {len(recorded)} {how} candidates "
                 "agree with the recorded verdict", tuple(bad[:EXAMPLES]))


def _same_score(a: Score, b: Score) -> bool:
    return (math.isclose(a.value, b.value, abs_tol=1e-9) and a.passed == b.passed
            and (a.tests_passed, a.tests_total, a.status) == (b.tests_passed, b.tests_total,
                                                              b.status))


def _same_outcome(a: Score, b: Score) -> bool:
    return (a.passed, a.tests_passed) == (b.passed, b.tests_passed)


def _verdict(s: Score) -> str:
    return (f"passed={int(s.passed)} value={s.value:.3g} {s.tests_passed}/{s.tests_total} "
            f"{s.status.value}")


def _limits_text(limits: Limits) -> str:
    return (f"timeout {limits.timeout_s:g} s, cpu {limits.cpu_s:g} s, memory {limits.memory_mb} "
            f"MB, output {limits.max_output_bytes} B, processes {limits.max_processes}, tmp "
            f"{limits.tmp_mb} MB")

