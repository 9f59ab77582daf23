"""Local backend: a warm harness inside bubblewrap, a cgroup of its own for the executions.

Isolation (bwrap): every namespace unshared (no network interface but loopback, own PID space
where the harness is PID 1, own hostname, IPC, user namespace with further user namespaces
disabled), read-only /usr and interpreter, only whitelisted site-packages, no host files, an empty
environment, a new session, die-with-parent, all capabilities dropped, and bwrap itself started
as a uid of the worker's own when we are root (jailuid.py: no other live jail spends its kernel
budgets), so even a kernel escape lands unprivileged.

Limits: a cgroup for the candidate's tree, reset between runs (memory including tmpfs pages,
pids, one CPU; cgroups.py) on v1 or v2 when we
may write there; rlimits inside the harness always (file size, open files, core, address space);
wall-clock and tree-CPU deadlines and the output cap in the harness; a host-side deadline on top
in case the harness itself hangs. The working directory is a tmpfs capped in bytes and inodes
that we mount as root (bwrap cannot cap inodes); without root it is bwrap's tmpfs, capped in
bytes only, and the result says so in `limits_enforced_by`.

Starts from any checkout: the jail's files go in as fds bwrap reads, and as root (bwrap then runs
as the worker's uid) a bwrap or a whitelisted package behind a private directory (a venv under
/root or in a `mktemp -d`) is reached through a root-owned copy or bind mount (hostpaths.py). When
bwrap cannot start at all, the error is BackendUnavailable naming the cause, with nothing left
mounted.

Not protected against: kernel exploits beyond what namespaces, the seccomp filter and an
unprivileged uid stop, CPU cache side channels, and the candidate reading the world-readable /usr.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from spade_ray.execution import cgroups, seccomp
from spade_ray.execution.channel import Channel, ChannelError, fd_reader, fd_writer
from spade_ray.execution.hostpaths import (
    SANDBOX_UID,
    Mount,
    find_bwrap,
    find_python,
    remove_stale_mounts,
    world_accessible,
)
from spade_ray.execution.jailuid import UidLease
from spade_ray.execution.packages import package_dirs, package_versions
from spade_ray.execution.protocol import (
    HOST_GRACE_S,
    JAIL_DIR,
    JAIL_ENV,
    JAIL_FILES,
    JAIL_PYTHON,
    JAIL_SITE,
    START_TIMEOUT_S,
    BackendUnavailable,
    Measured,
    Request,
    build_request,
    env_hash,
    grader_report,
    jail_digest,
    sandbox_error,
    spare_pid,
    to_exec_result,
)
from spade_ray.records import ExecResult, Limits, TestSuite


class LocalWorker:
    """One warm jail. Not thread-safe: the Sandbox gives each worker to one thread at a time."""

    _counter = 0

    def __init__(self, limits: Limits, packages: tuple[str, ...] = (),
                 max_runs: int = 1000) -> None:
        self.bwrap = find_bwrap()
        self.python = find_python()
        self.packages = package_dirs(packages)
        self.limits = limits
        self.max_runs = max_runs
        LocalWorker._counter += 1
        self.name = f"w-{os.getpid()}-{LocalWorker._counter}"
        self.cgroup_version, self.enforced_by = self._cgroup_mode()
        self._proc: subprocess.Popen | None = None
        self._harness_pid: int | None = None
        self._mounts: list[Mount] = []
        self._cgroup: cgroups.ExecCgroup | None = None
        self._runs = 0
        self._exec_seq = 0
        self._facts: dict = {}
        self._mover = ThreadPoolExecutor(max_workers=1, thread_name_prefix=self.name)
        self._moved: Future | None = None  # _take_spare for the next run
        # as root, a host uid no other live jail runs as (jailuid.py); else ours, every jail's
        self._lease = UidLease() if os.geteuid() == 0 else None
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _cgroup_mode(self) -> tuple[str | None, str]:
        """The cgroup version in use, and how limits are enforced, in words (for results)."""
        notes = []
        if os.geteuid() != 0:
            notes.append("tmp inodes uncapped, one uid for every jail (not root)")
        try:
            seccomp.compile_filter()
        except seccomp.UnsupportedArchitecture as e:
            notes.append(f"no seccomp filter: {e}")
        try:
            version = cgroups.detect()
        except cgroups.CgroupUnavailable as e:
            notes.insert(0, f"degraded: {e}; memory is per process, no pids cap")
            return None, f"rlimit ({'; '.join(notes)})"
        cgroups.remove_stale(version, "w-")
        return version, f"cgroup-{version}+seccomp" + (f" ({'; '.join(notes)})" if notes else "")

    # ------------------------------------------------------------------ lifecycle

    def _start(self) -> None:
        # What the jail needs from the host goes in as fds we open (bwrap copies or binds them),
        # so it starts from any checkout, however private its directory (bwrap runs as the
        # worker's uid).
        fds: list[int] = []
        try:
            self._spawn(fds)
        except OSError as e:
            self._stop()
            # The hint fits only bwrap itself missing or out of reach; a mount or a cgroup file
            # refusing a value (EINVAL) is not cured by installing bubblewrap.
            hint = ("; install bubblewrap (apt-get install bubblewrap) or run from a checkout "
                    "every user can read") if e.errno in (errno.ENOENT, errno.EACCES) \
                and e.filename == self.bwrap else ""
            raise BackendUnavailable(f"cannot start the bwrap sandbox ({self.bwrap}): {e}"
                                     f"{hint}") from e
        finally:
            for fd in fds:
                os.close(fd)
        self._channel = Channel(fd_reader(self._proc.stdout.fileno()),
                                fd_writer(self._proc.stdin.fileno()))
        try:
            ready = self._channel.recv(time.monotonic() + START_TIMEOUT_S)
        except ChannelError as e:
            err = self._stop()
            raise BackendUnavailable(f"the bwrap sandbox did not start: {err.strip() or e}") \
                from e
        self._harness_pid = self._only_child(self._proc.pid)
        self._facts = {
            "backend": "local", "python": ready["python"], "hash_seed": ready["hash_seed"],
            "interpreter": self.python,
            "harness": jail_digest()[:16],
            "packages": package_versions(self.packages), "enforced_by": self.enforced_by,
        }
        self._runs = 0
        self._moved = self._mover.submit(self._take_spare)

    def _spawn(self, fds: list[int]) -> None:
        seccomp_fd = self._seccomp_fd()
        if seccomp_fd is not None:
            fds.append(seccomp_fd)
        join = []
        if self.cgroup_version == "v1":  # each candidate joins the group itself (_take_spare)
            self._cgroup = self._new_cgroup()
            join = self._cgroup.join_fds()
            fds += join
        # 65534 inside the jail's user namespace, the leased uid outside (as_jail)
        cmd = [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns",
               "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID),
               "--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL",
               "--hostname", "sandbox", "--ro-bind", "/usr", "/usr",
               *self._root_links(), "--proc", "/proc", "--dev", "/dev", *self._work_dir(),
               *self._jail_files(fds), *self._python_binds(),
               "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/work", "--clearenv",
               *(arg for name, value in JAIL_ENV.items() for arg in ("--setenv", name, value)),
               *(["--seccomp", str(seccomp_fd)] if seccomp_fd is not None else []),
               self.python, *JAIL_PYTHON,
               *(["--join-cgroup", ",".join(map(str, join))] if join else [])]
        as_jail = {} if self._lease is None else \
            {"user": self._lease.uid, "group": self._lease.uid, "extra_groups": []}
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            pass_fds=tuple(fds), **as_jail)

    @staticmethod
    def _jail_files(fds: list[int]) -> list[str]:
        args = []
        for path in JAIL_FILES:
            fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
            args += ["--ro-bind-data", str(fds[-1]), f"{JAIL_DIR}/{path.name}"]
        return args

    def _seccomp_fd(self) -> int | None:
        try:
            return seccomp.filter_fd()
        except seccomp.UnsupportedArchitecture:
            return None  # said in enforced_by

    def _work_dir(self) -> list[str]:
        if os.geteuid() == 0:
            remove_stale_mounts()
            self._mounts.append(Mount(self.name, self.limits, uid=self._lease.uid))
            return ["--bind", str(self._mounts[-1].path), "/work"]
        return ["--size", str(self.limits.tmp_mb * 2**20), "--tmpfs", "/work"]

    @staticmethod
    def _root_links() -> list[str]:
        args = []
        for name in ("bin", "lib", "lib64", "sbin"):
            path = Path("/") / name
            if path.is_symlink():
                args += ["--symlink", os.readlink(path), str(path)]
            elif path.is_dir():
                args += ["--ro-bind", str(path), str(path)]
        return args

    def _python_binds(self) -> list[str]:
        args = []
        prefix = Path(self.python).parents[1]
        if not str(prefix).startswith("/usr"):
            args += ["--ro-bind", str(prefix), str(prefix)]
            site = next(prefix.glob("lib/python3*/site-packages"), None)
            if site is not None:  # the interpreter's own packages are not whitelisted
                args += ["--tmpfs", str(site)]
        for name, path in self.packages.items():
            if os.geteuid() == 0 and not world_accessible(path):
                self._mounts.append(Mount(f"p-{self.name[2:]}-{name}", source=path))
                path = self._mounts[-1].path
            args += ["--ro-bind", str(path), f"{JAIL_SITE}/{name}"]
        return args

    @staticmethod
    def _only_child(pid: int) -> int:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if len(children) != 1:
            raise BackendUnavailable(f"expected bwrap {pid} to have one child, got {children}")
        return int(children[0])

    def _stop(self) -> str:
        """Kill the jail; return what it wrote on stderr (for error messages)."""
        stderr = ""
        if self._proc is not None:
            # Kill the harness first, not bwrap: bwrap then reaps it. Killing bwrap first would
            # orphan the harness to host PID 1, which in containers often never reaps zombies.
            if self._harness_pid is not None:
                try:
                    os.kill(self._harness_pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if self._moved is not None:  # it reads the channel: it ends at the harness's death
                self._moved.exception()
                self._moved = None
            try:
                _, err = self._proc.communicate(timeout=10)
                stderr = err.decode(errors="replace")
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
            self._harness_pid = None
        for mount in self._mounts:
            mount.close()
        self._mounts = []
        self._drop_cgroup()
        return stderr

    def close(self) -> None:
        self._stop()
        self._mover.shutdown()
        if self._lease is not None:
            self._lease.close()

    # ------------------------------------------------------------------ running

    @property
    def env(self) -> dict:
        return self._facts

    def run(self, code: str, stdin: bytes | None, limits: Limits,
            tests: TestSuite | None = None) -> tuple[ExecResult, dict]:
        """Run one program; returns the result and protocol.grader_report's dict."""
        if self._proc is None or (limits.tmp_mb, limits.tmp_inodes) != (
                self.limits.tmp_mb, self.limits.tmp_inodes):
            self._stop()
            self.limits = limits
            # On the worker's own thread, which lives until close(): bwrap's --die-with-parent
            # is PR_SET_PDEATHSIG, which follows the thread that started it, and a caller's
            # pool thread may end first (Sandbox.close), leaving the jail's server a zombie of
            # the host's PID 1 (seen once runs recycled their jail: cleanup.py jail_changed).
            self._mover.submit(self._start).result()
        env = env_hash(self._facts, limits)
        try:
            self._moved.result()  # the candidate is in the cgroup, waiting for its job
            cgroup = self._cgroup
            if cgroup is not None:
                cgroup.begin(limits)
            request = build_request(code, stdin, limits, tests, rlimit_nproc=True,
                                    memory_cgroup=cgroup is not None, shares_memory_cgroup=False)
            reply, report = self._exchange(request, limits)
            measured = Measured(*cgroup.stats()) if cgroup else Measured()
            left_charged = cgroup is not None and cgroup.left_charged()
        except (ChannelError, OSError) as e:
            self._stop()
            return sandbox_error(f"sandbox worker failed and was restarted: {e}", limits,
                                 env=env, enforced_by=self.enforced_by), {}
        self._runs += 1
        # A run that changed the jail or left memory charged to its group (see cleanup.py's
        # jail_changed, cgroups.LEFT_CHARGED_MB) keeps its result; the next run gets a fresh
        # jail and group.
        if (reply["survivors"] or reply["cleanup_error"] or reply["jail_changed"] or left_charged
                or self._runs >= self.max_runs):
            self._stop()  # recycled lazily on the next run
        else:
            self._moved = self._mover.submit(self._take_spare)
        result = to_exec_result(reply, limits, measured, env=env, enforced_by=self.enforced_by)
        return result, grader_report(request, reply, report)

    def _take_spare(self) -> None:
        """Read the harness's spare candidate for the next run and see that it is alone in the
        worker's cgroup. Runs on the worker's own thread from the end of a run; the next run
        waits for it before it sends its request.

        On v1 the candidate joined the group itself (through the fds _spawn passed: harness.py),
        before the harness announced it. Moving it from here waits for an RCU grace period
        unless another migration happened shortly before: 6-17 ms after any run longer than
        ~20 ms, on the next run's critical path (measured here), against 0.06-0.2 ms joining.
        On v2 we move it (into a group made anew if a process outlived the last run),
        overlapping the caller's time between runs: a process joining through cgroup.procs
        moves its whole thread group, which takes the same global lock (not measured: this
        machine has v1 only)."""
        candidate = spare_pid(self._channel.recv(time.monotonic() + START_TIMEOUT_S))
        if self.cgroup_version == "v1":
            held = self._cgroup.pids()
            if len(held) != 1:  # the harness reaps a run's tree before replying: never
                raise ChannelError(f"the execution cgroup holds {len(held)} processes, not "
                                   "the spare candidate alone")
            return
        if not self.cgroup_version:
            return
        if self._cgroup is not None and self._cgroup.pids():
            self._drop_cgroup()
        if self._cgroup is None:
            self._cgroup = self._new_cgroup()
        self._cgroup.add(self._host_pid(candidate))

    def _new_cgroup(self) -> cgroups.ExecCgroup:
        self._exec_seq += 1
        return cgroups.ExecCgroup(self.cgroup_version, f"{self.name}-{self._exec_seq}",
                                  self.limits)

    def _drop_cgroup(self) -> None:
        if self._cgroup is not None:
            cgroup, self._cgroup = self._cgroup, None
            cgroup.destroy()

    def _exchange(self, request: Request, limits: Limits) -> tuple[dict, bytes | None]:
        deadline = time.monotonic() + limits.timeout_s + HOST_GRACE_S
        self._channel.send(request.frame, *(() if request.tests is None else (request.tests,)))
        reply = self._channel.recv(deadline)
        if "harness_error" in reply:
            raise ChannelError(f"harness error: {reply['harness_error']}")
        report = self._channel.recv_raw(deadline) if request.tests is not None else None
        return reply, report

    def _host_pid(self, jail_pid: int) -> int:
        """The host pid of the harness's child that is `jail_pid` in the jail (the grader, its
        other child, stays out of the candidate's cgroup). Raw reads of /proc: through pathlib
        this cost 0.2 ms of the host's 0.7 ms per execution (measured)."""
        children = _read_proc(f"/proc/{self._harness_pid}/task/{self._harness_pid}/children")
        for pid in reversed(children.split()):  # the candidate is forked last
            status = _read_proc(f"/proc/{int(pid)}/status")
            start = status.find(b"\nNSpid:")
            if start >= 0 and int(status[start:].split(b"\n", 2)[1].split()[-1]) == jail_pid:
                return int(pid)
        raise ChannelError(f"the candidate (pid {jail_pid} in the jail) is not a child of the "
                           f"harness {self._harness_pid}")


def _read_proc(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536)
    finally:
        os.close(fd)
