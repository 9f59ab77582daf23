"""The Docker container's CPU quota is the candidate's one CPU plus a margin for the harness: the
harness's own work must never make the kernel throttle the container (which stalls the next run
until a new period begins)."""

import os
import socket
from pathlib import Path

import docker
import pytest

from spade_ray.execution.docker_backend import LABEL
from spade_ray.records import ExecStatus, TestSuite
from tests.conftest import TEST_LIMITS, open_sandbox

pytestmark = pytest.mark.docker

BUSY = """
import time
start = time.process_time()
while time.process_time() - start < 0.8:
    pass
print("done")
"""


def throttled_periods(container) -> int | None:
    """nr_throttled of the container's CPU cgroup as this host sees it (None: a remote engine or
    a cgroup namespace hiding the path)."""
    container.reload()
    try:
        lines = Path(f"/proc/{container.attrs['State']['Pid']}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if container.id not in path:
            continue
        if "cpu" in controllers.split(","):
            stat = Path("/sys/fs/cgroup/cpu", path.lstrip("/"), "cpu.stat")
        elif controllers == "":
            stat = Path("/sys/fs/cgroup", path.lstrip("/"), "cpu.stat")
        else:
            continue
        if stat.is_file():
            fields = dict(line.split() for line in stat.read_text().splitlines())
            return int(fields["nr_throttled"])
    return None


def test_the_harness_never_gets_the_container_throttled():
    with open_sandbox("docker", limits=TEST_LIMITS, workers=1) as sb:
        sb.run("pass")
        client = docker.from_env()
        [container] = client.containers.list(
            filters={"label": f"{LABEL}={socket.gethostname()}:{os.getpid()}"})
        before = throttled_periods(container)
        if before is None:
            pytest.skip("this host cannot read the container's CPU cgroup")
        # a candidate using its whole CPU while the harness polls its CPU time, then short
        # checks back to back (forks, exits and the grader beside the candidate)
        busy = sb.run(BUSY)
        suite = TestSuite(asserts=("assert f(2) == 4", "assert f(3) == 9"))
        checks = [sb.check("def f(x):\n    return x * x\n", suite) for _ in range(60)]
        after = throttled_periods(container)
        client.close()
    assert busy.status is ExecStatus.OK and busy.stdout == "done\n"
    assert all(r.passed for r in checks)
    assert after - before == 0
