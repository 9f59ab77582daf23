"""Validation by execution: a task is kept only if its tests mean something.

Kept when, in the sandbox and within the task's limits: the reference passes every test; no
trivial program passes them all (empty body, `return None`, a constant, echoing the first
argument); and for a repair task the buggy program fails at least one. Everything else is
rejected with a short, countable reason, and the caller records it.
"""

from __future__ import annotations

import ast
import dataclasses

from spade_ray.records import CheckResult, ExecStatus, Task

TRIVIAL_BODIES = {
    "empty_body": "pass",
    "return_none": "return None",
    "return_zero": "return 0",
    "return_one": "return 1",
    "return_true": "return True",
    "return_false": "return False",
    "return_empty_str": "return ''",
    "return_empty_list": "return []",
    "return_empty_dict": "return {}",
}


@dataclasses.dataclass(frozen=True)
class Verdict:
    task: Task
    valid: bool
    reason: str  # "" when valid
    reference_cpu_s: float


def trivial_programs(task: Task) -> dict[str, str]:
    """Name -> program: the signature with a body that cannot solve a real task."""
    programs = {name: f"{task.signature}\n    {body}\n" for name, body in TRIVIAL_BODIES.items()}
    args = ast.parse(task.signature + "\n    pass\n").body[0].args
    params = [a.arg for a in args.posonlyargs + args.args]
    if params:
        programs["echo_input"] = f"{task.signature}\n    return {params[0]}\n"
    return programs


def validate_tasks(tasks: list[Task], sandbox) -> list[Verdict]:
    """One batch through the sandbox (reference, trivial and buggy programs of every task)."""
    jobs: list[tuple[int, str, str]] = []  # (task index, role, program)
    for i, task in enumerate(tasks):
        jobs.append((i, "reference", task.reference))
        jobs += [(i, f"trivial:{name}", code) for name, code in trivial_programs(task).items()]
        if task.buggy is not None:
            jobs.append((i, "buggy", task.buggy))
    by_task: dict[int, dict[str, CheckResult]] = {}
    for limits in {task.limits for task in tasks}:  # each task runs within its own limits
        group = [job for job in jobs if tasks[job[0]].limits == limits]
        results = sandbox.check_many([code for _, _, code in group],
                                     [tasks[i].tests for i, _, _ in group], limits=limits)
        for (i, role, _), result in zip(group, results):
            by_task.setdefault(i, {})[role] = result
    return [_verdict(task, by_task[i]) for i, task in enumerate(tasks)]


def _verdict(task: Task, results: dict[str, CheckResult]) -> Verdict:
    reference = results["reference"]
    cpu = reference.execution.cpu_s
    if reference.execution.status is ExecStatus.SANDBOX_ERROR:
        return Verdict(task, False, "sandbox_error", cpu)
    if reference.execution.status is not ExecStatus.OK:
        return Verdict(task, False, f"reference_{reference.execution.status.value}", cpu)
    if not reference.passed:
        return Verdict(task, False, "reference_fails_tests", cpu)
    for role, result in results.items():
        if role.startswith("trivial:") and result.passed:
            return Verdict(task, False, f"trivial_passes:{role.split(':', 1)[1]}", cpu)
    if "buggy" in results and results["buggy"].passed:
        return Verdict(task, False, "buggy_passes_tests", cpu)
    return Verdict(task, True, "", cpu)
