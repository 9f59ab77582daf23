"""`SandboxPool`: sandbox workers as Ray actors (default one per CPU), with the `Sandbox` calls
(both implement execution.Executor, so the loop takes either).

`stream(jobs)` is the primitive: it submits jobs with backpressure (at most `max_in_flight`
outstanding per actor, so a million-job iterator is never materialised in the object store) and
yields `(index, result)` in finish order. The other calls are built on it.

Fault handling: actors restart on death (max_restarts=-1). A job whose actor died is retried
once, on another actor if there is one; it never is when the code itself failed (that is a
result, not an error). A job lost twice comes back as `sandbox_error`, so nothing is dropped.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Sequence

import ray
from ray.exceptions import ActorUnavailableError, RayActorError

from spade_ray.execution.protocol import sandbox_error
from spade_ray.execution.sandbox import Sandbox, validate_programs
from spade_ray.records import CheckResult, ExecResult, Limits, TestSuite


@dataclasses.dataclass(frozen=True)
class Job:
    code: str
    stdin: bytes | None = None
    tests: TestSuite | None = None  # given: a check, answered with a CheckResult
    limits: Limits | None = None  # None: the pool's limits


@ray.remote(max_restarts=-1, max_task_retries=0)
class SandboxActor:
    """One warm sandbox worker. Jobs arrive validated; results go back as records."""

    def __init__(self, backend: str, limits: Limits, packages: tuple[str, ...]) -> None:
        self._sandbox = Sandbox(backend=backend, limits=limits, workers=1, packages=packages)
        self._executed = 0

    def execute(self, job: Job) -> ExecResult | CheckResult:
        self._executed += 1
        if job.tests is not None:
            return self._sandbox.check(job.code, job.tests, job.limits)
        return self._sandbox.run(job.code, job.stdin, job.limits)

    def pid(self) -> int:
        return os.getpid()

    def executed(self) -> int:
        """Jobs this actor process has run since it (re)started."""
        return self._executed


class SandboxPool:
    """Sandbox actors on the current Ray cluster (`ray.init()` first, or we start a local one)."""

    def __init__(self, backend: str = "local", limits: Limits | None = None,
                 num_actors: int | None = None, packages: Sequence[str] = (),
                 max_in_flight_per_actor: int = 2, cpus_per_actor: float = 1.0) -> None:
        if not ray.is_initialized():
            ray.init()
        self.limits = limits or Limits()
        count = num_actors or max(1, int(ray.available_resources().get("CPU", 1) //
                                         cpus_per_actor))
        self.actors = [SandboxActor.options(num_cpus=cpus_per_actor).remote(
            backend, self.limits, tuple(packages)) for _ in range(count)]
        self.max_in_flight = max_in_flight_per_actor * count
        self.retries = 0  # jobs re-run after their actor died (infrastructure failures)

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []

    def __enter__(self) -> SandboxPool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ the Sandbox calls

    def run(self, code: str | bytes, stdin: str | bytes | None = None,
            limits: Limits | None = None) -> ExecResult:
        return self.run_many([code], [stdin], limits)[0]

    def run_many(self, codes: Sequence[str | bytes],
                 stdins: Sequence[str | bytes | None] | None = None,
                 limits: Limits | None = None) -> list[ExecResult]:
        jobs = [Job(c, s, limits=limits) for c, s in validate_programs(codes, stdins)]
        return self._in_order(jobs)

    def check(self, code: str | bytes, tests: TestSuite,
              limits: Limits | None = None) -> CheckResult:
        return self.check_many([code], [tests], limits)[0]

    def check_many(self, codes: Sequence[str | bytes], tests: Sequence[TestSuite],
                   limits: Limits | None = None) -> list[CheckResult]:
        if len(codes) != len(tests):
            raise ValueError(f"got {len(codes)} programs but {len(tests)} test suites")
        jobs = [Job(c, tests=t, limits=limits)
                for (c, _), t in zip(validate_programs(codes, None), tests)]
        return self._in_order(jobs)

    def _in_order(self, jobs: list[Job]) -> list:
        results: list = [None] * len(jobs)
        for index, result in self.stream(jobs):
            results[index] = result
        return results

    # ------------------------------------------------------------------ streaming

    def stream(self, jobs: Iterable[Job]) -> Iterator[tuple[int, ExecResult | CheckResult]]:
        """Yield `(index, result)` as jobs finish. Jobs are pulled lazily (backpressure)."""
        if not self.actors:
            raise RuntimeError("this SandboxPool is closed")
        pending = iter(enumerate(jobs))
        in_flight: dict[ray.ObjectRef, tuple[int, Job, int, int]] = {}
        load = [0] * len(self.actors)
        exhausted = False
        while True:
            while not exhausted and len(in_flight) < self.max_in_flight:
                item = next(pending, None)
                if item is None:
                    exhausted = True
                    break
                self._submit(in_flight, load, *item, attempt=1)
            if not in_flight:
                return
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                index, job, actor_index, attempt = in_flight.pop(ref)
                load[actor_index] -= 1
                try:
                    yield index, ray.get(ref)
                except (RayActorError, ActorUnavailableError) as e:
                    if attempt == 1:
                        self.retries += 1
                        self._submit(in_flight, load, index, job, attempt=2,
                                     avoid=actor_index)
                    else:
                        yield index, self._lost(job, e)

    def _submit(self, in_flight, load, index: int, job: Job, attempt: int,
                avoid: int | None = None) -> None:
        order = sorted(range(len(self.actors)), key=lambda i: (i == avoid, load[i]))
        actor_index = order[0]
        ref = self.actors[actor_index].execute.remote(job)
        in_flight[ref] = (index, job, actor_index, attempt)
        load[actor_index] += 1

    def _lost(self, job: Job, error: Exception) -> ExecResult | CheckResult:
        result = sandbox_error(f"sandbox actor died twice running this job: {error}",
                               job.limits or self.limits, env="", enforced_by="")
        if job.tests is None:
            return result
        return CheckResult(execution=result, outcomes=(), tests_total=job.tests.total,
                           passed=False)


def actor_pids(pool: SandboxPool) -> list[int]:
    """The OS pids of the pool's actors (for tests and operators)."""
    return ray.get([a.pid.remote() for a in pool.actors])


def actor_executed(pool: SandboxPool) -> list[int]:
    """Jobs each of the pool's actors has run (for tests and operators: where work went)."""
    return ray.get([a.executed.remote() for a in pool.actors])
