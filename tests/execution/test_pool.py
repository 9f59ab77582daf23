"""The Ray pool, on a real local Ray cluster: streaming, order, retries after actor death."""

import os
import signal
import time

import pytest
import ray

from spade_ray.execution.pool import Job, SandboxPool, actor_pids
from spade_ray.records import ExecStatus, TestSuite
from tests.conftest import TEST_LIMITS


@pytest.fixture(scope="module")
def pool():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with SandboxPool(limits=TEST_LIMITS, num_actors=2) as p:
            p.run_many(["pass"] * 4)  # both actors constructed and warm
            yield p
    finally:
        ray.shutdown()


def test_stream_yields_in_finish_order(pool):
    jobs = [Job(f"import time; time.sleep({d})") for d in (1.5, 0.0)]
    assert [index for index, _ in pool.stream(jobs)] == [1, 0]


def test_stream_pulls_jobs_lazily(pool):
    pulled = []

    def jobs():
        for i in range(50):
            pulled.append(i)
            yield Job(f"print({i})")

    stream = pool.stream(jobs())
    next(stream)
    assert len(pulled) <= pool.max_in_flight + 1  # backpressure: not all 50 at once
    assert len(list(stream)) == 49


def test_run_many_returns_the_given_order(pool):
    results = pool.run_many([f"print({i})" for i in range(20)])
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(20)]


def test_check_through_the_pool(pool):
    result = pool.check("def f(x):\n    return x\n", TestSuite(asserts=("assert f(2) == 2",)))
    assert result.passed


def test_code_failure_is_not_retried(pool):
    before = pool.retries
    assert pool.run("raise SystemExit(1)").status is ExecStatus.ERROR
    assert pool.retries == before


def test_job_is_retried_once_when_its_actor_dies(pool):
    before = pool.retries
    refs_pids = actor_pids(pool)
    jobs = [Job("import time; time.sleep(1.5); print('done')") for _ in range(2)]
    stream = pool.stream(jobs)
    time.sleep(0.7)  # both jobs are running now
    os.kill(refs_pids[0], signal.SIGKILL)
    results = [r for _, r in stream]
    assert [r.status for r in results] == [ExecStatus.OK, ExecStatus.OK]
    assert pool.retries == before + 1
    assert pool.run("print('still up')").stdout == "still up\n"
