"""Jail-side execution server of spade-ray: standard library only, never imported by spade_ray.

It runs as PID 1 of the jail's own PID namespace (bwrap --as-pid-1, or a container's entry point)
and serves requests from the host over its stdin/stdout: each request is one program (optionally
followed by tests) run in a forked child. Forking a warm interpreter with the common stdlib already
imported is what makes execution cheap (DESIGN.md: ~100 exec/s for fresh `python -c` on 2 cores,
400-600 exec/s for a warm fork-server).

Why PID 1: in a PID namespace, kill(-1, SIGKILL) sent by PID 1 reaches every other process of the
namespace, so after each run the whole tree dies, daemonised and re-parented grandchildren
included, and PID 1 itself cannot be killed from inside (the kernel drops SIGKILL sent to a
namespace's init by its own members). Orphans are re-parented to us, so we reap them and count
their CPU time.

Limits enforced here: wall-clock deadline, CPU seconds of the whole tree (polled from /proc, since
RLIMIT_CPU is per process and forking escapes it), combined stdout+stderr cap, and rlimits as a
backstop (address space, file size, open files, core dumps). Memory and process-count limits of
the whole tree are the host's job (cgroups), as is the network (namespaces).

Non-goals: the tests run in the candidate's own interpreter after its code, so code that
deliberately introspects this harness (frames, fds) could forge a test report; the sentinel
defeats lazy fakes (exit code 0, printing PASS, os._exit) but not an attack aimed at this file.

Wire format: each message is a 4-byte big-endian length followed by UTF-8 JSON. Byte strings
(stdin, stdout, stderr) travel as latin-1 text so every byte survives.
"""

# Several of these are not used here: they are pre-imported for the candidates, so that a forked
# child finds them in sys.modules for free (noqa: F401 marks them).
import bisect  # noqa: F401
import collections  # noqa: F401
import copy  # noqa: F401
import ctypes
import dataclasses  # noqa: F401
import fractions  # noqa: F401
import functools  # noqa: F401
import gc
import hashlib  # noqa: F401
import heapq  # noqa: F401
import io
import itertools  # noqa: F401
import json
import math  # noqa: F401
import os
import random  # noqa: F401
import re  # noqa: F401
import resource
import select
import signal
import string  # noqa: F401
import struct
import sys
import time
import traceback
import types
import typing  # noqa: F401

WORK_DIR = "/work"
SITE_DIR = "/opt/spade-sandbox/site"  # whitelisted packages, bound read-only by the host
CHILD_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORK_DIR,
    "TMPDIR": WORK_DIR,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
REPORT_FD = 3  # the child's side channel for the test report and the memory-error flag
CPU_POLL_S = 0.05
PR_SET_DUMPABLE = 4  # <linux/prctl.h>
_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded once, not per execution
CLK_TCK = os.sysconf("SC_CLK_TCK")


def read_frame(fd):
    header = _read_exact(fd, 4)
    if header is None:
        return None
    (size,) = struct.unpack(">I", header)
    body = _read_exact(fd, size)
    if body is None:
        raise EOFError("control channel closed mid-message")
    return json.loads(body.decode("utf-8"))


def _read_exact(fd, size):
    chunks, got = [], 0
    while got < size:
        chunk = os.read(fd, size - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def write_frame(fd, obj):
    body = json.dumps(obj, separators=(",", ":")).encode("utf-8")
    data = struct.pack(">I", len(body)) + body
    while data:
        data = data[os.write(fd, data):]


# ---------------------------------------------------------------- the child (runs the candidate)


def child_main(req, fds):
    """Set up the forked child and run the candidate. Never returns."""
    os.setsid()
    os.dup2(fds["stdin_r"], 0)
    os.dup2(fds["out_w"], 1)
    os.dup2(fds["err_w"], 2)
    os.dup2(fds["rep_w"], REPORT_FD)
    go_r = fds["go_r"]
    if go_r is not None:
        go_r = os.dup2(go_r, REPORT_FD + 1)
    os.closerange(REPORT_FD + 2, 1024)
    if go_r is not None:
        os.read(go_r, 1)  # the host has moved us into our cgroup
        os.close(go_r)
    _set_child_limits(req["limits"], req["rlimit_nproc"], req["address_space_mb"],
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
    code = _run_candidate(req)
    os._exit(code)


def _set_child_limits(limits, rlimit_nproc, address_space_mb, shares_memory_cgroup):
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


def _run_candidate(req):
    """Run the code (and the tests, if any); return the exit code."""
    main = types.ModuleType("__main__")
    main.__file__ = "solution.py"
    sys.modules["__main__"] = main
    exit_code = 0
    try:
        exec(compile(req["code"], "solution.py", "exec"), main.__dict__)
        tests = req.get("tests")
        if tests is not None:
            _run_tests(tests, main.__dict__)
    except SystemExit as e:
        exit_code = _exit_code(e.code)
    except MemoryError:
        _report({"memory_error": True})
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


def _run_tests(tests, namespace):
    """One outcome per assert statement; a check program counts as one test (HumanEval form)."""
    outcomes = []
    for i, source in enumerate(tests.get("asserts") or []):
        outcomes.append(_one_test(f"assert[{i}]", source, namespace, None))
    check = tests.get("check")
    if check:
        outcomes.append(_one_test("check", check, namespace, tests.get("entry_point")))
    sys.stdout.flush()
    _report({"sentinel": tests["nonce"], "outcomes": outcomes})


def _one_test(name, source, namespace, entry_point):
    start = time.perf_counter()
    try:
        exec(compile(source, f"<{name}>", "exec"), namespace)
        if entry_point is not None:
            if entry_point not in namespace:
                raise NameError(f"entry point {entry_point!r} is not defined by the solution")
            namespace["check"](namespace[entry_point])
        outcome, message = "passed", ""
    except AssertionError as e:
        outcome, message = "failed", _describe(e)
    except BaseException as e:  # noqa: BLE001 - an erroring test is a failed test
        if isinstance(e, (SystemExit, KeyboardInterrupt, MemoryError)):
            raise
        outcome, message = "error", _describe(e)
    return {"name": name, "outcome": outcome, "message": message[:500],
            "wall_s": time.perf_counter() - start}


def _describe(exc):
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _report(obj):
    try:
        data = json.dumps(obj).encode("utf-8") + b"\n"
        while data:
            data = data[os.write(REPORT_FD, data):]
    except OSError:
        pass


# ---------------------------------------------------------------- the server (PID 1)


class Run:
    """Host-facing bookkeeping of one execution."""

    def __init__(self, limits):
        self.limits = limits
        self.out = bytearray()
        self.err = bytearray()
        self.report = bytearray()
        self.reason = None  # "timeout" | "cpu" | "output" once we kill for a limit
        self.reaped_cpu_s = 0.0
        self.max_rss_kb = 0
        self.status = None  # wait status of the main child

    def account(self, rusage):
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
        run.account(rusage)
        if pid == main_pid:
            run.status = status


def live_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1"]


def tree_cpu_s(run):
    """CPU seconds of the live tree plus everything already reaped."""
    total = run.reaped_cpu_s
    for pid in live_pids():
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


def serve_one(req, ctl_in, ctl_out):
    limits = req["limits"]
    stdin_data = req["stdin"].encode("latin-1") if req.get("stdin") is not None else b""
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    rep_r, rep_w = os.pipe()
    go_r, go_w = os.pipe() if req.get("handshake") else (None, None)
    fds = {"stdin_r": stdin_r, "out_w": out_w, "err_w": err_w, "rep_w": rep_w, "go_r": go_r}
    pid = os.fork()
    if pid == 0:
        try:
            child_main(req, fds)
        finally:
            os._exit(70)
    for fd in (stdin_r, out_w, err_w, rep_w, go_r):
        if fd is not None:
            os.close(fd)
    if go_w is not None:
        write_frame(ctl_out, {"forked": True})
        ack = read_frame(ctl_in)
        if ack is None:
            kill_all()
            raise EOFError("host went away during the cgroup handshake")
        os.write(go_w, b"g")
        os.close(go_w)
    run = Run(limits)
    start = time.monotonic()
    _pump(run, pid, start, stdin_w, stdin_data, out_r, err_r, rep_r)
    wall_s = time.monotonic() - start
    return _finish(run, wall_s, limits)


def _pump(run, pid, start, stdin_w, stdin_data, out_r, err_r, rep_r):
    """Feed stdin, collect output and enforce the wall, CPU and output limits until the exit."""
    limits = run.limits
    deadline = start + limits["timeout_s"]
    pidfd = os.pidfd_open(pid)
    os.set_blocking(stdin_w, False)
    if not stdin_data:
        os.close(stdin_w)
        stdin_w = None
    readers = {out_r: run.out, err_r: run.err, rep_r: run.report}
    next_cpu_check = start + CPU_POLL_S
    while run.reason is None:
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
        ready_r, ready_w, _ = select.select([*readers, pidfd], wlist, [], max(wait, 0))
        if stdin_w in ready_w:
            stdin_data = _feed(stdin_w, stdin_data)
            if not stdin_data:
                os.close(stdin_w)
                stdin_w = None
        if pidfd in ready_r:
            break  # the program is over; whatever it left behind dies below
        for fd in ready_r:
            chunk = os.read(fd, 65536)
            if not chunk:
                del readers[fd]
                continue
            readers[fd].extend(chunk)
            if len(run.out) + len(run.err) > limits["max_output_bytes"]:
                run.reason = "output"
                break
    kill_all()
    reap_all(run, pid)
    for fd in readers:  # after the kill every writer is gone: take what is left
        _drain(fd, readers[fd])
    for fd in (out_r, err_r, rep_r, pidfd, stdin_w):
        if fd is not None:
            os.close(fd)


def _feed(fd, data):
    """Write what the pipe takes now; return the rest (nothing if the reader is gone)."""
    try:
        return data[os.write(fd, data[:65536]):]
    except BrokenPipeError:
        return b""


def _drain(fd, buf):
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return
        if not chunk:
            return
        buf.extend(chunk)


def _finish(run, wall_s, limits):
    cap = limits["max_output_bytes"]
    truncated = len(run.out) + len(run.err) > cap
    out = bytes(run.out[:cap])
    err = bytes(run.err[: max(0, cap - len(out))])
    report = _parse_report(bytes(run.report))
    status = run.status if run.status is not None else 0
    survivors = live_pids()
    cleanup_error = _clear_work_dir()
    return {
        "exit_code": os.waitstatus_to_exitcode(status) if run.status is not None else None,
        "stdout": out.decode("latin-1"),
        "stderr": err.decode("latin-1"),
        "truncated": truncated,
        "reason": run.reason or ("output" if truncated else None),
        "wall_s": wall_s,
        "cpu_s": run.reaped_cpu_s,
        "max_rss_kb": run.max_rss_kb,
        "memory_error": bool(report.get("memory_error")),
        "tests": report.get("tests"),
        "survivors": len(survivors),
        "cleanup_error": cleanup_error,
    }


def _parse_report(data):
    merged = {}
    for line in data.splitlines():
        try:
            item = json.loads(line)
        except ValueError:
            continue
        if isinstance(item, dict) and item.get("memory_error"):
            merged["memory_error"] = True
        elif isinstance(item, dict) and "sentinel" in item:
            merged["tests"] = item
    return merged


def _clear_work_dir():
    """Empty the working directory so nothing persists between runs. Returns an error or None."""
    import shutil

    def make_writable_and_retry(func, path, _exc):
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        func(path)

    try:
        os.chmod(WORK_DIR, 0o700)
        for entry in os.scandir(WORK_DIR):
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)
                shutil.rmtree(entry.path, onerror=make_writable_and_retry)
            else:
                os.unlink(entry.path)
        return None
    except OSError as e:
        return f"{type(e).__name__}: {e}"


def _prctl(option, value):
    _LIBC.prctl(option, value, 0, 0, 0)


def main():
    # Signals from inside the namespace reach PID 1 only where it installed a handler: drop
    # Python's SIGINT handler so that no candidate can interrupt the server.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # Not dumpable: no candidate (same uid) may ptrace the server or read its memory.
    _prctl(PR_SET_DUMPABLE, 0)
    # Keep the control channel off fds 0-2 so that no child can inherit it.
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
        req = read_frame(ctl_in)
        if req is None:
            return
        try:
            reply = serve_one(req, ctl_in, ctl_out)
        except Exception as e:  # noqa: BLE001 - report, then let the host recycle us
            kill_all()
            write_frame(ctl_out, {"harness_error": f"{type(e).__name__}: {e}"})
            return
        write_frame(ctl_out, reply)


if __name__ == "__main__":
    main()
