"""What only the Docker backend does: its CPU quota's margin for the harness, and its control
channel (a unix socket bound into the container on a local engine, else the attach stream)."""

import os
import socket
import tempfile

import docker
import pytest

from spade_ray.execution import BackendUnavailable, docker_backend
from spade_ray.execution.docker_backend import DockerWorker
from spade_ray.execution.docker_cgroups import host_cgroup_dir
from spade_ray.execution.docker_engine import LABEL
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
SQUARE = TestSuite(asserts=("assert f(2) == 4", "assert f(3) == 9"))


def throttled_periods(container) -> int | None:
    """nr_throttled of the container's CPU cgroup as this host sees it (None: a remote engine or
    a cgroup namespace hiding the path)."""
    container.reload()
    directory = host_cgroup_dir(container.attrs["State"]["Pid"], container.id, "cpu")
    if directory is None or not (directory / "cpu.stat").is_file():
        return None
    fields = dict(line.split() for line in (directory / "cpu.stat").read_text().splitlines())
    return int(fields["nr_throttled"])


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
        checks = [sb.check("def f(x):\n    return x * x\n", SQUARE) for _ in range(60)]
        after = throttled_periods(container)
        client.close()
    assert busy.status is ExecStatus.OK and busy.stdout == "done\n"
    assert all(r.passed for r in checks)
    assert after - before == 0


FDS = """
import os
links = []
for fd in os.listdir("/proc/self/fd"):
    try:
        links.append(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:  # the listing's own fd, closed by now
        pass
print(sorted(links))
try:
    print(os.listdir("/run/spade-control"))
except OSError as e:
    print(type(e).__name__)
"""


def worker() -> DockerWorker:
    try:
        return DockerWorker(TEST_LIMITS)
    except BackendUnavailable as e:
        if os.environ.get("SPADE_REQUIRE_DOCKER") == "1":
            raise
        pytest.skip(f"docker backend unavailable: {e}")


def assert_it_works(w: DockerWorker) -> None:
    result, report = w.run("def f(x):\n    return x * x\n", None, TEST_LIMITS, SQUARE)
    assert result.status is ExecStatus.OK
    assert [o["outcome"] for o in report["outcomes"]] == ["passed", "passed"]
    echo, _ = w.run("print(input()[::-1])", b"abc", TEST_LIMITS)
    assert echo.stdout == "cba\n"


def assert_a_worker_works_on_attach() -> None:
    w = worker()
    try:
        assert w.channel == "attach"
        assert_it_works(w)
    finally:
        w.close()


def control_dirs() -> set[str]:
    return {d for d in os.listdir(tempfile.gettempdir()) if d.startswith("spade-ray-control-")}


def test_a_local_engine_talks_over_the_control_socket_and_the_program_cannot_reach_it():
    before = control_dirs()
    w = worker()
    try:
        if w.channel == "attach" and b"cannot connect" in w._stream.stderr:
            pytest.skip("the engine does not share this machine's files (the harness said so)")
        assert w.channel == "socket"
        assert control_dirs() == before  # the socket and its directory are gone once connected
        assert_it_works(w)
        r, _ = w.run(FDS, None, TEST_LIMITS)
    finally:
        w.close()
    fds, listing = r.stdout.splitlines()
    assert "socket:" not in fds  # the program holds its pipes and /dev/null only
    assert listing in ("[]", "PermissionError")  # removed on the host; 0711 besides


def test_a_harness_that_cannot_connect_answers_on_attach(monkeypatch):
    made = docker_backend.ControlSocket.__init__

    def elsewhere(self):  # the harness is told a socket name that is not there
        made(self)
        self.name += "-missing"

    monkeypatch.setattr(docker_backend.ControlSocket, "__init__", elsewhere)
    assert_a_worker_works_on_attach()


def test_an_engine_that_cannot_see_our_directory_gets_attach(monkeypatch):
    """Told to bind a directory it does not have (an engine on another file system), the engine
    binds an empty one of its own making: the harness finds no socket there."""
    made, unseen = docker_backend.ControlSocket.__init__, []

    def elsewhere(self):
        made(self)
        self.dir += "-unseen"
        unseen.append(self.dir)

    monkeypatch.setattr(docker_backend.ControlSocket, "__init__", elsewhere)
    try:
        assert_a_worker_works_on_attach()
    finally:
        for path in unseen:  # what the engine made, and ours (close removed the other)
            for made_dir in (path, path.removesuffix("-unseen")):
                if os.path.isdir(made_dir):
                    os.rmdir(made_dir)


def test_a_stranger_on_the_control_socket_is_refused(monkeypatch):
    """A peer that is not the container's first process never gets a frame: the container is
    replaced by one on the attach stream."""
    monkeypatch.setattr(docker_backend, "peer_pid", lambda conn: -1)
    assert_a_worker_works_on_attach()
