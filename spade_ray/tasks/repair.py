"""The bug a repair task shows: which of the reference's caught mutants, and whether it is sure.

Admission (admission.py) checks a proposal's mutants against its examples; a repair task shows
one of them as the buggy program to fix, and grades the fix all or nothing. Two things decide
whether that grade says the solver found the bug:
  * `shown_bug`: a hidden example must catch the bug (one that only shown examples catch is
    fixed by special-casing their inputs: 8 of the seed pool's 39 repair tasks were), and a
    shown example should (the seed pool's subtlest bugs passed both shown examples in 14 of 39
    repair tasks: the prompt, which says a fix returns the shown results, then gave no sign of
    the bug); of those, the subtlest (the mutant that passes most examples).
  * `bugs_differ`: the driver ran only the reference, so a branch only a mutant reaches
    (`startswith` mutated to `endswith`) can read the process (an address's bits); a copy of
    such a buggy program passed 14 of 20 gradings, a pass rate paid as if the solver half-knew
    the fix. The bug runs through the driver as the reference did.
"""

from __future__ import annotations

from collections.abc import Sequence

from spade_ray.execution import canonical
from spade_ray.records import CheckResult, Limits, Task, Verdict
from spade_ray.tasks import driver


def shown_bug(bugs: Sequence[tuple[str, CheckResult]], visible: int) -> str | None:
    """The program to show of the counted mutants `bugs` (program, check against the examples,
    the first `visible` of which the prompt shows), or None when no hidden example catches
    any."""
    caught = [(code, check) for code, check in bugs if hidden_catch(check, visible)]
    if not caught:
        return None
    shown = {f"example[{i}]" for i in range(visible)}
    return max(caught, key=lambda bug: _rank(bug[1], shown))[0]


def hidden_catch(check: CheckResult, shown: int) -> bool:
    """Whether an example past the first `shown` catches the bug `check` is of."""
    names = {f"example[{i}]" for i in range(shown)}
    return any(o.name not in names and o.outcome is not Verdict.PASSED for o in check.outcomes)


def _rank(check: CheckResult, shown: set[str]) -> tuple[bool, int]:
    return (any(o.name in shown and o.outcome is not Verdict.PASSED for o in check.outcomes),
            sum(o.outcome is Verdict.PASSED for o in check.outcomes))


def bugs_differ(tasks: Sequence[Task], executor, limits: Limits,
                max_reference_cpu_s: float) -> list[tuple[bool, float]]:
    """Per repair task, whether its buggy program answers its inputs differently in the
    driver's fresh interpreters, and the sandbox CPU that took."""
    if not tasks:
        return []
    calls = [[canonical.decode(e.args) for e in task.tests.examples] for task in tasks]
    runs = executor.run_many([driver.DRIVER] * len(tasks),
                             [driver.job(task.buggy, task.entry_point, inputs)
                              for task, inputs in zip(tasks, calls)],
                             limits=driver.driver_limits(limits, max_reference_cpu_s))
    return [(driver.answers(run, len(inputs), max_reference_cpu_s) == "nondeterministic",
             run.cpu_s) for run, inputs in zip(runs, calls)]
