"""Ray Jobs from a checkout: launch/ray_head.sh starts a local head (token auth), launch/ray_job.sh
submits `spade-ray run` to it, follows its logs and stops jobs; the head stops by its own PID.

Each head here is private: its own temp dir, free ports, 2 CPUs, its own token file (never
~/.ray/auth_token) and a small object store, so that it cannot meet another cluster on this
machine; and it is stopped through its process group, never with `ray stop`.
"""

import json
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a head takes ~20 s to start here, a tiny run as a job ~60 s

REPO = Path(__file__).resolve().parents[1]
HEAD_SH = REPO / "launch" / "ray_head.sh"
JOB_SH = REPO / "launch" / "ray_job.sh"
JOB_TIMEOUT_S = 420  # a cpu_tiny job took 53 s on an idle 2-core machine
# Every port a head listens on that has a fixed default (another head on this machine may hold
# it): GCS and dashboard through the script's variables, the rest as `ray start` flags.
PORT_FLAGS = ("--ray-client-server-port", "--dashboard-agent-listen-port",
              "--dashboard-agent-grpc-port", "--metrics-export-port", "--runtime-env-agent-port",
              "--node-manager-port", "--object-manager-port")


@dataclass(frozen=True)
class LocalHead:
    dir: Path
    pid: int  # leads the head's process group
    env: dict[str, str]  # a client's environment: address, token auth, token file


def free_ports(count: int) -> list[int]:
    with ExitStack() as stack:  # held together, so that the ports are distinct
        socks = [stack.enter_context(closing(socket.socket())) for _ in range(count)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def live_processes_of_group(pgid: int) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid=,pgid=,stat=,args="], capture_output=True,
                         text=True, check=True).stdout
    return [line for line in out.splitlines()
            if int(line.split()[1]) == pgid and not line.split()[2].startswith("Z")]


@contextmanager
def local_head(num_cpus: int = 2) -> Iterator[LocalHead]:
    """A head started by launch/ray_head.sh; on exit, stopped by it and checked gone."""
    # A short path (Ray's unix sockets live under it) and mode 0755 (the script sets it: the
    # sandbox user must reach a job's working_dir): not pytest's tmp_path.
    head_dir = Path(tempfile.mkdtemp(prefix="spade-head-", dir="/tmp"))
    gcs, dashboard, *others = free_ports(2 + len(PORT_FLAGS))
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_API_SERVER_ADDRESS")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(head_dir / "auth_token"),
               RAY_API_SERVER_ADDRESS=f"http://127.0.0.1:{dashboard}")
    flags = [x for flag, port in zip(PORT_FLAGS, others) for x in (flag, str(port))]
    flags += ["--object-store-memory", str(256 * 2**20)]
    start = subprocess.run(
        [str(HEAD_SH), "start", str(head_dir), "--", *flags], capture_output=True, text=True,
        env={**env, "GCS_PORT": str(gcs), "DASHBOARD_PORT": str(dashboard),
             "NUM_CPUS": str(num_cpus)}, timeout=300)
    pid_file = head_dir / "head.pid"
    pid = int(pid_file.read_text()) if pid_file.exists() else None
    try:
        assert start.returncode == 0, f"the head did not start:\n{start.stderr[-3000:]}"
        yield LocalHead(head_dir, pid, env)
    finally:
        stop = subprocess.run([str(HEAD_SH), "stop", str(head_dir)], capture_output=True,
                              text=True, env=env, timeout=120)
        left = live_processes_of_group(pid) if pid else []
        if left:  # the script failed to stop it: do not leave it running
            os.killpg(pid, signal.SIGKILL)
        shutil.rmtree(head_dir, ignore_errors=True)
        assert not left, f"stop left the head's processes running: {left}\n{stop.stderr}"


def ray_job(head: LocalHead, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(JOB_SH), *args], capture_output=True, text=True, env=head.env,
                          timeout=timeout)


def job_status(head: LocalHead, job_id: str) -> str:
    """The job's status, read from what `ray job status` prints."""
    out = ray_job(head, "status", job_id, "--log-style", "record", "--log-color", "false")
    text, quoted = out.stdout + out.stderr, re.escape(f"'{job_id}'")
    ended = re.search(rf"Job {quoted} (succeeded|was stopped|failed)", text)
    if ended:
        return {"succeeded": "SUCCEEDED", "was stopped": "STOPPED"}.get(ended[1], "FAILED")
    other = re.search(rf"Status for job {quoted}: (?:JobStatus\.)?(\w+)", text)
    return other[1] if other else f"unknown ({text[-500:]})"


def metrics_rounds(run_dir: Path) -> list[int]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["round"] for line in lines if line.strip()]


@pytest.fixture(scope="module")
def head() -> Iterator[LocalHead]:
    with local_head() as h:
        yield h


@pytest.mark.timeout(JOB_TIMEOUT_S + 400)  # and the head's start and stop
def test_tiny_run_submitted_as_a_job_succeeds_and_writes_its_run_directory(head, tmp_path):
    job_id = f"spade-test-{uuid.uuid4().hex[:8]}"
    cmd = ["submit", "--submission-id", job_id, "--", "spade-ray", "run", "experiment=cpu_tiny",
           f"run_root={tmp_path}", "wandb.mode=offline"]
    try:  # without --no-wait, submit follows the job's logs until it ends
        out = ray_job(head, *cmd, timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        logs = ray_job(head, "logs", job_id).stdout
        ray_job(head, "stop", job_id)
        pytest.fail(f"job {job_id} did not end in {JOB_TIMEOUT_S} s; its logs:\n{logs[-4000:]}")
    status = job_status(head, job_id)
    assert out.returncode == 0 and status == "SUCCEEDED", \
        f"job {job_id}: {status}; its logs:\n{out.stdout[-4000:]}\n{out.stderr[-2000:]}"
    run_dir = tmp_path / "cpu_tiny"
    assert metrics_rounds(run_dir) == [0, 1]
    db = sqlite3.connect(run_dir / "trace.sqlite")
    assert db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0] > 0
    assert db.execute("SELECT COUNT(*) FROM rounds").fetchone()[0] == 2


def test_a_running_job_stops_on_request(head):
    job_id = f"spade-test-{uuid.uuid4().hex[:8]}"
    out = ray_job(head, "submit", "--no-wait", "--submission-id", job_id, "--", "sleep", "600")
    assert out.returncode == 0, out.stderr[-3000:]
    stop = ray_job(head, "stop", job_id)  # waits until the job has ended
    assert stop.returncode == 0, stop.stderr[-3000:]
    assert job_status(head, job_id) == "STOPPED"
