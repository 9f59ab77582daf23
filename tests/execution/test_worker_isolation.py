"""Isolation between concurrent jails: no candidate spends another jail's kernel budgets.

The kernel keeps some budgets per host user, across namespaces (jailuid.py). With every jail
running as one uid, a candidate that used up the user's pipe pages left a concurrent candidate
in another worker, on either backend, new pipes of 8 KB instead of 64 KB, and an honest program
that staged 20 KB through a pipe of its own timed out there (red-team pass 18). Each family
here (pipe pages, queued signals; POSIX message queues and inotify instances are refused by the
seccomp filter): a hog in one worker spends the budget, a probe in the other, running
meanwhile, must find it whole. The hog also reports that it did reach its own limit, so the
probe's finding means something.
"""

import dataclasses
import os
import textwrap

import pytest

from spade_ray.execution.jailuid import JAIL_UIDS, UidLease
from spade_ray.execution.protocol import BackendUnavailable
from tests.conftest import TEST_LIMITS, open_sandbox

# The hog holds what it took for HOLD_S; the probe looks after WAIT_S, while it does.
HOLD_S, WAIT_S = 3.0, 1.5
HOG = textwrap.dedent(f"""
    import fcntl, os, time
    F_SETPIPE_SZ, F_GETPIPE_SZ = 1031, 1032
    # pipe buffer pages (fs.pipe-user-pages-soft: 16384 pages): 1 MB pipes until refused, then
    # plain ones until past the limit, where a new pipe gets 2 pages
    pipes = []
    for _ in range(110):
        r, w = os.pipe()
        pipes += [r, w]
        size = fcntl.fcntl(w, F_GETPIPE_SZ)
        if size < 65536:
            break
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
    print("pipe", size)
    # queued signals (RLIMIT_SIGPENDING): a blocked real-time signal queued until refused
    import ctypes, signal
    libc = ctypes.CDLL(None, use_errno=True)
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
    for _ in range(1 << 20):
        if libc.sigqueue(os.getpid(), signal.SIGRTMIN, None) < 0:
            break
    print("signal", ctypes.get_errno())
    time.sleep({HOLD_S})
""")
PROBE = textwrap.dedent(f"""
    import ctypes, fcntl, os, time
    time.sleep({WAIT_S})
    print("pipe", fcntl.fcntl(os.pipe()[1], 1032))
    libc = ctypes.CDLL(None, use_errno=True)
    import signal
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGRTMIN])
    print("signal", "ok" if libc.sigqueue(os.getpid(), signal.SIGRTMIN, None) == 0
          else ctypes.get_errno())
""")
EAGAIN = 11


def test_a_candidate_spending_per_user_budgets_leaves_a_concurrent_jails_whole(backend):
    if backend == "local" and os.geteuid() != 0:
        pytest.skip("not root: the local backend's jails all run as our uid (jailuid.py)")
    limits = dataclasses.replace(TEST_LIMITS, timeout_s=8.0)
    with open_sandbox(backend, limits=limits, workers=2) as sb:
        hog, probe = sb.run_many([HOG, PROBE])
    assert hog.stdout.split() == ["pipe", "8192", "signal", str(EAGAIN)], hog
    assert probe.stdout.split() == ["pipe", "65536", "signal", "ok"], probe


def test_live_leases_never_share_a_uid_and_a_closed_one_is_free_again(tmp_path):
    uids = range(JAIL_UIDS.start, JAIL_UIDS.start + 2)
    first, second = UidLease(uids, tmp_path), UidLease(uids, tmp_path)
    try:
        assert {first.uid, second.uid} == set(uids)
        with pytest.raises(BackendUnavailable, match="every uid of .* is leased"):
            UidLease(uids, tmp_path)
        first.close()
        again = UidLease(uids, tmp_path)
        assert again.uid == first.uid
        again.close()
    finally:
        first.close()
        second.close()


def test_a_killed_workers_uid_is_free_again(tmp_path):
    uids = range(JAIL_UIDS.start, JAIL_UIDS.start + 1)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # a worker that leases the only uid and is killed holding it
        try:
            UidLease(uids, tmp_path)
            os.write(write, b"1")
            os.pause()
        finally:
            os._exit(0)
    assert os.read(read, 1) == b"1"
    with pytest.raises(BackendUnavailable):
        UidLease(uids, tmp_path)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    UidLease(uids, tmp_path).close()
