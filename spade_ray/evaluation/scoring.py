"""The evaluator: one `Score` per checked candidate, and the order between two scores.

Hard rules first, and only rules:
  * value = 1.0 for a candidate that passed; below it, partial credit from the harness's
    confirmed per-test outcomes: the fraction of the task's tests passed, or, given a task of
    I/O examples, `partial_credit`: no credit for what its prompt gives away (a shown example
    passed earns nothing, a shown example failed, or a run that did not end ok, costs as a
    hidden one failed), and none for what a program earns without solving the task (a table
    of the shown examples and a constant, an argument or one cheap operation on one, shifted
    by a small constant, the nearest shown output, or two of these split by a one-line
    condition: the zero, baselines.py; `return False` passed 3 of 4 hidden examples of a seed
    task, and beat every honest attempt that raised). A repair task gets none (1.0 or 0.0):
    the buggy program its prompt shows is a subtle mutant that passes most examples, so a copy
    of it would outscore an honest fix that breaks one more;
  * value = 0.0 when the run hit a limit (timeout, memory_limit, output_limit), was killed, or
    failed before its tests ran (error with no test report) - whatever it printed;
  * passed = `CheckResult.passed` (every test passed, the sentinel seen, the run ended ok);
  * a `sandbox_error` says nothing about the code: it scores 0.0 with that status, `needs_rerun`
    is true for it, and `compare` refuses it, so it can never become the rejected side of a
    preference pair. The sandbox has already re-run it once on a fresh worker
    (`ExecResult.attempts` is 2); one that still failed is recorded as such, never dropped.
    Nothing a candidate does can make its own run a `sandbox_error` (tests/execution/
    test_grader_canaries.py): a failure it causes is its `error` and scores 0.0.

Order: `rank_key` is the rule key (value, then passed). It depends only on test outcomes, so the
same code gets the same key on every run, and it is a total order fit for sorting. `compare`
refines it: when BOTH candidates pass every test, lower CPU time and then lower peak memory win,
but only beyond a noise margin, and beyond what the harness's own coding of the task's calls
costs in the candidate's process (`codec_margins`: a program can replace that code, so what it
saves there is the harness's work, not a better algorithm). Margins cannot live in a sort key
(being "within noise" is not transitive), which is why efficiency is in `compare` only.

Non-goals: an LLM judge (off by default in the design). Its seam is `compare`: only pairs that
the rules call equal (compare == 0) may be sent to a judge; a judge never overrides a rule.
"""

from __future__ import annotations

from spade_ray.evaluation.baselines import null_credit
from spade_ray.records import (
    Candidate,
    CheckResult,
    ExecStatus,
    Score,
    Task,
    TaskFamily,
    Verdict,
)

# Measured here (HumanEval's 164 canonical solutions x5 through the local sandbox): the same
# program's cpu_s varied by up to 13 ms (16 ms vs 29 ms; 2 ms vs 7.5 ms spikes), so 5 ms is not
# enough; a difference must exceed BOTH the relative and the absolute margin to count.
CPU_MARGIN_REL = 0.25
CPU_MARGIN_S = 0.020
# Same measurement: peak memory of one program varied by at most 0.55 MB (cgroup accounting).
MEMORY_MARGIN_REL = 0.10
MEMORY_MARGIN_MB = 2.0
# The arguments of each call are decoded, and its answer encoded, by the harness's codec in the
# candidate's own process (sandbox/child.py), charged to the run, and the program can replace
# that code: red-team s37 swapped `canonical.decode` for a faster one of its own argument shape
# and won every tie-break against the same `sum(xs)` (0.10 against 0.27-0.34 s of CPU, four
# calls of 100,000 ints). Measured here (pure-Python codec): decode 1.1 us and encode 0.5-0.7 us
# a token, ~4 ns a character of a str or bytes; the margins are about twice the whole cost, so
# no saving on the coding decides a pair. Memory: json.loads' list of token strs and the
# encoder's list are ~60 bytes a token while one call is coded.
CODEC_CPU_S_PER_TOKEN = 4e-6
CODEC_CPU_S_PER_CHAR = 1e-8
CODEC_MB_PER_TOKEN = 1.2e-4

# The share of the examples left above the floor (baselines.null_credit) that a wrong program
# may get right by chance, and so earns nothing either. The floor is the best of a finite family
# of cheap programs; one outside it lands on some of the rest by coincidence, most often on a
# generated task, whose hidden examples are neighbours of its few inputs (tasks/augment.py).
# Measured (/work/notes/s25/h1: a screen of 131 expressions, each bare, shifted by +-1 and behind
# every guard, on the seed pool and on the seed programs admitted as generated tasks): clear
# non-solutions reached 0.20-0.25 of the rest on 4 of 39 generated tasks (`xs.count(t) - 1` for
# a last index, `sorted(xs)[-2]` for a closest value, character counts for word counts), above
# every honest attempt at 0. A third leaves them 0 and keeps the credit of near-solutions (a
# factorial capped at 20: 0.78; one-operator mutants of the references with credit, 54 -> 40 of
# 279 on the generated tasks, 9 -> 9 of 278 on the seed tasks).
CHANCE_SHARE = 1 / 3

# Statuses that score 0.0 even if some test outcomes were reported before the run went wrong:
# a program that passes its tests and then hangs or floods memory is not a good program.
ZERO_STATUSES = frozenset({ExecStatus.TIMEOUT, ExecStatus.MEMORY_LIMIT, ExecStatus.OUTPUT_LIMIT,
                           ExecStatus.KILLED, ExecStatus.SANDBOX_ERROR})


class SandboxFailure(ValueError):
    """A score comes from a failed sandbox, not from the code: re-run it before ranking."""


class IncomparableScores(ValueError):
    """Two scores that cannot be ordered (different tasks or different test counts)."""


def shown_examples(task: Task, hints: int | None = None) -> int:
    """How many of the task's examples its prompt shows: the leading ones that are its visible
    examples (a predict task shows a call, not an example of its `answer()` suite); with
    `hints` (the co-evolution controller's hint lever, tasks/control.py), fewer of them or the
    next ones in order, never more than the task's `most_shown` (admission's bound: no more
    than half of all, and copying the shown ones still fails)."""
    k = len(task.visible)
    if not (k and task.tests.examples[:k] == task.visible):
        return 0
    if hints is None or hints <= k:
        return k if hints is None else hints
    return max(k, min(hints, task.most_shown or k))


def score(candidate: Candidate, result: CheckResult, task: Task | None = None,
          hints: int | None = None) -> Score:
    """The evaluator's verdict on `candidate` from its check result; with its task, partial
    credit leaves out what the task's prompt gave away (`hints`: the examples the prompt showed
    when the controller's hint lever was on; `shown_examples`)."""
    status = result.execution.status
    if status in ZERO_STATUSES or (status is ExecStatus.ERROR and not result.outcomes):
        value, tests_passed = 0.0, 0
    else:
        # An `error` after the report (e.g. a non-zero exit at interpreter exit) keeps partial
        # credit; it still cannot pass, and rank_key puts passed above an equal value.
        tests_passed = result.tests_passed
        if result.passed:
            value = 1.0
        elif task is None:
            value = result.fraction_passed
        elif task.family is TaskFamily.REPAIR:
            value = 0.0
        else:
            value = partial_credit(result, task, hints)
    codec_cpu_s, codec_mb = codec_margins(task) if task is not None else (0.0, 0.0)
    return Score(candidate_id=candidate.candidate_id, task_id=candidate.task_id, value=value,
                 passed=result.passed, tests_passed=tests_passed,
                 tests_total=result.tests_total, status=status,
                 cpu_s=result.execution.cpu_s, peak_memory_mb=result.execution.peak_memory_mb,
                 codec_cpu_s=codec_cpu_s, codec_mb=codec_mb)


def codec_margins(task: Task) -> tuple[float, float]:
    """The CPU seconds (all calls) and MB (the largest call) that the harness's coding of a
    passing candidate's calls can take in its process: each example's arguments decoded and
    its expected result encoded, counted on their canonical text (a JSON array of token
    strings: one '","' between two tokens). 0 for a suite of assert or check code, whose
    arguments the host does not know (HumanEval's; its tasks are never paired)."""
    cpu_s = mb = 0.0
    for example in task.tests.examples:
        tokens = example.args.count('","') + example.expected.count('","') + 2
        chars = len(example.args) + len(example.expected)
        cpu_s += tokens * CODEC_CPU_S_PER_TOKEN + chars * CODEC_CPU_S_PER_CHAR
        mb = max(mb, tokens * CODEC_MB_PER_TOKEN + 2 * chars / 2**20)
    return cpu_s, mb


def partial_credit(result: CheckResult, task: Task, hints: int | None = None) -> float:
    """A failing candidate's value on a task of I/O examples: its credit (hidden examples
    passed less shown ones failed, over the hidden ones plus one for a run that did not end
    ok), rescaled so that what a program that does not solve the task earns
    (baselines.null_credit) is 0, and none below it. A task of assert or check code: the
    fraction of its tests passed."""
    examples = task.tests.examples
    if not examples:
        return result.fraction_passed
    passed = {o.name for o in result.outcomes if o.outcome is Verdict.PASSED}
    right = [f"example[{i}]" in passed for i in range(len(examples))]
    shown = shown_examples(task, hints)
    ended_badly = result.execution.status is not ExecStatus.OK or all(right)
    floor = null_credit(task.tests, shown)
    floor += CHANCE_SHARE * (1.0 - floor)
    if floor >= 1.0:
        return 0.0
    return max(0.0, (_credit(right, shown, ended_badly) - floor) / (1.0 - floor))


def _credit(right: list[bool], shown: int, ended_badly: bool) -> float:
    """Hidden examples passed less shown ones failed (each costs as much as a hidden one), over
    the hidden examples plus one for a run that did not end ok."""
    denominator = len(right) - shown + ended_badly
    gained = sum(right[shown:]) - right[:shown].count(False)
    return max(0, gained) / denominator if denominator else 0.0


def score_many(candidates: list[Candidate], results: list[CheckResult],
               tasks: dict[str, Task] | None = None, hints: int | None = None) -> list[Score]:
    """score() of each candidate, with its task when `tasks` (id -> task) has it."""
    if len(candidates) != len(results):
        raise ValueError(f"score_many got {len(candidates)} candidates but {len(results)} "
                         "check results")
    tasks = tasks or {}
    return [score(c, r, tasks.get(c.task_id), hints) for c, r in zip(candidates, results)]


def needs_rerun(s: Score) -> bool:
    """True when the sandbox failed on this candidate: the score says nothing about the code."""
    return s.status is ExecStatus.SANDBOX_ERROR


def rank_key(s: Score) -> tuple[float, bool]:
    """The rule key: higher value first, then passed. Deterministic for the same code."""
    if needs_rerun(s):
        raise SandboxFailure(f"candidate {s.candidate_id} has a sandbox_error score: the sandbox "
                             "failed, not the code; re-run it before ranking")
    return (s.value, s.passed)


def compare(a: Score, b: Score) -> int:
    """1 if `a` ranks above `b`, -1 if below, 0 if the rules cannot tell them apart."""
    key_a, key_b = rank_key(a), rank_key(b)  # refuses a sandbox_error first
    if a.task_id != b.task_id:
        raise IncomparableScores(f"cannot compare candidates of different tasks: "
                                 f"{a.candidate_id} ({a.task_id}) vs {b.candidate_id} "
                                 f"({b.task_id})")
    if a.tests_total != b.tests_total:
        raise IncomparableScores(f"{a.candidate_id} ran {a.tests_total} tests but "
                                 f"{b.candidate_id} ran {b.tests_total}: not the same test suite")
    if key_a != key_b:
        return 1 if key_a > key_b else -1
    if not (a.passed and b.passed):
        return 0  # efficiency only separates correct programs
    by_cpu = _lower_wins(a.cpu_s, b.cpu_s, CPU_MARGIN_REL,
                         CPU_MARGIN_S + max(a.codec_cpu_s, b.codec_cpu_s))
    if by_cpu:
        return by_cpu
    return _lower_wins(a.peak_memory_mb, b.peak_memory_mb, MEMORY_MARGIN_REL,
                       MEMORY_MARGIN_MB + max(a.codec_mb, b.codec_mb))


def _lower_wins(x: float, y: float, rel: float, absolute: float) -> int:
    """1 if x is lower than y beyond both margins, -1 if higher, else 0 (within noise)."""
    diff = abs(x - y)
    if diff <= absolute or diff <= rel * min(x, y):
        return 0
    return 1 if x < y else -1
