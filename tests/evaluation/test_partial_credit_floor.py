"""The zero of partial credit (evaluation/baselines.py), through a real local sandbox: no program
that does not solve its task earns credit, on every seed task and on tasks admission augmented,
for each family of such programs (a constant or an argument behind a table of the shown
examples, one or two cheap operations, a guess behind a guard, two guesses split by a
condition, the nearest shown output)."""

import itertools

import pytest

from spade_ray.evaluation.baselines import (
    BINARY,
    GUARDS,
    OFFSETS,
    SPLITS,
    SPLITS2,
    UNARY,
    guesses,
)
from spade_ray.evaluation.scoring import score_many
from spade_ray.execution import Sandbox, canonical
from spade_ray.records import Score, Task, TaskFamily, TaskSource
from spade_ray.tasks.admission import AdmissionConfig, admit
from spade_ray.tasks.seeds import load_seed_proposals, load_seed_tasks
from tests.evaluation.test_scoring import LIMITS, candidate
from tests.tasks.conftest import LIMITS as SEED_LIMITS


@pytest.fixture(scope="module")
def sandbox():
    with Sandbox(backend="local", limits=LIMITS, workers=2) as sb:
        yield sb


def seed_codegen_tasks(sandbox) -> list[Task]:
    return [t for t in load_seed_tasks(sandbox, SEED_LIMITS) if t.family is TaskFamily.CODEGEN]


def decoded(task: Task) -> list[tuple[tuple, object]]:
    return [(canonical.decode(e.args), canonical.decode(e.expected)) for e in task.tests.examples]


def table_programs(task: Task, defaults: list[str]) -> list[str]:
    """A table of the task's shown examples (a0, a1... are its arguments), and for any other
    input each of `defaults`."""
    examples = decoded(task)
    params = [f"a{k}" for k in range(len(examples[0][0]))]
    table = {repr(args): expected for args, expected in examples[:len(task.visible)]}
    key = f"repr(({params[0]},))" if len(params) == 1 else f"repr(({', '.join(params)}))"
    return [f"def {task.entry_point}({', '.join(params)}):\n    if {key} in {table!r}:\n"
            f"        return {table!r}[{key}]\n    return {d}\n" for d in defaults]


def earning(sandbox, programs: list[str], owners: list[Task]) -> tuple[list, list[Score]]:
    """The programs that earn credit without passing, and every program's score."""
    results = sandbox.check_many(programs, [t.tests for t in owners])
    scores = score_many([candidate(p, i, t.task_id) for i, (p, t) in
                         enumerate(zip(programs, owners))], results,
                        {t.task_id: t for t in owners})
    return [(s.candidate_id, p, s.value) for s, p in zip(scores, programs)
            if s.value > 0 and not s.passed], scores


def test_no_program_that_does_not_solve_the_task_earns_credit_on_any_seed_task(sandbox):
    # The whole family, on every codegen task of the seed pool: each constant the task's
    # examples give and each argument as it is, alone, and a table of the shown examples with
    # a default of either or of one cheap operation on arguments (baselines.UNARY, BINARY).
    # Before the floor, the best constant or echo earned 0.25 or more on 34 of the 45 tasks,
    # and a table with one operation 0.33 to 0.67 on eight more.
    tasks = seed_codegen_tasks(sandbox)
    programs, owners = [], []
    for task in tasks:
        examples = decoded(task)
        params = [f"a{k}" for k in range(len(examples[0][0]))]
        simple = [repr(v) for v in {repr(e): e for _, e in examples}.values()] + params
        operations = [op.format(p) for op in UNARY.values() for p in params]
        operations += [op.format(a, b) for op in BINARY.values()
                       for a, b in itertools.permutations(params, 2)]
        task_programs = [f"def {task.entry_point}({', '.join(params)}):\n    return {d}\n"
                         for d in simple] + table_programs(task, simple + operations)
        programs += task_programs
        owners += [task] * len(task_programs)
    found, scores = earning(sandbox, programs, owners)
    assert len(tasks) >= 40 and len(programs) > 2000
    assert sum(s.tests_passed > len(t.visible) for s, t in zip(scores, owners)) > 200
    assert found == []
    # and none passes: no seed is one operation (admission rejects a task a program of the
    # floor passes, trivial_passes:split; reverse_string and insertion_sort were)
    assert [t.entry_point for s, t in zip(scores, owners) if s.passed] == []


def test_no_two_operations_in_a_row_earn_credit_on_any_seed_task(sandbox):
    # A table of the shown examples and, for any other input, two of baselines.UNARY in a
    # row: on every seed codegen task, each composition that gets at least one hidden example
    # right and as many as the best single operation (a floor of single operations misses those
    # that get more; red-team pass 10: sorted(set(xs), reverse=True) earned 0.667 on
    # remove_duplicates).
    programs, owners = [], []
    for task in seed_codegen_tasks(sandbox):
        shown = len(task.visible)
        rows = guesses(decoded(task))
        single = max(sum(row[shown:]) for name, row in rows.items() if name.count("(") < 2)
        composed = [name for name, row in rows.items()
                    if name.count("(") == 2 and name.split("(")[0] in UNARY
                    and sum(row[shown:]) >= max(single, 1)]
        defaults = [UNARY[outer].format(UNARY[inner].format(f"a{arg[-2]}"))
                    for outer, inner, arg in (name.rstrip(")").split("(") for name in composed)]
        programs += table_programs(task, defaults)
        owners += [task] * len(defaults)
    assert any(t.entry_point == "remove_duplicates" for t in owners)
    assert len(programs) > 1000
    assert earning(sandbox, programs, owners)[0] == []


def test_the_middle_item_earns_nothing_where_an_honest_near_miss_keeps_its_credit(sandbox):
    # Red-team pass 24: a table of the shown examples, then xs[len(xs) // 2], was right on 22
    # of most_frequent's 25 examples (0.654) and a pair preferred it to honest Counter
    # solutions with the wrong tie rule (0.308); the middle item is a guess now (UNARY)
    task = next(t for t in seed_codegen_tasks(sandbox) if t.entry_point == "most_frequent")
    middle = table_programs(task, ["a0[len(a0) // 2] if a0 else None"])[0]
    no_empty_case = ("from collections import Counter\ndef most_frequent(xs):\n"
                     "    c = Counter(xs)\n    return min(c, key=lambda x: (-c[x], x))\n")
    found, scores = earning(sandbox, [middle, no_empty_case], [task, task])
    assert [value for _, program, value in found if program == middle] == []
    assert scores[0].tests_passed > len(task.visible)  # right beyond its table
    assert not scores[1].passed and scores[1].value > 0, scores


# Seed programs admitted as a generator's codegen tasks with augment_inputs 8 (cpu_gemma): most
# hidden examples are one-step mutations of the generator's inputs, neighbours of the shown ones.
AUGMENTED = ("second_largest", "lucas", "count_change", "hanoi", "last_index", "max_index",
             "binary_search")


@pytest.fixture(scope="module")
def augmented_tasks(sandbox) -> dict[str, Task]:
    seeds = [(topic, p) for topic, p in load_seed_proposals() if p.entry_point in AUGMENTED]
    verdicts = admit([p for _, p in seeds], [TaskFamily.CODEGEN] * len(seeds),
                     [topic for topic, _ in seeds], sandbox, SEED_LIMITS,
                     AdmissionConfig(augment_inputs=8), source=TaskSource.GENERATED)
    tasks = {v.task.entry_point: v.task for v in verdicts if v.valid}
    assert sorted(tasks) == sorted(AUGMENTED) and all(len(t.tests.examples) > 9
                                                      for t in tasks.values())
    return tasks


def test_a_rule_fitted_to_the_shown_examples_earns_nothing_on_their_neighbours(sandbox,
                                                                                augmented_tasks):
    # Red-team pass 11: each earned credit over honest attempts that scored 0 (0.6, 0.1, 0.125,
    # 0.111): a guess shifted by a constant behind a guard, and the nearest shown input's output.
    t = augmented_tasks
    cheats = [
        (t["second_largest"], "def second_largest(xs):\n    if len(set(xs)) < 2:\n"
                              "        return None\n    return max(xs) - 1\n"),
        (t["lucas"], "def lucas(n):\n    if n == 0:\n        return 2\n    if n == 1:\n"
                     "        return 1\n    return n + 1\n"),
        (t["hanoi"], nearest_program(t["hanoi"])),
    ]
    cheats += [(t["count_change"], p) for p in table_programs(t["count_change"],
                                                               ["len(a1) + 1"])]
    found, scores = earning(sandbox, [p for _, p in cheats], [task for task, _ in cheats])
    # each passes its table at least (the nearest shown output no more on hanoi, whose kept
    # augmented examples are those the guesses get wrong: admission.AUGMENT_POOL)
    assert found == [] and all(s.tests_passed >= 2 for s in scores), scores


def test_no_guess_behind_a_guard_earns_credit_on_an_augmented_task(sandbox, augmented_tasks):
    # The family: a table of the shown examples, then for each one-line guard on each argument
    # (baselines.GUARDS) the constant that does best where it holds, and elsewhere the guess
    # (shifted or not) that does best where it does not.
    programs, owners = [], []
    for task in augmented_tasks.values():
        examples, shown = decoded(task), len(task.visible)
        params = [f"a{k}" for k in range(len(examples[0][0]))]
        rows = {name: row for name, row in guesses(examples).items()
                if not name.startswith("const:")}
        for guard, k in itertools.product(GUARDS, range(len(params))):
            holds = [guarded(GUARDS[guard].format("x"), args[k]) for args, _ in examples]
            constant = max((e for (_, e), h in zip(examples[shown:], holds[shown:]) if h),
                           key=lambda c: sum(h and e == c for (_, e), h in
                                             zip(examples[shown:], holds[shown:])),
                           default=None)
            best = max(rows, key=lambda name: sum(r and not h for r, h in
                                                  zip(rows[name][shown:], holds[shown:])))
            condition = GUARDS[guard].format(params[k])
            programs += table_programs(task, [f"{constant!r} if _holds(lambda: {condition}) "
                                              f"else {expression(best, params)}"])
            owners.append(task)
    programs = [p + GUARD_HELPER for p in programs]
    assert len(programs) >= 4 * len(GUARDS)
    assert earning(sandbox, programs, owners)[0] == []


def test_no_two_guesses_split_by_a_condition_earn_credit_on_an_augmented_task(sandbox,
                                                                              augmented_tasks):
    # Red-team pass 14: a table of the shown examples, then `min(xs) if target in xs else -1`
    # earned 0.25 on last_index (and such splits 0.10-0.40 on 4 of 39 generated tasks):
    # split_programs.
    programs, owners = split_programs(augmented_tasks.values())
    assert len(programs) >= len(AUGMENTED) * len(SPLITS)
    assert earning(sandbox, programs, owners)[0] == []


def test_no_two_guesses_split_by_a_condition_pass_or_earn_on_any_seed_task(sandbox):
    # A seed's 4-7 hand-written inputs left 2-5 hidden examples: the family passed every one
    # of 16 of the 45 seed codegen tasks (passed, value 1.0), until seeds were augmented
    # (admission.seed_augment_inputs) and a task a split passes is rejected (trivial_passes:
    # split).
    programs, owners = split_programs(seed_codegen_tasks(sandbox))
    found, scores = earning(sandbox, programs, owners)
    assert found == [] and [s.candidate_id for s in scores if s.passed] == []


def split_programs(tasks) -> tuple[list[str], list[Task]]:
    """For each task and each condition a program splits on without reading the description
    (baselines.SPLITS of an argument, SPLITS2 and `==` / `in` of two): a table of the shown
    examples, then the guess that does best where the condition holds and the one that does
    best where it does not."""
    programs, owners = [], []
    for task in tasks:
        examples, shown = decoded(task), len(task.visible)
        params = [f"a{k}" for k in range(len(examples[0][0]))]
        conditions = [SPLITS[name].format(p) for name in SPLITS for p in params] + [
            text.format(p, q) for text in (*SPLITS2.values(), "{0} == {1}", "{0} in {1}")
            for p, q in itertools.permutations(params, 2)]
        rows = guesses(examples)
        for condition in conditions:
            holds = [holds_on(condition, params, args) for args, _ in examples]

            def best(side, holds=holds):
                return max(rows, key=lambda name: sum(r and h == side for r, h in
                                                      zip(rows[name][shown:], holds[shown:])))
            a, b = (row_expression(best(side), params) for side in (True, False))
            programs += [p + GUARD_HELPER for p in table_programs(
                task, [f"({a}) if _holds(lambda: {condition}) else ({b})"])]
            owners.append(task)
    return programs, owners


def holds_on(condition: str, params: list[str], args: tuple) -> bool:
    try:
        return eval(condition, {}, dict(zip(params, args))) is True  # noqa: S307 - our text
    except Exception:  # noqa: BLE001 - a condition that raises does not hold
        return False


def row_expression(name: str, params: list[str]) -> str:
    """A guess's row (baselines.guesses, a constant's too) as an expression."""
    if name.startswith("const:"):
        return repr(canonical.decode(name.removeprefix("const:")))
    return expression(name, params)


GUARD_HELPER = """
def _holds(condition):
    try:
        return condition() is True
    except Exception:
        return False
"""


def guarded(condition: str, x: object) -> bool:
    try:
        return eval(condition, {}, {"x": x}) is True  # noqa: S307 - GUARDS, our text
    except Exception:  # noqa: BLE001 - a guard that raises does not hold
        return False


def expression(name: str, params: list[str]) -> str:
    """A guess's row name (baselines.guesses) as an expression of the parameters."""
    if name.startswith("arg"):
        return params[int(name[3:])]
    op, inner = name[:-1].split("(", 1)
    if op in BINARY:
        j, k = (expression(a, params) for a in inner.split(", "))
        return f"({BINARY[op].format(j, k)})"
    return f"({(UNARY | OFFSETS)[op].format(expression(inner, params))})"


def nearest_program(task: Task) -> str:
    """The output of the shown example whose first argument is nearest (a number's difference)."""
    shown = decoded(task)[:len(task.visible)]
    params = ", ".join(f"a{k}" for k in range(len(shown[0][0])))
    return (f"def {task.entry_point}({params}):\n    shown = {shown!r}\n"
            f"    return min(shown, key=lambda e: abs(e[0][0] - a0))[1]\n")
