"""Jail-side execution server of spade-ray: standard library only, never imported by spade_ray.

It runs as PID 1 of the jail's own PID namespace (bwrap --as-pid-1, or a container's entry point)
and serves requests from the host over its stdin/stdout: each request is one program run in a
forked child. Forking a warm interpreter with the common stdlib already imported is what makes
execution cheap (DESIGN.md: ~100 exec/s for fresh `python -c` on 2 cores, 400-600 exec/s for a
warm fork-server).

A check (a request with tests) forks two children: the grader (grader.py), which holds the tests
and runs them, and the candidate, which runs the program and then answers the grader's calls with
canonical data (canonical.py). The tests never enter the candidate's process: they reach this
server as a separate frame read into a buffer that is handed to the grader by fork and zeroed
before the candidate is forked, and the grader's report travels back through another buffer that
is zeroed after it is sent, so no later candidate (forked from us) finds either in its memory.
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
(namespaces). SysV IPC objects left by a run are removed after it (the seccomp filter refuses
creating them in the first place).

Wire format (host <-> server): each frame is a 4-byte big-endian length and a body: UTF-8 JSON,
except the tests frame that follows a check request and the grader-report frame that follows its
reply, which are raw bytes. Byte strings (stdin, stdout, stderr) travel as latin-1 text.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # canonical.py and grader.py

# Several of these are not used here: they are pre-imported for the candidates, so that a forked
# child finds them in sys.modules for free (noqa: F401 marks them).
import bisect  # noqa: E402,F401
import collections  # noqa: E402,F401
import copy  # noqa: E402,F401
import ctypes  # noqa: E402
import dataclasses  # noqa: E402,F401
import fcntl  # noqa: E402
import fractions  # noqa: E402,F401
import functools  # noqa: E402,F401
import gc  # noqa: E402
import hashlib  # noqa: E402,F401
import heapq  # noqa: E402,F401
import io  # noqa: E402
import itertools  # noqa: E402,F401
import json  # noqa: E402
import math  # noqa: E402,F401
import random  # noqa: E402,F401
import re  # noqa: E402,F401
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import stat  # noqa: E402
import string  # noqa: E402,F401
import struct  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import types  # noqa: E402
import typing  # noqa: E402,F401

import canonical  # noqa: E402
import grader  # noqa: E402

WORK_DIR = "/work"
SITE_DIR = "/opt/spade-sandbox/site"  # whitelisted packages, bound read-only by the host
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORK_DIR,
    "TMPDIR": WORK_DIR,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# The candidate's fds: 0-2 as usual, then the memory-error flag and the call pipes (the grader's
# side of them is grader.REPLY_FD / grader.CALL_FD); the cgroup handshake pipe after those.
FLAG_FD, CALLS_FD, ANSWERS_FD, GO_FD = 3, 4, 5, 6
FLAG_CAP_BYTES = 16
REPORT_CAP_BYTES = 4 * 1024 * 1024  # a grader report: outcomes with 300-character messages
TESTS_CAP_BYTES = 64 * 1024 * 1024
CONTROL_CAP_BYTES = 64 * 1024 * 1024  # a request: code (1 MB at most) and stdin (16 MB)
CPU_POLL_S = 0.05
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
IPC_RMID = 0
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once, not per execution
CLK_TCK = os.sysconf("SC_CLK_TCK")
PLAIN_TYPES = (bool, int, float, str, bytes, list, tuple, dict, set, frozenset)
# Allocated once: a fresh 4 MB bytearray per check costs ~2 ms (CPython zero-fills it).
REPORT_BUFFER = bytearray(REPORT_CAP_BYTES)


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


def write_frame(fd, obj):
    write_raw_frame(fd, json.dumps(obj, separators=(",", ":")).encode("utf-8"))


def write_raw_frame(fd, body):
    grader.write_all(fd, struct.pack(">I", len(body)))
    grader.write_all(fd, body)


def zero(buf, size=None):
    """Overwrite a buffer in place, so no later fork of this server finds its contents."""
    size = len(buf) if size is None else size
    buf[:size] = bytes(size)


# ---------------------------------------------------------------- the children


def install_fds(mapping):
    """Make exactly the fds in `mapping` (target -> source fd) open, and nothing else."""
    high = {target: fcntl.fcntl(source, fcntl.F_DUPFD, 256)
            for target, source in mapping.items() if source is not None}
    os.closerange(0, 256)
    os.closerange(max(high.values(), default=255) + 1, 65536)
    for target, fd in high.items():
        os.dup2(fd, target)
        os.close(fd)


def candidate_main(req, fds):
    """Set up the forked candidate and run it. Never returns."""
    os.setsid()
    install_fds({0: fds["stdin_r"], 1: fds["out_w"], 2: fds["err_w"], FLAG_FD: fds["flag_w"],
                 CALLS_FD: fds.get("calls_r"), ANSWERS_FD: fds.get("answers_w"),
                 GO_FD: fds.get("go_r")})
    if fds.get("go_r") is not None:
        os.read(GO_FD, 1)  # the host has moved us into our cgroup
        os.close(GO_FD)
    set_limits(req["limits"], req["rlimit_nproc"], req["address_space_mb"],
               req["shares_memory_cgroup"])
    os.environ.clear()
    os.environ.update(CHILD_ENV)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8",
                                 errors="replace")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", write_through=False)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)
    sys.argv = ["solution.py"]
    os._exit(run_candidate(req["code"], serve=fds.get("calls_r") is not None))


def grader_main(req, fds, tests):
    """Set up the forked grader and run the tests. Never returns."""
    devnull = os.open("/dev/null", os.O_RDWR)
    install_fds({0: devnull, 1: devnull, 2: devnull, grader.REPORT_FD: fds["report_w"],
                 grader.REPLY_FD: fds["answers_r"], grader.CALL_FD: fds["calls_w"]})
    set_limits(req["limits"], req["rlimit_nproc"], req["limits"]["memory_mb"] + 128, False)
    os.chdir("/")  # nothing the candidate writes in /work is near the grader
    grader.main(tests)


def set_limits(limits, rlimit_nproc, address_space_mb, shares_memory_cgroup):
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if shares_memory_cgroup:  # with the server (Docker): the OOM killer must pick the candidate
        _prctl(PR_SET_DUMPABLE, 1)  # our /proc files back to our uid, to write oom_score_adj
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
    mb = 1024 * 1024
    cpu = max(1, int(limits["cpu_s"] + 0.999))
    rlimits = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_FSIZE, (limits["max_file_mb"] * mb,) * 2),
        (resource.RLIMIT_NOFILE, (256, 256)),
        (resource.RLIMIT_CORE, (0, 0)),
        # The host chooses: a loose backstop under a memory cgroup, a tight cap without one.
        (resource.RLIMIT_AS, (address_space_mb * mb,) * 2),
    ]
    if rlimit_nproc:  # only where the uid is the jail's alone (its own user namespace)
        rlimits.append((resource.RLIMIT_NPROC, (limits["max_processes"],) * 2))
    for res, value in rlimits:
        resource.setrlimit(res, value)
    # CPython ignores SIGXFSZ so that writes fail with EFBIG; we want the kernel's verdict
    # (killed by SIGXFSZ = file size limit) to be unambiguous.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_candidate(code, serve):
    """Run the code, then (for a check) answer the grader's calls; return the exit code."""
    main = types.ModuleType("__main__")
    main.__file__ = "solution.py"
    sys.modules["__main__"] = main
    exit_code = 0
    try:
        exec(compile(code, "solution.py", "exec"), main.__dict__)
        if serve:
            answer_calls(main.__dict__)
    except SystemExit as e:
        exit_code = _exit_code(e.code)
    except MemoryError:
        _flag_memory_error()
        _print_traceback()
        exit_code = 1
    except BaseException:  # noqa: BLE001 - any exception of the candidate is its failure
        _print_traceback()
        exit_code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - a closed or broken stdout is the candidate's doing
        exit_code = exit_code or 1
    return exit_code


def answer_calls(namespace):
    """Serve the grader: one canonical answer per call, until it closes the pipe."""
    while True:
        body = grader.recv_frame(CALLS_FD)
        if body is None:
            return
        seq, name, args, kwargs = canonical.decode(body)
        grader.send_frame(ANSWERS_FD, answer(namespace, seq, name, args, kwargs).encode())


def answer(namespace, seq, name, args, kwargs):
    try:
        function = namespace.get(name)
        if not callable(function):
            raise NameError(f"name {name!r} is not a function of the solution")
        value = function(*args, **kwargs)
    except BaseException as e:  # noqa: BLE001 - the grader decides what it means
        if isinstance(e, MemoryError):
            _flag_memory_error()
        return canonical.encode((seq, "raise", type(e).__name__, grader.describe(e)[:300]))
    try:
        return canonical.encode((seq, "ok", value))
    except canonical.NotPlainData as e:
        return canonical.encode((seq, "unplain", canonical.type_name(value), _oddity(value)
                                 or f"not plain data: {e}"[:200], bool(_oddity(value))))


def _oddity(value):
    """What makes a value look built to fool a comparison ("" for honest non-data)."""
    kind = type(value)
    if kind in PLAIN_TYPES or not isinstance(value, PLAIN_TYPES):
        return "defines __eq__" if "__eq__" in vars(kind) and kind not in PLAIN_TYPES else ""
    overridden = [m for m in ("__eq__", "__ne__", "__hash__")
                  if any(m in vars(k) for k in kind.__mro__[:-2] if k not in PLAIN_TYPES)]
    return "subclass of a plain type" + (f" overriding {', '.join(overridden)}"
                                          if overridden else "")


def _flag_memory_error():
    try:
        os.write(FLAG_FD, b"M")
    except OSError:
        pass


def _print_traceback():
    """The candidate's traceback, without the harness frames above its code."""
    etype, value, tb = sys.exc_info()
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    traceback.print_exception(etype, value, tb)


def _exit_code(code):
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


# ---------------------------------------------------------------- the server (PID 1)


class Run:
    """Host-facing bookkeeping of one execution."""

    def __init__(self, limits, grader_pid):
        self.limits = limits
        self.grader_pid = grader_pid
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


def serve_one(req, tests, ctl_in, ctl_out):
    """Run one request; `tests` (a bytearray, or None) is zeroed here once the grader has it."""
    limits = req["limits"]
    stdin_data = req["stdin"].encode("latin-1") if req.get("stdin") is not None else b""
    fds = {}
    fds["stdin_r"], stdin_w = os.pipe()
    out_r, fds["out_w"] = os.pipe()
    err_r, fds["err_w"] = os.pipe()
    flag_r, fds["flag_w"] = os.pipe()
    report_r = grader_pid = None
    if tests is not None:
        fds["calls_r"], fds["calls_w"] = os.pipe()
        fds["answers_r"], fds["answers_w"] = os.pipe()
        report_r, fds["report_w"] = os.pipe()
    go_w = None
    if req.get("handshake"):
        fds["go_r"], go_w = os.pipe()
    if tests is not None:
        grader_pid = _fork(lambda: grader_main(req, fds, tests))
        zero(tests)
    pid = _fork(lambda: candidate_main(req, fds))
    for fd in fds.values():
        os.close(fd)
    if go_w is not None:
        write_frame(ctl_out, {"forked": True, "candidate_pid": pid})
        ack = read_frame(ctl_in)
        if ack is None:
            kill_all()
            raise EOFError("host went away during the cgroup handshake")
        os.write(go_w, b"g")
        os.close(go_w)
    run = Run(limits, grader_pid)
    start = time.monotonic()
    _pump(run, pid, start, stdin_w, stdin_data, out_r, err_r, flag_r, report_r)
    wall_s = time.monotonic() - start
    return _finish(run, wall_s, limits), run


def _fork(body):
    pid = os.fork()
    if pid == 0:
        try:
            body()
        finally:
            os._exit(70)
    return pid


def _pump(run, pid, start, stdin_w, stdin_data, out_r, err_r, flag_r, report_r):
    """Feed stdin, collect output and enforce the wall, CPU and output limits until the
    candidate and the grader have both ended (or a limit is reached)."""
    limits = run.limits
    deadline = start + limits["timeout_s"]
    waiting = {os.pidfd_open(pid): "candidate"}
    if run.grader_pid is not None:
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
    reap_all(run, pid)
    for fd in readers:  # after the kill every writer is gone: take what is left
        while _take(run, fd, out_r, err_r, flag_r):
            pass
    for fd in (out_r, err_r, flag_r, report_r, stdin_w, *pidfds):
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
    cleanup_error = clear_work_dir() or remove_ipc_objects()
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


def clear_work_dir():
    """Empty the working directory; returns an error (the host then recycles the jail) or None.

    No recursion and no long paths, so no directory shape breaks it: subdirectories are moved up
    to the top level one level at a time (rename within one tmpfs) and each level is emptied
    through a directory fd, with permissions restored first."""
    try:
        os.chmod(WORK_DIR, 0o700)  # ours (uid 65534): a candidate may have taken our access
        top = os.open(WORK_DIR, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    moved = 0
    try:
        while True:
            names = os.listdir(top)
            if not names:
                return None
            for name in names:
                moved = _empty_entry(top, name, moved)
    except Exception as e:  # noqa: BLE001 - reported, never raised: the reply must go out
        return f"{type(e).__name__}: {e}"
    finally:
        os.close(top)


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


def remove_ipc_objects():
    """Remove SysV shared memory, semaphores and message queues a run left (the IPC namespace is
    the jail's own; the seccomp filter normally refuses creating them). Returns an error or None."""
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
    return None


def _prctl(option, value):
    _LIBC.prctl(option, value, 0, 0, 0)


def main():
    # Signals from inside the namespace reach PID 1 only where it installed a handler: drop
    # Python's SIGINT handler so that no candidate can interrupt the server.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # Not dumpable: no candidate (same uid) may ptrace the server or the grader (which inherits
    # this) or read their memory or fds.
    _prctl(PR_SET_DUMPABLE, 0)
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
    write_frame(ctl_out, {"ready": True, "python": sys.version.split()[0],
                          "pid": os.getpid()})
    while True:
        try:
            req = read_frame(ctl_in)
            if req is None:
                return
            tests = read_raw_frame(ctl_in, TESTS_CAP_BYTES) if req.get("grade") else None
            reply, run = serve_one(req, tests, ctl_in, ctl_out)
        except Exception as e:  # noqa: BLE001 - report, then let the host recycle us
            kill_all()
            write_frame(ctl_out, {"harness_error": f"{type(e).__name__}: {e}"})
            return
        write_frame(ctl_out, reply)
        if tests is not None:  # the grader's report, forwarded unread, then wiped
            write_raw_frame(ctl_out, memoryview(run.report)[:run.report_bytes])
            zero(run.report, run.report_bytes)


if __name__ == "__main__":
    main()
