"""Partial credit on generated tasks: a wrong program right on a few hidden neighbours by
chance earns nothing (scoring.CHANCE_SHARE), through a real sandbox of each backend."""

import dataclasses

from spade_ray.evaluation.scoring import score
from spade_ray.execution import canonical
from spade_ray.records import Task, TaskFamily, TaskSource, TestSuite
from tests.evaluation.test_scoring import candidate, examples_task

# Three tasks as admission made them from the seed programs with augment_inputs=8 (the gemma
# configs): two shown examples, the rest the generator's inputs and their one-step neighbours.
NEIGHBOURS = {
    "last_index": ("xs, target", [
        (([1, 2, 1, 3], 1), 2), (([1, 2, 3], 4), -1), (([], 0), -1), (([7, 7, 7], 7), 2),
        (([0, 1], 0), 0), (([1, 1, 2, 3], 1), 1), (([1, 2, 1, 3], 0), -1), (([1, 2, 3], 5), -1),
        (([2, 1, 3], 1), 1), (([7, 7, 7], 8), -1), (([7, 7, 7], 6), -1), (([1, 2, 1, 3], 2), 1),
        (([3, 1, 2, 1], 1), 3)]),
    "closest_value": ("xs, target", [
        (([1, 5, 9], 6), 5), (([1, 5, 9], 7), 5), (([], 3), None), (([4], -10), 4),
        (([-3, 3], 0), -3), (([10, 2, 8], 9), 8), (([10, 2, 8], 10), 10), (([1, 5, 9], 5), 5),
        (([4], 0), 4), (([9, 5, 1], 7), 5), (([10, 2, 8], 8), 8), (([10, 2, 8], -9), 2),
        (([], -3), None), (([10, 2, 8, 8], 9), 8)]),
    "max_index": ("xs", [
        (([1, 5, 3],), 1), (([-4, -2, -9],), 1), (([7],), 0), (([9, 3, 9],), 0),
        (([0, -1, 10],), 2), (([2, 8, 8, 1],), 1), (([3, 9, 9],), 1), (([-1, 10],), 1),
        (([2, 8, 8, 8, 1],), 1), (([7, 7],), 0), (([9, 9, 3],), 0), (([1, 5, 5, 3],), 1),
        (([1, 1, 5, 3],), 2), (([-1, 0, 10],), 2)]),
}


def neighbours_task(name: str) -> Task:
    examples = tuple(canonical.example(args, out) for args, out in NEIGHBOURS[name][1])
    return dataclasses.replace(examples_task(TaskFamily.CODEGEN, visible=2), task_id=name,
                               entry_point=name, tests=TestSuite(examples=examples,
                                                                 entry_point=name),
                               visible=examples[:2], source=TaskSource.GENERATED)


def test_a_wrong_expression_right_on_some_neighbours_by_chance_earns_nothing(sandbox):
    # Red-team pass 12 (solver H1): a table of the shown examples and one cheap expression
    # outside the floor's guesses, right by coincidence on one or two hidden neighbours more
    # than the best guess, earned 0.20-0.25 and was chosen over every honest attempt at 0.
    # Each wrong program below is a family member: it reads no description.
    wrong = {
        "last_index": ["xs.count(target) - 1",
                       "xs.index(target) if target in xs else -1"],  # the first one
        "closest_value": ["None if len(xs) < 2 else sorted(xs)[-2]",
                          "None if not xs else xs[len(xs) // 2]"],
        "max_index": ["0 if len(set(xs)) < 2 else xs.count(xs[0])"],
    }
    # near-solutions: the reference, wrong on one hidden input
    near = {"last_index": "max((i for i, x in enumerate(xs) if x == target), default=-1)"
                          " if target != 8 else 0",
            "closest_value": "min(xs, key=lambda x: (abs(x - target), x))"
                             " if xs and target != -9 else None",
            "max_index": "xs.index(max(xs)) if xs != [7, 7] else 1"}
    jobs = []
    for name, bodies in wrong.items():
        task = neighbours_task(name)
        params, examples = NEIGHBOURS[name]
        for body in bodies + [near[name]]:
            jobs.append((task, body, f"def {name}({params}):\n"
                                     f"    for args, out in {examples[:2]!r}:\n"
                                     f"        if args == ({params},):\n"
                                     f"            return out\n    return {body}\n"))
    results = sandbox.check_many([code for _, _, code in jobs], [t.tests for t, _, _ in jobs])
    values = {body: score(candidate(code, i, task.task_id), result, task).value
              for i, ((task, body, code), result) in enumerate(zip(jobs, results))}
    assert all(not r.passed for r in results), [r.tests_passed for r in results]
    assert {body: values[body] for bodies in wrong.values() for body in bodies} == dict.fromkeys(
        (body for bodies in wrong.values() for body in bodies), 0.0)
    # A near-solution keeps credit where the floor leaves room. These examples are fixed (admission
    # now keeps others, chosen against the middle item and the other guesses since added): on
    # them the median of xs gets 10 of closest_value's 12 hidden examples, and a split on
    # xs[0] < xs[-1] 11 of max_index's, so one wrong on one of them earns what a program that
    # reads nothing would: 0.
    assert values[near["last_index"]] > 0, values
