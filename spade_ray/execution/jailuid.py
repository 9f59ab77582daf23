"""A host uid of its own for every live jail, so that no jail can spend another's kernel budgets.

The kernel keeps some budgets per user of the host, whatever the namespaces: pipe buffer pages
(fs.pipe-user-pages-soft; past it, every new pipe of that user gets 2 pages instead of 16),
inotify instances and watches (fs.inotify.max_user_instances, 128 here), queued signals
(RLIMIT_SIGPENDING), processes (RLIMIT_NPROC). With every jail of the machine running as uid
65534, a candidate that spent one of them changed what a concurrent candidate in another jail,
on either backend, could do (red-team pass 18: pipes enlarged with F_SETPIPE_SZ left a
concurrent honest program's new pipes at 8 KB, and one that staged 20 KB through a pipe of its
own timed out there while it passed alone). So each worker leases a uid of JAIL_UIDS for its
life and its jails run as that host uid: bwrap is started as it (the jail's own user namespace
still calls it 65534 inside), a container is run as it.

A lease is a lock (flock) on a file named by the uid in LEASE_DIR, held by an fd of ours that
no child inherits: the kernel drops it when we close it or die, so a killed worker leaks no
uid. Leases are shared by the processes that see the same LEASE_DIR: on one machine, or one
pod. Pods of one node share its kernel unless each has its own (k8s/: a Kata VM per sandbox
pod); two that share it, each with its own /tmp, may lease the same uid. Each search starts at
a random place in the range, which makes that unlikely but not impossible (a node-wide
LEASE_DIR, a hostPath volume, rules it out). A Docker engine on another machine: the leases
keep apart the workers of this one only.

Not root, the local backend cannot change uid: its jails run as ours, all of them (said in its
`enforced_by`). Docker may run a container as any uid, so its workers lease one either way.
"""

from __future__ import annotations

import fcntl
import os
import secrets
from pathlib import Path

from spade_ray.execution.protocol import BackendUnavailable

# Debian leaves 60000-64999 to accounts created on demand (few machines have any) and Docker's
# user-namespace remapping maps uids 0-65535 only, so the range stays below 65536.
JAIL_UIDS = range(64000, 65000)
# not $TMPDIR, which processes may set apart: every worker of the machine must see this one
LEASE_DIR = Path("/tmp/spade-ray-uids")


class UidLease:
    """A uid of JAIL_UIDS that no other live jail of this machine runs as, until close()."""

    def __init__(self, uids: range = JAIL_UIDS, lease_dir: Path = LEASE_DIR) -> None:
        self._fd: int | None = None
        try:
            lease_dir.mkdir(mode=0o1777, exist_ok=True)
            if lease_dir.stat().st_uid == os.geteuid():
                os.chmod(lease_dir, 0o1777)  # past the umask: every user's workers lease here
        except OSError as e:
            raise BackendUnavailable(f"cannot make {lease_dir}, where the sandbox leases each "
                                     f"worker a uid: {e}") from e
        start = secrets.randbelow(len(uids))  # not `random`: a run's seeded stream stays its own
        for k in range(len(uids)):
            uid = uids[(start + k) % len(uids)]
            try:  # O_RDONLY: flock needs no write access, so any user's worker can lock it
                fd = os.open(lease_dir / str(uid),
                             os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o444)
            except OSError:
                continue  # not ours to open (a stray file): another uid
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                continue
            self.uid, self._fd = uid, fd
            return
        raise BackendUnavailable(f"every uid of {uids.start}-{uids.stop - 1} is leased by a live "
                                 f"sandbox worker of this machine ({lease_dir}): close some")

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
