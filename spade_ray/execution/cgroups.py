"""A worker's execution cgroup, on cgroup v1 or v2: memory (tmpfs pages included), pids, CPU.

Why hand-written: the Python cgroup libraries on PyPI (cgroupspy, cgroup-utils) are v1-only and
unmaintained; what we need is a dozen file writes. The candidate's host PID is moved in before
it executes a single line (the harness makes it wait), and after the run we read the peak
memory, the CPU time, whether the OOM killer fired and whether usage hit the limit.

One group per worker, reset between runs rather than created and removed per run: create +
remove cost 1.3 ms per execution on cgroup v1 here (4 hierarchies), a reset a few writes. The
group's files stay open from its creation to its removal: opening and closing the 18 files a
run touches cost the host about 0.4 ms per execution (measured on v1 here). A run's candidate
joins a group that held no process (the harness kills and reaps the whole tree before it
replies; on v1 the candidate joins by itself, through `join_fds`, and a group holding anything
else stops the worker; on v2 the host moves it, into a group made anew if it still held a
process), counters that can be reset are (v1: max_usage_in_bytes, failcnt, cpuacct.usage; v2:
memory.peak through its own fd, kernel >= 6.12), and the others are read as differences from
the run's start; the peak is above what the group held at the start (PeakMeter).

Not handled: cgroup v1 kernels without `oom_kill` in memory.oom_control (< 4.13) report an OOM as
`killed`; nested v2 delegation where the parent is not ours (we need write access to the root of
the hierarchy we see, e.g. a privileged container).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from spade_ray.records import Limits

ROOT = Path("/sys/fs/cgroup")
GROUP = "spade-ray"
V1_CONTROLLERS = ("memory", "pids", "cpu", "cpuacct")
CPU_PERIOD_US = 100_000  # one core's worth per period: a multi-threaded candidate gets one CPU
# How far above its idle level a worker's memory group may be after a run, page cache
# included, before the worker is recycled (PeakMeter.left_charged). Measured here (cgroup v1)
# after 27 honest runs of 9 kinds (60 MB allocated, 100 files written, 8 threads, a fork, 26
# stdlib imports, string and integer work): local -0.2-0.4 MB, Docker -0.6-5.7 MB (the cache of
# the image's files its first imports read; /work/notes/s36/cache/leftover.py); a leaking run
# left 15 MB per socketpair cycle (red-team s24 H1). 8 MB stays clear of those and costs a
# later run at most 6% of a 128 MB limit.
LEFT_CHARGED_MB = 8


class CgroupUnavailable(RuntimeError):
    """Cgroups cannot be used here; the message says why (the caller degrades to rlimits)."""


class PeakMeter:
    """A memory cgroup's peak usage over a span, above what the group held when the span began
    (kernel memory and page cache that earlier processes of the group left outlive them: the
    dentries of a million failed lookups would count in every later run's peak; what a run
    leaves is bounded: left_charged). v1:
    memory.max_usage_in_bytes, reset by writing 0, and memory.usage_in_bytes; v2: memory.peak
    through its own fd (a reset holds per open file; kernel >= 6.12, older ones keep the peak
    since the group was made) and memory.current. The files stay open until `close`."""

    def __init__(self, directory: Path) -> None:
        self.v1 = (directory / "memory.max_usage_in_bytes").exists()
        peak, usage = (("memory.max_usage_in_bytes", "memory.usage_in_bytes") if self.v1
                       else ("memory.peak", "memory.current"))
        self._usage = os.open(directory / usage, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self._peak = os.open(directory / peak, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:  # v2 before kernel 5.19: no memory.peak
            self._peak = None
        self._base = 0
        self.idle_mb: float | None = None  # what the group held at the first begin()

    def begin(self) -> None:
        if self._peak is not None:
            try:
                os.pwrite(self._peak, b"0" if self.v1 else b"reset\n", 0)
            except OSError:  # v2 before kernel 6.12: no reset
                pass
        self._base = int(os.pread(self._usage, 64, 0))
        if self.idle_mb is None:
            self.idle_mb = self._base / 2**20

    def left_charged(self) -> bool:
        """Whether the group holds more than LEFT_CHARGED_MB above its idle level: what a run
        left there would count against every later run's memory limit (H1: sockets in an
        SCM_RIGHTS cycle that no process holds any more), or hide in its peak, so the worker
        must be recycled. Page cache included: the kernel evicts it at the limit rather than
        fail a run, so a later run's allocations replaced it and read as no rise (red-team s36:
        a run that left 122 MB of cache from the host's files under a 128 MB limit had every
        later run of a 40 MB program on the worker read a peak of 5.3 MB, and win the tie-break
        against itself on a fresh one)."""
        if self.idle_mb is None:
            return False
        return int(os.pread(self._usage, 64, 0)) / 2**20 - self.idle_mb > LEFT_CHARGED_MB

    def peak_mb(self) -> float:
        peak = int(os.pread(self._peak, 64, 0)) if self._peak is not None else 0
        return max(0, peak - self._base) / 2**20

    def close(self) -> None:
        for fd in (self._usage, self._peak):
            if fd is not None:
                os.close(fd)
        self._usage = self._peak = None


def detect(root: Path = ROOT) -> str:
    """Return "v1" or "v2" if we can create groups here; raise CgroupUnavailable otherwise."""
    if (root / "cgroup.controllers").exists():
        version, parents = "v2", [root]
        missing = {"memory", "pids", "cpu"} - set((root / "cgroup.controllers").read_text().split())
        if missing:
            raise CgroupUnavailable(f"cgroup v2 at {root} lacks controllers {sorted(missing)}")
    else:
        version, parents = "v1", [root / c for c in V1_CONTROLLERS]
        absent = [str(p) for p in parents if not p.is_dir()]
        if absent:
            raise CgroupUnavailable(f"cgroup v1 controllers not mounted: {absent}")
    for parent in parents:
        try:
            (parent / GROUP).mkdir(exist_ok=True)
        except OSError as e:
            raise CgroupUnavailable(f"cannot create {parent / GROUP}: {e.strerror}") from e
    if version == "v2":
        _enable_v2_controllers(root)
    return version


def _enable_v2_controllers(root: Path) -> None:
    try:
        for parent in (root, root / GROUP):
            (parent / "cgroup.subtree_control").write_text("+memory +pids +cpu")
    except OSError as e:
        raise CgroupUnavailable(f"cannot enable memory/pids/cpu below {root}: {e.strerror}") from e


class ExecCgroup:
    """The cgroup(s) a worker runs its executions in, one at a time: `begin(limits)` before each
    run, add(pid), stats(); destroy() when the worker stops."""

    def __init__(self, version: str, name: str, limits: Limits, root: Path = ROOT) -> None:
        self.version = version
        if version == "v2":
            self.dirs = {c: root / GROUP / name for c in ("memory", "pids", "cpu")}
        else:
            self.dirs = {c: root / c / GROUP / name for c in V1_CONTROLLERS}
        for d in set(self.dirs.values()):
            d.mkdir()
        self._fds: dict[tuple[str, str, int], int] = {}
        self._peak: PeakMeter | None = None
        self._baseline = (0.0, 0, 0)
        try:
            self._apply(limits)
            self._peak = PeakMeter(self.dirs["memory"])
        except OSError:
            self.destroy()
            raise
        self.limits = limits

    def begin(self, limits: Limits) -> None:
        """Ready the group for a run under `limits`. It holds the run's candidate already (the
        caller checked that it holds nothing else), still waiting for its job."""
        if limits != self.limits:
            self._apply(limits)
            self.limits = limits
        if self.version == "v1":
            self._write("memory", "memory.failcnt", 0)
            self._write("cpuacct", "cpuacct.usage", 0)
        self._peak.begin()
        self._baseline = self._counters()

    def _apply(self, limits: Limits) -> None:
        memory = limits.memory_mb * 1024 * 1024
        if self.version == "v2":
            self._write("memory", "memory.max", memory)
            if (self.dirs["memory"] / "memory.swap.max").exists():
                self._write("memory", "memory.swap.max", 0)
            self._write("pids", "pids.max", limits.max_processes)
            self._write("cpu", "cpu.max", f"{CPU_PERIOD_US} {CPU_PERIOD_US}")
            return
        self._write("memory", "memory.limit_in_bytes", memory)
        # Only with swap accounting; then swap may not extend the limit.
        if (self.dirs["memory"] / "memory.memsw.limit_in_bytes").exists():
            self._write("memory", "memory.memsw.limit_in_bytes", memory)
        self._write("pids", "pids.max", limits.max_processes)
        self._write("cpu", "cpu.cfs_period_us", CPU_PERIOD_US)
        self._write("cpu", "cpu.cfs_quota_us", CPU_PERIOD_US)

    def add(self, host_pid: int) -> None:
        for controller in {d: c for c, d in self.dirs.items()}.values():  # one per directory
            self._write(controller, "cgroup.procs", host_pid)

    def join_fds(self) -> list[int]:
        """v1: new write fds of the group's `tasks` files (one per directory), through which a
        process moves itself in by writing "0", without the global lock that moving another
        process takes (sandbox/harness.py). They carry our credentials (the kernel checks the
        opener's), so only code we trust may hold them. The caller closes them."""
        if self.version != "v1":
            raise ValueError("joining through tasks files is cgroup v1's (v2: add())")
        return [os.open(d / "tasks", os.O_WRONLY | os.O_CLOEXEC) for d in set(self.dirs.values())]

    def _counters(self) -> tuple[float, int, int]:
        """(CPU seconds, OOM kills, limit hits) as the kernel counts them now."""
        if self.version == "v2":
            events = self._keyed("memory", "memory.events")
            return (self._keyed("cpu", "cpu.stat")["usage_usec"] / 1e6,
                    events.get("oom_kill", 0), events.get("max", 0))
        return (int(self._read("cpuacct", "cpuacct.usage")) / 1e9,
                self._keyed("memory", "memory.oom_control").get("oom_kill", 0),
                int(self._read("memory", "memory.failcnt")))

    def stats(self) -> tuple[float, float, bool, bool]:
        """Since begin(): (peak memory MB above what the group held at the start, CPU seconds,
        whether the OOM killer fired, whether usage hit the memory limit: memory.failcnt on v1,
        memory.events' `max` on v2)."""
        cpu_s, oom, hits = (now - then for now, then in zip(self._counters(), self._baseline))
        return self._peak.peak_mb(), cpu_s, oom > 0, hits > 0

    def left_charged(self) -> bool:
        return self._peak.left_charged()

    def pids(self) -> list[int]:
        return [int(p) for p in self._read("pids", "cgroup.procs").split()]

    def kill_all(self) -> None:
        """SIGKILL everything in the group (normally nothing: the harness already did)."""
        if self.version == "v2" and (self.dirs["pids"] / "cgroup.kill").exists():
            self._write("pids", "cgroup.kill", 1)
            return
        for _ in range(100):  # v1 has no atomic kill: repeat until no new process appears
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.001)

    def _write(self, controller: str, name: str, value: object) -> None:
        os.pwrite(self._fd(controller, name, os.O_WRONLY), str(value).encode(), 0)

    def _read(self, controller: str, name: str) -> str:
        fd, data = self._fd(controller, name, os.O_RDONLY), b""
        while True:
            chunk = os.pread(fd, 65536, len(data))
            data += chunk
            if len(chunk) < 65536:
                return data.decode()

    def _keyed(self, controller: str, name: str) -> dict[str, int]:
        out = {}
        for line in self._read(controller, name).splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                out[key] = int(value)
        return out

    def _fd(self, controller: str, name: str, mode: int) -> int:
        """The controller's file `name`, opened for `mode` once and kept open (module doc)."""
        fd = self._fds.get((controller, name, mode))
        if fd is None:
            fd = os.open(self.dirs[controller] / name, mode | os.O_CLOEXEC)
            self._fds[(controller, name, mode)] = fd
        return fd

    def destroy(self) -> None:
        """Kill what is left and remove the group. Raises if it cannot be emptied."""
        try:
            self.kill_all()
        finally:
            for fd in self._fds.values():
                os.close(fd)
            self._fds = {}
            if self._peak is not None:
                self._peak.close()
                self._peak = None
        for d in set(self.dirs.values()):
            for attempt in range(200):  # a killed task leaves the group a moment later
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if attempt == 199:
                        raise
                    time.sleep(0.005)


def remove_stale(version: str, prefix: str, root: Path = ROOT) -> None:
    """Remove empty groups left by a process that died before cleaning up (name has its pid)."""
    parents = [root / GROUP] if version == "v2" else [root / c / GROUP for c in V1_CONTROLLERS]
    for parent in parents:
        for d in parent.glob(f"{prefix}*"):
            owner = d.name[len(prefix):].split("-")[0]
            if owner.isdigit() and not Path(f"/proc/{owner}").exists():
                try:
                    d.rmdir()
                except OSError:
                    pass
