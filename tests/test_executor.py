"""The loop's executor: the in-process Sandbox and the Ray SandboxPool are interchangeable, a run
with `sandbox.placement=pool` executes on sandbox actors, and a killed sandbox actor costs the
round no candidate."""

import os
import signal
import sqlite3
import threading
from pathlib import Path

import pytest
import ray
from hydra import compose, initialize_config_dir

from spade_ray import app, stages
from spade_ray.execution import Executor, Sandbox
from spade_ray.execution.pool import SandboxPool, actor_executed, actor_pids
from spade_ray.records import Candidate, ExecStatus, Limits, TaskFamily
from spade_ray.tasks.seeds import load_seed_tasks

CONF = Path(__file__).resolve().parents[1] / "conf"
LIMITS = Limits(timeout_s=5.0, cpu_s=5.0, memory_mb=256)


def slow_solutions(count: int, sleep_s: float) -> stages.Solutions:
    """Correct candidates (seed references) that each take `sleep_s` to import."""
    with Sandbox("local", LIMITS, 2) as sandbox:
        seeds = load_seed_tasks(sandbox, LIMITS)
    tasks = [t for t in seeds if t.family is TaskFamily.CODEGEN][:count]
    candidates = [Candidate(candidate_id=f"{t.task_id}/r0/0", task_id=t.task_id,
                            code=f"import time\ntime.sleep({sleep_s})\n{t.reference}",
                            solver_version=0, prompt_tokens=0, completion_tokens=0)
                  for t in tasks]
    return stages.Solutions(tuple(tasks), ("",) * count, tuple(candidates), count, 0.0)


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def test_both_placements_implement_the_executor_interface(local_ray):
    def runs(executor: Executor) -> list[bool]:
        with executor:
            return [c.passed for c in stages.execute(executor, slow_solutions(2, 0), LIMITS)]

    assert runs(Sandbox("local", LIMITS, 1)) == runs(SandboxPool("local", LIMITS, 1)) == [
        True, True]


def test_a_killed_sandbox_actor_loses_no_candidate(local_ray):
    with SandboxPool("local", LIMITS, num_actors=2, cpus_per_actor=0.5) as pool:
        pool.run_many(["pass"] * 4)  # both actors warm
        victim = actor_pids(pool)[0]
        solutions = slow_solutions(4, 2.0)
        killer = threading.Timer(1.0, os.kill, (victim, signal.SIGKILL))
        killer.start()  # while both actors hold jobs that take 2 s
        checks = stages.execute(pool, solutions, LIMITS)
        killer.join()
        assert pool.retries >= 1  # the kill did land on a running job
    assert [c.execution.status for c in checks] == [ExecStatus.OK] * 4


def test_a_pool_run_executes_on_sandbox_actors_not_on_the_driver(local_ray, tmp_path,
                                                                 monkeypatch):
    executed = []
    close = SandboxPool.close

    def close_and_count(pool):
        executed.extend(actor_executed(pool))
        close(pool)

    def no_driver_sandbox(*args, **kwargs):
        raise AssertionError("a pool run built an in-process Sandbox")

    monkeypatch.setattr(SandboxPool, "close", close_and_count)
    monkeypatch.setattr(app, "Sandbox", no_driver_sandbox)
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[
            "experiment=cpu_tiny", "loop.rounds=1", "wandb.mode=disabled", "run_name=pool",
            "sandbox.placement=pool", "sandbox.workers=2", "sandbox.cpus_per_worker=0.25"])
    app.run(cfg, tmp_path)  # on the module's local Ray cluster
    db = sqlite3.connect(tmp_path / "trace.sqlite")
    traced = db.execute("SELECT COUNT(*) FROM executions").fetchone()[0]
    assert traced > 0 and sum(executed) >= traced  # every traced execution ran on an actor
