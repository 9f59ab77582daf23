"""Status classification: limits first, then crashes, then the exit code."""

import signal

import pytest

from spade_ray.execution.protocol import Measured, classify
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
    ({"exit_code": 1, "memory_error": True}, Measured(), ExecStatus.MEMORY_LIMIT),
    ({"reason": "output", "exit_code": -9}, Measured(), ExecStatus.OUTPUT_LIMIT),
    ({"exit_code": -signal.SIGXFSZ}, Measured(), ExecStatus.OUTPUT_LIMIT),
    ({"exit_code": -signal.SIGSEGV}, Measured(), ExecStatus.ERROR),
    ({"exit_code": 3}, Measured(), ExecStatus.ERROR),
    ({"exit_code": -signal.SIGKILL}, Measured(), ExecStatus.KILLED),
    ({"exit_code": None}, Measured(), ExecStatus.SANDBOX_ERROR),
    ({"exit_code": 0}, Measured(), ExecStatus.OK),
])
def test_classify(fields, measured, status):
    assert classify(reply(**fields), LIMITS, measured)[0] is status


def test_timeout_wins_over_oom():
    got = classify(reply(reason="timeout", exit_code=-9), LIMITS, Measured(oom_killed=True))
    assert got[0] is ExecStatus.TIMEOUT
