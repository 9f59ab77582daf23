"""The Docker engine's side of the docker backend: the sandbox image's tag, the engine
connection, the container's spec (`container_options`: every isolation setting and limit of a
container) and the removal of containers that dead host processes left. The warm container and
its runs are docker_backend.py's."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

import docker
from docker.errors import DockerException, ImageNotFound

from spade_ray.execution import seccomp
from spade_ray.execution.docker_channel import CONTROL_DIR, ControlSocket
from spade_ray.execution.protocol import (
    JAIL_ENV,
    JAIL_FILES,
    JAIL_PYTHON,
    JAIL_SITE,
    SANDBOX_DIR,
    BackendUnavailable,
)
from spade_ray.records import Limits

BUILD_SCRIPT = SANDBOX_DIR / "build_image.sh"
IMAGE_REPO = "spade-ray-sandbox"
LABEL = "spade-ray.sandbox"  # value: "<host name>:<host pid>", to find stale containers
# The harness shares the container's memory cgroup with the candidate: ~18 MB resident (measured:
# VmRSS of PID 1 in the bookworm image), plus the stdout/stderr it buffers while the candidate
# runs (up to the output cap, and the same again for the reply it builds).
HARNESS_MARGIN_MB = 24
# The CPU quota is the container's, harness and grader included: at one CPU, their forks, exits
# and the grader running beside a busy candidate pushed a 100 ms period over its quota and the
# whole container waited for the next one. Measured over 328 sequential HumanEval checks: 28 of
# 30 periods throttled, 0.4 s in all, 2-3% of runs 13-26 ms late (the p99 overhead 16-21 ms); at
# 1.25, 1.5 or 2 CPUs none throttled and the p99 was 3.9-6.4 ms.
HARNESS_CPU_MARGIN = 0.5


def image_tag() -> str:
    """The tag build_image.sh gives: sha256 of the jail's files then build_image.sh, 12 hex."""
    data = b"".join(p.read_bytes() for p in (*JAIL_FILES, BUILD_SCRIPT))
    digest = hashlib.sha256(data).hexdigest()
    return f"{IMAGE_REPO}:{digest[:12]}"


def connect() -> docker.DockerClient:
    try:
        client = docker.from_env()
        client.ping()
    except DockerException as e:
        raise BackendUnavailable(f"cannot reach a Docker engine ({e}); start dockerd: "
                                 "sandbox/start_dockerd.sh") from e
    return client


def find_image(client: docker.DockerClient, tag: str):
    try:
        return client.images.get(tag)
    except ImageNotFound as e:
        raise BackendUnavailable(f"sandbox image {tag} not found (it follows the current "
                                 "harness.py); build it: sandbox/build_image.sh") from e


def remove_stale(client: docker.DockerClient) -> None:
    """Remove sandbox containers left by dead host processes of this machine."""
    host = socket.gethostname()
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        owner_host, _, pid = container.labels.get(LABEL, "").rpartition(":")
        if owner_host == host and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                container.remove(force=True)
            except DockerException:
                pass  # another worker got there first, or removal is already under way


def container_options(limits: Limits, packages: dict[str, Path], label: str, uid: int,
                      control: ControlSocket | None = None, hide_cgroups: bool = False) -> dict:
    """`uid`: the host uid the container runs as, the worker's own (jailuid.py).
    `hide_cgroups`: an empty read-only tmpfs over /sys/fs/cgroup, for an engine on this
    machine (whose counters the host reads itself). The container's cgroup counters are never
    reset between its runs (peak usage, CPU, page faults), so a run could leave a number there
    for the next one to read: a channel from run to run."""
    output_mb = -(-limits.max_output_bytes // 2**20)
    tmpfs = {"/work": f"size={limits.tmp_mb}m,nr_inodes={limits.tmp_inodes},mode=0700,"
                      f"uid={uid},gid={uid},exec"}
    if hide_cgroups:
        tmpfs["/sys/fs/cgroup"] = "ro,size=4k"
    memory = f"{limits.memory_mb + HARNESS_MARGIN_MB + 2 * output_mb}m"
    volumes = {str(p): {"bind": f"{JAIL_SITE}/{n}", "mode": "ro"} for n, p in packages.items()}
    if control is not None:
        volumes[control.dir] = {"bind": CONTROL_DIR, "mode": "ro"}
    return dict(
        command=["python3", *JAIL_PYTHON,
                 *(["--control-socket", f"{CONTROL_DIR}/{control.name}"] if control else [])],
        stdin_open=True, tty=False, init=False,  # the harness must be PID 1 (kill(-1) sweeps)
        network_mode="none", read_only=True, cap_drop=["ALL"],
        security_opt=["no-new-privileges", f"seccomp={seccomp.docker_profile()}"],
        user=f"{uid}:{uid}", hostname="sandbox",
        ipc_mode="none",  # no /dev/shm: a writable mount that would outlive the run
        mem_limit=memory, memswap_limit=memory,  # equal: no swap
        pids_limit=limits.max_processes + 1,  # + the harness
        nano_cpus=int((1 + HARNESS_CPU_MARGIN) * 10**9),
        # uid/gid: the harness (the container's uid) must own /work to empty it; `exec` like the
        # bwrap backend's tmpfs (Docker defaults to noexec), so programs behave the same on both.
        tmpfs=tmpfs,
        working_dir="/work", environment=JAIL_ENV,
        ulimits=[docker.types.Ulimit(name="core", soft=0, hard=0)],
        volumes=volumes,
        # The frames carry every program's output: no engine-side log of them on the host disk.
        log_config={"type": "none"},
        labels={LABEL: label}, auto_remove=False,
    )
