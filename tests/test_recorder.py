"""The Recorder with a real trace store: what a round counts of the sandbox's re-runs, failures
and hack suspicions, and that a sandbox_error candidate is traced but never paired."""

import dataclasses
import sqlite3

import pytest

from spade_ray import stages
from spade_ray.recorder import Recorder
from spade_ray.records import ExecStatus
from spade_ray.rollout.sampling import TokenMeter
from spade_ray.tracking import MetricsSink, TraceStore, Versions
from tests.tracking import factories as f


def solutions(count: int) -> stages.Solutions:
    task = f.task()
    candidates = tuple(
        dataclasses.replace(f.candidate(index=i), code=f"def f(x):\n    return {i}\n")
        for i in range(count))  # distinct programs: pairs need them
    return stages.Solutions((task,), ("p",), candidates, count, 0.0)


def rerun(check):
    return dataclasses.replace(check, execution=dataclasses.replace(check.execution, attempts=2))


def sandbox_error(check):
    return dataclasses.replace(check, passed=False, outcomes=(), execution=dataclasses.replace(
        check.execution, status=ExecStatus.SANDBOX_ERROR, exit_code=None, attempts=2))


@pytest.fixture
def record(tmp_path):
    store = TraceStore(tmp_path / "trace.sqlite", "run")
    sink = MetricsSink(tmp_path, "run", {}, wandb_mode="disabled")
    yield Recorder("run", tmp_path, store, sink).start_round(0, Versions(0, 0))
    sink.close()
    store.close()


def solved(record, checks):
    batch = solutions(len(checks))
    scored = stages.score(batch, checks, pair_margin=0.0, with_groups=False)
    record.solved(batch, checks, scored, generated=True)
    meters = {"generator": TokenMeter("generator"), "solver": TokenMeter("solver")}
    return scored, record.metrics(None, 0, None, meters, 1.0)


def test_a_round_counts_the_sandboxs_reruns_errors_and_hack_suspects(record):
    checks = [f.check(), rerun(f.check()), sandbox_error(f.check()),
              dataclasses.replace(f.check(passed=False), suspicion="read the grader's fd")]
    _, metrics = solved(record, checks)
    assert (metrics.sandbox_reruns, metrics.sandbox_errors, metrics.hack_suspects) == (2, 1, 1)


def test_a_sandbox_error_candidate_is_traced_but_never_paired(record, tmp_path):
    scored, _ = solved(record, [f.check(), f.check(passed=False), sandbox_error(f.check())])
    db = sqlite3.connect(tmp_path / "trace.sqlite")
    traced = db.execute("SELECT candidate_id FROM executions WHERE status='sandbox_error'")
    paired = {c for p in scored.pairs for c in (p.chosen_candidate_id, p.rejected_candidate_id)}
    assert traced.fetchall() == [("t0/2",)] and "t0/2" not in paired and scored.pairs
