"""`SandboxPool`: sandbox workers as Ray actors (default one per CPU), with the `Sandbox` calls
(both implement execution.Executor, so the loop takes either).

`stream(jobs)` is the primitive: it submits jobs with backpressure (at most `max_in_flight`
outstanding per actor, so a million-job iterator is never materialised in the object store) and
yields `(index, result)` in finish order. The other calls are built on it.

Placement: `resources` (config: sandbox.resources, e.g. {"spade_sandbox": 1}) are custom Ray
resources each actor asks for, so that the actors run only on the nodes started with them
(`ray start --resources='{"spade_sandbox": 100}'`); without `num_actors`, one actor per
`cpus_per_actor` CPUs of those nodes.

Fault handling: actors restart on death (max_restarts=-1), on their node or, when the node is
gone, on another node with the resources. A job whose actor died is retried on an actor that is
up; it never is when the code itself failed (that is a result, not an error). The job is to
blame only if the actor's node is still alive (the job may have killed it): such a job is
retried once, and a job lost twice comes back as `sandbox_error`, so nothing is dropped. A job
whose actor's node died is not to blame and is retried up to NODE_LOSSES_PER_JOB times. An actor
that died, and every other actor on its node, is "down": no job goes to it until a probe
(`node_id`, every PROBE_INTERVAL_S, since Ray fails a call to a restarting actor at once) finds
it up, so a node's loss costs its jobs one re-run, never a second loss on the node's other, not
yet failed actors. With every actor down for `unavailable_timeout_s`, the stream raises rather
than wait forever.
Measured (tests/test_multinode.py, SIGKILLed node): its actors' calls fail ~2 s after the kill,
before the GCS marks the node dead, so those jobs count the loss against themselves (deaths=1)
and come back as `sandbox_error` only if the actor they are re-run on dies too.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence

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


NODE_LOSSES_PER_JOB = 3  # nodes that may die under one job before it comes back sandbox_error
PROBE_INTERVAL_S = 0.5  # how often a down actor is asked whether it is back
UNAVAILABLE_TIMEOUT_S = 600.0  # every actor down this long: give up (a node group is gone)


@dataclasses.dataclass
class _Attempt:
    """A job on its way through the pool: where it runs and what it has survived."""

    index: int
    job: Job
    actor: int = -1
    deaths: int = 0  # its actor died under it on a live node (the job may be the cause)
    node_losses: int = 0  # its actor's node died under it (not the job's doing)


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

    def node_id(self) -> str:
        return ray.get_runtime_context().get_node_id()

    def executed(self) -> int:
        """Jobs this actor process has run since it (re)started."""
        return self._executed


class SandboxPool:
    """Sandbox actors on the current Ray cluster: the caller joins one first (the run does,
    spade_ray/connect.py; a script calls ray.init)."""

    def __init__(self, backend: str = "local", limits: Limits | None = None,
                 num_actors: int | None = None, packages: Sequence[str] = (),
                 max_in_flight_per_actor: int = 2, cpus_per_actor: float = 1.0,
                 resources: Mapping[str, float] | None = None,
                 unavailable_timeout_s: float = UNAVAILABLE_TIMEOUT_S) -> None:
        if not ray.is_initialized():
            raise RuntimeError("SandboxPool places actors on a Ray cluster: join one first "
                               "(ray.init(), or spade_ray.connect.connect())")
        self.limits = limits or Limits()
        self.resources = dict(resources or {})
        count = num_actors or actor_count(cpus_per_actor, self.resources)
        self.actors = [SandboxActor.options(num_cpus=cpus_per_actor, resources=self.resources)
                       .remote(backend, self.limits, tuple(packages)) for _ in range(count)]
        self.per_actor = max_in_flight_per_actor
        self.max_in_flight = max_in_flight_per_actor * count
        self.unavailable_timeout_s = unavailable_timeout_s
        self.retries = 0  # jobs re-run after their actor died (infrastructure failures)
        self._nodes: list[str | None] = [None] * count  # where each actor was last seen up
        self._down: dict[int, float] = {}  # down actor -> when to probe it next (inf: probing)
        self._probes: dict[ray.ObjectRef, int] = {a.node_id.remote(): i
                                                  for i, a in enumerate(self.actors)}

    def close(self) -> None:
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors, self._down, self._probes = [], {}, {}

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
        retry: collections.deque[_Attempt] = collections.deque()
        in_flight: dict[ray.ObjectRef, _Attempt] = {}
        load = [0] * len(self.actors)
        exhausted = False
        stalled_since: float | None = None  # since when no actor has been up
        while True:
            self._send_probes()
            while (actor := self._free_actor(load)) is not None:
                if retry:
                    attempt = retry.popleft()
                elif not exhausted and (item := next(pending, None)) is not None:
                    attempt = _Attempt(*item)
                else:
                    exhausted = True
                    break
                attempt.actor = actor
                in_flight[self.actors[actor].execute.remote(attempt.job)] = attempt
                load[actor] += 1
            if exhausted and not in_flight and not retry:
                return
            stalled_since = self._check_stall(stalled_since)
            waiting = [*in_flight, *self._probes]
            timeout = self._wait_timeout(stalled_since)
            if not waiting:
                time.sleep(PROBE_INTERVAL_S if timeout is None else timeout)
                continue
            ready, _ = ray.wait(waiting, num_returns=1, timeout=timeout)
            for ref in ready:
                if ref in self._probes:
                    self._probe_done(ref)
                    continue
                attempt = in_flight.pop(ref)
                load[attempt.actor] -= 1
                try:
                    yield attempt.index, ray.get(ref)
                except (RayActorError, ActorUnavailableError) as e:
                    outcome = self._actor_lost(attempt, e)
                    if isinstance(outcome, _Attempt):
                        retry.append(outcome)
                    else:
                        yield attempt.index, outcome

    def _free_actor(self, load: list[int]) -> int | None:
        """The least loaded actor that is up and below its share of jobs in flight."""
        free = [i for i in range(len(self.actors))
                if i not in self._down and load[i] < self.per_actor]
        return min(free, key=lambda i: load[i]) if free else None

    def _actor_lost(self, attempt: _Attempt, error: Exception
                    ) -> _Attempt | ExecResult | CheckResult:
        """Its actor died under the job: the job to re-run, or its sandbox_error."""
        node = self._nodes[attempt.actor]
        self._mark_down(attempt.actor)
        # Its node may have died (Ray tells its callers before its health check tells the GCS):
        # then so did the node's other actors, whose failures may not have arrived yet. They are
        # down until a probe answers (milliseconds when only this actor's process died), so that
        # the re-run goes to an actor known to be up, not to a second death.
        for i, other in enumerate(self._nodes):
            if node is not None and other == node:
                self._mark_down(i)
        if node is not None and node not in alive_nodes():
            attempt.node_losses += 1
            if attempt.node_losses > NODE_LOSSES_PER_JOB:
                return self._lost(attempt.job, f"{attempt.node_losses} sandbox nodes died "
                                               f"running this job: {error}")
        else:
            attempt.deaths += 1
            if attempt.deaths > 1:
                return self._lost(attempt.job, f"sandbox actor died twice running this job: "
                                               f"{error}")
        self.retries += 1
        return attempt

    def _mark_down(self, actor: int) -> None:
        self._down.setdefault(actor, time.monotonic())

    def _send_probes(self) -> None:
        now = time.monotonic()
        for actor, when in self._down.items():
            if when <= now:
                self._probes[self.actors[actor].node_id.remote()] = actor
                self._down[actor] = math.inf

    def _probe_done(self, ref: ray.ObjectRef) -> None:
        actor = self._probes.pop(ref)
        try:
            self._nodes[actor] = ray.get(ref)
            self._down.pop(actor, None)
        except (RayActorError, ActorUnavailableError):  # still restarting (or gone): ask again
            self._down[actor] = time.monotonic() + PROBE_INTERVAL_S

    def _check_stall(self, since: float | None) -> float | None:
        if len(self._down) < len(self.actors):
            return None
        now = time.monotonic()
        if since is not None and now - since > self.unavailable_timeout_s:
            raise RuntimeError(f"no sandbox actor has been up for {now - since:.0f} s (all "
                               f"{len(self.actors)} restarting): are nodes with the resources "
                               f"{self.resources or {'CPU': 1}} still in the cluster?")
        return now if since is None else since

    def _wait_timeout(self, stalled_since: float | None) -> float | None:
        """Until the next probe is due or the stall deadline passes (None: no deadline)."""
        due = [when for when in self._down.values() if when < math.inf]
        if stalled_since is not None:
            due.append(stalled_since + self.unavailable_timeout_s + 0.01)
        return max(0.0, min(due) - time.monotonic()) if due else None

    def _lost(self, job: Job, reason: str) -> ExecResult | CheckResult:
        result = sandbox_error(reason, job.limits or self.limits, env="", enforced_by="")
        if job.tests is None:
            return result
        return CheckResult(execution=result, outcomes=(), tests_total=job.tests.total,
                           passed=False)


def alive_nodes() -> set[str]:
    """The ids of the cluster's live nodes (one GCS call)."""
    return {n["NodeID"] for n in ray.nodes() if n["Alive"]}


def actor_count(cpus_per_actor: float, resources: Mapping[str, float]) -> int:
    """One actor per `cpus_per_actor` CPUs: of the cluster's free CPUs, or with `resources`, of
    the live nodes that have them (their totals: a sandbox node runs nothing else)."""
    if not resources:
        return max(1, int(ray.available_resources().get("CPU", 1) // cpus_per_actor))
    fits = [min(_times(node["Resources"].get("CPU", 0), cpus_per_actor),
                *(_times(node["Resources"][k], v) for k, v in resources.items()))
            for node in ray.nodes()
            if node["Alive"] and all(k in node["Resources"] for k in resources)]
    if not fits:
        raise RuntimeError(f"sandbox actors ask for resources {dict(resources)}, which no live "
                           f"node has (the cluster has {ray.cluster_resources()}): start the "
                           f"sandbox nodes with `ray start --resources=...` naming them, or set "
                           f"the number of actors (sandbox.workers)")
    return max(1, sum(fits))


def _times(available: float, each: float) -> int:
    return math.floor(available / each + 1e-9)  # 1 // 0.001 is 999.0 in floats


def actor_pids(pool: SandboxPool) -> list[int]:
    """The OS pids of the pool's actors (for tests and operators)."""
    return ray.get([a.pid.remote() for a in pool.actors])


def actor_executed(pool: SandboxPool) -> list[int]:
    """Jobs each of the pool's actors has run (for tests and operators: where work went)."""
    return ray.get([a.executed.remote() for a in pool.actors])
