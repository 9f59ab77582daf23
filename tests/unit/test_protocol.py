"""Status classification: limits first, then crashes, then the exit code."""

import signal

import pytest

from spade_ray.execution.docker_cgroups import memory_counters
from spade_ray.execution.protocol import SPAWNER_LOST, Measured, classify
from spade_ray.records import ExecStatus, Limits

LIMITS = Limits()


def reply(**overrides):
    base = dict(reason=None, exit_code=0, memory_error=False)
    base.update(overrides)
    return base


@pytest.mark.parametrize("fields, measured, status", [
    ({"reason": "timeout", "exit_code": -9}, Measured(), ExecStatus.TIMEOUT),
    ({"reason": "cpu", "exit_code": -9}, Measured(), ExecStatus.TIMEOUT),
    ({"exit_code": -signal.SIGXCPU}, Measured(), ExecStatus.TIMEOUT),
    ({"exit_code": -9}, Measured(oom_killed=True), ExecStatus.MEMORY_LIMIT),
    # CPU burnt by the kernel's reclaim at the memory limit: the memory limit ended it
    ({"reason": "cpu", "exit_code": -9}, Measured(memory_limit_hit=True), ExecStatus.MEMORY_LIMIT),
    ({"exit_code": -signal.SIGXCPU}, Measured(memory_limit_hit=True), ExecStatus.MEMORY_LIMIT),
    ({"reason": "timeout", "exit_code": -9}, Measured(memory_limit_hit=True),
     ExecStatus.TIMEOUT),
    ({"exit_code": 1, "memory_error": True}, Measured(), ExecStatus.MEMORY_LIMIT),
    ({"reason": "output", "exit_code": -9}, Measured(), ExecStatus.OUTPUT_LIMIT),
    ({"exit_code": -signal.SIGXFSZ}, Measured(), ExecStatus.OUTPUT_LIMIT),
    ({"exit_code": -signal.SIGSEGV}, Measured(), ExecStatus.ERROR),
    ({"exit_code": 3}, Measured(), ExecStatus.ERROR),
    ({"exit_code": -signal.SIGKILL}, Measured(), ExecStatus.KILLED),
    ({"exit_code": None}, Measured(), ExecStatus.SANDBOX_ERROR),
    # the spawner, lost, took the status with it: only the run's processes can stop or kill it
    ({"exit_code": None, "jail_changed": SPAWNER_LOST}, Measured(), ExecStatus.ERROR),
    ({"exit_code": None, "jail_changed": "a socket was left"}, Measured(),
     ExecStatus.SANDBOX_ERROR),
    ({"exit_code": 0}, Measured(), ExecStatus.OK),
])
def test_classify(fields, measured, status):
    assert classify(reply(**fields), LIMITS, measured)[0] is status


def test_timeout_wins_over_oom():
    got = classify(reply(reason="timeout", exit_code=-9), LIMITS, Measured(oom_killed=True))
    assert got[0] is ExecStatus.TIMEOUT


@pytest.mark.parametrize("text, counters", [
    ("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n7\n", (2, 7)),  # v1: oom_control, failcnt
    ("low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n", (1, 5)),  # v2: events
    ("cat: /sys/fs/cgroup/memory.events: No such file or directory\n", (0, 0)),
])
def test_memory_counters_read_v1_and_v2(text, counters):
    assert memory_counters(text) == counters
