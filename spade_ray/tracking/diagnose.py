"""`spade-ray diagnose RUN_DIR`: walk a run's trace stage by stage and say what looks wrong.

Scope: a pure function over a run directory (trace.sqlite read through query.py's read-only
connection, metrics.jsonl) that returns a typed `Diagnosis`: per section, counts with one or two
examples each (ids and a one-line excerpt), and checks with a verdict (OK, WARN, FAIL) and why.
  1. tasks        generator outputs by outcome and family; task rows, valid or why not
  2. candidates   each candidate's class: passed, wrong answer, syntax / runtime error, a limit,
                  killed, sandbox_error, suspected hack (what the grader saw comes first)
  3. environment  the limits in use, env_hash per round, sandbox errors and re-runs
  4. evaluator    every recorded score against the scorer re-run on its execution row; with
                  `recheck` N, N sampled candidates re-executed in a sandbox and compared
  5. training     pair order (the evaluator's `compare`), recorded pair scores, duplicates,
                  chosen sides that did not pass, role / family balance, task distribution shift
A FAIL is a broken guarantee of the pipeline (a gate fails on it: `exit_code` 1); a WARN is
worth a look but may be legitimate (a weak model, an environment upgrade).
Non-goals: repairing a trace, judging the model's quality, plots (plots.py), ad-hoc queries
(query.py); traces of several runs in one file are diagnosed one run id at a time.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import random
import re
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from spade_ray.evaluation import IncomparableScores, SandboxFailure, compare, score, score_many
from spade_ray.execution import Executor
from spade_ray.records import (
    Candidate,
    CheckResult,
    Completion,
    ExecStatus,
    Limits,
    PreferencePair,
    Role,
    RoundMetrics,
    Score,
    Task,
    Verdict,
    to_dict,
)
from spade_ray.tasks import executable
from spade_ray.tracking import query, schema
from spade_ray.tracking.metrics import load_metrics
from spade_ray.tracking.schema import GeneratorInput, TracedTask

EXAMPLES = 2  # examples shown per count
ADMITTED = "admitted"  # generator_inputs.outcome of an output that became a task
# A judgement call, not a measurement: when a quarter of all candidates do not even parse, the
# program assembly (prompt end + completion) is a likelier culprit than the model.
SYNTAX_WARN_SHARE = 0.25
# Total-variation distance between two rounds' task histograms above which more than half the
# mass moved: worth a look (a collapsing generator, a family that stopped being admitted).
SHIFT_WARN_TV = 0.5

Keyed = tuple[int, str]  # (round, candidate_id): the key of executions and scores rows


class Level(enum.StrEnum):
    OK = "OK"
    WARN = "WARN"
    FAIL = "FAIL"


class CheckName(enum.StrEnum):
    ADMITTED_TASKS = "admitted outputs have valid task rows"
    CANDIDATE_TASKS = "attempted tasks have rows"
    RECORDS_COMPLETE = "every candidate has one execution and one score"
    HACKS = "suspected hacks"
    SYNTAX_SHARE = "share of candidates that do not parse"
    ENV_STABLE = "env_hash stable"
    LIMITS_ENFORCED = "limits enforced"
    SANDBOX_ERRORS = "sandbox errors re-run"
    RESCORE = "re-scored executions match the scores"
    RECHECK = "re-executed candidates match the scores"
    PAIR_ORDER = "chosen ranks above rejected"
    PAIR_SCORES = "pair scores match their records"
    DUPLICATES = "no duplicate pairs"
    SHIFT = "task distribution shift"


class FailureClass(enum.StrEnum):
    """How a candidate fared; each candidate is in exactly one class (see `classify`). The
    classes of a run that ended on a limit, a kill or a sandbox failure are ExecStatus values."""

    SUSPECTED_HACK = "suspected hack"
    PASSED = "passed"
    WRONG_ANSWER = "wrong answer"
    SYNTAX_ERROR = "syntax error"
    RUNTIME_ERROR = "runtime error"
    TIMEOUT = "timeout"
    MEMORY_LIMIT = "memory_limit"
    OUTPUT_LIMIT = "output_limit"
    KILLED = "killed"
    SANDBOX_ERROR = "sandbox_error"


_SYNTAX = re.compile(r"\b(SyntaxError|IndentationError|TabError)\b")


@dataclasses.dataclass(frozen=True)
class Example:
    id: str
    excerpt: str  # one line


@dataclasses.dataclass(frozen=True)
class Count:
    label: str
    count: int
    examples: tuple[Example, ...] = ()


@dataclasses.dataclass(frozen=True)
class Check:
    name: CheckName
    level: Level
    why: str
    examples: tuple[Example, ...] = ()


@dataclasses.dataclass(frozen=True)
class Section:
    key: str  # tasks | candidates | environment | evaluator | training
    title: str
    counts: tuple[Count, ...]
    notes: tuple[str, ...]
    checks: tuple[Check, ...]

    def count(self, label: str) -> int:
        return sum(c.count for c in self.counts if c.label == label)


@dataclasses.dataclass(frozen=True)
class Diagnosis:
    run_dir: str
    run_id: str
    rounds: tuple[int, ...]  # rounds with any row
    completed: tuple[int, ...]  # rounds with a `rounds` row
    metrics: tuple[RoundMetrics, ...]  # metrics.jsonl
    sections: tuple[Section, ...]

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(c for s in self.sections for c in s.checks)

    def check(self, name: CheckName) -> Check:
        return next(c for c in self.checks if c.name is name)

    def section(self, key: str) -> Section:
        return next(s for s in self.sections if s.key == key)

    @property
    def exit_code(self) -> int:
        return 1 if any(c.level is Level.FAIL for c in self.checks) else 0


@dataclasses.dataclass(frozen=True)
class RunTrace:
    """One run's rows as records, each with its round; read once, read-only."""

    run_dir: Path
    run_id: str
    completed: tuple[int, ...]
    tasks: tuple[tuple[int, TracedTask], ...]
    inputs: tuple[tuple[int, GeneratorInput], ...]
    candidates: tuple[tuple[int, Candidate], ...]
    checks: dict[Keyed, CheckResult]
    scores: dict[Keyed, Score]
    pairs: tuple[tuple[int, PreferencePair], ...]
    metrics: tuple[RoundMetrics, ...]

    @property
    def rounds(self) -> tuple[int, ...]:
        found = {r for r, _ in (*self.tasks, *self.inputs, *self.candidates, *self.pairs)}
        return tuple(sorted(found | set(self.completed)))

    def known_tasks(self) -> dict[str, Task]:
        return {t.task.task_id: t.task for _, t in self.tasks}


# -- loading ----------------------------------------------------------------------------------

def load_run(run_dir: str | Path, run_id: str | None = None) -> RunTrace:
    """Read run_dir/trace.sqlite (read-only) and metrics.jsonl; ValueError names a bad input."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ValueError(f"no run directory at {run_dir} (give runs/NAME of a run)")
    db = run_dir / "trace.sqlite"
    if not db.is_file():
        raise ValueError(f"no trace at {db}: a run writes run_dir/trace.sqlite")
    run_id = _one_run_id(db, run_id)
    rows = {table: _rows(db, table, run_id) for table in schema.TABLES}
    return RunTrace(
        run_dir=run_dir, run_id=run_id,
        completed=tuple(r["round"] for r in rows["rounds"]),
        tasks=tuple((r["round"], TracedTask(schema.row_to_record("tasks", Task, r),
                                            bool(r["valid"]), r["reason"]))
                    for r in rows["tasks"]),
        inputs=tuple((r["round"], _generator_input(r)) for r in rows["generator_inputs"]),
        candidates=tuple((r["round"], schema.row_to_record("candidates", Candidate, r))
                         for r in rows["candidates"]),
        checks={(r["round"], r["candidate_id"]): schema.row_to_check(r)
                for r in rows["executions"]},
        scores={(r["round"], r["candidate_id"]): schema.row_to_record("scores", Score, r)
                for r in rows["scores"]},
        pairs=tuple((r["round"], schema.row_to_record("pairs", PreferencePair, r))
                    for r in rows["pairs"]),
        metrics=tuple(m for m in load_metrics(run_dir / "metrics.jsonl") if m.run_id == run_id))


def _one_run_id(db: Path, run_id: str | None) -> str:
    try:
        version = query.run_sql(db, "SELECT value FROM meta WHERE key='schema_version'")[0]
        ids = sorted(r for (r,) in query.run_sql(db, " UNION ".join(
            f"SELECT run_id FROM {t}" for t in schema.TABLES))[0])
    except sqlite3.DatabaseError as e:
        raise ValueError(f"{db} is not a trace store ({e})") from e
    if version != [(str(schema.SCHEMA_VERSION),)]:
        raise ValueError(f"{db} has trace schema {version}; this code reads "
                         f"v{schema.SCHEMA_VERSION}")
    if not ids:
        raise ValueError(f"{db} holds no rows: nothing to diagnose")
    if run_id is None and len(ids) > 1:
        raise ValueError(f"{db} holds runs {ids}: name one with --run-id")
    if run_id is not None and run_id not in ids:
        raise ValueError(f"{db} holds no rows of run {run_id!r}; its runs: {ids}")
    return run_id or ids[0]


def _rows(db: Path, table: str, run_id: str) -> list[dict[str, Any]]:
    rows, columns = query.run_sql(db, f"SELECT * FROM {table} WHERE run_id=? "
                                  "ORDER BY round, rowid", (run_id,))
    return [dict(zip(columns, row)) for row in rows]


def _generator_input(row: dict[str, Any]) -> GeneratorInput:
    return GeneratorInput(row["input_index"], row["prompt"],
                          schema.row_to_record("generator_inputs", Completion, row),
                          row["outcome"], row["task_id"], row["family"], bool(row["executed"]),
                          row["pass_rate"], row["reward"])


# -- the diagnosis ----------------------------------------------------------------------------

def diagnose(trace: RunTrace, recheck: int = 0, executor: Executor | None = None,
             seed: int = 0) -> Diagnosis:
    """The five sections; `recheck` N > 0 re-executes N candidates (sampled with `seed`)."""
    if recheck < 0:
        raise ValueError(f"recheck={recheck}: give a number of candidates >= 0")
    if recheck and executor is None:
        raise ValueError("re-executing candidates needs an executor (a Sandbox)")
    sections = (_tasks_section(trace), _candidates_section(trace), _environment_section(trace),
                _evaluator_section(trace, recheck, executor, seed), _training_section(trace))
    return Diagnosis(str(trace.run_dir), trace.run_id, trace.rounds, trace.completed,
                     trace.metrics, sections)


def classify(check: CheckResult) -> FailureClass:
    """What the grader saw first, then how the run ended, then what the tests said."""
    if check.suspicion:
        return FailureClass.SUSPECTED_HACK
    if check.execution.status not in (ExecStatus.OK, ExecStatus.ERROR):
        return FailureClass(check.execution.status.value)
    if check.passed:
        return FailureClass.PASSED
    if any(_SYNTAX.search(t) for t in (check.execution.stderr,
                                       *(o.message for o in check.outcomes))):
        return FailureClass.SYNTAX_ERROR
    if (check.execution.status is ExecStatus.ERROR
            or any(o.outcome is Verdict.ERROR for o in check.outcomes)):
        return FailureClass.RUNTIME_ERROR
    return FailureClass.WRONG_ANSWER


def _tasks_section(trace: RunTrace) -> Section:
    outputs = _counts((o.outcome, Example(f"r{r}/output{o.index}",
                                          f"[{o.family}] {_line(o.completion.text)}"))
                      for r, o in trace.inputs)
    tasks = _counts(("valid" if t.valid else f"invalid: {t.reason}",
                     Example(t.task.task_id, f"r{r} {t.task.family.value}/{t.task.topic}: "
                                             f"{_line(t.task.description)}"))
                    for r, t in trace.tasks)
    outputs = tuple(sorted(outputs, key=lambda c: -c.count))  # the common outcomes first
    return Section("tasks", "Tasks", outputs + tasks, _family_notes(trace.inputs),
                   (_admitted_check(trace), _candidate_tasks_check(trace)))


def _family_notes(inputs: Sequence[tuple[int, GeneratorInput]]) -> tuple[str, ...]:
    by_family: dict[str, Counter[str]] = defaultdict(Counter)
    for _, o in inputs:
        by_family[o.family][o.outcome] += 1
    notes = []
    for family, outcomes in sorted(by_family.items()):
        rejected = [(k, n) for k, n in outcomes.most_common() if k != ADMITTED]
        top = f"; most often {rejected[0][0]} x{rejected[0][1]}" if rejected else ""
        notes.append(f"{family or '?'}: {outcomes[ADMITTED]} of {outcomes.total()} outputs "
                     f"admitted{top}")
    return tuple(notes)


def _admitted_check(trace: RunTrace) -> Check:
    valid = {t.task.task_id for _, t in trace.tasks if t.valid}
    admitted = [(r, o) for r, o in trace.inputs if o.outcome == ADMITTED]
    bad = [Example(f"r{r}/output{o.index}", f"task {o.task_id} has no valid row")
           for r, o in admitted if o.task_id not in valid]
    if bad:
        return Check(CheckName.ADMITTED_TASKS, Level.FAIL,
                     f"{len(bad)} of {len(admitted)} admitted outputs have no valid task row",
                     tuple(bad[:EXAMPLES]))
    return Check(CheckName.ADMITTED_TASKS, Level.OK,
                 f"{len(admitted)} admitted outputs, each with a valid task row")


def _candidate_tasks_check(trace: RunTrace) -> Check:
    attempted, known = Counter(c.task_id for _, c in trace.candidates), trace.known_tasks()
    missing = [t for t in attempted if t not in known]
    if not missing:
        return Check(CheckName.CANDIDATE_TASKS, Level.OK,
                     f"all {len(attempted)} attempted tasks have a row")
    return Check(CheckName.CANDIDATE_TASKS, Level.WARN,
                 f"{len(missing)} of {len(attempted)} tasks the solver attempted have no task "
                 "row (replayed seed tasks, in traces written before every attempted task was "
                 "recorded): their family is unknown and --recheck skips their candidates",
                 tuple(Example(t, f"{attempted[t]} candidates") for t in missing[:EXAMPLES]))


def _candidates_section(trace: RunTrace) -> Section:
    ran = [(c, trace.checks[(r, c.candidate_id)]) for r, c in trace.candidates
           if (r, c.candidate_id) in trace.checks]
    classified = sorted(((c, ch, classify(ch)) for c, ch in ran),
                        key=lambda item: list(FailureClass).index(item[2]))
    counts = _counts((k.value, Example(c.candidate_id, _class_excerpt(k, c, ch)))
                     for c, ch, k in classified)
    syntax = sum(k is FailureClass.SYNTAX_ERROR for _, _, k in classified)
    share = syntax / len(classified) if classified else 0.0
    level = Level.WARN if share >= SYNTAX_WARN_SHARE else Level.OK
    hint = (": look at how programs are assembled (prompt end + completion) before blaming the "
            "model" if level is Level.WARN else "")
    checks = (_records_check(trace), _hacks_check(trace),
              Check(CheckName.SYNTAX_SHARE, level,
                    f"{syntax} of {len(classified)} candidates ({share:.0%}) do not parse{hint}"))
    return Section("candidates", "Candidates", counts, (), checks)


def _class_excerpt(kind: FailureClass, candidate: Candidate, check: CheckResult) -> str:
    ran = check.execution
    if kind is FailureClass.SUSPECTED_HACK:
        return f"{check.suspicion} [{ran.status.value}]"
    if kind in (FailureClass.SYNTAX_ERROR, FailureClass.RUNTIME_ERROR):
        messages = [o.message for o in check.outcomes if o.outcome is Verdict.ERROR]
        error = _last_line(ran.stderr) or next(iter(messages), ran.detail)
        return f"{_line(error, 50)} | {_line(candidate.code, 60)}"
    if kind is FailureClass.WRONG_ANSWER:
        failed = next((o for o in check.outcomes if o.outcome is not Verdict.PASSED), None)
        said = f"{failed.name}: {_line(failed.message, 50)}" if failed else "no test report"
        return f"{check.tests_passed}/{check.tests_total} passed; {said}"
    if kind is FailureClass.PASSED:
        return _line(candidate.code)
    return f"{_line(ran.detail)} (wall {ran.wall_s:.2f} s, {ran.peak_memory_mb:.0f} MB)"


def _records_check(trace: RunTrace) -> Check:
    keys = {(r, c.candidate_id) for r, c in trace.candidates}
    gaps = {"no execution row": keys - trace.checks.keys(),
            "no score row": keys - trace.scores.keys(),
            "no candidate row": (trace.checks.keys() | trace.scores.keys()) - keys}
    bad = [Example(f"r{r}/{cid}", what) for what, found in gaps.items()
           for r, cid in sorted(found)]
    why = f"{len(keys)} candidates; " + ", ".join(f"{len(found)} with {what}"
                                                 for what, found in gaps.items())
    return Check(CheckName.RECORDS_COMPLETE, Level.FAIL if bad else Level.OK, why,
                 tuple(bad[:EXAMPLES]))


def _hacks_check(trace: RunTrace) -> Check:
    suspects = [k for k, ch in trace.checks.items() if ch.suspicion]
    passed = [k for k in suspects if k in trace.scores and trace.scores[k].passed]
    examples = tuple(Example(cid, _line(trace.checks[(r, cid)].suspicion))
                     for r, cid in (passed or suspects)[:EXAMPLES])
    if passed:
        return Check(CheckName.HACKS, Level.FAIL, f"{len(passed)} of {len(suspects)} candidates "
                     "that probed the grader were scored as passing", examples)
    if suspects:
        return Check(CheckName.HACKS, Level.WARN, f"{len(suspects)} candidates probed the "
                     "grader (none scored as passing): read their suspicion", examples)
    return Check(CheckName.HACKS, Level.OK, "no candidate probed the grader")


def _environment_section(trace: RunTrace) -> Section:
    limits = Counter(t.task.limits for _, t in trace.tasks)
    notes = [f"limits {_limits_text(lim)}: {n} task rows" for lim, n in limits.most_common()]
    hashes: dict[str, set[int]] = defaultdict(set)
    enforced: dict[str, set[str]] = defaultdict(set)
    for (r, _), ch in trace.checks.items():
        hashes[ch.execution.env_hash].add(r)
        enforced[ch.execution.env_hash].add(ch.execution.limits_enforced_by)
    notes += [f"env_hash {h}: rounds {_span(rounds)}, limits enforced by "
              f"{', '.join(sorted(enforced[h]))}" for h, rounds in hashes.items()]
    ran = trace.checks.items()
    counts = _counts([*(("sandbox_error", Example(cid, f"attempts {ch.execution.attempts}: "
                                                        f"{_line(ch.execution.detail)}"))
                        for (_, cid), ch in ran
                        if ch.execution.status is ExecStatus.SANDBOX_ERROR),
                      *(("re-run (attempts > 1)",
                         Example(cid, f"{ch.execution.status.value} after "
                                      f"{ch.execution.attempts} attempts"))
                        for (_, cid), ch in ran if ch.execution.attempts > 1)])
    checks = (_env_check(trace), _enforced_check(trace), _sandbox_errors_check(trace))
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
                     tuple(Example(f"x{n}", _line(how)) for how, n in degraded.most_common(2)))
    return Check(CheckName.LIMITS_ENFORCED, Level.OK, "no execution ran with degraded limits")


def _sandbox_errors_check(trace: RunTrace) -> Check:
    errors = [(cid, ch) for (_, cid), ch in trace.checks.items()
              if ch.execution.status is ExecStatus.SANDBOX_ERROR]
    once = [Example(cid, _line(ch.execution.detail)) for cid, ch in errors
            if ch.execution.attempts < 2]
    cured = sum(ch.execution.attempts > 1 for ch in trace.checks.values()) - len(errors)
    if once:
        return Check(CheckName.SANDBOX_ERRORS, Level.FAIL, f"{len(once)} sandbox_error "
                     "candidates were never re-run (attempts 1); the sandbox re-runs each once",
                     tuple(once[:EXAMPLES]))
    if errors:
        return Check(CheckName.SANDBOX_ERRORS, Level.WARN, f"{len(errors)} candidates are still "
                     "sandbox_error after their re-run (kept out of pairs)",
                     tuple(Example(cid, _line(ch.execution.detail)) for cid, ch in errors[:2]))
    return Check(CheckName.SANDBOX_ERRORS, Level.OK,
                 f"no sandbox_error left ({cured} cured by a re-run)")


def _evaluator_section(trace: RunTrace, recheck: int, executor: Executor | None,
                       seed: int) -> Section:
    scored = [(r, c) for r, c in trace.candidates
              if (r, c.candidate_id) in trace.checks and (r, c.candidate_id) in trace.scores]
    fresh = score_many([c for _, c in scored],
                       [trace.checks[(r, c.candidate_id)] for r, c in scored])
    recorded = [trace.scores[(r, c.candidate_id)] for r, c in scored]
    checks = [_agreement(CheckName.RESCORE, "re-scored", recorded, fresh, _same_score)]
    notes = ["re-execution skipped (--recheck N re-runs N sampled candidates in the sandbox)"]
    if recheck:
        assert executor is not None  # diagnose() checked
        notes = []
        known = trace.known_tasks()
        eligible = [(r, c) for r, c in scored if c.task_id in known]
        if len(eligible) < recheck:
            notes.append(f"only {len(eligible)} scored candidates have a task row to re-run")
        sample = random.Random(seed).sample(eligible, min(recheck, len(eligible)))
        rerun = _reexecute([c for _, c in sample], known, executor)
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
    return [score(c, results[i]) for i, c in enumerate(candidates)]


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


def _training_section(trace: RunTrace) -> Section:
    duplicates, duplicate_check = _duplicates(trace.pairs)
    not_passed = [(r, p) for r, p in trace.pairs if p.role is Role.SOLVER
                  and (r, p.chosen_candidate_id) in trace.scores
                  and not trace.scores[(r, p.chosen_candidate_id)].passed]
    counts = _counts((f"{p.role.value} pairs", _pair_example(r, p)) for r, p in trace.pairs)
    counts += _counts(("duplicate pairs", e) for e in duplicates)
    counts += _counts(("chosen did not pass (solver)", _pair_example(r, p))
                      for r, p in not_passed)
    shift_notes, shift_check = _shift(trace)
    checks = (_order_check(trace), _pair_scores_check(trace), duplicate_check, shift_check)
    return Section("training", "Training data", counts, _balance(trace) + shift_notes, checks)


def _pair_example(round: int, p: PreferencePair) -> Example:
    return Example(f"r{round} {p.chosen_candidate_id} > {p.rejected_candidate_id}",
                   f"{p.chosen_score:.3g} > {p.rejected_score:.3g}: {_line(p.chosen, 50)}")


def _output_ids(trace: RunTrace) -> dict[str, GeneratorInput]:
    # A generator pair's candidate ids name generator outputs: generator/r<round>/<index>.
    return {f"generator/r{r}/{o.index}": o for r, o in trace.inputs}


def _order_check(trace: RunTrace) -> Check:
    bad = []
    for r, p in trace.pairs:
        chosen = trace.scores.get((r, p.chosen_candidate_id))
        rejected = trace.scores.get((r, p.rejected_candidate_id))
        if p.role is Role.SOLVER and chosen and rejected:
            try:  # the evaluator's order: value, passed, then efficiency when both pass
                above, why = compare(chosen, rejected) > 0, "the evaluator ranks it lower or equal"
            except (SandboxFailure, IncomparableScores) as e:
                above, why = False, str(e)
        else:
            above, why = p.chosen_score > p.rejected_score, "its score is not higher"
        if not above:
            bad.append(Example(_pair_example(r, p).id, _line(why)))
    return Check(CheckName.PAIR_ORDER, Level.FAIL if bad else Level.OK,
                 f"{len(trace.pairs) - len(bad)} of {len(trace.pairs)} pairs have a chosen side "
                 "that ranks strictly above the rejected side", tuple(bad[:EXAMPLES]))


def _pair_scores_check(trace: RunTrace) -> Check:
    outputs = _output_ids(trace)

    def recorded(r: int, cid: str, role: Role) -> float | None:
        if role is Role.GENERATOR:
            return outputs[cid].reward if cid in outputs else None
        return trace.scores[(r, cid)].value if (r, cid) in trace.scores else None

    bad = []
    for r, p in trace.pairs:
        for side, cid, value in (("chosen", p.chosen_candidate_id, p.chosen_score),
                                 ("rejected", p.rejected_candidate_id, p.rejected_score)):
            found = recorded(r, cid, p.role)
            if found is None or not math.isclose(found, value, abs_tol=1e-9):
                bad.append(Example(f"r{r} {cid}", f"pair's {side} score {value:.3g}, its record "
                                   f"{'missing' if found is None else f'{found:.3g}'}"))
    return Check(CheckName.PAIR_SCORES, Level.FAIL if bad else Level.OK,
                 f"{len(bad)} pair sides differ from their candidate's score or output's reward "
                 f"({len(trace.pairs)} pairs)", tuple(bad[:EXAMPLES]))


def _duplicates(pairs: Sequence[tuple[int, PreferencePair]]) -> tuple[list[Example], Check]:
    first: dict[tuple[str, str, str], tuple[int, PreferencePair]] = {}
    found, same_round = [], 0
    for r, p in pairs:
        key = (p.prompt, p.chosen, p.rejected)
        if key in first:
            r0, p0 = first[key]
            same_round += r0 == r
            found.append(Example(_pair_example(r, p).id, f"repeats r{r0} "
                                 f"{p0.chosen_candidate_id} > {p0.rejected_candidate_id}"))
        else:
            first[key] = (r, p)
    if same_round:
        level, why = Level.FAIL, f"{same_round} pairs repeat a pair of their own round"
    elif found:
        level, why = Level.WARN, (f"{len(found)} pairs repeat a pair of an earlier round (a "
                                  "replayed task sampled the same programs)")
    else:
        level, why = Level.OK, f"{len(pairs)} distinct (prompt, chosen, rejected) pairs"
    return found, Check(CheckName.DUPLICATES, level, why, tuple(found[:EXAMPLES]))


def _balance(trace: RunTrace) -> tuple[str, ...]:
    known, outputs = trace.known_tasks(), _output_ids(trace)
    per_round: dict[int, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
    for r, p in trace.pairs:
        if p.role is Role.GENERATOR:
            family = outputs[p.chosen_candidate_id].family if p.chosen_candidate_id in outputs \
                else "?"
        else:
            family = known[p.task_id].family.value if p.task_id in known else "?"
        per_round[r][p.role.value][family] += 1
    return tuple(f"round {r} pairs: " + "; ".join(
        f"{role} {fams.total()} ({', '.join(f'{f} {n}' for f, n in sorted(fams.items()))})"
        for role, fams in sorted(roles.items())) for r, roles in sorted(per_round.items()))


def _shift(trace: RunTrace) -> tuple[tuple[str, ...], Check]:
    """Total-variation distance of each round's task family / topic histogram vs the previous
    round's; a round's tasks are its valid task rows and the tasks its candidates attempted."""
    known = trace.known_tasks()
    tasks: dict[int, set[str]] = defaultdict(set)
    for r, t in trace.tasks:
        if t.valid:
            tasks[r].add(t.task.task_id)
    for r, c in trace.candidates:
        if c.task_id in known:
            tasks[r].add(c.task_id)
    notes, large = [], []
    rounds = sorted(tasks)
    for before, now in zip(rounds, rounds[1:]):
        distances = {what: _tv(Counter(get(known[t]) for t in tasks[before]),
                               Counter(get(known[t]) for t in tasks[now]))
                     for what, get in (("family", lambda t: t.family.value),
                                       ("topic", lambda t: t.topic))}
        text = ", ".join(f"{what} TV {d:.2f}" for what, d in distances.items())
        notes.append(f"round {now} vs {before}: {text} ({len(tasks[now])} tasks)")
        if max(distances.values()) > SHIFT_WARN_TV:
            large.append(Example(f"round {now}", text))
    if large:
        return tuple(notes), Check(CheckName.SHIFT, Level.WARN, f"{len(large)} round(s) moved "
                                   f"more than {SHIFT_WARN_TV:.0%} of the task mass",
                                   tuple(large[:EXAMPLES]))
    return tuple(notes), Check(CheckName.SHIFT, Level.OK, f"no round moved more than "
                               f"{SHIFT_WARN_TV:.0%} of the task mass")


def _tv(p: Counter[str], q: Counter[str]) -> float:
    if not p.total() or not q.total():
        return 0.0
    return 0.5 * sum(abs(p[k] / p.total() - q[k] / q.total()) for k in p.keys() | q.keys())


# -- helpers and formatting -------------------------------------------------------------------

def _counts(items: Iterable[tuple[str, Example]]) -> tuple[Count, ...]:
    """Group (label, example) pairs into Counts, labels in first-seen order."""
    groups: dict[str, list[Example]] = {}
    for label, example in items:
        groups.setdefault(label, []).append(example)
    return tuple(Count(label, len(ex), tuple(ex[:EXAMPLES])) for label, ex in groups.items())


def _line(text: str, width: int = 80) -> str:
    """`text` on one line (newlines shown as \\n), cut to `width` with '…'."""
    flat = text.strip().replace("\n", "\\n")
    return flat if len(flat) <= width else flat[:width - 1] + "…"


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def _limits_text(limits: Limits) -> str:
    return (f"timeout {limits.timeout_s:g} s, cpu {limits.cpu_s:g} s, memory {limits.memory_mb} "
            f"MB, output {limits.max_output_bytes} B, processes {limits.max_processes}, tmp "
            f"{limits.tmp_mb} MB")


def _span(rounds: Iterable[int]) -> str:
    ordered = sorted(rounds)
    return ", ".join(map(str, ordered)) if len(ordered) < 3 or ordered != list(
        range(ordered[0], ordered[-1] + 1)) else f"{ordered[0]}-{ordered[-1]}"


def format_diagnosis(d: Diagnosis) -> str:
    """The human-readable report: header, metrics, five sections, one verdict line."""
    out = [f"diagnose {d.run_dir}: run {d.run_id}, rounds {_span(d.rounds) or 'none'} "
           f"({len(d.completed)} completed)"]
    if d.metrics:
        out.append("Metrics (metrics.jsonl)")
        out += [f"  round {m.round}: update {m.update.value}, pass@1 "
                f"{'-' if m.validation_pass_at_1 is None else f'{m.validation_pass_at_1:.3f}'} "
                f"on {m.validation_problems} problems, admitted {m.tasks_valid}/"
                f"{m.tasks_proposed}" for m in d.metrics]
    for number, section in enumerate(d.sections, start=1):
        out.append(f"{number}. {section.title}")
        for count in section.counts:
            out.append(f"  {count.label:<32} {count.count:>5}")
            out += [f"      {e.id}: {e.excerpt}" for e in count.examples]
        out += [f"  - {note}" for note in section.notes]
        for check in section.checks:
            out.append(f"  {check.level.value:<4}  {check.name.value}: {check.why}")
            out += [f"        {e.id}: {e.excerpt}" for e in check.examples]
    failed = [c.name.value for c in d.checks if c.level is Level.FAIL]
    warned = sum(c.level is Level.WARN for c in d.checks)
    out.append(f"verdict: {'FAIL' if failed else 'OK'} ({len(d.checks)} checks, "
               f"{len(failed)} failed, {warned} warnings)" + (f": {'; '.join(failed)}"
                                                            if failed else ""))
    return "\n".join(out)


def diagnosis_json(d: Diagnosis) -> str:
    return json.dumps({**to_dict(d), "exit_code": d.exit_code})
