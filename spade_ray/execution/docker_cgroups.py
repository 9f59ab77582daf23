"""A Docker container's cgroup counters as the host sees them (an engine on this machine): the
directories, the memory-event and CPU files, and how to read them. The host reads these itself
so that nothing inside the container needs to (or can) see them (docker_backend.py)."""

from __future__ import annotations

from pathlib import Path


def host_cgroup_dir(pid: int, container_id: str, controller: str) -> Path | None:
    """The directory of the container's `controller` cgroup (v1), or of its cgroup (v2), when
    this host sees the engine's cgroups (a local engine). `pid` is a process of the container."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        v1 = controller in controllers.split(",")
        # The id check rules out a reused pid and a cgroup namespace that hides the real path.
        if container_id in path and (v1 or controllers == ""):
            directory = Path(f"/sys/fs/cgroup/{controller}" if v1 else "/sys/fs/cgroup",
                             path.lstrip("/"))
            if directory.is_dir():
                return directory
    return None


def host_memory_files(pid: int, container_id: str) -> tuple[Path, ...] | None:
    """The container's memory-cgroup counter files, when this host sees them: memory.oom_control
    and memory.failcnt on v1, memory.events on v2."""
    directory = host_cgroup_dir(pid, container_id, "memory")
    if directory is None:
        return None
    v1 = (directory / "memory.oom_control").exists()
    files = ((directory / "memory.oom_control", directory / "memory.failcnt") if v1
             else (directory / "memory.events",))
    return files if all(f.is_file() for f in files) else None


def host_cpu_file(pid: int, container_id: str) -> Path | None:
    """The container's CPU usage counter, when this host sees it: cpuacct.usage (v1, ns) or
    cpu.stat (v2, `usage_usec`)."""
    directory = host_cgroup_dir(pid, container_id, "cpuacct")
    if directory is None:
        return None
    path = directory / ("cpuacct.usage" if (directory / "cpuacct.usage").exists() else "cpu.stat")
    return path if path.is_file() else None


def cpu_seconds(text: str) -> float:
    """Seconds of CPU from the text of cpuacct.usage (v1) or cpu.stat (v2)."""
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key == "usage_usec":
            return int(value) / 1e6
    return int(text.strip()) / 1e9


def memory_counters(text: str) -> tuple[int, int]:
    """(OOM kills, times usage hit the limit) from the text of memory.oom_control followed by
    memory.failcnt (v1: `oom_kill N`, then a bare number) or of memory.events (v2: `oom_kill N`,
    `max N`). Absent counters read 0."""
    oom = hits = 0
    for line in text.splitlines():
        key, _, value = line.strip().partition(" ")
        if key.isdigit() and not value:  # v1 memory.failcnt
            hits = int(key)
        elif key == "oom_kill" and value.isdigit():
            oom = int(value)
        elif key == "max" and value.isdigit():  # v2 memory.events
            hits = int(value)
    return oom, hits
