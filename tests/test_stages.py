"""Stage helpers of the round: which tasks are flaky, and what the hint lever shows."""

import dataclasses

from spade_ray import stages
from spade_ray.evaluation import scoring
from spade_ray.execution import canonical
from spade_ray.records import TaskFamily, TestSuite
from tests.conftest import TEST_LIMITS
from tests.tracking import factories as f


def examples_task(task_id: str, family: TaskFamily, expected: int):
    """A task whose tests expect `expected` for f(2); its reference returns 4."""
    entry = "answer" if family is TaskFamily.PREDICT else "f"
    args = () if family is TaskFamily.PREDICT else (2,)
    return dataclasses.replace(
        f.task(), task_id=task_id, family=family, reference="def f(x):\n    return x * 2\n",
        tests=TestSuite(examples=(canonical.example(args, expected),), entry_point=entry))


def test_a_task_whose_reference_fails_its_own_tests_now_is_flaky(sandbox):
    """What a reference reading its process would do on an unlucky worker, made certain: its
    tests expect what it does not return here. A predict task compares a literal with its
    stored answer and gets no control."""
    tasks = [examples_task("good", TaskFamily.CODEGEN, 4),
             examples_task("flaky", TaskFamily.CODEGEN, 5),
             examples_task("flaky-repair", TaskFamily.REPAIR, 5),
             examples_task("predict", TaskFamily.PREDICT, 5)]
    controls = stages.control(sandbox, tasks, TEST_LIMITS)
    assert controls.flaky == {"flaky", "flaky-repair"} and controls.cpu_s > 0
    assert stages.control(sandbox, tasks[3:], TEST_LIMITS) == stages.Controls()


def test_what_the_hint_lever_showed_earns_no_partial_credit(sandbox, monkeypatch):
    # f(x) = x * x + 5 on ten inputs, two visible; at hints 3 the prompt showed the first three
    # (not x * x + 1 or 2x, the floor's guesses, nor inputs below 3, where one is a guard's:
    # GUARDS).
    # The lever's own arithmetic, without scoring's allowance for luck (test_scoring's).
    monkeypatch.setattr(scoring, "CHANCE_SHARE", 0.0)
    examples = tuple(canonical.example((x,), x * x + 5) for x in range(10, 20))
    task = dataclasses.replace(f.task(), task_id="double", family=TaskFamily.CODEGEN,
                               entry_point="f", reference="def f(x):\n    return x * x + 5\n",
                               tests=TestSuite(examples=examples, entry_point="f"),
                               visible=examples[:2], most_shown=3)
    table = dataclasses.replace(f.candidate("double"), code=(
        "def f(x):\n    return {10: 105, 11: 126, 12: 149, 13: 174, 14: 201}.get(x, -1)\n"))
    checks = sandbox.check_many([table.code], [task.tests], limits=TEST_LIMITS)

    def value(hints):
        solutions = stages.Solutions((task,), ("p",), (table,), 1, 0.0, hints)
        return stages.score(solutions, checks, pair_margin=0.0, with_groups=False).scores[0].value

    # three of the eight unshown right against two constants split by a condition; two of
    # seven against two
    assert (round(value(None), 4), value(3)) == (0.1667, 0.0)
