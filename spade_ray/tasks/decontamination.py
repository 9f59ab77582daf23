"""Validation twins: a task that computes what a validation problem computes is that problem.

The validation set (HumanEval) measures what the solver learnt on tasks it never saw. A task
whose reference agrees with a validation problem's canonical solution on every one of the task's
examples trains the solver on that problem under another name and description: a validation
figure it lifts says nothing. The copies that matter are semantic (the shipped seed pool had
`gcd`, HumanEval/13's greatest_common_divisor, with nothing in common in its text), so the test
is by execution: TWINS (trusted text, run in the sandbox like any candidate, since the inputs are
the generator's) calls every validation problem whose function accepts the task's arguments on
them, each call under a CALL_S timer, and prints the first problem whose results have the reprs
of the task's expected outputs: of all of them, or of nearly all those it answers (TWIN_FRACTION,
MIN_AGREEING), so that special-casing an input or two does not hide a copy.

The whole benchmark is held out (app.py), not only the problems a run validates on: a
checkpoint is judged on all of HumanEval later, and a twin of a problem outside the run's subset
would have trained on it just the same (0.35 s of sandbox time for 8 tasks against all 164
problems, measured here, against 0.02 s for 8 problems).

What it does not catch: a twin with an example on which the validation solution is slower than
CALL_S (fib(50) and HumanEval/55's recursive fib), a task that computes a validation problem
only on inputs the task does not show, and one that special-cases more than a fifth of the
examples the problem answers (or shows fewer than MIN_AGREEING and special-cases one).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence

from spade_ray.execution import canonical
from spade_ray.records import ExecStatus, IOExample, Limits


@dataclasses.dataclass(frozen=True)
class HeldOut:
    """A validation problem as the twin test needs it: its id, a program defining its entry
    point (HumanEval: prompt + canonical solution), and that entry point."""

    problem_id: str
    source: str
    entry_point: str


CALL_S = 0.05  # one validation solution on one input; a slower one is no twin
# A twin: the validation solution gives every one of the task's expected outputs, or nearly
# all of those of the examples it answers (returns a value on). Every one was evaded by
# one special case: HumanEval/13's gcd plus `if a == 0 and b == 0: return -1` and the input
# (0, 0) agreed on 12 of 13 examples (augment_inputs=8) and was admitted (red-team pass
# 10). An example on which it raises counts for neither side, or inputs outside the problem's
# domain would hide a copy: the seed count_vowels agreed with HumanEval/64 on the 4 of its 5
# examples /64 answers ("" raises IndexError there), too few to tell (MIN_AGREEING), and
# augmented on 12 of 12 (it is distinct_vowels now, and the seed fibonacci, /55 on every
# input but fib(50), which /55 computes too slowly, is lucas). One slower than CALL_S still
# ends the problem: the augmented seed pool's twin run (39 tasks, 514 examples) takes 4.5 s
# here where the every-example rule took 2.6 s, and waiting on each slow example as on a raise
# made it 7.0 s.
# "Nearly all" is bounded on three sides, measured on the seed pool against all 164 problems
# (tests/tasks/test_decontamination.py; as shipped, and augmented as generated tasks are):
TWIN_FRACTION = 0.8  # of the answered examples agree: all but 2 of 13 (a special case
# usually reaches an augmented input or two of the input it was written for)
MIN_AGREEING = 6  # agreeing examples at least: the shipped seeds' closest non-twins agree on
# 5 of 6 (insertion_sort with HumanEval/34's sorted(set(l)), max_index with /73); no seed
# has more than 7 examples, so none is a twin but by agreeing on all, as before
MIN_DISTINCT = 4  # different outputs among them at least: a bool or a small count agrees by
# chance (augmented seeds: is_power_of_two with /138 on 12 of 14 in two values, is_balanced
# with /56 on 13 of 15 in two, max_index with /73 on 11 of 14 in three)
TWINS = r'''
import ast, inspect, json, os, signal, sys
job = json.loads(sys.stdin.read())
out = os.fdopen(os.dup(1), "w")
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)


class Late(Exception):
    pass


def late(*_):
    raise Late()


signal.signal(signal.SIGALRM, late)


def guarded(fn, *args):
    signal.setitimer(signal.ITIMER_REAL, CALL_S)
    try:
        return fn(*args)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


found = {}
for problem_id, source, entry in job["problems"]:
    namespace = {"__name__": "validation"}
    try:
        guarded(exec, compile(source, problem_id, "exec"), namespace)
        fn = namespace[entry]
        signature = inspect.signature(fn)
    except BaseException:
        continue
    for t, examples in enumerate(job["tasks"]):
        if str(t) in found:
            continue
        cases = [(ast.literal_eval(call), expected) for call, expected in examples]
        try:
            for args, _ in cases:
                signature.bind(*args)
        except TypeError:
            continue
        agreed, answered, outputs = 0, 0, set()
        for i, (args, expected) in enumerate(cases):
            try:
                result = repr(guarded(fn, *args))
            except Late:
                break  # slower than CALL_S: no twin, as before (waiting on more cost 2x)
            except BaseException:
                result = None  # not answered: no evidence either way
            answered += result is not None
            if result == expected:
                agreed += 1
                outputs.add(expected)
            if answered - agreed > (1 - TWIN_FRACTION) * len(cases) + 1e-9 or \
                    agreed + len(cases) - i - 1 < min(MIN_AGREEING, len(cases)):
                break  # no twin whatever the rest give
        else:
            if agreed == len(cases) or (agreed >= MIN_AGREEING and len(outputs) >= MIN_DISTINCT
                                        and agreed >= TWIN_FRACTION * answered - 1e-9):
                found[str(t)] = problem_id
out.write(json.dumps(found))
out.flush()
'''.replace("CALL_S", repr(CALL_S)).replace("TWIN_FRACTION", repr(TWIN_FRACTION)) \
    .replace("MIN_AGREEING", repr(MIN_AGREEING)).replace("MIN_DISTINCT", repr(MIN_DISTINCT))


def held_out(problems: Sequence) -> tuple[HeldOut, ...]:
    """HumanEval-shaped problems (task_id, prompt, canonical_solution, entry_point; the run
    passes all of evaluation.humaneval.load_problems()) as the twin test needs them."""
    return tuple(HeldOut(p.task_id, p.prompt + p.canonical_solution, p.entry_point)
                 for p in problems)


def twins(tasks: Sequence[Sequence[IOExample]], held_out: Sequence[HeldOut], executor,
          limits: Limits) -> list[str | None]:
    """Per task (its examples), the id of a validation problem whose solution returns every one
    of its expected outputs (repr for repr: `True` is not `1`), or nearly every one of those it
    answers (TWIN_FRACTION, MIN_AGREEING), or None. One sandbox run for all of them; a run that
    fails finds no twin (no task is rejected for the sandbox's sake)."""
    if not tasks or not held_out:
        return [None] * len(tasks)
    job = {"problems": [[h.problem_id, h.source, h.entry_point] for h in held_out],
           "tasks": [[[repr(canonical.decode(e.args)), repr(canonical.decode(e.expected))]
                      for e in examples] for examples in tasks]}
    budget = CALL_S * len(held_out) * max(len(examples) for examples in tasks) + 2.0
    run = executor.run(TWINS, stdin=json.dumps(job),
                       limits=dataclasses.replace(limits, timeout_s=budget, cpu_s=budget))
    if run.status is not ExecStatus.OK:
        return [None] * len(tasks)
    try:
        found = json.loads(run.stdout)
    except ValueError:
        return [None] * len(tasks)
    if not isinstance(found, dict):
        return [None] * len(tasks)
    return [found.get(str(t)) if isinstance(found.get(str(t)), str) else None
            for t in range(len(tasks))]
