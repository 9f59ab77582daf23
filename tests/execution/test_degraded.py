"""Without writable cgroups the local backend degrades to rlimits, and says so in every result."""

import pytest

from spade_ray.execution import Sandbox, cgroups
from spade_ray.records import ExecStatus
from tests.conftest import TEST_LIMITS


@pytest.fixture(scope="module")
def degraded():
    with pytest.MonkeyPatch.context() as mp:
        def unavailable():
            raise cgroups.CgroupUnavailable("test: cgroups switched off")

        mp.setattr(cgroups, "detect", unavailable)
        with Sandbox(backend="local", limits=TEST_LIMITS, workers=1) as sb:
            yield sb


def test_result_says_limits_are_degraded(degraded):
    r = degraded.run("print(1)")
    assert r.status is ExecStatus.OK
    assert r.limits_enforced_by.startswith("rlimit (degraded: test: cgroups switched off")


def test_memory_is_still_limited_by_rlimit(degraded):
    r = degraded.run("x = []\nwhile True: x.append(bytearray(2**20))")
    assert r.status is ExecStatus.MEMORY_LIMIT


def test_thread_bomb_is_still_capped_by_rlimit(degraded):
    r = degraded.run("import threading, time\n"
                     "while True: threading.Thread(target=time.sleep, args=(100,)).start()")
    assert r.status is ExecStatus.ERROR
    assert "can't start new thread" in r.stderr
