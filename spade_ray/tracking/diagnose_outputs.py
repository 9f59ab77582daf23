"""Sections 1 and 2 of `spade-ray diagnose` (see diagnose.py): what the generator and the
solver produced.
  tasks        generator outputs by outcome (counted by `metrics.rejection_label`: a name the
               model wrote shows in the examples, not in the labels) and family; task rows,
               valid or why not; admitted outputs without a valid task row (FAIL), attempted
               tasks without a row (WARN)
  candidates   each candidate's class (`classify`: what the grader saw first, then how the run
               ended, then what the tests said); missing execution / score rows, suspected hacks,
               the share of candidates that do not parse
Non-goals: re-running anything (diagnose_execution.py does), judging the model's quality.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Sequence

from spade_ray.records import Candidate, CheckResult, ExecStatus, Verdict
from spade_ray.tracking.diagnose_findings import (
    EXAMPLES,
    Check,
    CheckName,
    Example,
    FailureClass,
    Level,
    Section,
    group_counts,
    last_line,
    one_line,
)
from spade_ray.tracking.diagnose_run import RunTrace
from spade_ray.tracking.metrics import rejection_label
from spade_ray.tracking.schema import GeneratorInput

ADMITTED = "admitted"  # generator_inputs.outcome of an output that became a task
# A judgement call, not a measurement: when a quarter of all candidates do not even parse, the
# program assembly (prompt end + completion) is a likelier culprit than the model.
SYNTAX_WARN_SHARE = 0.25

_SYNTAX = re.compile(r"\b(SyntaxError|IndentationError|TabError)\b")


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


def tasks_section(trace: RunTrace) -> Section:
    outputs = group_counts((rejection_label(o.outcome), Example(
        f"r{r}/output{o.index}", f"[{o.family}] {_named(o.outcome)}{one_line(o.completion.text)}"))
        for r, o in trace.inputs)
    tasks = group_counts(("valid" if t.valid else f"invalid: {rejection_label(t.reason)}",
                          Example(t.task.task_id, f"r{r} {t.task.family.value}/{t.task.topic}: "
                                                  f"{'' if t.valid else _named(t.reason)}"
                                                  f"{one_line(t.task.description)}"))
                         for r, t in trace.tasks)
    outputs = tuple(sorted(outputs, key=lambda c: -c.count))  # the common outcomes first
    return Section("tasks", "Tasks", outputs + tasks, _family_notes(trace.inputs),
                   (_admitted_check(trace), _candidate_tasks_check(trace)))


def _named(reason: str) -> str:
    """An example's reason when its count's label drops the name in it (`unbound:<name>` is
    counted as `unbound`: metrics.rejection_label), so the example still shows the name."""
    return "" if rejection_label(reason) == reason else f"{one_line(reason, 40)}: "


def _family_notes(inputs: Sequence[tuple[int, GeneratorInput]]) -> tuple[str, ...]:
    by_family: dict[str, Counter[str]] = defaultdict(Counter)
    for _, o in inputs:
        by_family[o.family][rejection_label(o.outcome)] += 1
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


def candidates_section(trace: RunTrace) -> Section:
    ran = [(c, trace.checks[(r, c.candidate_id)]) for r, c in trace.candidates
           if (r, c.candidate_id) in trace.checks]
    classified = sorted(((c, ch, classify(ch)) for c, ch in ran),
                        key=lambda item: list(FailureClass).index(item[2]))
    counts = group_counts((k.value, Example(c.candidate_id, _class_excerpt(k, c, ch)))
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
        error = last_line(ran.stderr) or next(iter(messages), ran.detail)
        return f"{one_line(error, 50)} | {one_line(candidate.code, 60)}"
    if kind is FailureClass.WRONG_ANSWER:
        failed = next((o for o in check.outcomes if o.outcome is not Verdict.PASSED), None)
        said = f"{failed.name}: {one_line(failed.message, 50)}" if failed else "no test report"
        return f"{check.tests_passed}/{check.tests_total} passed; {said}"
    if kind is FailureClass.PASSED:
        return one_line(candidate.code)
    return f"{one_line(ran.detail)} (wall {ran.wall_s:.2f} s, {ran.peak_memory_mb:.0f} MB)"


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
    examples = tuple(Example(cid, one_line(trace.checks[(r, cid)].suspicion))
                     for r, cid in (passed or suspects)[:EXAMPLES])
    if passed:
        return Check(CheckName.HACKS, Level.FAIL, f"{len(passed)} of {len(suspects)} candidates "
                     "that probed the grader were scored as passing", examples)
    if suspects:
        return Check(CheckName.HACKS, Level.WARN, f"{len(suspects)} candidates probed the "
                     "grader (none scored as passing): read their suspicion", examples)
    return Check(CheckName.HACKS, Level.OK, "no candidate probed the grader")

