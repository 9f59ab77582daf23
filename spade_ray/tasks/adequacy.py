"""Admission's trusted checks of a proposal (tasks/admission.py): its reference, the null
solvers (tasks/guesses.py) and its mutants (tasks/mutation.py) against the examples its
reference's runs established, each under a budget of its own, and which mutants count in
mutation adequacy (`counted`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from spade_ray.records import CheckResult, IOExample, Limits, TestSuite, Verdict
from spade_ray.tasks.format import Proposal
from spade_ray.tasks.guesses import null_solvers
from spade_ray.tasks.making import suite_of
from spade_ray.tasks.mutation import mutants

MUTANT_ROLES = {False: "mutant", True: "mutant:fixed"}  # by Mutant.fixed
MUTANT_SLOWDOWN = 4.0  # a mutant's budget, in times the reference's check (_mutant_limits)


def trusted_checks(jobs: dict[str, tuple[Proposal, Sequence[IOExample], int]], executor,
                   limits: Limits, max_mutants: int, check_timeout_s: float
                   ) -> dict[str, list[tuple[str, str, CheckResult]]]:
    """The trusted checks of every proposal that ran (key -> the proposal, its examples, its
    seed for sampling mutants): its reference, the null solvers and its mutants against its
    examples; per key, (role, program, result), reference first.
    The reference is checked under the task's own limits, as its candidates will be: under
    `check_timeout_s` (meant for mutants that loop), a make run whose learner shared the cores
    timed one out and rejected a sound task as reference_fails_examples. Mutants come in two
    batches: `max_mutants`, then as many more for a proposal whose first ones did not all
    count (`counted`), so that mutants killed by any input cannot thin out the sample."""
    suites = {key: suite_of(examples, p.entry_point) for key, (p, examples, _) in jobs.items()}
    references = executor.check_many([p.reference for p, _, _ in jobs.values()],
                                     list(suites.values()), limits=limits) if jobs else []
    out = {key: [("reference", p.reference, result)]
           for (key, (p, _, _)), result in zip(jobs.items(), references)}
    null_limits = _mutant_limits(limits, check_timeout_s, 0.0, 0.0)
    pools, budgets, first = {}, {}, []
    for (key, (p, _, seed)), reference in zip(jobs.items(), references):
        first += [(key, f"null:{name}", code, null_limits)
                  for name, code in null_solvers(p.signature).items()]
        pools[key] = mutants(p.reference, 2 * max_mutants, seed)
        budgets[key] = _mutant_limits(limits, check_timeout_s, reference.execution.cpu_s,
                                      reference.execution.wall_s)
        first += [(key, MUTANT_ROLES[m.fixed], m.code, budgets[key])
                  for m in pools[key][:max_mutants]]
    _run_checks(first, suites, executor, out)
    second = [(key, MUTANT_ROLES[m.fixed], m.code, budgets[key])
              for key, pool in pools.items()
              if sum(counted(role, r) for role, _, r in out[key]) < max_mutants
              for m in pool[max_mutants:]]
    _run_checks(second, suites, executor, out)
    return out


def _run_checks(jobs: list[tuple[str, str, str, Limits]], suites: dict[str, TestSuite],
                executor, out: dict[str, list[tuple[str, str, CheckResult]]]) -> None:
    """Checks (key, role, program, limits) in one batch per distinct limits; the results join
    out[key] in the order of `jobs`."""
    results: dict[int, CheckResult] = {}
    for job_limits in dict.fromkeys(job[3] for job in jobs):
        batch = [i for i, job in enumerate(jobs) if job[3] == job_limits]
        results.update(zip(batch, executor.check_many([jobs[i][2] for i in batch],
                                                      [suites[jobs[i][0]] for i in batch],
                                                      limits=job_limits)))
    for i, (key, role, code, _) in enumerate(jobs):
        out[key].append((role, code, results[i]))


def _mutant_limits(limits: Limits, check_timeout_s: float, reference_cpu_s: float,
                   reference_wall_s: float) -> Limits:
    """A mutant's budget: `check_timeout_s`, or MUTANT_SLOWDOWN times what the reference's check
    took when that is more, within the task's limits. A fixed budget made every mutant of a
    reference that spins (or sleeps) a little longer than it time out, and a timeout counted as
    a kill: such examples scored 1.0 where the same reference without the spin scored 0.125."""
    return dataclasses.replace(
        limits, timeout_s=min(limits.timeout_s, max(check_timeout_s,
                                                    MUTANT_SLOWDOWN * reference_wall_s)),
        cpu_s=min(limits.cpu_s, max(check_timeout_s, MUTANT_SLOWDOWN * reference_cpu_s)))


def counted(role: str, check: CheckResult) -> bool:
    """Whether a mutant's check counts in mutation adequacy. Not when it fails every example
    where it did not even return (raising or timing out everywhere), nor when it fails every
    example and its mutation is in code no input reaches (Mutant.fixed): any one input kills
    those, so they say nothing of the examples, and they are what a reference pads its score
    with: a guard of constant comparisons whose mutants raise everywhere (0.875 where its
    examples killed 0.125 of the rest), or constant arithmetic added to the answer (`base = k
    * m + n - 5` with constant k, m, n: 0.5 where 0.0). A real bug that fails every example
    (`a + b` for `a * b`) still counts."""
    if role not in MUTANT_ROLES.values():
        return False
    returned = any(o.outcome is not Verdict.ERROR for o in check.outcomes)
    passed_one = any(o.outcome is Verdict.PASSED for o in check.outcomes)
    return returned and (passed_one or role == MUTANT_ROLES[False])
