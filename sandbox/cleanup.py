"""What the jail's server does after every run, so that nothing persists into the next one.

Standard library only. None of it can be broken by what a candidate left: the working directory
is emptied without recursion and without long paths, whatever its depth, names or permissions,
and its extended attributes (a default ACL would deny every later run its own files) are put
back as they were; SysV IPC objects (which outlive their process and its memory limit; the
seccomp filter already refuses creating them) are removed; and the server checks that its own
limits and scheduling, which every later run inherits, are as they were (a candidate runs as
the server's uid: the seccomp filter refuses it calls that name another process, and this
catches what a jail without the filter lets through). Each returns an error in words, or None:
the server reports it and the host recycles the jail, and the run's own result stands.

What no process of the jail may reset (its pid counter, its tmpfs's inode counter, its network
namespace's counters and sockets) `jail_changed` compares with what a plain run leaves; a change
is reported the same way.
"""

import ctypes
import errno
import os
import resource
import socket
import stat

IPC_RMID = 0
MQUEUE_DIR = "/dev/mqueue"
_LIBC = ctypes.CDLL(None, use_errno=True)


def work_dir_attributes(work_dir):
    """The working directory's extended attributes, name -> value (what `clear_work_dir` puts
    back)."""
    return {name: os.getxattr(work_dir, name) for name in _xattr_names(work_dir)}


def _xattr_names(path):
    try:
        return os.listxattr(path)
    except OSError as e:
        if e.errno in (errno.EOPNOTSUPP, errno.ENOTSUP):  # a file system without them
            return []
        raise


def clear_work_dir(work_dir, attributes):
    """Empty the working directory and give it back `attributes` (its extended attributes, from
    `work_dir_attributes`); returns an error (the host then recycles the jail) or None.

    No recursion and no long paths, so no directory shape breaks it: subdirectories are moved up
    to the top level one level at a time (rename within one tmpfs) and each level is emptied
    through a directory fd, with permissions restored first."""
    try:
        os.chmod(work_dir, 0o700)  # ours (uid 65534): a candidate may have taken our access
        for name in _xattr_names(work_dir):  # ACLs (system.posix_acl_*) and user.* data
            if name not in attributes:
                os.removexattr(work_dir, name)
        for name, value in attributes.items():
            os.setxattr(work_dir, name, value)
        top = os.open(work_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    moved = 0
    try:
        while True:
            names = os.listdir(top)
            if not names:
                break
            for name in names:
                moved = _empty_entry(top, name, moved)
        return _reset_times(top)
    except Exception as e:  # noqa: BLE001 - reported, never raised: the reply must go out
        return f"{type(e).__name__}: {e}"
    finally:
        os.close(top)


def _reset_times(top):
    """The directory's atime and mtime back to 0, last: a run could set them to any 64-bit value
    for the next one to read (red-team s24 H2, p1_persist_work_times.py). Its ctime is the time
    of this reset, whatever the run did."""
    os.utime(top, ns=(0, 0))
    st = os.stat(top)
    return None if (st.st_atime_ns, st.st_mtime_ns) == (0, 0) else "cannot reset /work's times"


def _empty_entry(top, name, moved):
    st = os.lstat(name, dir_fd=top)
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=top)
        return moved
    os.chmod(name, 0o700, dir_fd=top, follow_symlinks=False)
    sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
    try:
        for child in os.listdir(sub):
            if stat.S_ISDIR(os.lstat(child, dir_fd=sub).st_mode):
                moved += 1
                os.rename(child, f".spade-{moved}", src_dir_fd=sub, dst_dir_fd=top)
            else:
                os.unlink(child, dir_fd=sub)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=top)
    return moved


RLIMITS = sorted(getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_"))


def process_state():
    """What another process of our uid could change about this one and every later run would
    inherit: resource limits, nice value, CPU affinity, scheduling policy."""
    return {"rlimits": [resource.getrlimit(r) for r in RLIMITS],
            "nice": os.getpriority(os.PRIO_PROCESS, 0),
            "affinity": sorted(os.sched_getaffinity(0)),
            "scheduler": os.sched_getscheduler(0)}


def state_changed(baseline):
    """An error naming what differs from `baseline` (`process_state()` at start), or None."""
    now = process_state()
    changed = [key for key in baseline if now[key] != baseline[key]]
    return f"the server's {', '.join(changed)} changed during the run" if changed else None


def remove_ipc_objects():
    """Remove SysV shared memory, semaphores and message queues, and POSIX message queues, that
    a run left (the IPC namespace is the jail's own; the seccomp filter refuses creating them
    through their calls). Returns an error or None."""
    removers = {"shm": lambda i: _LIBC.shmctl(i, IPC_RMID, None),
                "sem": lambda i: _LIBC.semctl(i, 0, IPC_RMID),
                "msg": lambda i: _LIBC.msgctl(i, IPC_RMID, None)}
    for kind, remove in removers.items():
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                ids = [int(line.split()[1]) for line in f.read().splitlines()[1:]]
        except OSError:
            continue
        for ipc_id in ids:
            if remove(ipc_id) != 0:
                return f"cannot remove SysV {kind} {ipc_id}: errno {ctypes.get_errno()}"
    # POSIX message queues: seccomp refuses mq_open, but where the mqueue file system is mounted
    # (Docker mounts /dev/mqueue), open() makes one too
    try:
        queues = os.listdir(MQUEUE_DIR)
    except OSError:  # not mounted (the local backend's jail)
        return None
    for name in queues:
        try:
            os.unlink(os.path.join(MQUEUE_DIR, name))
        except OSError as e:
            return f"cannot remove POSIX message queue {name}: {e}"
    return None


# What a run can change in the jail's kernel state that nothing here can put back (no
# capabilities in the jail): the next run could read it, so a change beyond what a plain run
# makes recycles the jail (red-team s24 H2/H4: p1, p1b, p9 learnt a hidden check's answers
# through these, one failed run at a time). The tables list the sockets of the jail's network
# namespace (a TCP port in TIME_WAIT for 60 s, and any socket an SCM_RIGHTS cycle keeps alive
# after every process died: H1, p15); the counters count its packets, routing failures and
# connection attempts. TCP and UDP sockets are counted from sockstat's per-namespace figures
# (`inuse`, and `tw` for TIME_WAIT; its orphan, alloc and mem figures are the host's): their
# tables (/proc/net/tcp, tcp6) walk the host's whole hash table, 3.7 ms each here.
SOCKET_TABLES = ("raw", "raw6", "unix", "netlink", "packet")
NET_COUNTERS = ("snmp", "snmp6", "netstat")
SOCKSTAT_FIELDS = (b"inuse", b"tw")
PROBE_NAME = ".spade-probe"


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:  # not in this kernel (no IPv6, say): the same at every reading
        return b""


def jail_state(work_dir):
    """The jail's kernel state a run could leave for the next one (see `jail_changed`). The
    probe file takes the working directory's next inode number (a tmpfs counts them per mount:
    a run that made N files moves it by N); /proc/loadavg's last field is the last pid this
    PID namespace gave out."""
    fd = os.open(os.path.join(work_dir, PROBE_NAME), os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600)
    inode = os.fstat(fd).st_ino
    os.close(fd)
    os.unlink(os.path.join(work_dir, PROBE_NAME))
    loopback = [line for line in _read("/proc/net/dev").splitlines()
                if line.strip().startswith(b"lo:")]
    return {"inode": inode, "last_pid": int(_read("/proc/loadavg").split()[-1]),
            "sockets": {**{t: _read(f"/proc/net/{t}").count(b"\n") for t in SOCKET_TABLES},
                        **_sockstat()},
            "counters": [loopback, *(_read(f"/proc/net/{n}") for n in NET_COUNTERS)]}


def _sockstat():
    """{"TCP inuse": n, "TCP tw": n, "UDP inuse": n, ...} from sockstat and sockstat6."""
    counts = {}
    for line in (_read("/proc/net/sockstat") + _read("/proc/net/sockstat6")).splitlines():
        proto, _, rest = line.partition(b":")
        fields = rest.split()
        for key, value in zip(fields[::2], fields[1::2]):
            if proto != b"sockets" and key in SOCKSTAT_FIELDS:
                counts[f"{proto.decode()} {key.decode()}"] = int(value)
    return counts


def jail_changed(before, after, forks):
    """What differs between two `jail_state`s beyond a plain run in between, which forks
    `forks` processes (its two spares) and whose probe takes one inode, in words; or None.
    `after` is None where the probe failed (a run that filled /work, or took our access)."""
    if after is None:
        return "the run changed the jail: cannot probe /work"
    changed = []
    if after["inode"] - before["inode"] != 1:
        changed.append(f"{after['inode'] - before['inode'] - 1} inodes made in /work")
    if after["last_pid"] - before["last_pid"] != forks:
        changed.append(f"{after['last_pid'] - before['last_pid'] - forks} processes forked")
    changed += [f"{t} sockets left" for t, n in after["sockets"].items()
                if n != before["sockets"][t]]
    if after["counters"] != before["counters"]:
        changed.append("network counters moved")
    return f"the run changed the jail: {', '.join(changed)}" if changed else None


def collect_unix_garbage():
    """Close a unix socket that had one in flight: the kernel then runs its garbage collector
    for SCM_RIGHTS cycles, which a run's last exit does not always do (H1: a cycle holding
    ~90 MB of queued data stayed charged to the worker's memory cgroup). Returns an error or
    None, as the others: a run that left too many descriptors in flight (ETOOMANYREFS) must
    not end the server (red-team s33 noted this was the one cleanup step not guarded)."""
    sockets = []
    try:
        sockets += socket.socketpair()
        sockets += socket.socketpair()
        socket.send_fds(sockets[0], [b"g"], [sockets[2].fileno()])
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    finally:
        for s in sockets:
            s.close()
    return None
