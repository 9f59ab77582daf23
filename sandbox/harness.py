"""Jail-side execution server of spade-ray: standard library only, never imported by spade_ray.

It runs as PID 1 of the jail's own PID namespace (bwrap --as-pid-1, or a container's entry point)
and serves requests from the host over its stdin/stdout, each run in forked children: a warm
interpreter with the common stdlib imported forks far faster than `python -c` starts (DESIGN.md).

Every run has two children (child.py), forked ahead of its request while we wait for it (the
"spares", see fork_spares): the grader (grader.py), which holds the tests and runs them, and the
candidate, which runs the program and then answers the grader's calls with canonical data
(canonical.py); a plain run leaves its grader unused. They are forked by the spawner
(spawner.py), our first child, forked before the first request: it never holds a request, a
reply or a run's figures, so no candidate starts with anything of an earlier run in its memory
(forked from us, one found the last run's program and output in our frames and heap). The
tests never enter the candidate's process either: it was forked before they arrived, they
reach this server as a separate frame read into a buffer that is written to the grader's pipe
and then zeroed, and the grader's report travels back through another buffer that fork leaves
out.
This server never parses anything a candidate wrote: output is counted and forwarded, the
memory-error flag is one byte, and every read is capped.

Why PID 1: in a PID namespace, kill(-1, SIGKILL) reaches every process of the namespace but the
sender and PID 1, so after each run the spawner's kill ends the whole tree, daemonised and
re-parented grandchildren included (the spawner is their subreaper: it reaps them and reports
their CPU time), and PID 1 itself cannot be killed from inside (the kernel drops SIGKILL sent
to a namespace's init by its own members). A run that stops or kills the spawner gets our own
kill(-1), which ends the spawner too; the host then starts a fresh jail.

Limits enforced here (pump.py, one run's I/O): wall-clock deadline, CPU seconds of the
candidate's tree (polled from /proc, since RLIMIT_CPU is per process and forking escapes it),
combined stdout+stderr cap, and rlimits as a backstop (address space, file size, open files,
core dumps). Memory and process-count limits of the whole tree are the host's job (cgroups),
as is the network (namespaces). After each run, cleanup.py empties the working directory and
removes SysV IPC objects (the seccomp filter refuses creating them in the first place), and
reports kernel state the run changed beyond a plain run, which the host answers with a fresh jail.

Wire format (host <-> server): each frame is a 4-byte big-endian length and a body: UTF-8 JSON,
except the tests frame that follows a check request and the grader-report frame that follows its
reply, which are raw bytes. Before each request the server sends {"spare": pid}: the waiting
candidate's pid in the jail, in the run's cgroup before the host sends the request (see
`fork_spares`). Byte strings (stdin, stdout, stderr) travel as latin-1 text.

The control channel is our stdin and stdout, or a unix socket the host listens on
(`--control-socket PATH`, see `control_channel`).

Started as `harness.py --join-cgroup FD,...` (the local backend on cgroup v1), the server holds
fds of the execution cgroup's `tasks` files, opened by the host as root: each candidate writes
"0" to them, joining the group itself, before it does anything else, and closes them (no
candidate code ever sees them; the grader closes them at once). A process that moves itself
takes no global lock, where the host moving another one waits for an RCU grace period whenever
no migration happened in the last ~20 ms: 6-17 ms, after every run longer than that (measured
on this project's machine, cgroup v1, kernel 6.18: 0.06-0.2 ms moving itself).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the jail's other modules

# Several of these are not used here: they are pre-imported for the candidates, so that a forked
# child finds them in sys.modules for free (noqa: F401 marks them).
import bisect  # noqa: E402,F401
import collections  # noqa: E402,F401
import copy  # noqa: E402,F401
import ctypes  # noqa: E402,F401
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
import select  # noqa: E402,F401
import signal  # noqa: E402
import string  # noqa: E402,F401
import struct  # noqa: E402,F401
import time  # noqa: E402
import typing  # noqa: E402,F401

import child  # noqa: E402
import cleanup  # noqa: E402
import framing  # noqa: E402
import grader  # noqa: E402
import pump  # noqa: E402
import spawner  # noqa: E402

WORK_DIR = child.WORK_DIR
SITE_DIR = "/opt/spade-sandbox/site"  # whitelisted packages, bound read-only by the host
REPORT_CAP_BYTES = 4 * 1024 * 1024  # a grader report: outcomes with 300-character messages
CONTROL_CAP_BYTES = 64 * 1024 * 1024  # a request: code (1 MB at most) and stdin (16 MB)
SPAWNER_LOST = "the run stopped or killed the spawner"  # a jail_changed the host reads as probing


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
# What cleanup.py puts back, or checks, after every run: as they are before the first one.
WORK_DIR_ATTRIBUTES = cleanup.work_dir_attributes(WORK_DIR)
SERVER_STATE = cleanup.process_state()
# The jail's kernel state after the last run (cleanup.jail_state); main() takes the first.
JAIL_STATE = {}


def _option(name):
    """The command-line value after `name`, or None."""
    args = sys.argv[1:]
    return args[args.index(name) + 1] if name in args[:-1] else None


# The fds of the execution cgroup's `tasks` files that the host passed (module doc).
JOIN_FDS = tuple(int(fd) for fd in (_option("--join-cgroup") or "").split(",") if fd)
# A unix socket the host listens on for our control channel (`control_channel`).
CONTROL_SOCKET = _option("--control-socket")


def read_frame(fd):
    body = framing.read_frame(fd, CONTROL_CAP_BYTES)
    return None if body is None else json.loads(body.decode("utf-8"))


def write_frame(fd, obj, *raw):
    """A JSON frame, then the raw frames `raw`, in one write (framing.send_frame)."""
    framing.send_frame(fd, json.dumps(obj, separators=(",", ":")).encode("utf-8"), *raw)


def zero(buf, size=None):
    """Overwrite a buffer in place, so no later fork of this server finds its contents."""
    size = len(buf) if size is None else size
    buf[:size] = bytes(size)


# ---------------------------------------------------------------- the server (PID 1)


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
        if JOIN_FDS:  # the candidate says here that it joined its cgroup
            self.joined_r, self.fds["joined_w"] = os.pipe()
        self.grader_pid = self.candidate_pid = None


def fork_spares(forker):
    """Have the spawner (`forker`, spawner.py) fork the grader and the candidate of the next
    run before its request arrives, while the host is busy with the last reply: the forks (about
    1 ms of CPU each, mostly page-table copies and the children's set-up) then leave the
    critical path, and the candidate is in its cgroup
    before the request is sent, instead of moved there in a round trip after it: it joins the
    group itself (JOIN_FDS; we wait for its word before announcing it), or the host moves it
    when it reads the announcement. Neither has seen any request: the candidate waits for its
    program on the job pipe, the grader for its settings and tests on the tests pipe, so each
    serves exactly one run (pump.kill_all ends both after it) and the tests reach only the
    grader's process."""
    spares = Spares()
    spares.grader_pid, spares.candidate_pid = forker.fork(spares.fds)
    for fd in spares.fds.values():
        os.close(fd)
    if JOIN_FDS:
        joined = os.read(spares.joined_r, 1)
        os.close(spares.joined_r)
        if joined != b"1":  # it exited instead (child.join_cgroup): no run without the group
            raise OSError("the spare candidate could not join its execution cgroup")
    return spares


def serve_one(req, tests, spares, forker):
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
    run = pump.Run(limits, spares.grader_pid, tests is not None, REPORT_BUFFER, forker.pid)
    start = time.monotonic()
    pump.pump(run, spares, start, stdin_data, forker)
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


def _finish(run, wall_s, limits):
    cap = limits["max_output_bytes"]
    truncated = len(run.out) + len(run.err) > cap
    out = bytes(run.out[:cap])
    err = bytes(run.err[: max(0, cap - len(out))])
    survivors = pump.live_pids(run.spawner_pid)
    garbage_error = cleanup.collect_unix_garbage()
    jail_changed = _jail_changed(run.spawner_lost)
    cleanup_error = (cleanup.clear_work_dir(WORK_DIR, WORK_DIR_ATTRIBUTES)
                     or cleanup.remove_ipc_objects() or cleanup.state_changed(SERVER_STATE)
                     or garbage_error)
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
        "jail_changed": jail_changed,
    }


def _jail_changed(spawner_lost):
    """What the run changed in the jail beyond a plain run (cleanup.jail_changed), or None: the
    host then recycles the jail, and the run's own result stands. Measured before emptying /work
    (the probe needs no room a run could have taken after it)."""
    if spawner_lost:
        return SPAWNER_LOST
    try:
        now = cleanup.jail_state(WORK_DIR)
    except OSError:
        now = None
    changed = cleanup.jail_changed(JAIL_STATE, now, forks=2)  # the run's grader and candidate
    JAIL_STATE.update(now or {})
    return changed


def control_channel():
    """Our ends of the host's control channel, (read fd, write fd), off fds 0-2 (which become
    /dev/null; every child closes these: install_fds). With `--control-socket PATH` (the Docker
    backend, when its engine runs on the host's machine) it is a unix socket the host listens
    on, bound into the container: the frames then skip the engine's attach relay (dockerd and
    containerd-shim copying each one). Where we cannot connect (an engine that does not share
    the host's files), it is our stdin and stdout, as without the option: the host reads our
    ready frame there."""
    if CONTROL_SOCKET:
        import socket  # only here: no other server needs it loaded

        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(CONTROL_SOCKET)
                fd = sock.detach()
            return fd, os.dup(fd)
        except OSError as e:
            print(f"harness: cannot connect to {CONTROL_SOCKET} ({e}): control over stdin/stdout",
                  file=sys.stderr, flush=True)
    return os.dup(0), os.dup(1)


def main():
    # Signals from inside the namespace reach PID 1 only where it installed a handler: drop
    # Python's SIGINT handler so that no candidate can interrupt the server.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # Not dumpable: no candidate (same uid) may ptrace the server or the grader (which inherits
    # this) or read their memory or fds.
    child.prctl(child.PR_SET_DUMPABLE, 0)
    ctl_in, ctl_out = control_channel()
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)
    os.chdir(WORK_DIR)
    if os.path.isdir(SITE_DIR):
        sys.path.insert(0, SITE_DIR)
    # The host sets the string-hash seed (PYTHONHASHSEED) for every jail alike: say which one
    # took effect, for the results' environment. Then every child's environment (child.py's
    # CHILD_ENV), inherited from here: nothing of ours reads ours after this.
    hash_seed = os.environ.get("PYTHONHASHSEED", "random")
    os.environ.clear()
    os.environ.update(child.CHILD_ENV)
    streams = child.standard_streams()
    # Move everything imported so far out of the collector's reach: a forked child's collections
    # would otherwise write to (and so copy) every page holding a tracked object.
    gc.freeze()
    forker = spawner.Spawner(streams, JOIN_FDS, (ctl_in, ctl_out))  # before any request
    JAIL_STATE.update(cleanup.jail_state(WORK_DIR))
    cleanup.clear_work_dir(WORK_DIR, WORK_DIR_ATTRIBUTES)  # /work's times, as after every run
    write_frame(ctl_out, {"ready": True, "python": sys.version.split()[0], "pid": os.getpid(),
                          "hash_seed": hash_seed})
    while True:
        try:
            # Forked after the last run's tree is gone and its buffers are zeroed; the
            # candidate is in its cgroup (if it has one) before the host sends the request.
            spares = fork_spares(forker)
            write_frame(ctl_out, {"spare": spares.candidate_pid})
            req = read_frame(ctl_in)
            if req is None:
                return
            tests = framing.read_frame(ctl_in, grader.TESTS_CAP_BYTES) if req.get("grade") else None
            reply, run = serve_one(req, tests, spares, forker)
        except Exception as e:  # noqa: BLE001 - report, then let the host recycle us
            pump.kill_all()
            write_frame(ctl_out, {"harness_error": f"{type(e).__name__}: {e}"})
            return
        if tests is None:
            write_frame(ctl_out, reply)
        else:  # with the grader's report, forwarded unread, then wiped
            write_frame(ctl_out, reply, memoryview(run.report)[:run.report_bytes])
            zero(run.report, run.report_bytes)
        if run.spawner_lost:  # the host starts a fresh jail (jail_changed)
            return


if __name__ == "__main__":
    main()
