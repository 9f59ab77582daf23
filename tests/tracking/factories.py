"""Small valid records for the tracking tests (real spade_ray.records types, nothing mocked),
and `shm_refused`: a run directory SQLite may not write its -shm file in."""

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from spade_ray.records import (
    Candidate,
    CheckResult,
    Completion,
    ExecResult,
    ExecStatus,
    Limits,
    PreferencePair,
    RoundMetrics,
    Score,
    Task,
    TestOutcome,
    TestSuite,
)
from spade_ray.tracking import GeneratorInput


def task(n: int = 0, generator_version: int = 1) -> Task:
    return Task(task_id=f"t{n}", family="codegen", topic="arith", description=f"add {n}",
                entry_point="f", signature="def f(x: int) -> int:",
                tests=TestSuite(asserts=(f"assert f(1) == {1 + n}",), check=None),
                reference=f"def f(x):\n    return x + {n}\n", limits=Limits(timeout_s=2.5),
                generator_version=generator_version)


def candidate(task_id: str = "t0", index: int = 0, solver_version: int = 1) -> Candidate:
    return Candidate(candidate_id=f"{task_id}/{index}", task_id=task_id,
                     code="def f(x):\n    return x\n", solver_version=solver_version,
                     prompt_tokens=12, completion_tokens=7)


def check(stdout: str = "out", stderr: str = "", passed: bool = True) -> CheckResult:
    execution = ExecResult(status=ExecStatus.OK if passed else ExecStatus.ERROR,
                           exit_code=0 if passed else 1, stdout=stdout, stderr=stderr,
                           truncated=False, wall_s=0.125, cpu_s=0.0625, peak_memory_mb=9.5,
                           env_hash="e1", limits_enforced_by="cgroup-v1", detail="")
    outcome = TestOutcome("assert[0]", "passed" if passed else "failed", "", 0.001)
    return CheckResult(execution=execution, outcomes=(outcome,), tests_total=1, passed=passed)


def score(candidate_id: str = "t0/0", passed: bool = True) -> Score:
    return Score(candidate_id=candidate_id, task_id=candidate_id.split("/")[0],
                 value=1.0 if passed else 0.0, passed=passed, tests_passed=int(passed),
                 tests_total=1, status=ExecStatus.OK if passed else ExecStatus.ERROR,
                 cpu_s=0.0625, peak_memory_mb=9.5)


def pair(task_id: str = "t0") -> PreferencePair:
    return PreferencePair(task_id=task_id, prompt="p", chosen="good", rejected="bad",
                          chosen_candidate_id=f"{task_id}/0", rejected_candidate_id=f"{task_id}/1",
                          chosen_score=1.0, rejected_score=0.0, solver_version=1,
                          generator_version=1)


def generator_input(index: int = 0, text: str = "TASK ...") -> GeneratorInput:
    completion = Completion(text=text, prompt_tokens=30, completion_tokens=40,
                            finish_reason="stop", weights_version=1)
    return GeneratorInput(index=index, prompt="Write a task", completion=completion,
                          outcome="admitted", task_id="t0", family="codegen", executed=True,
                          pass_rate=0.5,
                          reward=1.0)


def metrics(round: int, run_id: str = "run", pass_at_1: float | None = 0.25) -> RoundMetrics:
    return RoundMetrics(
        run_id=run_id, round=round, generator_version=round, solver_version=round,
        validation_pass_at_1=pass_at_1, validation_problems=20, tasks_proposed=10,
        tasks_valid=7, rejection_reasons=(("reference fails its tests", 2), ("no tests", 1)),
        new_task_pass_rate=0.5 + 0.01 * round, mean_difficulty=0.5, pairs=11 + round,
        candidate_diversity=0.75, tokens_generator=1000, tokens_solver=5000,
        sandbox_cpu_s=12.5, stage_s=(("generate", 3.0), ("solve", 8.0), ("execute", 2.5)),
        wall_s=14.0)


@contextlib.contextmanager
def shm_refused(directory: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`directory` as an archived run or a read-only mount: SQLite cannot create trace.sqlite-shm
    there. chmod 0555 where that binds; for root (CAP_DAC_OVERRIDE), where it does not, the plain
    read-only open fails as it does there (SQLITE_CANTOPEN) and only the immutable one runs."""
    directory.chmod(0o555)
    try:
        if not _can_create_in(directory):
            yield
            return
    finally:
        directory.chmod(0o755)
    from spade_ray.tracking import query

    real = query._open

    def refuse_plain(uri: str) -> sqlite3.Connection:
        if "immutable=1" not in uri:
            error = sqlite3.OperationalError("unable to open database file")
            error.sqlite_errorcode = sqlite3.SQLITE_CANTOPEN
            raise error
        return real(uri)

    monkeypatch.setattr(query, "_open", refuse_plain)
    yield


def _can_create_in(directory: Path) -> bool:
    probe = directory / ".probe"
    try:
        probe.touch()
    except PermissionError:
        return False
    probe.unlink()
    return True
