"""The spawner: the process that forks every run's grader and candidate (standard library only).

A forked child starts with a copy of its parent's memory, and the server (harness.py) holds
what every run sent and got: the program, its stdin and output, its exit status and figures,
in its own objects and in freed memory Python never zeroes. Forked from the server, a candidate
found the previous run's request and reply in `main`'s frame, and three or four copies of them
in its heap (red-team pass 13, Q1): a wrong program passed by running the sibling before it,
and one with no answers learnt a hidden check's answers from its own earlier outputs. So the
server forks one process before its first request, the spawner, which never sees a request or
a reply, and the spawner forks every run's spares: each candidate starts from memory that no
run has touched.

The spawner takes two commands over a unix socket (SOCK_SEQPACKET, one message each):
  F + the spares' pipe ends (SCM_RIGHTS)   fork the grader and the candidate; reply their pids
  K                                        kill every process of the jail but the server and
                                           us (kill(-1): it spares PID 1), reply "k", then
                                           reap them all: reply their records, then "E"
Each record is the reaped pid, its wait status and its struct rusage, written by wait4 straight
into a mapping that fork leaves out and sent from there: no figure of a run becomes an object
of ours, so none reaches a later candidate either. As the spares' parent and a child subreaper,
we are the parent of every process a run leaves (the server, PID 1, gets none while we live).

A candidate can stop or kill us (same uid): the server then gets no "k" in time, kills every
process itself (us included), reaps them, and the host starts a fresh jail (harness.py). It
cannot change our limits, priority, affinity or scheduling, which our children would inherit:
the seccomp filter (seccomp.json, self_only) allows those calls on the caller only.
"""

import ctypes
import mmap
import os
import select
import signal
import socket
import struct

import child

PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>
# The fds a spare pair gets, in the order they travel (harness.Spares.fds).
FD_NAMES = ("stdin_r", "out_w", "err_w", "flag_w", "calls_r", "calls_w", "answers_r",
            "answers_w", "report_w", "job_r", "tests_r", "joined_w")
PIDS = struct.Struct("=ii")
RUSAGE_BYTES = 144  # struct rusage on LP64 Linux: two timevals, then 14 longs
RECORD = struct.Struct(f"=ii{RUSAGE_BYTES}s")
_FIGURES = struct.Struct("=qqqqq")  # ru_utime, ru_stime (seconds, microseconds), ru_maxrss
RECORDS_PER_MESSAGE = 256
KILLED, DONE = b"k", b"E"


class Spawner:
    """The server's handle on the spawner."""

    def __init__(self, streams, join_fds, close_fds):
        """Fork the spawner, which closes `close_fds` (the server's control channel)."""
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.pid = os.fork()
        if self.pid == 0:
            try:
                self.sock.close()
                for fd in close_fds:
                    os.close(fd)
                _serve(theirs, streams, join_fds)
            finally:
                os._exit(70)
        theirs.close()

    def fork(self, fds):
        """Fork a grader and a candidate on `fds` (FD_NAMES; joined_w may be missing):
        (grader pid, candidate pid)."""
        names = [name for name in FD_NAMES if name in fds]
        socket.send_fds(self.sock, [b"F" + " ".join(names).encode()], [fds[n] for n in names])
        reply = self.sock.recv(PIDS.size)
        if len(reply) != PIDS.size:
            raise OSError("the spawner ended instead of forking the spares")
        return PIDS.unpack(reply)

    def end_run(self, kill_s, records_s):
        """Kill the run's processes and reap them: ([(pid, status, cpu_s, max_rss_kb)], whether
        the spawner finished), unfinished if it did not answer the kill within `kill_s` or
        any message of the records after it within `records_s` (stopped or killed by the run:
        a process in the middle of signalling it when the kill came can still do it), with the
        records it sent before."""
        records = []
        try:  # a dead spawner's socket answers EPIPE, ECONNRESET or end of stream
            os.kill(self.pid, signal.SIGCONT)
            self.sock.send(b"K")
            if not _ready(self.sock, kill_s) or self.sock.recv(1) != KILLED:
                return records, False
            while _ready(self.sock, records_s):
                message = self.sock.recv(RECORD.size * RECORDS_PER_MESSAGE)
                if message == DONE:
                    return records, True
                if not message or len(message) % RECORD.size:
                    break
                for pid, status, usage in RECORD.iter_unpack(message):
                    us, uus, ss, sus, rss = _FIGURES.unpack_from(usage)
                    records.append((pid, status, us + ss + (uus + sus) / 1e6, rss))
        except OSError:
            pass
        return records, False


def _ready(sock, timeout_s):
    return bool(select.select([sock], [], [], timeout_s)[0])


def _serve(sock, streams, join_fds):
    """The spawner's loop: it holds nothing of any run (module doc). Never returns."""
    child.prctl(PR_SET_CHILD_SUBREAPER, 1)
    # Records go here: outside fork's copy, so a spare never has them mapped.
    area = mmap.mmap(-1, RECORD.size * RECORDS_PER_MESSAGE,
                     flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    area.madvise(mmap.MADV_DONTFORK)
    base = ctypes.addressof(ctypes.c_char.from_buffer(area))
    view = memoryview(area)
    while True:
        message, fds, _, _ = socket.recv_fds(sock, 1024, len(FD_NAMES))
        if not message:
            os._exit(0)  # the server is gone
        if message[:1] == b"F":
            named = dict(zip(message[1:].decode().split(), fds))
            pids = (_fork(lambda: child.grader_main(named)),
                    _fork(lambda: child.candidate_main(named, join_fds, streams)))
            for fd in fds:
                os.close(fd)
            sock.send(PIDS.pack(*pids))
        elif message == b"K":
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
            sock.send(KILLED)
            _reap(sock, base, view)
            sock.send(DONE)


def _reap(sock, base, view):
    """wait4 every child into the records area, sending it whenever it is full."""
    wait4 = child.LIBC.wait4
    count = 0
    while True:
        slot = base + count * RECORD.size
        pid = wait4(-1, ctypes.c_void_p(slot + 4), 0, ctypes.c_void_p(slot + 8))
        if pid <= 0:  # ECHILD: no child left (nothing here makes EINTR)
            break
        ctypes.c_int32.from_address(slot).value = pid
        count += 1
        if count == RECORDS_PER_MESSAGE:
            sock.send(view[:count * RECORD.size])
            count = 0
    if count:
        sock.send(view[:count * RECORD.size])


def _fork(body):
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(70)
    return pid
