"""Docker backend: a warm harness as PID 1 of a locked-down container, talked to over a unix
socket bound into it (an engine on this machine) or over `attach` (any engine): docker_channel.py.

Isolation: no network, read-only root, no capabilities, no-new-privileges, the project's seccomp
deny list (sandbox/seccomp.json, the bwrap backend's: io_uring, userfaultfd, keyctl, bpf, perf,
SysV IPC, ...) as the container's profile, a uid no other live jail of this machine runs as
(jailuid.py), a private IPC namespace without /dev/shm
(SysV objects and POSIX message queues a run could still leave are removed by the harness), no
/sys/fs/cgroup with a local engine (`container_options`), no core dumps; the working
directory is a tmpfs capped in bytes and inodes that the harness empties after every run. The
image is pinned by its ID. Limits: the container's memory (tmpfs pages included, no swap), pids
and CPU cgroups hold the whole tree, each with a margin for the harness, which shares them (the
candidate gets one CPU, as on the local backend, and the harness half of one more); the
harness enforces wall-clock, tree-CPU, output and rlimits. Peak memory is the container's
cgroup's during the run, above what it held at the start (a local engine), or else the
harness's figure (the largest process). The container is kept warm and destroyed after any
timeout, OOM, violation, leftover process or failed cleanup, after `max_runs`, and when its
limits change.

Not protected against: kernel exploits beyond what namespaces, seccomp and an unprivileged uid
stop; CPU cache side channels.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import time

from docker.errors import DockerException, ImageNotFound, NotFound

from spade_ray.execution.cgroups import PeakMeter
from spade_ray.execution.channel import Channel, ChannelError, fd_reader
from spade_ray.execution.docker_cgroups import (
    cpu_seconds,
    host_cgroup_dir,
    host_cpu_file,
    host_memory_files,
    memory_counters,
)
from spade_ray.execution.docker_channel import (
    AttachStream,
    ControlPeerError,
    ControlSocket,
    peer_pid,
)
from spade_ray.execution.docker_engine import (
    connect,
    container_options,
    find_image,
    image_tag,
    remove_stale,
)
from spade_ray.execution.jailuid import UidLease
from spade_ray.execution.packages import package_dirs, package_versions
from spade_ray.execution.protocol import (
    HOST_GRACE_S,
    START_TIMEOUT_S,
    BackendUnavailable,
    Measured,
    Request,
    build_request,
    env_hash,
    grader_report,
    jail_digest,
    lost_run,
    sandbox_error,
    spare_pid,
    to_exec_result,
)
from spade_ray.records import ExecResult, ExecStatus, Limits, TestSuite

ENFORCED_BY = "docker (container limits)"
# After these the container may hold damage we cannot see (a half-killed tree, a harness that
# lost a race with the OOM killer): recycle it rather than reason about what survived.
RECYCLE = {ExecStatus.TIMEOUT, ExecStatus.MEMORY_LIMIT, ExecStatus.OUTPUT_LIMIT,
           ExecStatus.KILLED, ExecStatus.SANDBOX_ERROR}


def _container_shape(limits: Limits) -> tuple:
    """The limits fixed when a container starts; the others travel with each request."""
    return (limits.memory_mb, limits.max_processes, limits.max_output_bytes, limits.tmp_mb,
            limits.tmp_inodes)


class DockerWorker:
    """One warm container. Not thread-safe: the Sandbox hands a worker to one thread at a time."""

    def __init__(self, limits: Limits, packages: tuple[str, ...] = (),
                 max_runs: int = 1000) -> None:
        self.packages = package_dirs(packages)
        self.limits = limits
        self.max_runs = max_runs
        self.enforced_by = ENFORCED_BY
        self.client = connect()
        tag = image_tag()
        self.image = find_image(self.client, tag)
        remove_stale(self.client)
        self._container = None
        self._peak: PeakMeter | None = None
        self._stream: AttachStream | None = None
        self._conn: socket.socket | None = None
        # An engine on this machine (a local unix socket) may see our files: try a ControlSocket
        # (False once its peer turned out not to be the harness).
        self._local_engine = self.client.api.base_url == "http+docker://localhost"
        self._control_socket = self._local_engine
        self.channel = "attach"  # or "socket": what the current container's frames travel on
        self._lease = UidLease()  # the host uid no other live jail of this machine runs as
        try:
            self._start()
        except BaseException:
            self._lease.close()
            raise
        self._facts = {
            "backend": "docker", "image": self.image.id, "image_tag": tag,
            "engine": self.client.version().get("Version", "unknown"),
            "python": self._python, "hash_seed": self._hash_seed,
            "harness": jail_digest()[:16],
            "packages": package_versions(self.packages),
            "enforced_by": self.enforced_by,
        }

    # ------------------------------------------------------------------ lifecycle

    def _start(self) -> None:
        started = time.monotonic()
        control = ControlSocket() if self._control_socket else None
        try:
            self._container = self.client.containers.create(
                self.image.id, name=f"spade-ray-{os.getpid()}-{secrets.token_hex(4)}",
                **container_options(self.limits, self.packages,
                                    f"{socket.gethostname()}:{os.getpid()}", self._lease.uid,
                                    control,
                                    hide_cgroups=self._local_engine))
            # Attach before start: a stream attached later would miss the ready frame.
            self._stream = AttachStream(self._container.attach_socket(
                params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}))
            self._container.start()
            self._container.reload()  # State.Pid: the control socket's peer, the memory counters
            deadline = time.monotonic() + START_TIMEOUT_S
            self._channel = self._open_channel(control, deadline)
            ready = self._channel.recv(deadline)
        except ControlPeerError:  # not our harness, or a pid we cannot match: attach instead
            self._stop()
            self._control_socket = False
            return self._start()
        except (DockerException, ChannelError, OSError) as e:
            err = self._stop().strip() or str(e)
            hint = "; build it: sandbox/build_image.sh" if isinstance(e, ImageNotFound) else ""
            raise BackendUnavailable(f"the docker sandbox ({self.image.id[:19]}) did not start: "
                                     f"{err}{hint}") from e
        finally:
            if control is not None:
                control.close()
        self._python = ready.get("python", "unknown")
        self._hash_seed = ready.get("hash_seed")
        self._memory_files = host_memory_files(self._container.attrs["State"]["Pid"],
                                               self._container.id)
        self._cpu_file = host_cpu_file(self._container.attrs["State"]["Pid"], self._container.id)
        self._peak = self._peak_meter()
        # A remote engine: a new container starts a new cgroup at zero (and saves an exec).
        self._memory_seen = self._memory_counts() if self._memory_files else (0, 0)
        self._runs = 0
        self.start_s = time.monotonic() - started

    def _open_channel(self, control: ControlSocket | None, deadline: float) -> Channel:
        conn = None if control is None else control.accept(self._stream, deadline)
        if conn is None:
            self.channel = "attach"
            return Channel(self._stream.read, self._stream.write)
        peer, pid = peer_pid(conn), self._container.attrs["State"]["Pid"]
        if peer != pid:
            conn.close()
            raise ControlPeerError(f"control socket peer {peer}, harness {pid}")
        conn.settimeout(START_TIMEOUT_S)  # bounds sendall when the harness stops reading
        self._conn = conn
        self.channel = "socket"
        return Channel(fd_reader(conn.fileno()), conn.sendall)

    def _stop(self) -> str:
        """Remove the container; return what the harness wrote on stderr (for error messages)."""
        stderr = ""
        if self._peak is not None:
            self._peak.close()
            self._peak = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._stream is not None:
            try:
                self._stream.poll(reads=64)
            except OSError:
                pass
            stderr = self._stream.stderr.decode(errors="replace")
            self._stream.close()
            self._stream = None
        if self._container is not None:
            try:
                self._container.remove(force=True)
            except NotFound:
                pass
            except DockerException as e:  # the engine went away: nothing left to clean here
                stderr += f"\n(removing container {self._container.short_id} failed: {e})"
            self._container = None
        return stderr

    def close(self) -> None:
        self._stop()
        self.client.close()
        self._lease.close()

    # ------------------------------------------------------------------ running

    @property
    def env(self) -> dict:
        return self._facts

    def run(self, code: str, stdin: bytes | None, limits: Limits,
            tests: TestSuite | None = None) -> tuple[ExecResult, dict]:
        """Run one program; returns the result and protocol.grader_report's dict."""
        if self._container is None or _container_shape(limits) != _container_shape(self.limits):
            self._stop()
            self.limits = limits
            self._start()
        env = env_hash(self._facts, limits)
        # uid 65534 is shared with every other container of the host user namespace, so
        # RLIMIT_NPROC would count their processes too: the pids cgroup caps the tree instead.
        request = build_request(code, stdin, limits, tests, rlimit_nproc=False,
                                memory_cgroup=True, shares_memory_cgroup=True)
        started = time.monotonic()
        cpu_before = self._cpu_usage()
        if self._peak is not None:
            self._peak.begin()
        try:
            reply, report = self._exchange(request, limits)
            oom_killed, limit_hit = self._memory_events(reply)
            cpu_after = self._cpu_usage()
            measured = Measured(oom_killed=oom_killed, memory_limit_hit=limit_hit,
                                cpu_s=None if cpu_after is None else cpu_after - cpu_before,
                                peak_memory_mb=self._peak.peak_mb() if self._peak else None)
        except (ChannelError, DockerException, OSError) as e:
            oom = self._harness_oom_killed()
            err = self._stop().strip()[-2000:]
            wall_s = time.monotonic() - started
            if oom:  # the run filled the container: its own failure, whoever the kernel killed
                return lost_run(ExecStatus.MEMORY_LIMIT, f"the container's {limits.memory_mb} MB "
                                "memory limit was reached and the OOM killer ended the jail's "
                                "server", limits, env=env, enforced_by=self.enforced_by,
                                wall_s=wall_s), {}
            detail = f"docker sandbox failed and was removed: {e}" + (f"; {err}" * bool(err))
            return sandbox_error(detail, limits, env=env, enforced_by=self.enforced_by,
                                 wall_s=wall_s), {}
        result = to_exec_result(reply, limits, measured, env=env, enforced_by=self.enforced_by)
        self._runs += 1
        if (result.status in RECYCLE or reply["survivors"] or reply["cleanup_error"]
                or reply["jail_changed"] or (self._peak and self._peak.left_charged())
                or self._runs >= self.max_runs):  # as LocalWorker.run
            self._stop()  # a fresh container starts lazily on the next run
        return result, grader_report(request, reply, report)

    def _exchange(self, request: Request, limits: Limits) -> tuple[dict, bytes | None]:
        # The harness enforces the limits; this deadline only catches a hung harness.
        deadline = time.monotonic() + limits.timeout_s + HOST_GRACE_S
        self._channel.send(request.frame, *(() if request.tests is None else (request.tests,)))
        # The harness announced its spare candidate before reading our request; the container's
        # cgroups hold it already, so we need not wait for that frame (a relay through the
        # engine) before sending.
        spare_pid(self._channel.recv(deadline))
        reply = self._channel.recv(deadline)
        if "harness_error" in reply:
            raise ChannelError(f"harness error: {reply['harness_error']}")
        report = self._channel.recv_raw(deadline) if request.tests is not None else None
        return reply, report

    def _memory_events(self, reply: dict) -> tuple[bool, bool]:
        """(OOM-killed, hit the memory limit) during this run, from the memory cgroup's counters.
        The harness cannot tell: it sees a SIGKILL with no reason of its own, or a time limit
        reached while the kernel reclaimed at the memory limit. Docker's State.OOMKilled does
        not help either: it describes the container's main process, which the OOM killer spares.
        A remote engine costs an exec per read, so it reads only after those two outcomes; a
        limit hit by an earlier run of the same container that ended normally is then counted
        for the next such run."""
        suspect = (reply["reason"] in ("cpu", "timeout") or reply["exit_code"] == -signal.SIGXCPU
                   or (reply["exit_code"] == -signal.SIGKILL and not reply["reason"]))
        if self._memory_files is None and not suspect:
            return False, False
        (oom_seen, hits_seen), self._memory_seen = self._memory_seen, self._memory_counts()
        return self._memory_seen[0] > oom_seen, self._memory_seen[1] > hits_seen

    def _peak_meter(self) -> PeakMeter | None:
        """The container's memory peak per run, from its cgroup (a local engine that lets us
        reset the counter), or None: then the harness's figure, the largest process's max RSS,
        which misses memory no process maps (a memfd) and grows with the harness's own heap."""
        directory = host_cgroup_dir(self._container.attrs["State"]["Pid"], self._container.id,
                                    "memory")
        if directory is None:
            return None
        meter = None
        try:
            meter = PeakMeter(directory)
            meter.begin()  # a reset we may not be allowed to write
            return meter
        except (OSError, ValueError):
            if meter is not None:
                meter.close()
            return None

    def _cpu_usage(self) -> float | None:
        """The container's CPU seconds so far (a local engine), or None. A run's share is the
        difference: it counts what the harness cannot see, e.g. children a program set up to be
        reaped by the kernel (SIGCHLD ignored), whose time no wait() returns, and the harness's
        and grader's few milliseconds."""
        if self._cpu_file is None:
            return None
        try:
            return cpu_seconds(self._cpu_file.read_text())
        except (OSError, ValueError):
            return None

    def _harness_oom_killed(self) -> bool:
        """Whether the OOM killer ended the harness (the container's main process): a program
        that holds its memory where no process's RSS shows it (a memfd) and lowers its own OOM
        score leaves the kernel the harness to kill. That is the program's memory limit, not a
        sandbox failure."""
        if self._container is None:
            return False
        deadline = time.monotonic() + 2.0  # the engine records the exit a moment after it
        try:
            while True:
                self._container.reload()
                state = self._container.attrs["State"]
                if not state.get("Running") or time.monotonic() > deadline:
                    return bool(state.get("OOMKilled"))
                time.sleep(0.02)
        except DockerException:
            return False

    def _memory_counts(self) -> tuple[int, int]:
        if self._memory_files is not None:  # a local engine: read the kernel's counters directly
            return memory_counters("\n".join(f.read_text() for f in self._memory_files))
        if self._local_engine:  # whose cgroups we cannot see (rootless); the jail cannot see
            return 0, 0        # them either (container_options): an OOM kill reads as a kill
        # A remote engine: the container sees its own cgroup (v1 bind mount, v2 namespace).
        result = self._container.exec_run(["cat", "/sys/fs/cgroup/memory/memory.oom_control",
                                           "/sys/fs/cgroup/memory/memory.failcnt",
                                           "/sys/fs/cgroup/memory.events"])
        return memory_counters(result.output.decode(errors="replace"))
