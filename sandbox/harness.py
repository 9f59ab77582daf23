"""Jail-side execution server of spade-ray: standard library only, never imported by spade_ray.

It runs as PID 1 of the jail's own PID namespace (bwrap --as-pid-1, or a container's entry point)
and serves requests from the host over its stdin/stdout, each run in forked children: a warm
interpreter with the common stdlib imported forks far faster than `python -c` starts (DESIGN.md).

Every run has two children (child.py), forked ahead of its request while we wait for it (the
"spares", see fork_spares): the grader (grader.py), which holds the tests and runs them, and the
candidate, which runs the program and then answers the grader's calls with canonical data
(canonical.py); a plain run leaves its grader unused. The tests never enter the candidate's
process: it was forked before they arrived, they reach this server as a separate frame read into
a buffer that is written to the grader's pipe and then zeroed, and the grader's report travels
back through another buffer that is zeroed after it is sent, so no later candidate (forked from
us) finds either in its memory.
This server never parses anything a candidate wrote: output is counted and forwarded, the
memory-error flag is one byte, and every read is capped.

Why PID 1: in a PID namespace, kill(-1, SIGKILL) sent by PID 1 reaches every other process of the
namespace, so after each run the whole tree dies, daemonised and re-parented grandchildren
included, and PID 1 itself cannot be killed from inside (the kernel drops SIGKILL sent to a
namespace's init by its own members). Orphans are re-parented to us, so we reap them and count
their CPU time.

Limits enforced here: wall-clock deadline, CPU seconds of the candidate's tree (polled from
/proc, since RLIMIT_CPU is per process and forking escapes it), combined stdout+stderr cap, and
rlimits as a backstop (address space, file size, open files, core dumps). Memory and
process-count limits of the whole tree are the host's job (cgroups), as is the network
(namespaces). After each run, cleanup.py empties the working directory and removes SysV IPC
objects (the seccomp filter refuses creating them in the first place).

Wire format (host <-> server): each frame is a 4-byte big-endian length and a body: UTF-8 JSON,
except the tests frame that follows a check request and the grader-report frame that follows its
reply, which are raw bytes. Before each request the server sends {"spare": pid}: the waiting
candidate's pid in the jail, for the host to move into the run's cgroup before it sends the
request. Byte strings (stdin, stdout, stderr) travel as latin-1 text.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the jail's other modules

# Several of these are not used here: they are pre-imported for the candidates, so that a forked
# child finds them in sys.modules for free (noqa: F401 marks them).
import bisect  # noqa: E402,F401
import collections  # noqa: E402,F401
import copy  # noqa: E402,F401
import ctypes  # noqa: E402
import fractions  # noqa: E402,F401
import functools  # noqa: E402,F401
import gc  # noqa: E402
import heapq  # noqa: E402,F401
import itertools  # noqa: E402,F401
import json  # noqa: E402
import math  # noqa: E402,F401
import mmap  # noqa: E402
import random  # noqa: E402,F401
import re  # noqa: E402,F401
import select  # noqa: E402
import signal  # noqa: E402
import string  # noqa: E402,F401
import struct  # noqa: E402
import time  # noqa: E402
import typing  # noqa: E402,F401

import child  # noqa: E402
import cleanup  # noqa: E402
import grader  # noqa: E402

WORK_DIR = child.WORK_DIR
SITE_DIR = "/opt/spade-sandbox/site"  # whitelisted packages, bound read-only by the host
FLAG_CAP_BYTES = 16
REPORT_CAP_BYTES = 4 * 1024 * 1024  # a grader report: outcomes with 300-character messages
CONTROL_CAP_BYTES = 64 * 1024 * 1024  # a request: code (1 MB at most) and stdin (16 MB)
CPU_POLL_S = 0.05
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once, not per execution
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _report_buffer():
    """The grader reports' buffer, allocated once (a fresh 4 MB bytearray per check cost ~2 ms:
    CPython zero-fills it). An anonymous mapping that fork leaves out (MADV_DONTFORK): no child
    of ours has it mapped, so no candidate can find a report in its memory, and each fork copies
    ~1,000 fewer page-table entries (fork's cost here is mostly that copy, and the child's exit
    the unmapping: the buffer was a third of this process's anonymous memory)."""
    buf = mmap.mmap(-1, REPORT_CAP_BYTES)
    buf.madvise(mmap.MADV_DONTFORK)
    return buf


REPORT_BUFFER = _report_buffer()


class ProtocolError(Exception):
    """The host broke the wire format: the server reports it and exits."""


def read_raw_frame(fd, cap):
    header = grader.read_exact(fd, 4)
    if header is None:
        return None
    (size,) = struct.unpack(">I", header)
    if size > cap:
        raise ProtocolError(f"frame of {size} bytes over the {cap}-byte cap")
    body = grader.read_exact(fd, size)
    if body is None:
        raise ProtocolError("control channel closed mid-frame")
    return body


def read_frame(fd):
    body = read_raw_frame(fd, CONTROL_CAP_BYTES)
    return None if body is None else json.loads(body.decode("utf-8"))


def write_frame(fd, obj, *raw):
    """A JSON frame, then the raw frames `raw`, in one write (grader.send_frame)."""
    grader.send_frame(fd, json.dumps(obj, separators=(",", ":")).encode("utf-8"), *raw)


def zero(buf, size=None):
    """Overwrite a buffer in place, so no later fork of this server finds its contents."""
    size = len(buf) if size is None else size
    buf[:size] = bytes(size)


# ---------------------------------------------------------------- the server (PID 1)


class Run:
    """Host-facing bookkeeping of one execution."""

    def __init__(self, limits, grader_pid, grading):
        self.limits = limits
        self.grader_pid = grader_pid  # excluded from the candidate's accounting even unused
        self.grading = grading
        self.out = bytearray()
        self.err = bytearray()
        self.flag = bytearray()
        self.report = REPORT_BUFFER  # zeroed after every use
        self.report_bytes = 0
        self.report_overflow = False
        self.reason = None  # "timeout" | "cpu" | "output" once we kill for a limit
        self.reaped_cpu_s = 0.0
        self.max_rss_kb = 0
        self.status = None  # wait status of the candidate
        self.grader_status = None  # wait status of the grader, if it ended before our kill

    def account(self, pid, rusage):
        if pid == self.grader_pid:  # the grader's time and memory are not the candidate's
            return
        self.reaped_cpu_s += rusage.ru_utime + rusage.ru_stime
        self.max_rss_kb = max(self.max_rss_kb, rusage.ru_maxrss)


def kill_all():
    """SIGKILL every process of the namespace but us (we are its PID 1)."""
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass


def reap_all(run, main_pid):
    """Collect every process of the namespace. Blocks until none is left."""
    while True:
        try:
            pid, status, rusage = os.wait4(-1, 0)
        except ChildProcessError:
            return
        run.account(pid, rusage)
        if pid == main_pid:
            run.status = status


def live_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1"]


def tree_cpu_s(run):
    """CPU seconds of the candidate's live tree plus everything already reaped."""
    total = run.reaped_cpu_s
    for pid in live_pids():
        if pid == run.grader_pid:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


class Spares:
    """The next run's grader and candidate, forked ahead of its request (see `fork_spares`), with
    our ends of their pipes."""

    def __init__(self):
        self.fds = {}  # the children's ends, closed here once both are forked
        self.fds["stdin_r"], self.stdin_w = os.pipe()
        self.out_r, self.fds["out_w"] = os.pipe()
        self.err_r, self.fds["err_w"] = os.pipe()
        self.flag_r, self.fds["flag_w"] = os.pipe()
        self.fds["calls_r"], self.fds["calls_w"] = os.pipe()
        self.fds["answers_r"], self.fds["answers_w"] = os.pipe()
        self.report_r, self.fds["report_w"] = os.pipe()
        self.fds["job_r"], self.job_w = os.pipe()
        self.fds["tests_r"], self.tests_w = os.pipe()
        self.grader_pid = self.candidate_pid = None


def fork_spares():
    """Fork the grader and the candidate of the next run before its request arrives, while the
    host is busy with the last reply: the forks (about 1 ms of CPU each, mostly page-table copies
    and the children's set-up) then leave the critical path, and the host moves the candidate
    into its cgroup before sending the request, instead of in a round trip after it. Neither has
    seen any request: the candidate waits for its program on the job pipe, the grader for its
    settings and tests on the tests pipe, so each serves exactly one run (kill_all ends both
    after it) and the tests reach only the grader's process."""
    spares = Spares()
    spares.grader_pid = _fork(lambda: child.grader_main(spares.fds))
    spares.candidate_pid = _fork(lambda: child.candidate_main(spares.fds))
    for fd in spares.fds.values():
        os.close(fd)
    return spares


def serve_one(req, tests, spares):
    """Run one request on the spares; `tests` (a bytearray, or None) is zeroed here once the
    grader has it."""
    limits = req["limits"]
    stdin_data = req["stdin"].encode("latin-1") if req.get("stdin") is not None else b""
    if tests is not None:
        _hand_over(spares.tests_w, {"limits": limits, "rlimit_nproc": req["rlimit_nproc"]},
                   tests)
        zero(tests)
    else:  # a plain run's grader sees the end of the stream and exits unused
        os.close(spares.tests_w)
    job = {key: req[key] for key in ("code", "limits", "rlimit_nproc", "address_space_mb",
                                     "shares_memory_cgroup")}
    job["grade"] = tests is not None
    _hand_over(spares.job_w, job)
    run = Run(limits, spares.grader_pid, tests is not None)
    start = time.monotonic()
    _pump(run, spares, start, stdin_data)
    wall_s = time.monotonic() - start
    return _finish(run, wall_s, limits), run


def _hand_over(fd, obj, *raw):
    """Write a spare its frames, then close its pipe. One that died before reading them (killed
    at its memory limit, say) ends the run through its exit status, not as our failure."""
    try:
        write_frame(fd, obj, *raw)
    except BrokenPipeError:
        pass
    finally:
        os.close(fd)


def _fork(body):
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(70)
    return pid


def _pump(run, spares, start, stdin_data):
    """Feed stdin, collect output and enforce the wall, CPU and output limits until the
    candidate and (for a check) the grader have both ended, or a limit is reached."""
    limits = run.limits
    deadline = start + limits["timeout_s"]
    stdin_w, out_r, err_r, flag_r = spares.stdin_w, spares.out_r, spares.err_r, spares.flag_r
    report_r = spares.report_r if run.grading else None
    waiting = {os.pidfd_open(spares.candidate_pid): "candidate"}
    if run.grading:
        waiting[os.pidfd_open(run.grader_pid)] = "grader"
    pidfds = list(waiting)
    os.set_blocking(stdin_w, False)
    if not stdin_data:
        os.close(stdin_w)
        stdin_w = None
    readers = [fd for fd in (out_r, err_r, flag_r, report_r) if fd is not None]
    for fd in readers:
        os.set_blocking(fd, False)
    next_cpu_check = start + CPU_POLL_S
    while run.reason is None and waiting:
        now = time.monotonic()
        if now >= deadline:
            run.reason = "timeout"
            break
        if now >= next_cpu_check:
            next_cpu_check = now + CPU_POLL_S
            if tree_cpu_s(run) > limits["cpu_s"]:
                run.reason = "cpu"
                break
        wait = min(deadline, next_cpu_check) - now
        wlist = [stdin_w] if stdin_w is not None else []
        ready_r, ready_w, _ = select.select([*readers, *waiting], wlist, [], max(wait, 0))
        if stdin_w in ready_w:
            stdin_data = _feed(stdin_w, stdin_data)
            if not stdin_data:
                os.close(stdin_w)
                stdin_w = None
        for fd in ready_r:
            if fd in waiting:
                if waiting.pop(fd) == "grader":
                    run.grader_status = _exit_status(run.grader_pid)
            elif _take(run, fd, out_r, err_r, flag_r) is False:
                readers.remove(fd)
    kill_all()
    reap_all(run, spares.candidate_pid)
    for fd in readers:  # after the kill every writer is gone: take what is left
        while _take(run, fd, out_r, err_r, flag_r):
            pass
    for fd in (out_r, err_r, flag_r, spares.report_r, stdin_w, *pidfds):
        if fd is not None:
            os.close(fd)


def _exit_status(pid):
    """The wait status of an ended child, leaving it to be reaped (and accounted) later."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
    if info is None:
        return None
    if info.si_code == os.CLD_EXITED:
        return info.si_status
    return -info.si_status


def _take(run, fd, out_r, err_r, flag_r):
    """Read what fd has, within its cap: True if it gave data, None if it had none yet, False
    once it is at end of stream or over its cap (then we stop reading it)."""
    if fd in (out_r, err_r, flag_r):
        chunk = _read_some(fd, 4096 if fd == flag_r else 65536)
        if not chunk:
            return None if chunk is None else False
        if fd == flag_r:
            run.flag.extend(chunk[:max(0, FLAG_CAP_BYTES - len(run.flag))])
            return True
        (run.out if fd == out_r else run.err).extend(chunk)
        if len(run.out) + len(run.err) > run.limits["max_output_bytes"]:
            run.reason = run.reason or "output"
            return False
        return True
    room = memoryview(run.report)[run.report_bytes:]  # the grader's report
    if not room:
        run.report_overflow = bool(_read_some(fd, 1))
        return False
    n = _read_some(fd, 0, room)
    if not n:
        return None if n is None else False
    run.report_bytes += n
    return True


def _read_some(fd, size, into=None):
    """Bytes read (or, with `into`, how many), b""/0 at end of stream, None if none yet (the
    fds are non-blocking)."""
    try:
        return os.readv(fd, [into]) if into is not None else os.read(fd, size)
    except BlockingIOError:
        return None


def _feed(fd, data):
    """Write what the pipe takes now; return the rest (nothing if the reader is gone)."""
    try:
        return data[os.write(fd, data[:65536]):]
    except BrokenPipeError:
        return b""


def _finish(run, wall_s, limits):
    cap = limits["max_output_bytes"]
    truncated = len(run.out) + len(run.err) > cap
    out = bytes(run.out[:cap])
    err = bytes(run.err[: max(0, cap - len(out))])
    survivors = live_pids()
    cleanup_error = cleanup.clear_work_dir(WORK_DIR) or cleanup.remove_ipc_objects()
    return {
        "exit_code": os.waitstatus_to_exitcode(run.status) if run.status is not None else None,
        "stdout": out.decode("latin-1"),
        "stderr": err.decode("latin-1"),
        "truncated": truncated,
        "reason": run.reason or ("output" if truncated else None),
        "wall_s": wall_s,
        "cpu_s": run.reaped_cpu_s,
        "max_rss_kb": run.max_rss_kb,
        "memory_error": b"M" in run.flag,
        "grader_exit": run.grader_status,
        "report_overflow": run.report_overflow,
        "survivors": len(survivors),
        "cleanup_error": cleanup_error,
    }


def main():
    # Signals from inside the namespace reach PID 1 only where it installed a handler: drop
    # Python's SIGINT handler so that no candidate can interrupt the server.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # Not dumpable: no candidate (same uid) may ptrace the server or the grader (which inherits
    # this) or read their memory or fds.
    child.prctl(child.PR_SET_DUMPABLE, 0)
    # Keep the control channel off fds 0-2; every child closes it (install_fds).
    ctl_in = os.dup(0)
    ctl_out = os.dup(1)
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)
    os.chdir(WORK_DIR)
    if os.path.isdir(SITE_DIR):
        sys.path.insert(0, SITE_DIR)
    # Move everything imported so far out of the collector's reach: a forked child's collections
    # would otherwise write to (and so copy) every page holding a tracked object.
    gc.freeze()
    # The host sets the string-hash seed (PYTHONHASHSEED) for every jail alike: say which one
    # took effect, for the results' environment.
    write_frame(ctl_out, {"ready": True, "python": sys.version.split()[0], "pid": os.getpid(),
                          "hash_seed": os.environ.get("PYTHONHASHSEED", "random")})
    while True:
        try:
            # Forked after the last run's tree is gone and its buffers are zeroed; the host
            # moves the candidate into its cgroup (if it has one) before sending the request.
            spares = fork_spares()
            write_frame(ctl_out, {"spare": spares.candidate_pid})
            req = read_frame(ctl_in)
            if req is None:
                return
            tests = read_raw_frame(ctl_in, grader.TESTS_CAP_BYTES) if req.get("grade") else None
            reply, run = serve_one(req, tests, spares)
        except Exception as e:  # noqa: BLE001 - report, then let the host recycle us
            kill_all()
            write_frame(ctl_out, {"harness_error": f"{type(e).__name__}: {e}"})
            return
        if tests is None:
            write_frame(ctl_out, reply)
        else:  # with the grader's report, forwarded unread, then wiped
            write_frame(ctl_out, reply, memoryview(run.report)[:run.report_bytes])
            zero(run.report, run.report_bytes)


if __name__ == "__main__":
    main()
