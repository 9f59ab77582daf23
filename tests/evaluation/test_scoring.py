"""The evaluator's rules, through a real local sandbox where a run is needed."""

import dataclasses

import pytest

from spade_ray.evaluation import scoring
from spade_ray.evaluation.baselines import (
    null_credit,
)
from spade_ray.evaluation.scoring import (
    CPU_MARGIN_S,
    IncomparableScores,
    SandboxFailure,
    compare,
    needs_rerun,
    rank_key,
    score,
    score_many,
    shown_examples,
)
from spade_ray.execution import Sandbox, canonical
from spade_ray.records import (
    Candidate,
    CheckResult,
    ExecResult,
    ExecStatus,
    Limits,
    Score,
    Task,
    TaskFamily,
    TaskSource,
    TestOutcome,
    TestSuite,
)
from tests.conftest import TEST_LIMITS, open_sandbox

ADD_TESTS = TestSuite(asserts=("assert add(1, 2) == 3", "assert add(0, 0) == 0",
                               "assert add(-2, 1) == -1"))
# HANGS ends on the CPU limit; the wall limit leaves SLOW (0.25 s of CPU here) room on a loaded
# machine: at 1 s it timed out once while a make run shared the two cores, and its verdict flipped.
LIMITS = Limits(timeout_s=3.0, cpu_s=1.0, memory_mb=128, max_output_bytes=10_000)

CORRECT = "def add(a, b):\n    return a + b\n"
# CPU before defining add, far beyond the CPU noise margin (20 ms and 25 %): ~0.15-0.25 s on
# these machines (8 million took 0.04 s, 20 ms above BIG's: the tie-break flipped run to run).
SLOW = "_ = sum(range(30_000_000))\n" + CORRECT
# 40 MB held while the tests run: far beyond the memory margin (2 MB and 10 %).
BIG = "_keep = bytearray(40_000_000)\n" + CORRECT
PARTIAL = "def add(a, b):\n    return a + b if a >= 0 else 0\n"  # fails add(-2, 1) only
WRONG = "def add(a, b):\n    return a - b - 1\n"
HANGS = "while True:\n    pass\n"
BROKEN = "def add(a, b) return a + b\n"


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(backend="local", limits=LIMITS, workers=2) as sb:
        yield sb


def candidate(code: str, index: int = 0, task_id: str = "t") -> Candidate:
    return Candidate(candidate_id=f"{task_id}/{index}", task_id=task_id, code=code,
                     solver_version=0, prompt_tokens=0, completion_tokens=0)


def scored(sandbox, codes: list[str]) -> list[Score]:
    candidates = [candidate(code, i) for i, code in enumerate(codes)]
    return score_many(candidates, sandbox.check_many(codes, [ADD_TESTS] * len(codes)))


def made_score(value=1.0, passed=True, cpu_s=0.01, peak_memory_mb=10.0, index=0,
               status=ExecStatus.OK, task_id="t") -> Score:
    return Score(candidate_id=f"{task_id}/{index}", task_id=task_id, value=value, passed=passed,
                 tests_passed=round(value * 3), tests_total=3, status=status, cpu_s=cpu_s,
                 peak_memory_mb=peak_memory_mb)


def check_result(status: ExecStatus, outcomes: tuple[str, ...], passed: bool) -> CheckResult:
    execution = ExecResult(status=status, exit_code=0, stdout="", stderr="", truncated=False,
                           wall_s=0.1, cpu_s=0.05, peak_memory_mb=5.0, env_hash="x",
                           limits_enforced_by="test")
    return CheckResult(execution=execution, tests_total=len(outcomes), passed=passed,
                       outcomes=tuple(TestOutcome(f"assert[{i}]", o, "", 0.0)
                                      for i, o in enumerate(outcomes)))


def test_value_is_the_fraction_of_tests_passed(sandbox):
    correct, partial, wrong = scored(sandbox, [CORRECT, PARTIAL, WRONG])
    assert (correct.value, partial.value, wrong.value) == (1.0, pytest.approx(2 / 3), 0.0)
    assert (partial.tests_passed, partial.tests_total) == (2, 3)


def test_passed_only_when_every_test_passed(sandbox):
    assert [s.passed for s in scored(sandbox, [CORRECT, PARTIAL])] == [True, False]


@pytest.mark.parametrize("code, status", [
    (HANGS, ExecStatus.TIMEOUT),
    ("_ = bytearray(400_000_000)\n" + CORRECT, ExecStatus.MEMORY_LIMIT),
    ("print('x' * 50_000)\n" + CORRECT, ExecStatus.OUTPUT_LIMIT),
    (BROKEN, ExecStatus.ERROR),
])
def test_limits_and_errors_before_the_tests_score_zero(sandbox, code, status):
    (s,) = scored(sandbox, [code])
    assert (s.status, s.value, s.passed) == (status, 0.0, False)


@pytest.mark.parametrize("status", [ExecStatus.TIMEOUT, ExecStatus.MEMORY_LIMIT,
                                    ExecStatus.OUTPUT_LIMIT, ExecStatus.KILLED])
def test_a_limit_after_the_tests_reported_still_scores_zero(status):
    s = score(candidate(CORRECT), check_result(status, ("passed",) * 3, passed=False))
    assert (s.value, s.tests_passed) == (0.0, 0)


def test_error_after_the_tests_keeps_partial_credit_but_ranks_below_a_pass():
    late_error = score(candidate(CORRECT), check_result(ExecStatus.ERROR, ("passed",) * 3,
                                                        passed=False))
    assert late_error.value == 1.0 and not late_error.passed
    assert compare(made_score(), late_error) == 1


def test_sandbox_error_is_flagged_for_rerun_and_never_ranked():
    s = score(candidate(CORRECT), check_result(ExecStatus.SANDBOX_ERROR, (), passed=False))
    assert needs_rerun(s) and s.value == 0.0
    assert not needs_rerun(made_score())
    with pytest.raises(SandboxFailure, match="re-run"):
        compare(made_score(), s)


def test_higher_value_wins_whatever_the_cost():
    cheap_partial = made_score(value=2 / 3, passed=False, cpu_s=0.001, peak_memory_mb=1.0)
    costly_pass = made_score(cpu_s=0.9, peak_memory_mb=100.0, index=1)
    assert compare(costly_pass, cheap_partial) == 1
    assert compare(cheap_partial, costly_pass) == -1


def test_clearly_less_cpu_wins_between_two_passes(sandbox):
    fast, slow = scored(sandbox, [CORRECT, SLOW])
    assert compare(fast, slow) == 1 and compare(slow, fast) == -1


@pytest.mark.parametrize("a_ms, b_ms", [(10, 10 + 1000 * CPU_MARGIN_S - 1), (100, 124)])
def test_cpu_differences_within_noise_are_ties(a_ms, b_ms):
    a = made_score(cpu_s=a_ms / 1000)
    b = made_score(cpu_s=b_ms / 1000, index=1)
    assert compare(a, b) == 0 == compare(b, a)


def test_memory_breaks_a_cpu_tie_only_beyond_its_margin():
    base = made_score(cpu_s=0.010, peak_memory_mb=10.0)
    assert compare(base, dataclasses.replace(base, peak_memory_mb=13.0)) == 1
    assert compare(base, dataclasses.replace(base, peak_memory_mb=11.5)) == 0  # < 2 MB
    assert compare(dataclasses.replace(base, peak_memory_mb=100.0),
                   dataclasses.replace(base, peak_memory_mb=108.0)) == 0  # < 10 %


# Red-team s37: the harness decodes each call's arguments in the candidate's process, charged to
# it; this correct program swaps in a faster decoder of its own argument shape (anything else
# goes to the harness's) and read 0.10 s of CPU against the same sum(xs)'s 0.27-0.34 s.
OWN_DECODER = """
import json, sys
_codec = sys.modules["canonical"]
_theirs = _codec.decode
def _mine(text):
    try:
        t = json.loads(text)
        n = int(t[4][1:])
        if t[0] == "U4" and t[3] == "U1" and t[4][0] == "L" and len(t) == 6 + n:
            return (int(t[1][1:], 16), t[2][1:], ([int(s[1:], 16) for s in t[5:5 + n]],), {})
    except Exception:
        pass
    return _theirs(text)
_codec.decode = _mine
def total(xs):
    return sum(xs)
"""


def sum_task(examples: int, items: int) -> Task:
    lists = [list(range(i, i + items)) for i in range(examples)]
    tests = TestSuite(examples=tuple(canonical.example((xs,), sum(xs)) for xs in lists),
                      entry_point="total")
    return Task(task_id="total", family=TaskFamily.CODEGEN, topic="lists",
                description="The sum of xs.", entry_point="total",
                signature="def total(xs: list) -> int:", tests=tests,
                reference="def total(xs: list) -> int:\n    return sum(xs)\n", buggy=None,
                visible=tests.examples[:1], limits=LIMITS, source=TaskSource.SEED)


def test_a_program_that_replaces_the_harness_codec_does_not_win_the_tie_break(backend):
    task = sum_task(examples=4, items=50_000)
    honest = "def total(xs):\n    return sum(xs)\n"
    codes = [OWN_DECODER, honest] * 2
    with open_sandbox(backend, limits=TEST_LIMITS, workers=1) as sandbox:
        results = [sandbox.check(code, task.tests) for code in codes]
    scores = [score(candidate(code, i, "total"), r, task)
              for i, (code, r) in enumerate(zip(codes, results))]
    assert all(s.passed for s in scores)
    assert scores[0].codec_cpu_s > 0.5 and scores[0].codec_mb > 5
    assert compare(scores[0], scores[1]) == 0 == compare(scores[2], scores[3])


def test_codec_margins_follow_the_data_a_task_moves_and_only_widen_the_tie():
    small_cpu, small_mb = scoring.codec_margins(examples_task(TaskFamily.CODEGEN, 2))
    big_cpu, big_mb = scoring.codec_margins(sum_task(examples=4, items=50_000))
    assert small_cpu < 0.001 and small_mb < 0.01  # six calls of one int: the margins of before
    assert 0.8 < big_cpu < 1.2 and 5 < big_mb < 10
    fast = dataclasses.replace(made_score(cpu_s=0.1), codec_cpu_s=big_cpu, codec_mb=big_mb)
    assert compare(fast, dataclasses.replace(fast, cpu_s=0.9, candidate_id="t/1")) == 0
    assert compare(fast, dataclasses.replace(fast, cpu_s=1.5, candidate_id="t/1")) == 1
    assert compare(fast, dataclasses.replace(fast, peak_memory_mb=18.0)) == 0
    assert compare(fast, dataclasses.replace(fast, peak_memory_mb=20.0)) == 1


def test_efficiency_does_not_separate_failing_candidates():
    a = made_score(value=2 / 3, passed=False, cpu_s=0.001)
    b = made_score(value=2 / 3, passed=False, cpu_s=0.9, index=1)
    assert compare(a, b) == 0


def test_rank_key_sorts_by_value_then_passed():
    scores = [made_score(value=1.0, passed=False), made_score(value=0.0, passed=False),
              made_score(value=1.0), made_score(value=1 / 3, passed=False)]
    ordered = sorted(scores, key=rank_key, reverse=True)
    assert [(s.value, s.passed) for s in ordered] == [(1.0, True), (1.0, False), (1 / 3, False),
                                                     (0.0, False)]


def test_scores_of_different_tasks_are_incomparable():
    with pytest.raises(IncomparableScores, match="different tasks"):
        compare(made_score(task_id="a"), made_score(task_id="b"))


def test_same_code_gets_the_same_verdicts_every_time(sandbox):
    codes = [CORRECT, SLOW, BIG, PARTIAL, WRONG, HANGS, BROKEN]
    runs = []
    for _ in range(3):
        scores = scored(sandbox, codes)
        verdicts = [(s.value, s.passed, s.status) for s in scores]
        order = [[compare(a, b) for b in scores] for a in scores]
        runs.append((verdicts, order))
    assert runs[1] == runs[0] and runs[2] == runs[0]
    # The order is not trivially all ties: efficiency and correctness both separate someone.
    order = runs[0][1]
    assert order[0][1] == 1 and order[0][2] == 1 and order[0][3] == 1 and order[3][4] == 1


def examples_task(family: TaskFamily, visible: int, inputs=(3, 12, 7, 20, 0, 15)) -> Task:
    """clip(x) = min(x, 10) on six inputs, the first `visible` shown in the prompt."""
    examples = tuple(canonical.example((x,), min(x, 10)) for x in inputs)
    return Task(task_id="clip", family=family, topic="math", description="Clip x at 10.",
                entry_point="clip", signature="def clip(x: int) -> int:",
                tests=TestSuite(examples=examples, entry_point="clip"),
                reference="def clip(x: int) -> int:\n    return min(x, 10)\n", buggy=None,
                visible=examples[:visible], limits=LIMITS, source=TaskSource.SEED)


def test_the_examples_a_prompt_shows_give_no_partial_credit(sandbox):
    # clip(3) == 3 and clip(12) == 10 are shown; clip(7), clip(20), clip(6), clip(15) are not.
    # A program that ignores its input gets half of those right (10, or x itself), and a third
    # of the other half may be luck (CHANCE_SHARE): the zero is at 2/3.
    # (With clip(0) hidden, `0 if x < 2 else 10` gets three: baselines.GUARDS.)
    codes = {"table": "{3: 3, 12: 10}.get(x, 5)",  # the shown examples: 2 of 6, credit 0
             "table_and_10": "{3: 3, 12: 10}.get(x, 10)",  # 4 of 6: no more than a constant
             "echo_below_10": "x if x < 10 else 0",  # 2 hidden right, 1 shown wrong
             "wrong_at_6": "min(x, 10) if x != 6 else 1",  # 3 of 4 hidden: 0.25
             "wrong_at_3": "min(x, 10) if x != 3 else 0"}  # a shown one wrong costs as much
    task = examples_task(TaskFamily.CODEGEN, visible=2, inputs=(3, 12, 7, 20, 6, 15))
    assert null_credit(examples_task(TaskFamily.CODEGEN, visible=2).tests, 2) == 0.75
    assert shown_examples(task) == 2 and null_credit(task.tests, 2) == 0.5
    programs = [f"def clip(x):\n    return {body}\n" for body in codes.values()]
    results = sandbox.check_many(programs, [task.tests] * len(programs))
    scores = score_many([candidate(code, i, "clip") for i, code in enumerate(programs)], results,
                        {"clip": task})
    assert [s.tests_passed for s in scores] == [2, 4, 3, 5, 5]
    assert not any(s.passed for s in scores)
    assert [round(s.value, 4) for s in scores] == [0.0, 0.0, 0.0, 0.25, 0.25]
    assert score(candidate(programs[0], 0, "clip"), results[0]).value == pytest.approx(2 / 6)
    # Nothing shown, or a predict task (its prompt shows a call, not an example of its suite).
    assert shown_examples(examples_task(TaskFamily.CODEGEN, visible=0)) == 0
    predict = dataclasses.replace(task, family=TaskFamily.PREDICT, tests=TestSuite(
        examples=(canonical.example((), 10),), entry_point="answer"))
    assert shown_examples(predict) == 0


def test_a_program_that_ignores_its_input_is_the_zero_of_partial_credit(sandbox):
    # is_even on six inputs, two shown: `return False` gets 3 of the 4 hidden ones right, as
    # a table of the shown answers plus False does; neither beats an attempt that raises.
    # (The floor is all of them: `x % 2 == 0` splitting two constants is a guess, SPLITS.)
    examples = tuple(canonical.example((x,), x % 2 == 0) for x in (2, 3, 5, 7, 9, 4))
    task = dataclasses.replace(examples_task(TaskFamily.CODEGEN, visible=2), tests=TestSuite(
        examples=examples, entry_point="clip"), visible=examples[:2])
    assert null_credit(task.tests, 2) == 1.0
    programs = ["def clip(x):\n    return False\n",
                "def clip(x):\n    return {2: True, 3: False}.get(x, False)\n",
                "def clip(x):\n    raise ValueError(x)\n",
                "def clip(x):\n    return x % 2 == 0 if x != 4 else None\n"]
    results = sandbox.check_many(programs, [task.tests] * len(programs))
    scores = score_many([candidate(code, i, "clip") for i, code in enumerate(programs)], results,
                        {"clip": task})
    assert [s.tests_passed for s in scores] == [4, 5, 0, 5]
    assert [s.value for s in scores] == [0.0, 0.0, 0.0, 0.0]  # 3 of 4 hidden is the zero
    assert compare(scores[0], scores[2]) == 0 and compare(scores[1], scores[2]) == 0


def test_a_run_that_ends_badly_after_every_test_passed_scores_below_one(sandbox):
    # All six examples right, then the interpreter exits with status 1: it did not pass, and
    # a policy-gradient reward (the value) must say so.
    program = "import sys\nsys.stdout.close()\ndef clip(x):\n    return min(x, 10)\n"
    task = examples_task(TaskFamily.CODEGEN, visible=2, inputs=(3, 12, 7, 20, 6, 15))
    (result,) = sandbox.check_many([program], [task.tests])
    s = score(candidate(program, 0, "clip"), result, task)
    assert (s.tests_passed, s.passed, s.status) == (6, False, ExecStatus.ERROR), result.execution
    assert round(s.value, 4) == 0.4  # 4 of 5 against the floor's 0.5 and chance's 1/6


def test_examples_the_hint_lever_shows_give_no_partial_credit_either(sandbox, monkeypatch):
    # x * x + 5 on 1..10, two visible: a table of the first five beats the floor (two
    # constants split by a condition: two hidden right) at the task's own two, and is worth
    # nothing once the hint lever shows three. The lever's own arithmetic, without the
    # allowance for luck (tested on its own below).
    monkeypatch.setattr(scoring, "CHANCE_SHARE", 0.0)
    examples = tuple(canonical.example((x,), x * x + 5) for x in range(1, 11))
    task = dataclasses.replace(examples_task(TaskFamily.CODEGEN, visible=2), tests=TestSuite(
        examples=examples, entry_point="clip"), visible=examples[:2], most_shown=3)
    table = "def clip(x):\n    return {1: 6, 2: 9, 3: 14, 4: 21, 5: 30}.get(x, 0)\n"
    assert [shown_examples(task, h) for h in (None, 0, 1, 3, 100)] == [2, 0, 1, 3, 3]
    # admission's bound (None: the visible ones) caps what the lever shows
    for most, shown in ((None, 2), (2, 2), (4, 4)):
        bounded = dataclasses.replace(task, most_shown=most)
        assert shown_examples(bounded, 100) == shown
    (result,) = sandbox.check_many([table], [task.tests])
    assert result.tests_passed == 5

    def value(hints):
        return score(candidate(table, 0, "clip"), result, task, hints).value

    # two shown: 3 of 8 hidden against the floor's 2; three: 2 of 7 against 2; one: 4 of 9
    # against 2
    assert [round(value(h), 4) for h in (None, 3, 1)] == [0.1667, 0.0, 0.2857]


def test_a_repair_is_right_or_it_is_not(sandbox):
    # The buggy program a repair prompt shows passes most examples by construction: copied, it
    # would outscore an honest fix that breaks one more.
    task = dataclasses.replace(examples_task(TaskFamily.REPAIR, visible=2),
                               buggy="def clip(x: int) -> int:\n    return min(x, 15)\n")
    fix, copy, near = task.reference, task.buggy, "def clip(x):\n    return min(x, 10) or 1\n"
    results = sandbox.check_many([fix, copy, near], [task.tests] * 3)
    assert [r.tests_passed for r in results] == [6, 3, 5]
    scores = score_many([candidate(code, i, "clip") for i, code in enumerate([fix, copy, near])],
                        results, {"clip": task})
    assert [(s.value, s.passed) for s in scores] == [(1.0, True), (0.0, False), (0.0, False)]
